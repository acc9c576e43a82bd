"""Training LRanker (paper Section 3.2, Appendix "Implementation details").

InfoNCE (softmax cross-entropy over the positive and negatives, temperature 0.15) on
<h_q, h_c> (Eq. 10); AdamW (0.9, 0.999, weight decay 0.01), lr 1e-4 with 10% linear warm-up then
cosine decay, batch 20, 15 epochs, gradient clipping at norm 0.5. Random partition sampling: each
training query's candidate set is split into M=10 random disjoint parts and every step uses the
centroids of one uniformly drawn part.

Choices the paper leaves open, made here:

- Candidate tower (``candidate_tower=shared``, default): "h_q and h_c are produced by the same
  LLM f_theta", so every step encodes its candidates -- the batch's positives and the sampled
  negatives -- with f_theta *with gradients*. The union of the step's candidates serves every
  query of the batch (in-batch negatives plus ``n_negatives`` uniform samples shared by the
  batch; ``max_step_candidates`` caps the union). K-means uses the cached *base* embeddings e(c)
  (the paper's offline encoder), so the centroids do not move while f_theta trains. After
  training, the pool's h_c is re-encoded with the trained model into the embedding cache, keyed by
  the checkpoint (validation during training re-encodes it in memory).
  ``candidate_tower=frozen`` is the ablation: h_c = e(c), only the query side learns.
- Masking: a query's other positives, its history and the items its ranking excludes are never
  its negatives (they are removed at evaluation, so they are not negatives there); the training
  split carries no ``exclude``, so the history is used.
- Candidate lists (small scenario): a query's negatives come from its own list only, and its
  softmax runs over its own entries of the step's union.
- One positive per query (the paper's tasks); with several, one is drawn uniformly per step.
- Partitions: ``partition_sets=0`` (default) draws each query's M-partition from a seed that
  depends on the query, fixed for the whole training as the paper's precomputed splits are; the
  drawn part's centroids are computed by the data loader's workers, off the training loop.
  ``partition_sets=P>0`` draws P partitions of a shared pool once (P*M clusterings in total).
- Budget: ``windows_per_user`` keeps the newest N training windows of each user (rows of one user
  are consecutive and in time order in the training split); ``max_train_queries`` samples that
  many per epoch; ``max_steps`` caps the optimiser steps (and sets the schedule's length).
- Checkpoint selection: validation MRR of direct ranking after every epoch (or every
  ``eval_every`` steps) on ``valid_max_queries`` queries (all by default); the best evaluation's
  weights are restored (``checkpoint_selection=best``); ``patience`` stops early. The curve
  (train loss, valid MRR, steps, examples, seconds) goes into the RunRecord.
- Input pipeline: a ``torch.utils.data.DataLoader`` over whole steps (tokenised queries and
  candidates, partition centroids, the step's candidate ids and masks), ``loader_workers``
  processes, ``prefetch`` steps ahead each, pinned memory on CUDA. Each step's randomness is
  seeded by (seed, epoch, step, rank), so results do not depend on the number of workers.
- A batch of one query is merged into the previous batch (BatchNorm needs two rows).
- Several GPUs (data parallel, ``torch.distributed`` initialised by ``rbench run`` when it runs
  under ``torchrun`` or ``accelerate launch``, see ``rbench.run.runner``): every rank draws the same
  epoch permutation, takes its stride of it (``rows[rank::world]``, equal lengths), samples its
  own negatives, and gradients
  are averaged over ranks after each backward pass (what DDP does, without wrapping the model, so
  the model's own methods stay callable). ``batch_size`` is per rank.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from rbench.api import Queries

from .aggregation import Aggregator, derive_seed
from .config import LRankerConfig
from .model import LRankerModel, PromptTokenizer, TokenBatch


@dataclass
class TrainReport:
    """What training did: the budget (shown in tables) and the learning curve."""

    epochs: float = 0.0  # passes over the (selected) training windows, fractional when capped
    steps: int = 0  # optimiser steps
    examples_seen: int = 0  # training queries processed (with repeats)
    windows: int = 0  # distinct training windows available (after windows_per_user)
    queries_per_epoch: int = 0
    loss_per_epoch: list[float] = field(default_factory=list)
    seconds_per_epoch: list[float] = field(default_factory=list)
    trainable_params: int = 0
    partitions: str = ""
    negatives_per_example: str = ""
    candidates_per_step: float = 0.0  # mean distinct candidates scored per step
    curve: list[dict] = field(default_factory=list)  # one row per validation evaluation
    best_step: int | None = None
    best_valid_mrr: float | None = None
    selection: str = ""
    stopped: str = ""  # why training ended
    train_wall_s: float = 0.0  # training loop incl. validation evaluations
    data_wait_s: float = 0.0  # time the loop waited for the data loader
    step_s: float = 0.0  # time in forward/backward/optimiser
    skipped: str = ""

    def budget(self) -> dict[str, Any]:
        """The RunRecord's ``training_budget`` (the same keys for every trained ranker)."""
        return {"examples_seen": self.examples_seen, "epochs": round(self.epochs, 3),
                "optimizer_steps": self.steps, "train_wall_s": round(self.train_wall_s, 1),
                "negatives_per_example": self.negatives_per_example, "trainable_params": self.trainable_params,
                "selection": self.selection}


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

    def slots_many(self, qs: Sequence[int], rs: Sequence[int]) -> np.ndarray:
        """``np.stack([self.slots(q, r) for q, r in zip(qs, rs)])``: a step's partitions are
        clustered in one batched call (``Aggregator.many``), with the same slots."""
        many = getattr(self.agg, "many", None)
        if self.bank is not None or many is None:
            return np.stack([self.slots(int(q), int(r)) for q, r in zip(qs, rs)])
        subsets, seeds = [], []
        for q, r in zip(qs, rs):
            q = int(q)
            items = self.candidates[q] if self.candidates is not None else np.arange(len(self.vectors))
            parts = self.parts_of(np.asarray(items), ("query", q))
            r = int(r) % len(parts)
            subsets.append(parts[r])
            seeds.append(derive_seed(self.seed, "part", q, r))
        return np.asarray(many(self.vectors, subsets, seeds))

    def describe(self) -> str:
        if self.bank is not None:
            return f"{len(self.bank)} shared random {self.m}-partitions of the pool"
        return f"a random {self.m}-partition per query (centroids on the fly)"


