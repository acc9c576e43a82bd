"""An existing TREC run file scored as a row: ``rbench run -r run:PATH -t TASK``.

Why a ranker: the run then takes the one road every ranker takes (the engine's pessimistic
ranks, the same measures, RunRecord, per-query file and exported run), so its row is comparable
with every other and ``rbench verify`` checks it like any record. It reads nothing but the file,
the pool's ids and the evaluated queries' ids and candidate lists (what any ranker sees), through
the one reader of run files (``rbench.engine.runfile.read_run``: a malformed line, a document
not in the pool or not among a query's candidates is one line naming the file and line).

Scores: a listed candidate keeps the file's score. A candidate the file does not list scores
one value strictly below every listed score of its query, the same for all of them: it ranks
after every listed candidate, tied with the other missing ones, and the engine's tie rule
(``rbench.engine.metrics.TIE_RULE``) puts a positive among them after all of them: the
pessimistic place, the one the rerank reader gives too (``rbench.run.rerank``). A query the
file does not list at all ranks its whole list tied (its positives last). The record says so:
``ranker_info`` holds the file's name and sha256, ``n_missing_candidates`` (candidates scored
that the file does not list, before the task's exclusions) and ``n_queries_not_listed``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rbench.api import BaseRanker, Queries, TaskData
from rbench.core.errors import RBenchError

RUN_RANKER_PREFIX = "run:"
MISSING_RULE = ("candidates the file does not list rank after every listed one, tied; a positive among them "
                "after all of them (pessimistic)")


@dataclass
class RunFileOptions:
    file: str = ""  # the run file (as given)
    sha256: str = ""  # its content hash: a run of another file is another configuration


def missing_score(listed: np.ndarray) -> float:
    """One score strictly below every score in ``listed`` (float64): below the lowest by 1, or by
    one ulp where 1 is lost in rounding; 0.0 for a query that lists nothing."""
    if not len(listed):
        return 0.0
    low = float(np.min(listed))
    below = low - 1.0
    return below if below < low else float(np.nextafter(low, -np.inf))


class RunFileRanker(BaseRanker):
    """Scores read from a TREC run file (module doc)."""

    name = "run"
    version = "1"
    description = "an existing TREC run file (run:PATH): missing candidates rank last, pessimistically"
    Config = RunFileOptions
    transfers = False  # its scores are keyed on one task's query and document ids

    @classmethod
    def needs_training(cls, config: Any) -> bool:
        return False  # it learns nothing: it reads a file

    @property
    def label(self) -> str:
        return f"run:{Path(self.cfg.file).name}" if self.cfg.file else "run"

    def fit(self, task: TaskData) -> None:
        """Read the file against the evaluated queries and the pool (what a ranker is handed)."""
        from rbench.engine.runfile import read_run

        test = task.test
        per = read_run(Path(self.cfg.file), test.ids, task.pool.ids, test.candidates)
        self._rows = {str(q): i for i, q in enumerate(test.ids)}
        self._idx = [np.fromiter(p.keys(), dtype=np.int64, count=len(p)) for p in per]
        self._val = [np.fromiter(p.values(), dtype=np.float64, count=len(p)) for p in per]
        order = [np.argsort(i, kind="stable") for i in self._idx]
        self._idx = [i[o] for i, o in zip(self._idx, order)]
        self._val = [v[o] for v, o in zip(self._val, order)]
        self._floor = np.array([missing_score(v) for v in self._val])
        width = len(task.pool) if test.candidates is None else test.candidates.shape[1]
        self.info = {"run_file": Path(self.cfg.file).name, "run_file_sha256": self.cfg.sha256,
                     "n_missing_candidates": int(sum(width - len(i) for i in self._idx)),
                     "n_queries_not_listed": int(sum(1 for i in self._idx if not len(i))),
                     "missing_candidates": MISSING_RULE}

    def score(self, queries: Queries, candidates: np.ndarray) -> np.ndarray:
        cand = np.asarray(candidates, dtype=np.int64)
        rows = cand if cand.ndim == 2 else np.broadcast_to(cand, (len(queries), len(cand)))
        out = np.empty(rows.shape, dtype=np.float64)
        for k, q in enumerate(queries.ids):
            i = self._rows.get(str(q))
            if i is None:
                raise RBenchError(f"run file {self.cfg.file}: asked to score query {q!r}, which was not "
                                  "among the evaluated queries it was read for")
            idx, val = self._idx[i], self._val[i]
            at = np.minimum(np.searchsorted(idx, rows[k]), max(len(idx) - 1, 0))
            hit = idx[at] == rows[k] if len(idx) else np.zeros(rows.shape[1], dtype=bool)
            out[k] = np.where(hit, val[at] if len(idx) else 0.0, self._floor[i])
        return out


def run_file_ranker(spec: str) -> RunFileRanker:
    """The ranker of ``run:PATH``: the file must be a regular file (checked here, before any data
    is loaded); its sha256 is part of the configuration (so of the RunRecord's name)."""
    from rbench.core.errors import DataError
    from rbench.core.hashing import file_sha256
    from rbench.core.inputs import require_regular

    path = Path(spec[len(RUN_RANKER_PREFIX):]).expanduser()
    if not spec[len(RUN_RANKER_PREFIX):]:
        raise RBenchError("--ranker run:PATH: expected a TREC run file after 'run:'")
    if not path.exists():
        raise RBenchError(f"--ranker {spec}: no such run file {path}")
    try:
        require_regular(path)
    except DataError as exc:
        raise RBenchError(f"--ranker {spec}: {exc}") from exc
    return RunFileRanker(config=RunFileOptions(file=str(path), sha256=file_sha256(path)))
