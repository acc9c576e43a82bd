"""Cross-encoder rerankers (sentence-transformers ``CrossEncoder``): the paper's RankBERT-110M
(monoBERT) and BGE-Reranker-v2-m3 rows, and any other cross-encoder by hub name or local folder.

A cross-encoder reads each (query, candidate) pair jointly, so its cost grows with the number of
pairs: it is meant to rescore a first-stage shortlist through the two-stage protocol
(``rbench run --ranker cross-encoder --rerank-from bm25 --rerank-depth 100``). The class sets
``pairwise = True``, the attribute the harness reads to know that a ranker scores pairs one by
one (so exhaustive use above the pair budget is refused unless forced), and ``rerank_depth``, the
depth used when ``--rerank-depth`` is left out.

Choices written down:

- ``model`` is a preset name, a hub name or a local folder. Presets (``PRESETS``) carry the
  model's label layout and activation as its card gives them:

  - ``monobert``: ``nboost/pt-bert-base-uncased-msmarco``, BERT-base (110M) trained on MS MARCO
    passages in the monoBERT recipe (Nogueira & Cho 2019); two labels, index 1 = relevant; score
    = ``log_softmax(logits)[:, 1]`` as pygaggle's monoBERT scores.
  - ``monobert-large``: ``castorini/monobert-large-msmarco`` (BERT-large), same two-label layout.
  - ``ms-marco-minilm``: ``cross-encoder/ms-marco-MiniLM-L-6-v2``, one label; score = the raw
    logit (its card: sigmoid only to map into [0, 1]).
  - ``bge-reranker-v2-m3``: ``BAAI/bge-reranker-v2-m3`` (XLM-R large, 568M), one label; score =
    the raw logit (its card: ``normalize=True`` applies a sigmoid), max length 512 as its card's
    example.

  A sigmoid never changes the order but saturates in fp32 (ties at 1.0), so one-label models are
  scored by their logit. ``activation=auto`` for a non-preset model: one label -> logit, two
  labels -> ``log_softmax[:, 1]``; ``sigmoid`` / ``identity`` / ``softmax1`` force one.
- The offline default ``model=all-MiniLM-L6-v2`` is a bi-encoder checkpoint: it is loaded as a
  ``CrossEncoder`` with a fresh one-label head (seeded by the run's seed), so it only means
  something after ``--set fit=true``.
- Query text is ``Queries.texts`` (never the LLM prompt template); candidate text the pool's text.
  Pairs are truncated to ``max_length`` tokens (``longest_first``), scored in length-sorted
  batches of ``batch_size``, fp32 on CPU.
- ``fit=true`` fine-tunes the whole model on the task's train split: each sampled train query
  gives (query, positive) with label 1 and ``negatives`` (query, negative) pairs with label 0;
  negatives are drawn from the top ``hard_depth`` of a BM25 first stage over the train pool
  (positives and excluded items removed; ``hard_negatives=random`` draws them uniformly), from
  the query's own candidate list in the small scenario. Loss: binary cross-entropy on the logit
  (two-label heads: cross-entropy). AdamW, ``lr``, linear warm-up over the first 10% of
  ``train_steps`` steps of ``train_batch_size // (1 + negatives)`` queries with their pairs. No model selection (the last step is
  used); ``ranker_info["training_budget"]`` records the budget like every trained ranker. The
  fine-tuned model lives for the run only (not cached).
- Every model that cannot be found offline answers with ``rbench_rankers.dense``'s one-line error
  telling how to pass a local folder (``--set model=/path/to/model``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np

from rbench.api import DOMAINS, Pool, Queries, TaskData
from rbench.plugin import FLOAT32_KERNELS, AtLeast0, AtLeast1, BaseRanker, Positive, Range, RBenchError
from rbench_rankers.models import from_pretrained, quiet_loading, resolve_folder

# the first stage's depth negatives are drawn from: a ranking that deep is computed per training query
HardDepth = Annotated[int, Range(1, 100_000)]

Activation = Literal["auto", "identity", "sigmoid", "softmax1"]


@dataclass(frozen=True)
class CrossEncoderPreset:
    model: str
    num_labels: int
    activation: str  # identity | sigmoid | softmax1 (log_softmax, index 1 = relevant)
    max_length: int
    note: str = ""


PRESETS: dict[str, CrossEncoderPreset] = {
    "monobert": CrossEncoderPreset("nboost/pt-bert-base-uncased-msmarco", 2, "softmax1", 512,
                                   "BERT-base monoBERT (RankBERT-110M); label 1 = relevant"),
    "monobert-large": CrossEncoderPreset("castorini/monobert-large-msmarco", 2, "softmax1", 512,
                                         "BERT-large monoBERT; label 1 = relevant"),
    "ms-marco-minilm": CrossEncoderPreset("cross-encoder/ms-marco-MiniLM-L-6-v2", 1, "identity", 512,
                                          "MiniLM-L6 MS MARCO cross-encoder; raw logit"),
    "bge-reranker-v2-m3": CrossEncoderPreset("BAAI/bge-reranker-v2-m3", 1, "identity", 512,
                                             "BGE-Reranker-v2-m3 (568M); raw logit"),
}


@dataclass
class CrossEncoderOptions:
    """Options of the ``cross-encoder`` ranker."""

    model: str = "all-MiniLM-L6-v2"  # preset (monobert, bge-reranker-v2-m3, ...), hub name or local folder
    revision: str = ""
    activation: Activation = "auto"  # auto: the preset's, else logit (1 label) / log_softmax[1] (2 labels)
    max_length: AtLeast0 = 0  # tokens per pair (0: the preset's, else min(512, the model's limit))
    batch_size: AtLeast1 = 32
    device: str = "auto"
    fit: bool = False  # fine-tune on the train split with first-stage hard negatives
    train_steps: AtLeast1 = 200
    train_batch_size: AtLeast1 = 16  # pairs per step
    lr: Positive = 2e-5
    negatives: AtLeast1 = 3  # negatives per positive
    hard_negatives: Literal["bm25", "random"] = "bm25"
    hard_depth: HardDepth = 50  # negatives are drawn from the first stage's top hard_depth



# ------------------------------------------------------------------------------------ helpers


def pair_matrix(candidates: Any, n_queries: int, n_docs: int, who: str) -> np.ndarray:
    """The ``score`` contract's candidates (1-D shared or 2-D per query) as a checked 2-D array."""
    cand = np.asarray(candidates)
    if cand.size == 0:
        cand = cand.astype(np.int64)
    if cand.ndim not in (1, 2) or not np.issubdtype(cand.dtype, np.integer):
        raise ValueError(f"{who}: candidates must be a 1-D or 2-D integer array, got {cand.dtype} {cand.shape}")
    if cand.ndim == 2 and cand.shape[0] != n_queries:
        raise ValueError(f"{who}: candidates has {cand.shape[0]} rows for {n_queries} queries")
    if cand.size and (int(cand.min()) < 0 or int(cand.max()) >= n_docs):
        raise ValueError(f"{who}: candidate indices must lie in [0, {n_docs})")
    return cand if cand.ndim == 2 else np.broadcast_to(cand, (n_queries, cand.shape[0]))


