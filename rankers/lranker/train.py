"""Training LRanker (paper Section 3.2, Appendix "Implementation details").

InfoNCE (softmax cross-entropy, temperature 0.15) of the positive against sampled negatives;
AdamW (0.9, 0.999, weight decay 0.01) on LoRA + projector, lr 1e-4 with 10% linear warm-up then
cosine decay, batch 20, 15 epochs, gradient clipping at norm 0.5. Random partition sampling: each
training query's candidate set is split into M=10 random disjoint parts and every step uses the
centroids of one uniformly drawn part.

Choices the paper leaves open, made here:

- Candidate tower: frozen. The paper computes the candidate embeddings "offline ... before
  training", caches them "for reuse during training and testing", and uses the same offline
  vectors for its baselines and for the K-means centroids; so h_c comes from the backbone without
  LoRA, computed once per pool, and only the query side (LoRA + projector) learns. This keeps the
  K-means inputs and the scored vectors identical, and makes a training step cost one forward
  and backward pass per query (no candidate passes).
- Negatives: ``n_negatives`` (127) drawn uniformly per query from its candidate set, without
  the query's positives and the items its ranking excludes (the user's history in
  recommendation: they are removed at evaluation, so they are not negatives there). Small
  candidate lists use all their other items (padding is masked out of the softmax).
- One positive per query (the paper's tasks); with several, one is drawn uniformly per step.
- The candidate set of a training query is the shared pool (large scenario) or its own
  candidate list (small scenario).
- Partitions: ``partition_sets=0`` (default) draws each query's M-partition from a seed that
  depends on the query, so it is fixed for the whole training as the paper's precomputed splits
  are; the drawn part's centroids are computed on the fly (identical to precomputing, and the
  only way that fits in memory for large pools). ``partition_sets=P>0`` draws P partitions of
  a shared pool once and assigns each query one of them (P*M clusterings in total instead of
  one per query and step) -- the CPU preset's shortcut.
- ``max_train_queries``: a fresh random sample of that many training queries per epoch (the
  schedule's length follows it); 0 uses every training query, as the paper does.
- A batch of one query is merged into the previous batch (BatchNorm needs two rows).
- Several GPUs (data parallel, ``torch.distributed`` initialised, e.g. by ``accelerate launch``;
  see ``rankers/lranker/launch.py``): every rank draws the same epoch permutation, takes its
  stride of it (``rows[rank::world]``, equal lengths), samples its own negatives, and gradients
  are averaged over ranks after each backward pass (what DDP does, without wrapping the model, so
  the model's own methods stay callable). ``batch_size`` is per rank.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from rbench.api import Queries

from .aggregation import Aggregator, derive_seed
from .config import LRankerConfig
from .model import LRankerModel


@dataclass
class TrainReport:
    epochs: int = 0
    steps: int = 0
    queries_per_epoch: int = 0
    loss_per_epoch: list[float] = field(default_factory=list)
    seconds_per_epoch: list[float] = field(default_factory=list)
    trainable_params: int = 0
    partitions: str = ""
    skipped: str = ""


class PartitionSampler:
    """Slots of part ``r`` of training query ``q``'s random M-partition (see module docstring)."""

    def __init__(self, aggregator: Aggregator, vectors: np.ndarray, m: int, seed: int,
                 candidates: np.ndarray | None = None, partition_sets: int = 0) -> None:
        self.agg, self.vectors, self.m, self.seed = aggregator, vectors, m, seed
        self.candidates = candidates
        self.bank: list[list[np.ndarray]] | None = None
        if partition_sets > 0 and candidates is None:
            self.bank = [[self.agg(vectors[part], derive_seed(seed, "bank", s, r))
                          for r, part in enumerate(self.parts_of(np.arange(len(vectors)), ("bank", s)))]
                         for s in range(partition_sets)]

    def parts_of(self, items: np.ndarray, key: tuple[Any, ...]) -> list[np.ndarray]:
        perm = items[np.random.default_rng(derive_seed(self.seed, "partition", *key)).permutation(len(items))]
        return [p for p in np.array_split(perm, min(self.m, len(items))) if len(p)]

    def slots(self, q: int, r: int) -> np.ndarray:
        if self.bank is not None:
            parts = self.bank[derive_seed(self.seed, "bank-of", q) % len(self.bank)]
            return parts[r % len(parts)]
        items = self.candidates[q] if self.candidates is not None else np.arange(len(self.vectors))
        parts = self.parts_of(np.asarray(items), ("query", q))
        r = r % len(parts)
        return self.agg(self.vectors[parts[r]], derive_seed(self.seed, "part", q, r))

    def describe(self) -> str:
        if self.bank is not None:
            return f"{len(self.bank)} shared random {self.m}-partitions of the pool"
        return f"a random {self.m}-partition per query (centroids on the fly)"


def sample_negatives(rng: np.random.Generator, n: int, forbidden: np.ndarray, pool_size: int,
                     candidates: np.ndarray | None = None) -> np.ndarray:
    """``n`` distinct negatives from the pool (or ``candidates``) avoiding ``forbidden``."""
    if candidates is not None:
        allowed = candidates[~np.isin(candidates, forbidden)]
        return rng.permutation(allowed)[:n]
    free = pool_size - len(np.unique(forbidden))
    n = min(n, max(free, 0))
    out = np.zeros(0, dtype=np.int64)
    while len(out) < n:
        draw = rng.integers(0, pool_size, size=2 * (n - len(out)) + 8)
        draw = draw[~np.isin(draw, forbidden)]
        out = np.unique(np.concatenate([out, draw]))
        if len(out) > n:
            out = rng.permutation(out)[:n]
    return rng.permutation(out)


