"""The ``lranker`` plugin: LRanker (the paper's model) as an rbench ``EmbeddingRanker``.

``fit`` trains LoRA + projector on the training split (or loads a matching checkpoint from
``<cache>/lranker/<hash>``), then chooses the test-time-scaling width k and depth d on the
validation split (cached next to the checkpoint). ``encode_pool`` returns the frozen candidate
embeddings h_c (shared ``rbench.engine.embeddings`` cache); ``encode_queries`` returns, per query, the
mean of E^(0..d) (see ``scaling.py``), which the engine scores by inner product.

Module layout: ``config`` (options), ``aggregation`` (K-means and alternatives), ``model`` (backbone,
placeholder, pooling, projector), ``train`` (InfoNCE, partitions), ``scaling`` (test-time
scaling, selection). Only ``config`` is imported at plugin load; torch and friends are imported by
the methods, so ``rbench rankers`` stays instant.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rbench.api import Pool, Queries, TaskData
from rbench.plugin import BaseRanker, RBenchError, ast_digest, config_hash
from rbench_rankers.models import model_fingerprint

from .config import LRankerConfig

# The code that decides what a checkpoint holds: the model, its training loop, the K-means soft
# prompt, the options and this module (fit, validation: which weights are kept), and how the backbone
# is found and loaded (``rbench_rankers.models``). Derived from that code (its AST, so comments and
# docstrings do not count), never bumped by hand: any change to it gives new checkpoint keys, so a
# cache trained by older code is never loaded by newer code. It is also the ranker's ``version`` in
# RunRecords.
CHECKPOINT_CODE = tuple(f"{__package__}.{m}" for m in ("model", "train", "aggregation", "kmeans_many", "streams",
                                                          "config", "ranker")) + (
    "rbench_rankers.models:resolve_model", "rbench_rankers.models:from_pretrained")
CODE_VERSION = ast_digest(CHECKPOINT_CODE, "rbench_rankers.lranker.ranker.CHECKPOINT_CODE")[:12]
# what a cached width/depth selection also depends on: the test-time-scaling rounds
SELECTION_CODE = tuple(f"{__package__}.{m}" for m in ("scaling", "elimination", "prefix"))
SELECTION_VERSION = ast_digest(SELECTION_CODE, "rbench_rankers.lranker.ranker.SELECTION_CODE")[:12]


def weights_digest(directory: Path) -> str:
    """sha256 over a checkpoint's weight files (names and bytes): what names the trained h_c in
    the embedding cache, so two trainings that land in one directory name (or a checkpoint
    replaced in place) can never share cached candidate vectors, and identical weights can."""
    h = hashlib.sha256()
    for f in sorted(directory.glob("*.safetensors")):
        h.update(f.name.encode() + b"\0")
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 24), b""):
                h.update(block)
    return h.hexdigest()[:32]


class _ExcludedSets(Sequence):
    """Per-query candidate sets (the pool minus the user's history, or the query's own list), built lazily."""

    def __init__(self, queries: Queries, pool_size: int) -> None:
        self.q, self.n = queries, pool_size

    def __len__(self) -> int:
        return len(self.q)

    def __getitem__(self, i: Any) -> np.ndarray:  # type: ignore[override]
        if not 0 <= int(i) < len(self.q):
            raise IndexError(i)
        if self.q.candidates is not None:
            return np.asarray(self.q.candidates[i], dtype=np.int64)
        keep = np.ones(self.n, dtype=bool)
        if self.q.history is not None:  # what the user has had: the input, the same for valid and test
            keep[self.q.history[i]] = False  # (queries scored carry no ``exclude``: see Queries.unlabelled)
        return np.flatnonzero(keep)


def _digest(*arrays: Any) -> str:
    h = hashlib.sha256()
    for a in arrays:
        if a is None:
            h.update(b"-")
            continue
        h.update(np.ascontiguousarray(np.asarray(a)).tobytes() if not isinstance(a, str) else a.encode())
    return h.hexdigest()[:16]


def length_sorted(encode: Any, texts: list[str], batch_size: int) -> np.ndarray:
    """``encode`` over ``texts`` in batches of ``batch_size`` texts of similar length (longest
    first), rows returned in the input order. Padding to each batch's longest text then costs
    little: the pool's encoding is the big cost of a large pool (issue 32)."""
    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    order = np.argsort([-len(t) for t in texts], kind="stable")
    parts = [np.asarray(encode([texts[i] for i in order[a : a + batch_size]]), dtype=np.float32)
             for a in range(0, len(texts), batch_size)]
    out = np.empty((len(texts), parts[0].shape[1]), dtype=np.float32)
    out[order] = np.concatenate(parts)
    return out