def pair_texts(queries: Queries, cand: np.ndarray, pool: Pool) -> tuple[list[str], list[str]]:
    """Query and candidate texts of every pair, row-major (each candidate's text fetched once)."""
    uniq, inv = np.unique(cand, return_inverse=True)
    texts = pool.text_batch(uniq)
    docs = [texts[i] for i in inv.reshape(-1)]
    qs = [str(queries.texts[i]) for i in range(len(queries)) for _ in range(cand.shape[1])]
    return qs, docs


def apply_activation(logits: Any, activation: str) -> Any:
    """Per-pair scores from a (n, labels) logit tensor."""
    import torch

    if activation == "softmax1":
        if logits.shape[-1] < 2:
            raise RBenchError("activation=softmax1 needs a two-label head")
        return torch.log_softmax(logits.float(), dim=-1)[:, 1]
    x = logits[:, 0].float() if logits.ndim == 2 else logits.float()
    return torch.sigmoid(x) if activation == "sigmoid" else x


def torch_device(device: str) -> str:
    import torch

    return ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device


def sample_training_pairs(task: TaskData, n_queries: int, negatives: int, mode: str, depth: int,
                          seed: int) -> tuple[list[tuple[int, int, float]], dict[str, Any]]:
    """(train query row, pool index, label) triples: each sampled train query with one positive
    (label 1) and ``negatives`` first-stage hard negatives (label 0), over ``task.fit_pool``."""
    train, pool = task.train, task.fit_pool
    rng = np.random.default_rng(seed)
    has_pos = np.flatnonzero(train.positives.lengths() > 0)
    if not len(has_pos):
        raise RBenchError("fit=true: the train split has no query with a positive")
    rows = rng.choice(has_pos, size=min(n_queries, len(has_pos)), replace=False)
    rows.sort()
    sub = train.take(rows)
    cand_rows = sub.candidates  # small scenario: each query's own list
    stage1: np.ndarray | None = None
    if mode == "bm25":
        from rbench_rankers.bm25 import BM25Ranker

        bm = BM25Ranker()
        bm.index(pool)
        stage1 = np.zeros((len(sub), 0), dtype=np.int64)
        parts = []
        step = max(1, int(2**26 // max(1, len(pool))))  # <= 256 MB of float32 scores per call
        for a in range(0, len(sub), step):
            qs = sub.take(np.arange(a, min(a + step, len(sub))))
            cand = cand_rows[a : a + step] if cand_rows is not None else np.arange(len(pool))
            s = np.asarray(bm.score(qs, cand), dtype=np.float32)
            k = min(depth + 64, s.shape[1])
            top = np.argsort(-s, axis=1, kind="stable")[:, :k]
            parts.append(np.take_along_axis(np.broadcast_to(cand, s.shape) if cand.ndim == 1 else cand, top, 1))
        stage1 = np.concatenate(parts) if parts else stage1
    triples: list[tuple[int, int, float]] = []
    for i, row in enumerate(rows):
        pos = sub.positives[i]
        banned = set(pos.tolist()) | (set(sub.exclude[i].tolist()) if sub.exclude is not None else set())
        triples.append((int(row), int(rng.choice(pos)), 1.0))
        if stage1 is not None:
            pick = [int(c) for c in stage1[i] if int(c) not in banned][:depth]
        elif cand_rows is not None:
            pick = [int(c) for c in cand_rows[i] if int(c) not in banned]
        else:
            pick = []
        if pick:
            neg = rng.choice(pick, size=min(negatives, len(pick)), replace=False)
        else:  # random negatives from the pool
            neg = [int(c) for c in rng.integers(0, len(pool), size=4 * negatives) if int(c) not in banned][:negatives]
        triples.extend((int(row), int(c), 0.0) for c in neg)
    return triples, {"hard_negatives": mode if mode == "random" or stage1 is not None else "random",
                     "hard_depth": depth, "train_queries_used": len(rows)}


# ------------------------------------------------------------------------------------ ranker


class PairRanker(BaseRanker):
    """Base of the pairwise rerankers: ``index`` keeps the pool, ``score`` gathers every
    (query text, candidate text) pair of 1-D shared or 2-D per-query candidates and hands them to
    ``score_pairs``. ``pairwise = True`` tells the harness the ranker scores pair by pair."""

    score_tolerance = FLOAT32_KERNELS  # torch fp32 kernels (rbench.api)

    pairwise = True
    transfers = True  # fit (if any) tunes a text pair scorer on fit_pool's texts
    _pool: Pool | None = None

    @classmethod
    def needs_training(cls, config: Any) -> bool:
        """Only ``fit=true`` learns from the train split; the default scores with the model as it is."""
        return bool(getattr(config, "fit", False))
    info: dict[str, Any]

    def score_pairs(self, qs: list[str], docs: list[str]) -> np.ndarray:
        raise NotImplementedError

    def train_groups(self, task: TaskData, model: Any, logits: Any, params: list[Any], steps: int,
                     groups_per_step: int, negatives: int, lr: float, hard_negatives: str, hard_depth: int,
                     loss: str) -> None:
        """Fine-tune ``model`` on the train split: each step takes ``groups_per_step`` train
        queries, each with one positive and ``negatives`` first-stage hard negatives
        (``sample_training_pairs``), and minimises ``loss``: ``listwise`` = softmax cross-entropy
        of the positive within its group (RankLLaMA's contrastive recipe), ``pointwise`` = binary
        cross-entropy per pair (two-label heads: cross-entropy). ``logits(qs, docs)`` returns the
        model's (pairs, labels) logits. AdamW, linear warm-up over the first 10% of the steps,
        then linear decay; gradients clipped at 1. The last step is used (no selection); the
        budget and curve go to ``info`` like every trained ranker's."""
        import torch

        seed = int(getattr(self.context, "seed", 0))
        triples, neg_info = sample_training_pairs(task, steps * groups_per_step, negatives, hard_negatives,
                                                  hard_depth, seed)
        groups: list[list[tuple[int, int, float]]] = []
        for t in triples:  # each query's positive comes first, then its negatives
            if t[2] == 1.0:
                groups.append([])
            groups[-1].append(t)
        rng = np.random.default_rng(seed + 1)
        pool, train = task.fit_pool, task.train
        model.train()
        torch.manual_seed(seed)
        opt = torch.optim.AdamW(params, lr=lr)
        warm = max(1, steps // 10)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: min((s + 1) / warm, max(0.0, (steps - s) / max(1, steps - warm))))
        t0 = time.perf_counter()
        order = np.concatenate([rng.permutation(len(groups)) for _ in range(-(-steps * groups_per_step // len(groups)))])
        seen, pairs_seen, losses, curve = 0, 0, [], []
        every = max(1, steps // 10)
        for step in range(steps):
            batch = [groups[i] for i in order[step * groups_per_step:(step + 1) * groups_per_step]]
            flat = [t for g in batch for t in g]
            seen += len(batch)
            pairs_seen += len(flat)
            out = logits([str(train.texts[q]) for q, _, _ in flat],
                         pool.text_batch(np.array([d for _, d, _ in flat], dtype=np.int64))).float()
            labels = torch.tensor([y for _, _, y in flat], device=out.device)
            if loss == "listwise":
                width = max(len(g) for g in batch)
                grid = torch.full((len(batch), width), float("-inf"), device=out.device)
                at = 0
                for gi, g in enumerate(batch):
                    grid[gi, : len(g)] = out[at : at + len(g), 0]
                    at += len(g)
                value = torch.nn.functional.cross_entropy(grid, torch.zeros(len(batch), dtype=torch.long,
                                                                            device=out.device))
            elif out.shape[-1] >= 2:
                value = torch.nn.functional.cross_entropy(out, labels.long())
            else:
                value = torch.nn.functional.binary_cross_entropy_with_logits(out[:, 0], labels)
            opt.zero_grad(set_to_none=True)
            value.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            sched.step()
            losses.append(float(value.detach()))
            if (step + 1) % every == 0 or step + 1 == steps:
                curve.append({"epoch": round(seen / len(groups), 4), "step": step + 1, "examples": pairs_seen,
                              "train_loss": round(float(np.mean(losses[-every:])), 5),
                              "valid_MRR": None, "seconds": round(time.perf_counter() - t0, 2)})
        model.eval()
        self.info["training_budget"] = {
            "examples_seen": pairs_seen, "queries_seen": seen, "epochs": round(seen / len(groups), 3),
            "optimizer_steps": steps,
            "train_wall_s": round(time.perf_counter() - t0, 1), "negatives_per_example": negatives,
            "trainable_params": int(sum(p.numel() for p in params)), "loss": loss,
            "selection": "last step (no validation)"}
        self.info["training_curve"] = curve
        self.info["training_pairs"] = {**neg_info, "pairs": len(triples)}

    def index(self, pool: Pool) -> None:
        self._pool = pool

    def score(self, queries: Queries, candidates: np.ndarray) -> np.ndarray:
        if self._pool is None:
            raise RBenchError(f"{self.name}: score() called before index(pool)")
        cand = pair_matrix(candidates, len(queries), len(self._pool), self.name)
        if cand.size == 0:
            return np.zeros(cand.shape, dtype=np.float32)
        qs, docs = pair_texts(queries, cand, self._pool)
        self.info["pairs_scored"] = int(self.info.get("pairs_scored", 0)) + len(qs)
        return self.score_pairs(qs, docs).reshape(cand.shape)


class CrossEncoderRanker(PairRanker):
    """sentence-transformers ``CrossEncoder`` reranker: score = f(query, candidate) read jointly.

    ``pairwise = True`` marks it as a pair-by-pair reranker: the harness uses it through
    ``--rerank-from S --rerank-depth N`` and refuses an exhaustive run (``--rerank-depth all``)
    above its pair budget unless forced. ``rerank_depth`` is its default depth (100)."""

    name = "cross-encoder"
    version = "1"
    description = "cross-encoder reranker (sentence-transformers CrossEncoder; presets monobert, bge-reranker-v2-m3)"
    Config = CrossEncoderOptions
    domains = DOMAINS
    pairwise = True
    rerank_depth = 100
    presets = {k: {"model": p.model, "labels": p.num_labels, "activation": p.activation,
                   "max_length": p.max_length, "note": p.note} for k, p in PRESETS.items()}

    def __init__(self, config: Any | None = None, context: Any | None = None) -> None:
        super().__init__(config, context)
        self._ce: Any = None
        self._activation = "identity"
        self._max_length = 512
        self._pool: Pool | None = None
        self.info: dict[str, Any] = {}

    # -- loading --------------------------------------------------------------------------------

    def load(self) -> Any:
        if self._ce is not None:
            return self._ce
        import torch

        cfg = self.cfg
        preset = PRESETS.get(cfg.model.lower())
        name = preset.model if preset else cfg.model
        t0 = time.perf_counter()
        resolved = resolve_folder(name, cfg.revision)
        dev = torch_device(cfg.device)
        quiet_loading()
        from transformers import AutoConfig
        from transformers.utils import logging as hf_logging

        try:
            hf_cfg = from_pretrained(AutoConfig, resolved.path)
            archs = list(getattr(hf_cfg, "architectures", None) or [])
            fresh = not any(a.endswith("ForSequenceClassification") for a in archs)
            num_labels = preset.num_labels if preset else (1 if fresh else int(hf_cfg.num_labels))
            from sentence_transformers import CrossEncoder

            torch.manual_seed(int(getattr(self.context, "seed", 0)))  # a fresh head is seeded
            verbosity = hf_logging.get_verbosity()
            hf_logging.set_verbosity_error()
            try:
                ce = CrossEncoder(str(resolved.path), num_labels=num_labels, device=dev, local_files_only=True,
                                  activation_fn=torch.nn.Identity())
            finally:
                hf_logging.set_verbosity(verbosity)
        except (OSError, ValueError) as exc:
            raise RBenchError(f"cannot load cross-encoder {resolved.name!r} from {resolved.path}: "
                              f"{' '.join(str(exc).split())[:300]}") from exc
        if dev == "cpu":
            ce.float()
        act = cfg.activation
        if act == "auto":
            act = preset.activation if preset else ("softmax1" if num_labels == 2 else "identity")
        attr = "max_seq_length" if hasattr(type(ce), "max_seq_length") else "max_length"  # renamed in ST 6
        limit = int(getattr(ce, attr, None) or 512)
        self._max_length = cfg.max_length or (preset.max_length if preset else min(512, limit))
        self._ce, self._activation = ce, act
        self.info.update({"model": name, "model_path": str(resolved.path), "model_source": resolved.source,
                          "model_revision": resolved.revision, "num_labels": num_labels, "fresh_head": fresh,
                          "activation": act, "max_length": self._max_length, "device": dev,
                          "load_s": round(time.perf_counter() - t0, 3)})
        return ce

    def _batch(self, qs: list[str], docs: list[str]) -> Any:
        ce = self._ce
        enc = ce.tokenizer(qs, docs, padding=True, truncation="longest_first", max_length=self._max_length,
                           return_tensors="pt")
        return enc.to(ce.model.device)

    # -- protocol -------------------------------------------------------------------------------

    def fit(self, task: TaskData) -> None:
        if not self.cfg.fit:
            return
        ce = self.load()
        cfg = self.cfg
        model = ce.model
        self.train_groups(task, model, lambda qs, docs: model(**self._batch(qs, docs)).logits,
                          [p for p in model.parameters() if p.requires_grad], cfg.train_steps,
                          max(1, cfg.train_batch_size // (1 + cfg.negatives)), cfg.negatives, cfg.lr,
                          cfg.hard_negatives, cfg.hard_depth, "pointwise")

    def score_pairs(self, qs: list[str], docs: list[str]) -> np.ndarray:
        """Scores of (query, candidate) text pairs, in length-sorted batches, input order."""
        import torch

        self.load()
        out = np.zeros(len(qs), dtype=np.float32)
        order = np.argsort([-(len(q) + len(d)) for q, d in zip(qs, docs)], kind="stable")
        bs = self.cfg.batch_size
        with torch.inference_mode():
            for a in range(0, len(order), bs):
                idx = order[a : a + bs]
                logits = self._ce.model(**self._batch([qs[i] for i in idx], [docs[i] for i in idx])).logits
                out[idx] = apply_activation(logits, self._activation).cpu().numpy()
        return out
