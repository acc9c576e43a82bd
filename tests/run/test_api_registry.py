"""The contract types and the task registry."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from rbench.api import PROMPTS, Ragged
from rbench.core.errors import RBenchError
from rbench.tasks.registry import get_task, paper_tasks

PAPER_SIZES = {"rec-music": (20, 12483), "routing-balance": (20, 1620), "rec-movie": (3884, 4167),
               "rec-toy": (11925, 19413), "msmarco": (24697, 3038), "esci": (4000, 3999),
               "rec-clothing": (6805462, 185925)}


def test_ragged_roundtrip_and_take():
    rows = [[1, 2, 3], [], [4], [5, 6]]
    r = Ragged.from_rows(rows)
    assert [x.tolist() for x in r] == rows
    t = r.take(np.array([3, 1, 0]))
    assert [x.tolist() for x in t] == [[5, 6], [], [1, 2, 3]]
    assert r.row_ids().tolist() == [0, 0, 0, 2, 3, 3]
    with pytest.raises(ValueError):
        Ragged(np.array([0, 2]), np.array([1]))


def test_slices_equal_takes_of_the_range():
    """``Ragged.slice`` / ``Queries.slice`` (the engine's batches) give what ``take`` of the
    same rows gives, every field included."""
    from rbench.api import Queries

    r = Ragged.from_rows([[1, 2, 3], [], [4], [5, 6], [7]])
    for a, b in [(0, 5), (1, 3), (2, 2), (4, 5)]:
        assert [x.tolist() for x in r.slice(a, b)] == [x.tolist() for x in r.take(np.arange(a, b))]
    n = 5
    queries = Queries(ids=np.array([f"q{i}" for i in range(n)], dtype=object), texts=[f"t{i}" for i in range(n)],
                      positives=Ragged.from_rows([[i] for i in range(n)]),
                      grades=Ragged.from_rows([[1.0]] * n, dtype=np.float64),
                      prompts=[f"p{i}" for i in range(n)], history=r,
                      candidates=np.arange(n * 3).reshape(n, 3), exclude=r, user_ids=np.arange(n) + 10)
    got, want = queries.slice(1, 4), queries.take(np.arange(1, 4))
    for name in ("ids", "texts", "prompts", "candidates", "user_ids"):
        assert np.array_equal(np.asarray(getattr(got, name)), np.asarray(getattr(want, name))), name
    for name in ("positives", "grades", "history", "exclude"):
        assert [x.tolist() for x in getattr(got, name)] == [x.tolist() for x in getattr(want, name)], name
    assert [len(b) for _, b in queries.batches(2)] == [2, 2, 1]


def test_ragged_negative_indices_count_from_the_end():
    rows = [[1, 2, 3], [], [4], [5, 6]]
    r = Ragged.from_rows(rows)
    for i in range(-len(rows), len(rows)):
        assert r[i].tolist() == rows[i], i  # as a list does: r[-1] is the last row, not an empty one
    assert r[np.int64(-1)].tolist() == [5, 6]
    for bad in (4, -5):
        with pytest.raises(IndexError):
            r[bad]


def test_all_paper_tasks_declared_with_paper_sizes():
    assert set(paper_tasks()) == set(PAPER_SIZES)
    for name, (cand, nq) in PAPER_SIZES.items():
        spec = get_task(name)
        assert (spec.paper_candidates, spec.paper_queries) == (cand, nq)
        assert spec.sources and spec.license and spec.how_to_get
        assert "<|embedding|>" in spec.prompt and "{query}" in spec.prompt
    assert get_task("rec-music").scenario == "small" and get_task("rec-clothing").scenario == "ultra"
    assert get_task("esci").prompt == PROMPTS["product"]


def test_unknown_task_suggests():
    with pytest.raises(RBenchError, match="did you mean 'msmarco'"):
        get_task("ms-marco")


def test_listing_does_not_import_heavy_packages():
    code = ("import sys; from rbench.cli.app import main; main(['rankers', '--json']); main(['tasks', '--json']);"
            "heavy = [m for m in ('torch', 'transformers', 'recbole', 'peft', 'sentence_transformers') "
            "if m in sys.modules]; print('HEAVY', heavy); sys.exit(1 if heavy else 0)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout[-500:] + res.stderr[-2000:]


def test_a_task_declared_twice_is_refused_and_the_order_is_the_papers():
    from rbench.core.errors import RBenchError
    from rbench.tasks import registry
    from rbench.tasks.families import recsys

    with pytest.raises(RBenchError, match="declared twice"):
        registry.build((recsys.FAMILY, recsys.RecommendationFamily(specs=recsys.SPECS[:1])))
    assert list(registry.TASKS)[0] == "ml-100k"
    assert registry.paper_tasks() == ("rec-music", "routing-balance", "rec-movie", "rec-toy", "msmarco", "esci",
                                      "rec-clothing")
    for name, task in registry.BUILTIN.items():  # every built-in task resolves to the family serving it
        assert task.spec in task.family.specs() and registry.resolve(name) is task
