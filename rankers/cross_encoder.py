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
  ``train_steps`` steps of ``train_batch_size`` pairs. No model selection (the last step is
  used); ``ranker_info["training_budget"]`` records the budget like every trained ranker. The
  fine-tuned model lives for the run only (not cached).
- Every model that cannot be found offline answers with ``rankers.dense``'s one-line error
  telling how to pass a local folder (``--set model=/path/to/model``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from rbench.api import Pool, Queries, TaskData
from rbench.errors import RBenchError
from rbench.plugins import BaseRanker

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
    max_length: int = 0  # tokens per pair (0: the preset's, else min(512, the model's limit))
    batch_size: int = 32
    device: str = "auto"
    fit: bool = False  # fine-tune on the train split with first-stage hard negatives
    train_steps: int = 200
    train_batch_size: int = 16  # pairs per step
    lr: float = 2e-5
    negatives: int = 3  # negatives per positive
    hard_negatives: Literal["bm25", "random"] = "bm25"
    hard_depth: int = 50  # negatives are drawn from the first stage's top hard_depth

    def validate(self) -> None:
        for name in ("batch_size", "train_steps", "train_batch_size", "negatives", "hard_depth"):
            if getattr(self, name) < 1:
                raise RBenchError(f"{name} must be >= 1")
        if self.max_length < 0:
            raise RBenchError("max_length must be >= 0 (0: the model's default)")


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
        from rankers.bm25 import BM25Ranker

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


def trainable_params(model: Any) -> int:
    return int(sum(p.numel() for p in model.parameters() if p.requires_grad))


# ------------------------------------------------------------------------------------ ranker


class PairRanker(BaseRanker):
    """Base of the pairwise rerankers: ``index`` keeps the pool, ``score`` gathers every
    (query text, candidate text) pair of 1-D shared or 2-D per-query candidates and hands them to
    ``score_pairs``. ``pairwise = True`` tells the harness the ranker scores pair by pair."""

    pairwise = True
    _pool: Pool | None = None
    info: dict[str, Any]

    def score_pairs(self, qs: list[str], docs: list[str]) -> np.ndarray:
        raise NotImplementedError

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
    domains = ("recommendation", "routing", "passage", "product", "generic")
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

        from rankers.dense import _quiet_loading, resolve_model

        cfg = self.cfg
        preset = PRESETS.get(cfg.model.lower())
        name = preset.model if preset else cfg.model
        t0 = time.perf_counter()
        resolved = resolve_model(name, cfg.revision)
        dev = torch_device(cfg.device)
        _quiet_loading()
        from transformers import AutoConfig
        from transformers.utils import logging as hf_logging

        try:
            hf_cfg = AutoConfig.from_pretrained(str(resolved.path), local_files_only=True)
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
        import torch

        ce = self.load()
        cfg = self.cfg
        seed = int(getattr(self.context, "seed", 0))
        n_pairs = cfg.train_steps * cfg.train_batch_size
        triples, neg_info = sample_training_pairs(task, -(-n_pairs // (1 + cfg.negatives)), cfg.negatives,
                                                  cfg.hard_negatives, cfg.hard_depth, seed)
        rng = np.random.default_rng(seed + 1)
        pool, train = task.fit_pool, task.train
        model = ce.model
        model.train()
        torch.manual_seed(seed)
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
        warm = max(1, cfg.train_steps // 10)
        sched = torch.optim.lr_scheduler.LambdaLR(  # linear warm-up, then linear decay to 0
            opt, lambda s: min((s + 1) / warm, max(0.0, (cfg.train_steps - s) / max(1, cfg.train_steps - warm))))
        two = self.info["num_labels"] >= 2
        t0 = time.perf_counter()
        order = rng.permutation(len(triples))
        seen, losses, curve = 0, [], []
        for step in range(cfg.train_steps):
            if seen // len(order) != (seen + cfg.train_batch_size - 1) // len(order):
                order = np.concatenate([order, rng.permutation(len(triples))])
            idx = [order[(seen + j) % len(order)] for j in range(cfg.train_batch_size)]
            seen += len(idx)
            batch = [triples[i] for i in idx]
            qs = [str(train.texts[q]) for q, _, _ in batch]
            docs = pool.text_batch(np.array([d for _, d, _ in batch], dtype=np.int64))
            labels = torch.tensor([y for _, _, y in batch], device=model.device)
            logits = model(**self._batch(qs, docs)).logits
            if two:
                loss = torch.nn.functional.cross_entropy(logits.float(), labels.long())
            else:
                loss = torch.nn.functional.binary_cross_entropy_with_logits(logits[:, 0].float(), labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            losses.append(float(loss.detach()))
            if (step + 1) % max(1, cfg.train_steps // 10) == 0 or step + 1 == cfg.train_steps:
                curve.append({"epoch": round(seen / len(triples), 4), "step": step + 1, "examples": seen,
                              "train_loss": round(float(np.mean(losses[-max(1, cfg.train_steps // 10):])), 5),
                              "valid_MRR": None, "seconds": round(time.perf_counter() - t0, 2)})
        model.eval()
        self.info["training_budget"] = {
            "examples_seen": seen, "epochs": round(seen / len(triples), 3), "optimizer_steps": cfg.train_steps,
            "train_wall_s": round(time.perf_counter() - t0, 1), "negatives_per_example": cfg.negatives,
            "trainable_params": trainable_params(model), "selection": "last step (no validation)"}
        self.info["training_curve"] = curve
        self.info["training_pairs"] = {**neg_info, "pairs": len(triples)}

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