def sample_negatives(rng: np.random.Generator, n: int, forbidden: np.ndarray, pool_size: int) -> np.ndarray:
    """``n`` distinct negatives from a shared pool avoiding ``forbidden`` (candidate lists draw
    from their own entries in ``StepBuilder``)."""
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


def training_rows(queries: Queries, windows_per_user: int) -> np.ndarray:
    """Rows of the newest ``windows_per_user`` windows of each user (all rows when 0 or when the
    split names no users). A user's windows are consecutive and oldest-first in the split."""
    n = len(queries)
    if windows_per_user <= 0 or queries.user_ids is None or n == 0:
        return np.arange(n)
    users = np.asarray(queries.user_ids)
    start = np.r_[True, users[1:] != users[:-1]]
    group = np.cumsum(start) - 1
    first = np.flatnonzero(start)
    size = np.diff(np.r_[first, n])
    from_end = size[group] - (np.arange(n) - first[group])  # 1 for a user's newest window
    return np.flatnonzero(from_end <= windows_per_user)


def schedule(cfg: LRankerConfig, n_windows: int, rank: int = 0, size: int = 1) -> tuple[int, int, int]:
    """(queries per epoch, optimiser steps per epoch, total steps) for ``n_windows`` training
    windows: what the learning-rate schedule spans and what the budget will be."""
    per_epoch = min(cfg.max_train_queries, n_windows) if cfg.max_train_queries else n_windows
    steps_per_epoch = len(epoch_batches(rank_rows(np.arange(per_epoch), rank, size), cfg.batch_size))
    total = steps_per_epoch * cfg.epochs
    return per_epoch, steps_per_epoch, min(total, cfg.max_steps) if cfg.max_steps else total


@dataclass
class StepInputs:
    """One optimiser step's inputs, prepared by a loader worker."""

    rows: np.ndarray  # training-query rows
    queries: TokenBatch
    slots: torch.Tensor | None  # (B, K, D) partition centroids (global_info)
    cand_ids: np.ndarray  # (C,) pool indices: the union of the step's candidates
    cand_tokens: TokenBatch | None  # their tokens (shared candidate tower)
    target: torch.Tensor  # (B,) column of each query's positive in cand_ids
    allowed: torch.Tensor  # (B, C) bool: columns in each query's softmax

    def to(self, device: torch.device) -> StepInputs:
        """The tensors on ``device``; copies from pinned memory do not block the host."""
        nb = device.type == "cuda"
        move = lambda t: t.to(device, non_blocking=nb) if t is not None else None  # noqa: E731
        move_batch = lambda b: TokenBatch(*(move(t) for t in (b.input_ids, b.attention_mask, b.pool_mask,  # noqa: E731
                                                              b.placeholder))) if b is not None else None
        return StepInputs(self.rows, move_batch(self.queries), move(self.slots), self.cand_ids,
                          move_batch(self.cand_tokens), move(self.target), move(self.allowed))

    def pin_memory(self) -> StepInputs:
        pin = lambda t: t.pin_memory() if t is not None else None  # noqa: E731
        pin_batch = lambda b: TokenBatch(*(pin(t) for t in (b.input_ids, b.attention_mask, b.pool_mask, b.placeholder))) \
            if b is not None else None  # noqa: E731
        return StepInputs(self.rows, pin_batch(self.queries), pin(self.slots), self.cand_ids,
                          pin_batch(self.cand_tokens), pin(self.target), pin(self.allowed))


