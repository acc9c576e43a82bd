"""Sanity floors: seeded random scores and item popularity.

Every leaderboard shows them so that a ranker which does not beat popularity is visible as such
(on ml-100k popularity beats every zero-shot text ranker).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from rbench.api import Pool, Queries, TaskData
from rbench.plugin import BaseRanker

_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """A stateless 64-bit mixer: random-looking values that depend only on the input, so a
    candidate's score is the same whatever batch or chunk it is scored in."""
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


@dataclass
class RandomOptions:
    seed: int | None = None  # None: the run's --seed


class RandomRanker(BaseRanker):
    """Uniform random scores, reproducible by seed (the expected MRR floor ~ H_N / N)."""

    name = "random"
    transfers = True  # no fit
    version = "1"
    description = "seeded uniform random scores (floor)"
    Config = RandomOptions

    def index(self, pool: Pool) -> None:
        self._pool_ids = np.array([zlib.crc32(str(i).encode()) for i in pool.ids], dtype=np.uint64)

    def score(self, queries: Queries, candidates: np.ndarray) -> np.ndarray:
        seed = self.cfg.seed if self.cfg.seed is not None else self.context.seed
        qh = np.array([zlib.crc32(f"{seed}\x1f{q}".encode()) for q in queries.ids], dtype=np.uint64)
        cand = self._pool_ids[candidates]
        if cand.ndim == 1:
            cand = cand[None, :]
        mixed = splitmix64((qh[:, None] << np.uint64(32)) ^ cand)
        return (mixed >> np.uint64(11)).astype(np.float64) / float(1 << 53)


@dataclass
class PopOptions:
    pass


class PopularityRanker(BaseRanker):
    """Item popularity: how often each candidate is a training target.

    Only the training split's positives are counted (never valid/test targets), so there is no
    leakage. Ties are broken deterministically by pool order (earlier id first): the score is
    ``count - position / (N + 1)``, which keeps count order and makes every score distinct.
    Candidates unseen in training (variant pools) count 0.
    """

    name = "pop"
    transfers = False  # counts keyed on the training pool's item ids
    version = "1"
    description = "training-target frequency (floor for recommendation and routing)"
    Config = PopOptions
    domains = ("recommendation", "routing", "generic")

    @classmethod
    def needs_training(cls, config: Any) -> bool:
        """A floor: on a task with no train split every count is 0 and it ranks by pool order
        (the hashed order, another query-independent floor), so it runs zero-shot too."""
        return False

    def fit(self, task: TaskData) -> None:
        counts = np.bincount(task.train.positives.values, minlength=len(task.fit_pool)).astype(np.float64)
        self._counts_by_id = dict(zip(map(str, task.fit_pool.ids), counts))
        self.info = {"n_train_targets": int(len(task.train.positives.values)),
                     "counted": "training-split positives only",
                     "tie_break": "earlier pool position first"}

    def index(self, pool: Pool) -> None:
        counts = np.array([self._counts_by_id.get(str(i), 0.0) for i in pool.ids], dtype=np.float64)
        self._scores = counts - np.arange(len(pool)) / (len(pool) + 1.0)

    def score(self, queries: Queries, candidates: np.ndarray) -> np.ndarray:
        s = self._scores[candidates]
        return np.broadcast_to(s, (len(queries), len(candidates))).copy() if s.ndim == 1 else s