def sampled_mrr(E: np.ndarray, vectors: np.ndarray, queries: Queries, sample: np.ndarray) -> float:
    """Mean reciprocal rank of each query's best positive among its positives and ``sample``
    (pool rows), its history left out; ties pessimistic like the engine's. The validation metric
    of ``valid_pool_sample`` (checkpoint choice only, never a reported number)."""
    rr = np.zeros(len(queries))
    for i in range(len(queries)):
        pos = np.asarray(queries.positives[i], dtype=np.int64)
        if len(pos) == 0:
            continue
        others = np.setdiff1d(sample, pos)
        if queries.history is not None:
            others = np.setdiff1d(others, np.asarray(queries.history[i], dtype=np.int64))
        q = E[i].astype(np.float64)
        best = (vectors[pos].astype(np.float64) @ q).max()
        higher_or_tied = int(((vectors[others].astype(np.float64) @ q) >= best).sum())
        rr[i] = 1.0 / (1 + higher_or_tied)
    return float(rr.mean()) if len(rr) else 0.0


def fixed_scorer(Q: np.ndarray, queries: Queries, vectors: np.ndarray):
    """An engine scorer for precomputed query vectors ``Q`` (rows aligned with ``queries``)."""
    from rbench.plugin import vector_scorer

    return vector_scorer(vectors, Q, queries, "lranker")