class StepBuilder(torch.utils.data.Dataset):
    """Builds step ``i`` of the current epoch: negatives, masks, centroids and tokens.

    Everything random is seeded by (seed, epoch, step, rank), so a step is the same whether it is
    built in the loop or in any worker."""

    def __init__(self, cfg: LRankerConfig, queries: Queries, tokens: PromptTokenizer, pool_texts: Any,
                 pool_size: int, sampler: PartitionSampler | None, seed: int, rank: int = 0) -> None:
        self.cfg, self.q, self.tokens, self.pool_texts = cfg, queries, tokens, pool_texts
        self.pool_size, self.sampler, self.seed, self.rank = pool_size, sampler, seed, rank
        self.prompts = queries.prompts if queries.prompts is not None else queries.texts
        self.shared = cfg.candidate_tower == "shared"
        self.epoch, self.batches = 0, []

    def for_epoch(self, epoch: int, batches: list[np.ndarray]) -> StepBuilder:
        self.epoch, self.batches = epoch, batches
        return self

    def __len__(self) -> int:
        return len(self.batches)

    def forbidden(self, q: int) -> np.ndarray:
        q_ = self.q
        parts = [q_.positives[q]]
        if q_.history is not None:
            parts.append(q_.history[q])
        if q_.exclude is not None:
            parts.append(q_.exclude[q])
        return np.unique(np.concatenate(parts).astype(np.int64))

    def __getitem__(self, i: int) -> StepInputs:
        rows = self.batches[i]
        cfg, q_ = self.cfg, self.q
        rng = np.random.default_rng(derive_seed(self.seed, "step", self.epoch, i, self.rank))
        targets = np.empty(len(rows), dtype=np.int64)
        forbidden = [self.forbidden(int(q)) for q in rows]
        for b, q in enumerate(rows):
            pos = q_.positives[int(q)]
            targets[b] = pos[rng.integers(len(pos))]
        own: list[np.ndarray] | None = None
        if q_.candidates is not None:  # small scenario: negatives from the query's own list
            own = []
            for b, q in enumerate(rows):
                lst = np.asarray(q_.candidates[int(q)], dtype=np.int64)
                neg = rng.permutation(lst[~np.isin(lst, forbidden[b])])[: cfg.n_negatives]
                own.append(np.concatenate([[targets[b]], neg]))
            union = np.unique(np.concatenate(own))
        else:
            neg = sample_negatives(rng, cfg.n_negatives, np.unique(targets), self.pool_size)
            union = np.unique(np.concatenate([targets, neg]))
        cap = cfg.max_step_candidates
        if cap and len(union) > cap:
            others = np.setdiff1d(union, targets)
            keep = rng.permutation(others)[: max(0, cap - len(np.unique(targets)))]
            union = np.unique(np.concatenate([targets, keep]))
        col = np.searchsorted(union, targets)
        if own is not None:
            allowed = np.stack([np.isin(union, o) for o in own])
        else:
            allowed = np.stack([~np.isin(union, f) for f in forbidden])
        allowed[np.arange(len(rows)), col] = True
        slots = None
        if self.sampler is not None:  # the part draws first (slots_many draws nothing from rng)
            drawn = [int(rng.integers(cfg.n_partitions)) for _ in rows]
            slots = torch.from_numpy(self.sampler.slots_many([int(q) for q in rows], drawn).astype(np.float32))
        qtok = self.tokens.queries([self.prompts[int(q)] for q in rows], [q_.texts[int(q)] for q in rows],
                                   with_placeholder=cfg.global_info)
        ctok = self.tokens.candidates([str(self.pool_texts[int(c)]) for c in union]) if self.shared else None
        return StepInputs(rows, qtok, slots, union, ctok, torch.from_numpy(col), torch.from_numpy(allowed))