def lr_lambda(total: int, warmup_ratio: float) -> Callable[[int], float]:
    """Linear warm-up over ``warmup_ratio`` of the steps, then cosine decay to 0."""
    warm = max(1, int(round(total * warmup_ratio))) if warmup_ratio > 0 else 0

    def f(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        progress = (step - warm) / max(1, total - warm)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return f


def world() -> tuple[int, int]:
    """(rank, world size) of an initialised torch.distributed group, else (0, 1)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def average_gradients(params: list[torch.Tensor]) -> None:
    """All-reduce every gradient to its mean over ranks (no-op in a single process)."""
    import torch.distributed as dist

    rank, size = world()
    if size == 1:
        return
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
        p.grad.div_(size)


def rank_rows(rows: np.ndarray, rank: int, size: int) -> np.ndarray:
    """This rank's stride of an epoch's rows, every rank the same length."""
    if size == 1:
        return rows
    usable = (len(rows) // size) * size
    return rows[:usable][rank::size]


def epoch_batches(rows: np.ndarray, size: int) -> list[np.ndarray]:
    batches = [rows[a : a + size] for a in range(0, len(rows), size)]
    if len(batches) > 1 and len(batches[-1]) == 1:
        batches[-2] = np.concatenate([batches[-2], batches.pop()])
    return batches


def train(model: LRankerModel, cfg: LRankerConfig, queries: Queries, vectors: np.ndarray,
          sampler: PartitionSampler | None, seed: int,
          progress: Callable[[str, int], Callable[[int], None]] | None = None) -> TrainReport:
    """Optimise LoRA + projector in place; ``vectors`` are the (normalised) frozen h_c."""
    report = TrainReport(partitions=sampler.describe() if sampler else "none (global_info=false)")
    params = model.trainable_parameters()
    report.trainable_params = int(sum(p.numel() for p in params))
    if not params:
        report.skipped = "nothing to train (lora=false and global_info=false)"
        return report
    if cfg.epochs == 0 or len(queries) == 0:
        report.skipped = "epochs=0 or no training queries"
        return report
    rng = np.random.default_rng(derive_seed(seed, "train"))  # the epoch order: the same on every rank
    rank, size = world()
    neg_rng = rng if size == 1 else np.random.default_rng(derive_seed(seed, "train", "rank", rank))
    n_q = len(queries)
    per_epoch = min(cfg.max_train_queries, n_q) if cfg.max_train_queries else n_q
    steps_per_epoch = len(epoch_batches(rank_rows(np.arange(per_epoch), rank, size), cfg.batch_size))
    total = steps_per_epoch * cfg.epochs
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(total, cfg.warmup_ratio))
    prompts = queries.prompts if queries.prompts is not None else queries.texts
    cand = queries.candidates
    report.queries_per_epoch = per_epoch
    model.train()
    for epoch in range(cfg.epochs):
        t0 = time.perf_counter()
        rows = rank_rows(rng.permutation(n_q)[:per_epoch], rank, size)
        tick = progress(f"lranker epoch {epoch + 1}/{cfg.epochs}", per_epoch) if progress else None
        losses = []
        for batch_rows in epoch_batches(rows, cfg.batch_size):
            loss = _step(model, cfg, queries, prompts, cand, vectors, sampler, batch_rows, neg_rng)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            average_gradients(params)
            torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
            opt.step()
            sched.step()
            report.steps += 1
            losses.append(float(loss.detach()))
            if tick:
                tick(len(batch_rows))
        report.epochs += 1
        report.loss_per_epoch.append(float(np.mean(losses)))
        report.seconds_per_epoch.append(round(time.perf_counter() - t0, 3))
    model.eval()
    return report


def _step(model: LRankerModel, cfg: LRankerConfig, queries: Queries, prompts: Any, cand: np.ndarray | None,
          vectors: np.ndarray, sampler: PartitionSampler | None, rows: np.ndarray,
          rng: np.random.Generator) -> torch.Tensor:
    targets, soft_inputs = [], []
    for q in rows:
        q = int(q)
        pos = queries.positives[q]
        forbidden = pos if queries.exclude is None else np.concatenate([pos, queries.exclude[q]])
        neg = sample_negatives(rng, cfg.n_negatives, forbidden, len(vectors), cand[q] if cand is not None else None)
        targets.append(np.concatenate([[pos[rng.integers(len(pos))]], neg]).astype(np.int64))
        if sampler is not None:
            soft_inputs.append(sampler.slots(q, int(rng.integers(cfg.n_partitions))))
    width = max(len(t) for t in targets)
    idx = np.zeros((len(rows), width), dtype=np.int64)
    valid = np.zeros((len(rows), width), dtype=bool)
    for b, t in enumerate(targets):
        idx[b, : len(t)], valid[b, : len(t)] = t, True
    soft = model.project(np.stack(soft_inputs)) if sampler is not None else None
    hq = model.query_embeddings([prompts[int(q)] for q in rows], [queries.texts[int(q)] for q in rows], soft)
    hc = torch.from_numpy(np.asarray(vectors[idx.reshape(-1)], dtype=np.float32).reshape(*idx.shape, -1))
    logits = torch.einsum("bd,bnd->bn", hq, hc.to(hq.device)) / cfg.temperature
    logits = logits.masked_fill(~torch.from_numpy(valid).to(hq.device), float("-inf"))
    return F.cross_entropy(logits, torch.zeros(len(rows), dtype=torch.long, device=hq.device))
