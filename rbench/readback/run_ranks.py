"""A record's test set and the ranks its run file gives: what ``rbench verify`` recomputes a
record's metrics from, and what ``rbench compare`` computes a measure a run did not record from.

The task is loaded as the run loaded it (task name, non-default options, variant, test-query
sample, seed); each query's run-file lines are read by the one reader of run files
(``rbench.engine.runfile.read_run``) and ordered as the tools read them (score descending; a tie,
which rbench's own files never hold, broken pessimistically as the engine does). Kept apart from
``rbench.audit.verify`` (which reruns rankers through ``rbench.public``) so that
``rbench.readback.compare_runs`` can use it without an import circle.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rbench.api import TaskData
from rbench.results.record import RunRecord

BEYOND = 1 << 40  # the rank given to a positive the run file does not list (past any cutoff)


def _text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def load_test_set(record: RunRecord) -> TaskData:
    """The task as the record's run loaded it: name, non-default task options, variant, test
    sample and seed (``RBenchError`` when the task is unknown or its data is not here)."""
    from rbench.run.runner import apply_variant, subsample
    from rbench.tasks.pools import parse_variant
    from rbench.tasks.registry import load, resolve

    task = resolve(record.task)
    diff = record.run_options.get("non_default") or {}
    options = task.options({k: _text(v) for k, v in (diff.get("task") or {}).items()})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the run's own notes (donors, samples) were said when it ran
        data = load(task, options, seed=record.seed)
        data = apply_variant(data, parse_variant(record.variant or "original"), record.seed)
        data = subsample(data, record.run_options.get("max_queries"), record.seed)
    return data


def _n_ranked(data: TaskData) -> np.ndarray:
    """How many candidates each test query ranks: its list (or the pool) minus its exclusions."""
    test = data.test
    n = len(test)
    if test.candidates is None:
        sizes = np.full(n, len(data.pool), dtype=np.int64)
        if test.exclude is not None:
            sizes -= np.array([len(np.unique(test.exclude[i])) for i in range(n)], dtype=np.int64)
        return sizes
    sizes = np.full(n, test.candidates.shape[1], dtype=np.int64)
    if test.exclude is not None:
        sizes -= np.array([int(np.isin(test.candidates[i], test.exclude[i]).sum()) for i in range(n)], dtype=np.int64)
    return sizes


@dataclass
class FileRanks:
    """Each positive's rank in the run file (aligned with ``test.positives.values``; 0: not
    listed), each query's number of lines and whether its list holds all it ranks."""

    ranks: np.ndarray
    lines: np.ndarray
    complete: np.ndarray


def file_ranks(run_path: Path, data: TaskData) -> FileRanks:
    """The positives' ranks as the run file orders each query: score descending; tied lines
    pessimistically (non-positives first, then positives by ascending grade, then by descending
    pool index: ``rbench.engine.metrics.TIE_RULE``)."""
    from rbench.engine.runfile import read_run

    test = data.test
    per = read_run(run_path, test.ids, data.pool.ids, test.candidates, test.exclude)
    pos, grades = test.positives, test.grades
    ranks = np.zeros(len(pos.values), dtype=np.int64)
    lines = np.array([len(p) for p in per], dtype=np.int64)
    for i, listed in enumerate(per):
        if not listed:
            continue
        lo, hi = pos.offsets[i], pos.offsets[i + 1]
        grade_of = {int(d): float(g) for d, g in zip(pos.values[lo:hi], grades.values[lo:hi])}
        docs = np.fromiter(listed.keys(), dtype=np.int64, count=len(listed))
        score = np.fromiter(listed.values(), dtype=np.float64, count=len(listed))
        is_pos = np.array([d in grade_of for d in docs.tolist()])
        grade = np.array([grade_of.get(d, 0.0) for d in docs.tolist()])
        order = np.lexsort((-docs, grade, is_pos, -score))  # last key first: score desc, then the tie rule
        place = {int(d): r + 1 for r, d in enumerate(docs[order].tolist())}
        for j in range(lo, hi):
            ranks[j] = place.get(int(pos.values[j]), 0)
    return FileRanks(ranks, lines, lines >= _n_ranked(data))
