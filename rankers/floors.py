"""Sanity floors: seeded random scores, item popularity and the pool prior.

Every leaderboard shows them so that a ranker which does not beat them is visible as such (on
ml-100k popularity beats every zero-shot text ranker; on a pool gathered from the queries'
positives, such as ESCI's, "what already answered a known query is not the answer" beats chance
several times over with no skill: ``prior``).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from rbench.api import Pool, Queries, TaskData
from rbench.plugin import BaseRanker, Seed

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
    seed: Seed | None = None  # None: the run's --seed


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


@dataclass
class PriorOptions:
    seed: Seed | None = None  # None: the run's --seed (the random order within a group)


class PriorRanker(BaseRanker):
    """The pool prior: candidates that were a train or valid query's positive go last.

    Why a floor: where a task's pool is gathered from its queries' positives (ESCI's default pool
    is one positive per sampled query; MS MARCO ``pool=all`` every judged passage of the sampled
    queries; ``TaskSpec.pool_from_positives``), ~90% of the pool are train/valid positives that
    ``fit`` is handed (rightly) and that are almost never a test answer. Pushing them down is a
    gain with no skill at all; any ranker that does no better than that has not earned its number.
    Since issue 40 the harness excludes those positives from every test ranking by default
    (``rbench.tasks.fit_positives``), and ``prior`` then ranks exactly as ``random``; it is the
    floor of records made with ``task.exclude_fit_positives=false`` (the paper's protocol).

    Scores, from the contract alone (``fit`` reads ``train`` and ``valid`` positives, as ``pop``
    reads train positives): candidates that were no train/valid query's positive come first, in
    the seeded random order of ``random`` (the same hash and seed, so with nothing learned it
    ranks as ``random`` does); they have no popularity signal by construction, since
    popularity counts training positives. The train/valid positives come after every one of them,
    by popularity (more often a training target first), ties in the same random order.
    Candidates are matched by id, so a variant pool's added candidates count as never seen.
    """

    name = "prior"
    transfers = False  # keyed on the fit pool's item ids
    version = "1"
    description = "pool prior: train/valid positives last, else seeded random (floor for pools built from positives)"
    Config = PriorOptions
    domains = ("passage", "product", "generic")

    @classmethod
    def needs_training(cls, config: Any) -> bool:
        """A floor: with no train/valid split nothing is pushed down and it equals ``random``."""
        return False

    def fit(self, task: TaskData) -> None:
        ids = np.asarray(task.fit_pool.ids, dtype=object)
        n = len(ids)
        train = np.bincount(task.train.positives.values, minlength=n)
        seen = train + np.bincount(task.valid.positives.values, minlength=n)
        self._train_by_id = {str(i): float(c) for i, c in zip(ids, train) if c}
        self._seen = {str(i) for i, c in zip(ids, seen) if c}
        self.info = {"n_fit_positives": len(self._seen), "fit_pool_size": n,
                     "counted": "train and valid positives (train only for popularity)",
                     "order": "never a fit positive (random), then fit positives by popularity (ties random)"}

    def index(self, pool: Pool) -> None:
        ids = [str(i) for i in pool.ids]
        seen: set[str] = getattr(self, "_seen", set())
        train: dict[str, float] = getattr(self, "_train_by_id", {})
        self._pool_ids = np.array([zlib.crc32(i.encode()) for i in ids], dtype=np.uint64)
        pop = np.array([train.get(i, 0.0) for i in ids], dtype=np.float64)
        fresh = np.array([i not in seen for i in ids], dtype=bool)
        # fresh candidates above every seen one: popularity + a tie-break in [0, 0.5) stays below top
        top = float(pop.max(initial=0.0)) + 1.0
        self._base = np.where(fresh, top, pop)
        self.info = {**getattr(self, "info", {}), "n_pushed_down": int((~fresh).sum()), "pool_size": len(ids)}

    def score(self, queries: Queries, candidates: np.ndarray) -> np.ndarray:
        seed = self.cfg.seed if self.cfg.seed is not None else self.context.seed
        qh = np.array([zlib.crc32(f"{seed}\x1f{q}".encode()) for q in queries.ids], dtype=np.uint64)
        cand = self._pool_ids[candidates]
        base = self._base[candidates]
        if cand.ndim == 1:
            cand, base = cand[None, :], base[None, :]
        mixed = splitmix64((qh[:, None] << np.uint64(32)) ^ cand)
        u = (mixed >> np.uint64(11)).astype(np.float64) / float(1 << 53)
        return base + 0.5 * u