def keep_freed_memory() -> bool:
    """glibc: stop returning freed memory to the OS between steps (no mmap for big blocks, no trim).
    Each CPU step allocates and frees gigabytes of activations, and faulting fresh pages in again
    cost as much as the arithmetic on these VMs (RecBole's SASRec epoch: 150-230 s -> 114 s with
    the same settings as environment variables, shared/notes/stack.md). No-op elsewhere."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_max = -1, -4
        return bool(libc.mallopt(m_mmap_max, 0)) and bool(libc.mallopt(m_trim_threshold, 2**30))
    except (OSError, AttributeError):
        return False


def _identity(x: Any) -> Any:
    return x


def _worker_init(_: int) -> None:
    try:  # one BLAS thread per worker: the training loop owns the cores
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
    except ImportError:
        pass


def step_loader(builder: StepBuilder, workers: int, prefetch: int, pin: bool) -> Any:
    """Whole steps from ``builder`` in order; ``workers=0`` builds them in the loop."""
    if workers == 0:  # pinned as the loader's workers would (non-blocking copies to the GPU)
        return (builder[i].pin_memory() if pin else builder[i] for i in range(len(builder)))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # forked workers tokenise on their own
    return iter(torch.utils.data.DataLoader(builder, batch_size=None, shuffle=False, num_workers=workers,
                                            prefetch_factor=prefetch, pin_memory=pin, collate_fn=_identity,
                                            worker_init_fn=_worker_init,
                                            # its own generator: starting workers must not draw from
                                            # the global RNG (dropout masks would depend on workers)
                                            generator=torch.Generator().manual_seed(builder.epoch)))


def step_loss(model: LRankerModel, inputs: StepInputs, frozen: np.ndarray | None) -> torch.Tensor:
    """InfoNCE of each query's positive against the other allowed candidates of the step."""
    dev = model.device
    if dev.type == "cuda":  # one round of non-blocking copies (pinned by the loader) before the forward
        inputs = inputs.to(dev)
    soft = model.project(inputs.slots) if inputs.slots is not None else None
    model.fit_checkpointing(inputs.queries, inputs.cand_tokens)
    hq = model.query_tokens_embeddings(inputs.queries, soft, model.cfg.length_buckets)
    if inputs.cand_tokens is not None:
        hc = model.candidate_tokens_embeddings(inputs.cand_tokens, model.cfg.length_buckets)
    else:
        assert frozen is not None
        hc = torch.from_numpy(np.asarray(frozen[inputs.cand_ids], dtype=np.float32)).to(dev)
    logits = (hq.float() @ hc.float().T) * model.scale
    logits = logits.masked_fill(~inputs.allowed.to(dev), float("-inf"))
    return F.cross_entropy(logits, inputs.target.to(dev))


Validate = Callable[[], float]  # -> validation MRR of the model as it is now


