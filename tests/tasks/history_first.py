"""The two-line rule "the user's own history first, then popularity": a probe of recommendation
protocols, not a ranker to report (issue 40).

It never reads a label field: it scores a candidate by whether it is in the query's ``history``
(what every deployed recommender sees) and breaks ties by training-target popularity. On a
protocol whose exclusions or negatives look at the answer it is an oracle for every repeat target;
on an honest one it gains only what users' real coming back to items gives it. Used by
``tests/tasks/test_rec_exclusions.py`` and, on real data, by

    rbench run -r tests/tasks/history_first.py:HistoryFirst -t rec-music --no-write
    rbench run -r tests/tasks/history_first.py:HistoryFirst -t rec-music --no-write --set task.negatives_from=unseen
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rbench.api import Pool, Queries, TaskData
from rbench.plugin import BaseRanker


@dataclass
class HistoryFirstOptions:
    pass


class HistoryFirst(BaseRanker):
    """Score = popularity rank in [0, 1) + 1 if the candidate is in the query's history."""

    name = "history-first"
    version = "1"
    description = "user's history first, then training popularity (a protocol probe)"
    Config = HistoryFirstOptions
    domains = ("recommendation",)

    def fit(self, task: TaskData) -> None:
        counts = np.bincount(task.train.positives.values, minlength=len(task.fit_pool)).astype(np.float64)
        self._counts = dict(zip(map(str, task.fit_pool.ids), counts))

    def index(self, pool: Pool) -> None:
        counts = np.array([self._counts.get(str(i), 0.0) for i in pool.ids], dtype=np.float64)
        order = np.lexsort((np.arange(len(pool)), -counts))  # most popular first, then pool order
        pop = np.empty(len(pool), dtype=np.float64)
        pop[order] = 1.0 - (np.arange(len(pool)) + 1.0) / (len(pool) + 1.0)
        self._pop = pop

    def score(self, queries: Queries, candidates: np.ndarray) -> np.ndarray:
        cand = np.broadcast_to(candidates, (len(queries), candidates.shape[-1])) if candidates.ndim == 1 \
            else candidates
        out = self._pop[cand].copy()
        assert queries.history is not None
        for qi in range(len(queries)):
            out[qi] += np.isin(cand[qi], queries.history[qi])
        return out
