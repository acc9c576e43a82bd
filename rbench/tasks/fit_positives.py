"""Pools built from positives: the positives ``fit`` is handed are left out of every test ranking.

Why: where a task's pool is gathered from its own queries' positives (``TaskSpec.pool_from_positives``
or ``info["pool_from_positives"]``: ESCI's default pool is the chosen product of each sampled
query, MS MARCO's every judged passage of them, an imported corpus mostly judged-relevant
documents), the train and valid positives handed to ``fit`` are much of the pool (ESCI ~90%) and
almost never a test answer. A ranker that pushes them to the bottom gains with no skill (bm25 on
an ESCI-format file: MRR 51.45 -> 87.55 with that filter added; under this rule both score 89.01:
``benchmarks/pool_prior.py``), and any plugin can add it.

The rule (``exclude`` below), applied by the registry on every load, so the runner, ``rbench
verify`` and the Python API see one test set:

1. The excluded set is computed once per task from the input alone: every candidate that is a
   positive of a train or valid query (what ``fit`` receives). The test labels never enter it.
2. It is excluded from every test query's ranking, as the query's own exclusions are (the engine
   scores it ``-inf``: never above, never tied with, never in the top-k of, an answer).
3. A test query cannot keep an answer and exclude it. A positive of a test query that is one of
   those fit positives is excluded like the rest and no longer counts as its answer (as ESCI's
   and MS MARCO's *other relevant* candidates: neither answer nor negative); a query left with
   no positive (every one-positive query whose answer is a fit positive) is left out of the test
   split and counted as ``info["fit_positive_targets_dropped"]`` (as recommendation's
   ``repeat_targets_dropped``); ``info["fit_positive_answers_excluded"]`` counts the positives
   taken from queries that stay, ``info["fit_positives_excluded"]`` the excluded candidates.
   Where answers recur across queries (an imported FAQ-like collection) this can leave no test
   query: that is refused in one line naming ``task.exclude_fit_positives=false``.
4. The task's fingerprint moves with the test set it changes (a record made before the rule is
   never reused for or compared with one made after it).

A task with no fit positives (a test-only split, ``task.split=test``) or a pool not built from
positives is returned unchanged, fingerprint included. ``task.exclude_fit_positives=false`` keeps
the old protocol (the filter's no-skill gain included) for comparison; the record says
``exclude_fit_positives: false`` in its task info then.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from numpy.typing import NDArray

from rbench.api import Ragged, TaskData
from rbench.core.errors import DataError, RBenchError
from rbench.tasks.building import fingerprint

OPTION = "exclude_fit_positives"  # the task option's name (PassageOptions, ImportedOptions)
# test rows x fit positives held as exclusions (int64): ESCI's default is 400 x 3,600 = 1.4M
MAX_EXCLUSIONS = 50_000_000


def wanted(options: Any) -> bool:
    """Whether the task's options ask for the rule (the default, for options without the field)."""
    return bool(getattr(options, OPTION, True))


def built_from_positives(data: TaskData) -> bool:
    """The task's pool is gathered from its queries' positives (declared, or measured on load)."""
    return bool(data.spec.pool_from_positives or data.info.get("pool_from_positives") is True)


def fit_positive_set(data: TaskData) -> NDArray[np.int64]:
    """Rule 1: the pool indices that are a train or valid query's positive (sorted, unique)."""
    fit: NDArray[np.int64] = np.unique(np.concatenate([np.asarray(data.train.positives.values, dtype=np.int64),
                                                       np.asarray(data.valid.positives.values, dtype=np.int64)]))
    return fit


def exclude(data: TaskData, on: bool = True) -> TaskData:
    """``data`` under the rule of the module doc (``on`` False: unchanged, but said in ``info``
    where the rule would have applied)."""
    if not built_from_positives(data):
        return data
    fit = fit_positive_set(data)
    if not len(fit):
        return data
    if not on:
        return dataclasses.replace(data, info={**data.info, OPTION: False})
    test = data.test
    hit = np.isin(np.asarray(test.positives.values, dtype=np.int64), fit)
    left = np.bincount(test.positives.row_ids()[~hit], minlength=len(test))  # positives that stay
    dropped = left == 0
    kept = np.flatnonzero(~dropped)
    name = data.spec.name
    if not len(kept):
        raise DataError(f"{name}: every test query's answers are train/valid positives, which "
                        f"task.{OPTION}=true excludes: nothing to evaluate (answers recur across "
                        f"queries here; task.{OPTION}=false evaluates them)")
    n = len(kept)
    if n * len(fit) > MAX_EXCLUSIONS:
        raise RBenchError(f"{name}: excluding the {len(fit):,} train/valid positives from each of {n:,} test "
                          f"queries needs {n * len(fit):,} exclusions (at most {MAX_EXCLUSIONS:,}): sample "
                          f"fewer queries (task.n_queries), or keep the old protocol (task.{OPTION}=false)")
    n_taken = int(hit.sum()) - int(test.positives.lengths()[dropped].sum())  # from queries that stay
    if hit.any():  # rule 3: a fit positive is no query's answer
        offsets = np.zeros(len(test) + 1, dtype=np.int64)
        np.cumsum(left, out=offsets[1:])
        test = dataclasses.replace(test, positives=Ragged(offsets, test.positives.values[~hit]),
                                   grades=Ragged(offsets.copy(), test.grades.values[~hit])).take(kept)
    own = test.exclude
    if own is None or not len(own.values):
        rows = Ragged(np.arange(n + 1, dtype=np.int64) * len(fit), np.tile(fit, n))
    else:
        parts = [np.union1d(np.asarray(own[i], dtype=np.int64), fit) for i in range(n)]
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum([len(x) for x in parts], out=offsets[1:])
        rows = Ragged(offsets, np.concatenate(parts))
    test = dataclasses.replace(test, exclude=rows)
    pool = dataclasses.replace(data.pool, fingerprint=fingerprint(
        data.pool.fingerprint, "fit positives excluded", test.ids, rows.offsets, rows.values))
    info = {**data.info, OPTION: True, "fit_positives_excluded": int(len(fit)),
            "fit_positive_targets_dropped": int(dropped.sum()), "fit_positive_answers_excluded": n_taken,
            "n_test": n}
    return dataclasses.replace(data, pool=pool, test=test, info=info)
