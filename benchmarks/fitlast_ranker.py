"""``bm25 + fit positives last``: the cheat of issue 40 on a pool built from positives, as a
plugin file any user could write (``rbench run -r benchmarks/fitlast_ranker.py:FitLastBM25``).

It never reads a test label: ``fit`` is handed the train and valid positives by contract, and it
puts every one of them below every other candidate, on top of bm25's own scores (ties and all).
Under the default protocol (``rbench.tasks.fit_positives``: those positives are left out of every
test ranking) it must score exactly what ``bm25`` scores; with
``--set task.exclude_fit_positives=false`` (the paper's protocol) it shows the no-skill gain.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rbench_rankers.bm25 import BM25Ranker


class FitLastBM25(BM25Ranker):
    """bm25, with the train/valid positives ``fit`` is handed pushed below every other candidate."""

    name = "bm25-fitlast"

    def fit(self, task: Any) -> None:
        ids = np.asarray(task.fit_pool.ids, dtype=object)
        self._seen = {str(ids[i]) for split in (task.train, task.valid) for i in split.positives.values}

    def index(self, pool: Any) -> None:
        super().index(pool)
        seen: set[str] = getattr(self, "_seen", set())
        self._down = np.array([str(i) in seen for i in pool.ids], dtype=bool)

    def score(self, queries: Any, candidates: np.ndarray) -> np.ndarray:
        s = np.array(super().score(queries, candidates), dtype=np.float64)
        return s - 1e6 * self._down[np.asarray(candidates)]  # bm25 scores stay far below 1e6