class LRankerRanker(BaseRanker):
    name = "lranker"
    transfers = True  # LoRA + projector over texts; K-means/TTS read the scored pool
    version = CODE_VERSION
    description = ("LRanker: LLM dual encoder with a K-means soft prompt of the candidate pool and "
                   "graph-based test-time scaling (paper's model; --set preset=cpu for CPUs)")
    Config = LRankerConfig

    def __init__(self, config: LRankerConfig | None = None, context: Any | None = None) -> None:
        super().__init__(config, context)
        self.cfg: LRankerConfig
        self.info: dict[str, Any] = {}
        self._model: Any = None
        self._agg: Any = None
        self._fitted = False
        self._pool: Pool | None = None
        self._vectors: np.ndarray | None = None
        self._pool_slots: dict[str, np.ndarray] = {}
        self._base_cache: dict[str, np.ndarray] = {}
        self._pretrained: Any = None  # the unadapted backbone, for e(c) after full fine-tuning
        self._checkpoint_id = ""  # the trained weights' digest: names h_c in the embedding cache
        self.width, self.depth = 0, 0
        self.last_trace: list[dict] = []

    # ------------------------------------------------------------------------------------
    @property
    def seed(self) -> int:
        return int(self.cfg.seed if self.cfg.seed is not None else self.context.seed)

    def _log(self, msg: str) -> None:
        if getattr(self.context, "show_progress", False):
            print(f"[lranker] {msg}", file=sys.stderr, flush=True)

    def _ensure_model(self) -> Any:
        if self._model is None:
            import torch

            from .aggregation import Aggregator
            from .model import LRankerModel, load_backbone

            torch.manual_seed(self.seed)
            backbone = load_backbone(self.cfg)
            self._model = LRankerModel(self.cfg, backbone)
            c = self.cfg
            self._agg = Aggregator(c.aggregation, c.n_clusters, c.assign_dims, c.kmeans_batch_size,
                                   c.hierarchical_max_items, c.kmeans_backend)
        return self._model

    def _base_vectors(self, pool: Pool) -> np.ndarray:
        """e(c) of ``pool``: the backbone before adaptation (cached on disk; unit length with
        ``similarity=cosine``). K-means always reads these (the paper's offline encoder)."""
        from .model import load_backbone

        model = self._ensure_model()

        def encode(texts: list[str]) -> np.ndarray:
            if model.full_finetune:  # the trained weights replaced the pretrained ones: use a copy
                if self._pretrained is None:
                    from .model import LRankerModel

                    self._pretrained = LRankerModel(self.cfg, load_backbone(self.cfg))
                return self._pretrained.candidate_embeddings(texts)
            return model.candidate_embeddings(texts, adapted=False)

        key = f"{pool.fingerprint or pool.name}:{len(pool)}"
        if key not in self._base_cache:
            self._base_cache[key] = self._cached_vectors(pool, {"tower": "base"}, encode)
        return self._base_cache[key]

    def _scoring_vectors(self, pool: Pool) -> np.ndarray:
        """h_c that queries are scored against: the trained f_theta's (cached under the weights' digest) with
        ``candidate_tower=shared``, else the base e(c)."""
        if self.cfg.candidate_tower == "frozen" or not self._checkpoint_id:
            return self._base_vectors(pool)
        model = self._ensure_model()
        return self._cached_vectors(pool, {"tower": "trained", "weights": self._checkpoint_id},
                                    lambda texts: model.candidate_embeddings(texts, adapted=True))

    def _cached_vectors(self, pool: Pool, which: dict[str, Any], encode_raw: Any) -> np.ndarray:
        from rbench.plugin import pool_embeddings

        model = self._ensure_model()
        cosine = self.cfg.similarity == "cosine"
        key = {"encoder": "lranker-hc", **which, "backbone": model_fingerprint(self.cfg.model, self.cfg.gguf_file),
               "max_length": self.cfg.candidate_max_length, "pooling": "mean(text tokens + eos)",
               "dtype": str(model.info.dtype), "normalize": cosine,
               "version": 3}  # 3: encoded in length-sorted batches (last-bit differences from 2's pool order)

        def encode(texts: list[str]) -> np.ndarray:
            vec = length_sorted(encode_raw, texts, self.cfg.encode_batch_size)
            if cosine:  # stored normalised: a million-item pool is then used without a copy
                vec = vec / np.maximum(np.linalg.norm(vec, axis=1, keepdims=True), 1e-12)
            return vec

        # chunks of 64 model batches go to ``encode``, which sorts each by length
        vec = pool_embeddings(pool, key, encode, batch_size=self.cfg.encode_batch_size * 64,
                              progress=bool(getattr(self.context, "show_progress", False)))
        return vec if vec.dtype == np.float32 else np.asarray(vec, dtype=np.float32)

    def _current_vectors(self, pool: Pool, rows: np.ndarray | None = None) -> np.ndarray:
        """h_c of the model as it is now (in memory; validation during training), of every pool
        item or of ``rows`` (in that order)."""
        if self.cfg.candidate_tower == "frozen":
            base = self._base_vectors(pool)
            return base if rows is None else base[rows]
        model = self._ensure_model()
        idx = np.arange(len(pool)) if rows is None else np.asarray(rows, dtype=np.int64)
        texts = pool.text_batch(idx)
        vec = length_sorted(lambda batch: model.candidate_embeddings(batch, adapted=True), texts,
                            self.cfg.encode_batch_size)
        if self.cfg.similarity == "cosine":
            vec /= np.maximum(np.linalg.norm(vec, axis=1, keepdims=True), 1e-12)
        return vec

    # ------------------------------------------------------------------------------------
    def checkpoint_dir(self, task: TaskData) -> Path:
        from .model import pick_device, pick_dtype

        tr = task.train
        device = pick_device(self.cfg)
        # the numerics the weights were trained in: "dtype=auto" is bf16 on CUDA and fp32 on the CPU,
        # so a CPU-fp32 and a GPU-bf16 training of one config never share a checkpoint
        numerics = {"dtype": str(pick_dtype(self.cfg, device)), "device": device.type}
        if self.cfg.compile == "on":  # compiled kernels may round differently (the default keys stay as they were)
            numerics["compile"] = "on"
        config = {k: v for k, v in self.cfg.training_key().items() if k != "dtype"}  # resolved in numerics
        key = {"config": config, "seed": self.seed, "code": CODE_VERSION, "numerics": numerics,
               "backbone": model_fingerprint(self.cfg.model, self.cfg.gguf_file),
               "task": task.fit_spec.name, "pool": task.fit_pool.fingerprint or task.fit_pool.name,
               "train": _digest(tr.positives.offsets, tr.positives.values,
                                tr.history.values if tr.history is not None else None,
                                tr.candidates, str(len(tr)))}
        # the task fitted on (a transfer run reuses its source's checkpoint)
        return Path(self.context.cache_dir) / "lranker" / f"{task.fit_spec.name}-{config_hash(key, 16)}"

    @property
    def label(self) -> str:
        return self.label_for(self.config)

    @classmethod
    def label_for(cls, config: dict[str, Any]) -> str:
        """Table row name from a RunRecord's config: the preset, the ablation switches and any
        other option that differs from the paper (beyond what the preset sets)."""
        from .config import LRankerConfig

        return LRankerConfig.row_label("lranker", config)

    def fit(self, task: TaskData) -> None:
        import torch

        from .aggregation import PCAState
        from .train import PartitionSampler, TrainReport, schedule, train

        cfg = self.cfg
        if self._fitted:  # a second fit starts from the pretrained backbone again
            self._model, self._fitted, self._pool_slots, self._checkpoint_id = None, False, {}, ""
            self._base_cache = {}
        model = self._ensure_model()
        t0 = time.perf_counter()
        base = self._base_vectors(task.fit_pool)
        encode_s = time.perf_counter() - t0
        ckpt = self.checkpoint_dir(task)
        loaded = (ckpt / "meta.json").exists()
        if loaded and cfg.aggregation == "pca":
            from safetensors.numpy import load_file

            st = load_file(str(ckpt / "aggregation.safetensors"))
            self._agg.pca = PCAState(st["mean"], st["components"])
        self._agg.fit(base, cfg.pca_dim, self.seed)
        torch.manual_seed(self.seed)
        model.attach_projector(self._agg.slot_dim(base.shape[1]))
        if loaded:
            meta = model.load(ckpt)
            report = TrainReport(**meta["train"])
            _, per_epoch_steps, _ = schedule(cfg, report.windows)
            for point in report.curve:  # one epoch position formula for old and new checkpoints
                point["epoch"] = round(point["step"] / max(1, per_epoch_steps), 4)
            self._log(f"loaded checkpoint {ckpt}")
        else:
            if cfg.lora:
                model.make_trainable()
            sampler = None
            if cfg.global_info:
                sampler = PartitionSampler(self._agg, base, cfg.n_partitions, self.seed,
                                           task.train.candidates, cfg.partition_sets)
            self._log(f"training on {len(task.train):,} queries ({cfg.epochs} epochs, "
                      f"max_steps={cfg.max_steps or 'none'}, windows_per_user={cfg.windows_per_user or 'all'})")
            report = train(model, cfg, task.train, base, sampler, self.seed, pool_texts=task.fit_pool.texts,
                           validate=self._validator(task), progress=self._epoch_progress(), log=self._log)
            from .train import world

            rank, size = world()
            if rank == 0:  # data-parallel replicas are identical: one writer
                self._save(ckpt, model, report, task)
            if size > 1:
                import torch.distributed as dist

                dist.barrier()
        self._checkpoint_id = weights_digest(ckpt)
        self._fitted = True
        model.eval()
        self.info = {
            "checkpoint": str(ckpt), "loaded_checkpoint": loaded, "train": report.__dict__,
            "training_budget": report.budget(), "training_curve": report.curve,
            "candidate_encoding_s": round(encode_s, 3), "backbone": cfg.model, "backbone_kind": model.info.kind,
            "hidden": model.info.hidden, "lora_targets": len(model.lora_names),
            "temperature": round(float(1.0 / model.scale.detach().cpu()), 5),
            "decisions": {"candidate_tower": cfg.candidate_tower, "finetune": cfg.finetune if cfg.lora else "none",
                          "kmeans_input": "base embeddings e(c) (backbone before adaptation)",
                          "query_pooling": cfg.query_pooling, "similarity": cfg.similarity,
                          "n_negatives": cfg.n_negatives, "e0_context": "whole pool",
                          "tts_keep": cfg.tts_keep or "1/k"},
        }
        self._select(task)

    def _validator(self, task: TaskData) -> Any:
        """Validation MRR of direct ranking (E^(0)) with the model as it is now, on
        ``valid_max_queries`` seeded validation queries.

        h_c moves as f_theta trains, so a validation must encode candidates again. By default it
        re-encodes the whole pool and ranks exactly (the engine, every pool item). On large pools
        ``valid_pool_sample=N`` re-encodes only the validation positives and N pool items drawn
        once (seeded, the same at every validation, so the curve compares like with like) and
        ranks each query's positives among them (its history left out). That is a sampled metric:
        it only chooses the checkpoint; every reported number is the exact full-pool test."""
        from rbench.plugin import MEASURES, aggregate, per_query, scan

        valid = task.valid
        if valid is None or len(valid) == 0:
            return None
        if self.cfg.valid_max_queries and len(valid) > self.cfg.valid_max_queries:
            rows = np.random.default_rng(self.seed).choice(len(valid), self.cfg.valid_max_queries, replace=False)
            valid = valid.take(np.sort(rows))
        pool = task.fit_pool
        n_sample = self.cfg.valid_pool_sample
        if n_sample and valid.candidates is None and len(pool) > n_sample:
            sample = np.sort(np.random.default_rng([self.seed, 0x7A11D]).choice(len(pool), n_sample, replace=False))
            encoded = np.union1d(sample, valid.positives.values)

            def validate_sampled() -> float:
                vec = np.zeros((len(pool), self._ensure_model().info.hidden), dtype=np.float32)
                vec[encoded] = self._current_vectors(pool, encoded)
                E0 = self.direct(valid, pool, vec)
                return sampled_mrr(E0, vec, valid, sample)

            return validate_sampled

        def validate() -> float:
            vec = self._current_vectors(pool)
            E0 = self.direct(valid, pool, vec)
            res = scan(self, valid, pool, scorer=fixed_scorer(E0, valid, vec), topk=0)  # ranks only
            return float(aggregate(per_query(res.ranks, valid.grades, MEASURES))["RR"])

        return validate

    def _epoch_progress(self):
        if not getattr(self.context, "show_progress", False):
            return None

        def factory(desc: str, total: int):
            start = time.perf_counter()
            state = {"n": 0}

            def tick(n: int) -> None:
                state["n"] += n
                if state["n"] >= total:
                    self._log(f"{desc}: {total} queries in {time.perf_counter() - start:.0f}s")

            return tick

        return factory

    def _save(self, ckpt: Path, model: Any, report: Any, task: TaskData) -> None:
        from rbench.plugin import atomic_dir

        # the same key means the same checkpoint: a writer that finishes second keeps the first one's
        with atomic_dir(ckpt, replace=False) as tmp:
            model.save(tmp, {"train": report.__dict__, "config": self.cfg.training_key(), "task": task.fit_spec.name,
                             "seed": self.seed})
            if self._agg.pca is not None:
                from safetensors.numpy import save_file

                save_file({"mean": self._agg.pca.mean, "components": self._agg.pca.components},
                          str(tmp / "aggregation.safetensors"))

    # ------------------------------------------------------------------------------------
    def _require_fit(self) -> None:
        if not self._fitted:
            raise RBenchError("lranker: call fit(task) before encoding (it trains or loads the checkpoint)")

    def encode_pool(self, pool: Pool) -> np.ndarray:
        self._require_fit()
        self._pool, self._vectors = pool, self._scoring_vectors(pool)
        return self._vectors

    def encode_queries(self, queries: Queries) -> np.ndarray:
        self._require_fit()
        if self._vectors is None or self._pool is None:
            raise RBenchError("lranker: call encode_pool(pool) before encode_queries")
        return self.encode(queries, self._pool, self._vectors, self.width, self.depth)

    def encode(self, queries: Queries, pool: Pool, vectors: np.ndarray, width: int, depth: int) -> np.ndarray:
        """mean(E^(0..depth)) per query (E^(0) when width or depth is 0). With test-time scaling
        the queries go in chunks through E^(0) and all rounds, so a causal backbone's prompt
        prefix is run once per query (``prefix.py``) with bounded memory; the result does not
        depend on the chunking (every random choice is seeded per query)."""
        from .prefix import sessions_for
        from .scaling import chunk_rows, concat_outputs, tts_chunk

        with sessions_for(self).session():
            if not (self.cfg.tts and self.cfg.global_info and width > 0 and depth > 0) or len(queries) == 0:
                return self.direct(queries, pool, vectors)
            outs = []
            for rows in chunk_rows(len(queries), tts_chunk(self.cfg)):
                E0 = self.direct(queries, pool, vectors, rows=rows)
                outs.append(self.tts(queries, vectors, E0, width, depth, pool=pool, rows=rows))
            out = concat_outputs(outs)
        self.last_trace = out.trace
        return out.means[-1]

    def direct(self, queries: Queries, pool: Pool, vectors: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """E^(0): conditioned on the whole pool (or each query's own candidate list); for
        ``queries[rows]`` when ``rows`` is given (rows of the result follow ``rows``)."""
        from .prefix import sessions_for

        rows = np.arange(len(queries)) if rows is None else np.asarray(rows, dtype=np.int64)
        n = len(rows)
        with sessions_for(self).session():
            if not self.cfg.global_info:
                return self._encode_rows(queries, rows, None)
            base = self._base_vectors(pool)  # K-means reads e(c), whatever h_c is scored
            if queries.candidates is None:
                slots = self._shared_slots(pool, base)
                return self._encode_rows(queries, rows, np.broadcast_to(slots, (n, *slots.shape)))
            seeds = self._query_seeds(queries, rows)
            slots = np.stack([self._agg(base[queries.candidates[i]], sd) for i, sd in zip(rows, seeds)])
            return self._encode_rows(queries, rows, slots)

    def tts(self, queries: Queries, vectors: np.ndarray, E0: np.ndarray, width: int, depth: int,
            pool: Pool | None = None, rows: np.ndarray | None = None):
        """Graph-based test-time scaling from E^(0) (rows aligned with ``rows``, default all
        queries, run in chunks). ``vectors`` score the eliminations; the kept subsets' K-means
        reads the base e(c) of ``pool`` (as E^(0) does; default: the pool of ``encode_pool`` when
        ``vectors`` are its vectors), else ``vectors``."""
        from .prefix import sessions_for
        from .scaling import RowView, chunk_rows, concat_outputs, graph_tts, min_part_size, tts_chunk

        if pool is None and self._pool is not None and len(self._pool) == len(vectors):
            pool = self._pool
        agg_vectors = self._base_vectors(pool) if pool is not None else vectors
        sets = _ExcludedSets(queries, len(vectors))
        min_keep = min_part_size(self.cfg.tts_min_part_factor, self.cfg.n_clusters)
        with sessions_for(self).session():
            if rows is None:
                all_rows = np.arange(len(queries))
                chunks = chunk_rows(len(queries), tts_chunk(self.cfg)) or [all_rows]
                outs = [self.tts(queries, vectors, E0[c], width, depth, pool=pool, rows=c) for c in chunks]
                out = concat_outputs(outs)
            else:
                rows = np.asarray(rows, dtype=np.int64)
                out = graph_tts(E0, RowView(sets, rows), vectors, width, depth,
                                lambda r, slots: self._encode_rows(queries, rows[r], slots), self._agg,
                                self._query_seeds(queries, rows), self.cfg.tts_keep, min_keep, agg_vectors)
        self.last_trace = out.trace
        return out

    def _query_seeds(self, queries: Queries, rows: np.ndarray) -> list[int]:
        """The seeds of ``queries[rows]`` only: a chunk's call must not cost the whole split
        (that made chunked test-time scaling quadratic in the number of queries)."""
        from .aggregation import derive_seed

        return [derive_seed(self.seed, "query", queries.ids[int(i)]) for i in rows]

    def _shared_slots(self, pool: Pool, vectors: np.ndarray) -> np.ndarray:
        from .aggregation import derive_seed

        key = f"{pool.fingerprint or pool.name}:{len(pool)}"
        if key not in self._pool_slots:
            self._pool_slots[key] = self._agg(vectors, derive_seed(self.seed, "pool", key))
        return self._pool_slots[key]

    def _encode_rows(self, queries: Queries, rows: np.ndarray, slots: np.ndarray | None) -> np.ndarray:
        """h_q for ``queries[rows]`` with the given (P, K, D) slots, in length-sorted batches.
        Causal backbones (``tts_prefix_cache``): each query's prompt prefix is run once and kept
        for the enclosing call; only the suffix after the placeholder runs per row."""
        import torch

        from .prefix import NoPrefix, sessions_for, supports_prefix_cache
        from .scaling import tts_chunk

        model = self._model
        prompts = queries.prompts if queries.prompts is not None else queries.texts
        rows = np.asarray(rows, dtype=np.int64)
        p = [prompts[int(r)] for r in rows]
        t = [queries.texts[int(r)] for r in rows]
        order = np.argsort([len(x) for x in p], kind="stable")  # stable: a query's parts stay together
        out = np.zeros((len(rows), 0), dtype=np.float32)
        bs = self.cfg.encode_batch_size
        cached = (slots is not None and len(rows) > 0 and self.cfg.tts_prefix_cache
                  and supports_prefix_cache(model))
        model.eval()
        with torch.no_grad(), sessions_for(self).session() as sessions:
            if cached:
                cache = sessions.get(model, queries, prompts, queries.texts, tts_chunk(self.cfg))
                try:
                    for a in range(0, len(rows), 4 * bs):  # suffixes are short: 4x the batch
                        sel = order[a : a + 4 * bs]
                        soft = model.project(np.ascontiguousarray(slots[sel]))
                        h = cache.encode(rows[sel], soft).float().cpu().numpy()
                        if out.shape[1] == 0:
                            out = np.zeros((len(rows), h.shape[1]), dtype=np.float32)
                        out[sel] = h
                    return out
                except NoPrefix:  # nothing before the placeholder: the full pass below
                    out = np.zeros((len(rows), 0), dtype=np.float32)
            for a in range(0, len(rows), bs):
                sel = order[a : a + bs]
                soft = model.project(np.ascontiguousarray(slots[sel])) if slots is not None else None
                h = model.query_embeddings([p[i] for i in sel], [t[i] for i in sel], soft)
                h = h.float().cpu().numpy()
                if out.shape[1] == 0:
                    out = np.zeros((len(rows), h.shape[1]), dtype=np.float32)
                out[sel] = h
        return out

    # ------------------------------------------------------------------------------------
    def _select(self, task: TaskData) -> None:
        """Choose (k, d) on the validation split only; cache the table next to the checkpoint."""
        cfg = self.cfg
        if not cfg.tts or not cfg.global_info:
            self.width, self.depth = 0, 0
            why = "tts=false" if not cfg.tts else "global_info=false (E_m would equal E^(0))"
            self.info["tts"] = {"width": 0, "depth": 0, "selected_on": None, "reason": why}
            return
        widths = [cfg.width] if cfg.width is not None else list(cfg.tts_widths)
        depths = [cfg.depth] if cfg.depth is not None else list(cfg.tts_depths)
        if len(widths) == 1 and len(depths) == 1:
            self.width, self.depth = widths[0], depths[0]
            self.info["tts"] = {"width": self.width, "depth": self.depth, "selected_on": None,
                                "reason": "fixed by options"}
            return
        valid = task.valid
        if cfg.select_max_queries and len(valid) > cfg.select_max_queries:
            rows = np.sort(np.random.default_rng(self.seed).choice(len(valid), cfg.select_max_queries, replace=False))
            valid = valid.take(rows)
        key = {"widths": widths, "depths": depths, "keep": cfg.tts_keep, "metric": cfg.select_metric,
               "alpha": cfg.select_alpha, "min_part": cfg.tts_min_part_factor, "rule": "cheapest-unless-significant",
               "code": CODE_VERSION, "tts_code": SELECTION_VERSION,
               "seed": self.seed, "valid": _digest(valid.positives.values, valid.ids.astype(str)),
               "assign_dims": cfg.assign_dims, "kmeans_batch_size": cfg.kmeans_batch_size,
               "kmeans_backend": cfg.kmeans_backend}
        cache = Path(self.info["checkpoint"]) / f"selection-{config_hash(key, 12)}.json"
        if cache.exists():
            sel = json.loads(cache.read_text())
        else:
            sel = self.select(task, valid, widths, depths)
            if cache.parent.exists():
                from rbench.plugin import atomic_write_text

                atomic_write_text(cache, json.dumps(sel, indent=1))
        self.width, self.depth = int(sel["width"]), int(sel["depth"])
        self.info["tts"] = sel

    def select(self, task: TaskData, valid: Queries, widths: list[int], depths: list[int]) -> dict[str, Any]:
        """Width/depth on ``valid`` by per-query ``select_metric``: the cheapest setting unless a
        costlier one is significantly better (``scaling.select_width_depth``)."""
        from rbench.plugin import MEASURES, per_query, scan

        from .prefix import sessions_for
        from .scaling import select_width_depth

        pool = task.fit_pool
        vectors = self._scoring_vectors(pool)
        t0 = time.perf_counter()

        def metrics(Q: np.ndarray) -> dict[str, np.ndarray]:  # ranks only: no top-k list is kept
            res = scan(self, valid, pool, scorer=fixed_scorer(Q, valid, vectors), topk=0)
            return per_query(res.ranks, valid.grades, MEASURES)

        self._log(f"choosing width/depth on {len(valid)} validation queries: widths {widths}, depths {depths}")
        with sessions_for(self).session():
            E0 = self.direct(valid, pool, vectors)
            sel = select_width_depth(E0, widths, depths,
                                     lambda k, d: self.tts(valid, vectors, E0, k, d, pool=pool).means,
                                     metrics, self.cfg.select_metric, alpha=self.cfg.select_alpha, seed=self.seed)
        return {**sel.as_dict(), "selected_on": "valid", "seconds": round(time.perf_counter() - t0, 2)}
