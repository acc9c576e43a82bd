"""Training TIGER's T5 on the training windows' semantic-ID sequences, selected on validation.

One example per (training window, positive): encoder input = the window's history IDs (and the
user token), decoder target = the target's ID; T5's cross-entropy over the ID's tokens. AdamW
(the paper's schedule shape: a constant learning rate for ``lr_constant_steps`` steps, then
inverse-square-root decay). Every ``eval_every`` steps (default: every epoch) the exact
validation MRR is computed (the same scoring as the test, on ``valid_max_queries`` queries) and
the best evaluation's weights are kept; ``patience`` evaluations without improvement stop early.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rbench.api import Queries


@dataclass
class Examples:
    ids: np.ndarray  # (n, S) encoder ids, right-padded
    mask: np.ndarray  # (n, S)
    labels: np.ndarray  # (n, levels + 1) target tokens


def newest_windows(q: Queries, per_user: int) -> np.ndarray:
    """Rows of ``q`` to train on: all, or the newest ``per_user`` per user (rows are in time order
    within a user, as the recommendation family writes them)."""
    if per_user <= 0 or q.user_ids is None:
        return np.arange(len(q))
    users = np.asarray(q.user_ids).astype(str)
    keep = np.zeros(len(q), dtype=bool)
    seen: dict[str, int] = {}
    for i in range(len(q) - 1, -1, -1):
        c = seen.get(users[i], 0)
        if c < per_user:
            keep[i] = True
            seen[users[i]] = c + 1
    return np.flatnonzero(keep)


def build_examples(q: Queries, rows: np.ndarray, item_tokens: np.ndarray, vocab: Any, max_history: int) -> Examples:
    from rbench_rankers.tiger.model import encoder_inputs

    hists, users, labels = [], [], []
    for i in rows.tolist():
        h = q.history[i] if q.history is not None else np.zeros(0, np.int64)
        for t in q.positives[i].tolist():
            hists.append(h)
            users.append(None if q.user_ids is None else q.user_ids[i])
            labels.append(item_tokens[t])
    ids, mask = encoder_inputs(item_tokens, hists, users, vocab, max_history)
    lab = np.asarray(labels, dtype=np.int64).reshape(len(labels), item_tokens.shape[1])
    return Examples(ids.astype(np.int32), mask.astype(np.int8), lab)


@dataclass
class TrainResult:
    best_state: dict[str, Any] | None
    curve: list[dict[str, Any]] = field(default_factory=list)
    steps: int = 0
    epochs: float = 0.0
    examples_seen: int = 0
    train_s: float = 0.0
    best_step: int = -1
    best_valid: float = float("-inf")
    epoch_s: list[float] = field(default_factory=list)
    eval_s: float = 0.0  # time spent in validation (inside train_s)


def train(model: Any, ex: Examples, *, batch_size: int, lr: float, lr_constant_steps: int, weight_decay: float,
          epochs: int, max_steps: int, eval_every: int, patience: int, seed: int, device: str,
          evaluate: Callable[[], float], log: Callable[[str], None] | None = None) -> TrainResult:
    """Train ``model`` in place; returns the curve and the best evaluation's state dict."""
    import torch

    n = len(ex.labels)
    steps_per_epoch = max(1, -(-n // batch_size))
    total = steps_per_epoch * epochs if epochs > 0 else max_steps
    if max_steps > 0:
        total = min(total, max_steps)
    every = eval_every if eval_every > 0 else steps_per_epoch
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (max(lr_constant_steps, 1) / max(s, 1)) ** 0.5))
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    res = TrainResult(best_state=None)
    t0 = time.perf_counter()
    epoch_t0 = t0
    losses: list[float] = []
    bad = 0
    step = 0
    order = rng.permutation(n)
    pos = 0
    while step < total:
        if pos >= n:
            order, pos = rng.permutation(n), 0
            res.epoch_s.append(time.perf_counter() - epoch_t0)
            epoch_t0 = time.perf_counter()
        idx = order[pos : pos + batch_size]
        pos += len(idx)
        width = int(ex.mask[idx].sum(axis=1).max())
        ids = torch.from_numpy(ex.ids[idx, :width].astype(np.int64)).to(device)
        mask = torch.from_numpy(ex.mask[idx, :width].astype(np.int64)).to(device)
        labels = torch.from_numpy(ex.labels[idx]).to(device)
        model.train()
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        step += 1
        res.examples_seen += len(idx)
        losses.append(loss.item())
        if step % every == 0 or step == total:
            model.eval()
            te = time.perf_counter()
            with torch.no_grad():
                v = float(evaluate())
            res.eval_s += time.perf_counter() - te
            elapsed = time.perf_counter() - t0
            res.curve.append({"epoch": round(res.examples_seen / n, 4), "step": step, "examples": res.examples_seen,
                              "train_loss": round(float(np.mean(losses)), 6), "valid_MRR": round(v, 6),
                              "seconds": round(elapsed, 3)})
            if log is not None:
                log(f"  tiger step {step}/{total} (epoch {res.examples_seen / n:.2f}): loss {np.mean(losses):.4f}, "
                    f"valid MRR {100 * v:.2f} (best {100 * max(v, res.best_valid):.2f}) {elapsed:.0f}s")
            losses = []
            if v > res.best_valid:
                res.best_valid, res.best_step, bad = v, step, 0
                res.best_state = copy.deepcopy({k: t.detach().cpu() for k, t in model.state_dict().items()})
            else:
                bad += 1
                if patience > 0 and bad >= patience:
                    break
    if pos >= n:
        res.epoch_s.append(time.perf_counter() - epoch_t0)
    res.steps, res.epochs = step, res.examples_seen / max(n, 1)
    res.train_s = time.perf_counter() - t0
    model.eval()
    return res