def train(model: LRankerModel, cfg: LRankerConfig, queries: Queries, vectors: np.ndarray,
          sampler: PartitionSampler | None, seed: int, pool_texts: Sequence[str] | None = None,
          validate: Validate | None = None,
          progress: Callable[[str, int], Callable[[int], None]] | None = None,
          log: Callable[[str], None] | None = None) -> TrainReport:
    """Optimise the adaptation + projector in place. ``vectors`` are the base embeddings e(c)
    (h_c itself with ``candidate_tower=frozen``); ``pool_texts`` the candidate texts the shared
    tower encodes; ``validate`` is called every ``eval_every`` steps (or per epoch)."""
    report = TrainReport(partitions=sampler.describe() if sampler else "none (global_info=false)")
    params = model.trainable_parameters()
    report.trainable_params = int(sum(p.numel() for p in params))
    if not params:
        report.skipped = "nothing to train (lora=false and global_info=false)"
        return report
    rows_all = training_rows(queries, cfg.windows_per_user)
    report.windows = int(len(rows_all))
    if cfg.epochs == 0 or len(rows_all) == 0 or cfg.max_steps < 0:
        report.skipped = "epochs=0 or no training queries"
        return report
    shared = cfg.candidate_tower == "shared"
    if shared and pool_texts is None:
        raise ValueError("candidate_tower=shared needs the pool texts")
    rng = np.random.default_rng(derive_seed(seed, "train"))  # the epoch order: the same on every rank
    rank, size = world()
    n_q = len(rows_all)
    per_epoch, steps_per_epoch, total = schedule(cfg, n_q, rank, size)
    eval_every = cfg.eval_every or steps_per_epoch
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(total, cfg.warmup_ratio))
    builder = StepBuilder(cfg, queries, model.tokens, pool_texts, len(vectors), sampler, seed, rank)
    report.queries_per_epoch = per_epoch
    in_batch = "shared pool: in-batch positives + " if queries.candidates is None else "own list: "
    report.negatives_per_example = f"{in_batch}{cfg.n_negatives} sampled per step" + (
        f" (cap {cfg.max_step_candidates} candidates)" if cfg.max_step_candidates else "")
    pin = model.device.type == "cuda"
    if not pin:
        keep_freed_memory()
    best_state: dict[str, torch.Tensor] | None = None
    since_best, cand_total = 0, 0
    # per-step losses stay on the device (no host sync per step); read at evaluations and epoch ends
    window_losses: list[torch.Tensor] = []

    def host(losses: list[torch.Tensor]) -> list[float]:
        return torch.stack(losses).tolist() if losses else []
    t_start = time.perf_counter()

    def evaluate_now(epoch_pos: float) -> bool:
        """Record a curve point; returns True when patience is exhausted."""
        nonlocal best_state, since_best
        t_eval = time.perf_counter()
        mrr = float(validate()) if validate is not None else None
        model.train()
        point = {"epoch": round(epoch_pos, 4), "step": report.steps, "examples": report.examples_seen,
                 "train_loss": float(np.mean(host(window_losses))) if window_losses else None,
                 "valid_MRR": mrr, "seconds": round(time.perf_counter() - t_start, 1),
                 "eval_s": round(time.perf_counter() - t_eval, 1)}
        report.curve.append(point)
        window_losses.clear()
        if log:
            log(f"step {report.steps}: train loss {point['train_loss']}, valid MRR {mrr}")
        if mrr is None:
            return False
        if report.best_valid_mrr is None or mrr > report.best_valid_mrr:
            report.best_valid_mrr, report.best_step, since_best = mrr, report.steps, 0
            if cfg.checkpoint_selection == "best":
                best_state = model.trainable_state()
            return False
        since_best += 1
        return bool(cfg.patience) and since_best >= cfg.patience

    model.train()
    stop = ""
    for epoch in range(cfg.epochs):
        t0 = time.perf_counter()
        rows = rank_rows(rows_all[rng.permutation(n_q)[:per_epoch]], rank, size)
        batches = epoch_batches(rows, cfg.batch_size)
        if cfg.max_steps:
            batches = batches[: total - report.steps]
        tick = progress(f"lranker epoch {epoch + 1}", sum(len(b) for b in batches)) if progress else None
        loader = step_loader(builder.for_epoch(epoch, batches), cfg.loader_workers, cfg.prefetch, pin)
        losses: list[torch.Tensor] = []
        for i in range(len(batches)):
            t_wait = time.perf_counter()
            inputs = next(loader)
            t_step = time.perf_counter()
            report.data_wait_s += t_step - t_wait
            loss = step_loss(model, inputs, None if shared else vectors)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            average_gradients(params)
            torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
            opt.step()
            sched.step()
            report.step_s += time.perf_counter() - t_step
            report.steps += 1
            report.examples_seen += len(inputs.rows)
            cand_total += len(inputs.cand_ids)
            losses.append(loss.detach())
            window_losses.append(losses[-1])
            if tick:
                tick(len(inputs.rows))
            done = report.steps >= total
            if report.steps % eval_every == 0 or done or i == len(batches) - 1 and not cfg.eval_every:
                if evaluate_now(epoch + (i + 1) / max(1, steps_per_epoch)):
                    stop = f"early stop: no better validation MRR in {cfg.patience} evaluations"
            if stop or done:
                break
        del loader
        report.epochs = epoch + (i + 1) / max(1, steps_per_epoch)
        report.loss_per_epoch.append(float(np.mean(host(losses))))
        report.seconds_per_epoch.append(round(time.perf_counter() - t0, 3))
        if stop or report.steps >= total:
            break
    report.stopped = stop or f"budget: {report.steps} steps"
    report.train_wall_s = time.perf_counter() - t_start
    report.candidates_per_step = round(cand_total / max(1, report.steps), 1)
    n_evals = sum(1 for p in report.curve if p["valid_MRR"] is not None)
    if best_state is not None and report.best_step != report.steps:
        model.restore_trainable_state(best_state)
    if n_evals:
        report.selection = (f"{cfg.checkpoint_selection} of {n_evals} validation evaluations "
                            f"(step {report.best_step if cfg.checkpoint_selection == 'best' else report.steps})")
    else:
        report.selection = "last step (no validation)"
    model.eval()
    return report
