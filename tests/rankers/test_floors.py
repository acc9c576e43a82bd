"""Popularity and random floors: no leakage, determinism, expected random level."""

from __future__ import annotations

import dataclasses

import numpy as np

from rbench.api import RunContext, TaskData, TaskSpec
from rbench.engine.metrics import aggregate, per_query
from rbench.engine.scan import scan
from rbench_rankers.floors import PopularityRanker, RandomRanker
from tests.helpers import make_pool, make_queries

SPEC = TaskSpec(name="toy", title="toy", scenario="large", domain="recommendation", description="",
                paper_candidates=None, paper_queries=None, sources=(), license="", how_to_get="")


def _task(train_pos, valid_pos, test_pos, n_pool=10) -> TaskData:
    pool = make_pool(n_pool)
    return TaskData(spec=SPEC, pool=pool, train=make_queries([[p] for p in train_pos]),
                    valid=make_queries([[p] for p in valid_pos]), test=make_queries([[p] for p in test_pos]))


def test_pop_counts_training_targets_only():
    task = _task(train_pos=[1, 1, 1, 2, 2, 3], valid_pos=[7, 7, 7, 7], test_pos=[8, 8, 8, 8, 8])
    pop = PopularityRanker()
    pop.fit(task)
    pop.index(task.pool)
    s = pop.score(task.test, np.arange(10))[0]
    order = np.argsort(-s)
    assert order[:3].tolist() == [1, 2, 3]
    # valid/test targets (7, 8) get no credit: they rank among the zero-count items by pool order
    assert s[7] < s[3] and s[8] < s[3] and s[0] > s[7] > s[8]
    # changing valid/test targets changes nothing
    other = _task(train_pos=[1, 1, 1, 2, 2, 3], valid_pos=[0], test_pos=[9])
    pop2 = PopularityRanker()
    pop2.fit(other)
    pop2.index(other.pool)
    np.testing.assert_array_equal(pop2.score(other.test, np.arange(10))[0], s)
    assert len(set(s.tolist())) == 10  # deterministic tie-break: all distinct


def test_random_is_seeded_and_batch_invariant():
    pool = make_pool(300)
    q = make_queries([[i] for i in range(40)])
    a = RandomRanker(context=RunContext(cache_dir=None, seed=3))
    a.index(pool)
    full = a.score(q, np.arange(300))
    part = a.score(q.take(np.arange(10, 20)), np.arange(100, 200))
    np.testing.assert_array_equal(full[10:20, 100:200], part)
    b = RandomRanker(context=RunContext(cache_dir=None, seed=3))
    b.index(pool)
    np.testing.assert_array_equal(b.score(q, np.arange(300)), full)
    c = RandomRanker(context=RunContext(cache_dir=None, seed=4))
    c.index(pool)
    assert not np.array_equal(c.score(q, np.arange(300)), full)
    assert 0.0 <= full.min() and full.max() < 1.0


def test_random_mrr_near_expectation():
    n_pool, n_q = 200, 3000
    pool = make_pool(n_pool)
    q = make_queries([[i % n_pool] for i in range(n_q)])
    q = dataclasses.replace(q)
    r = RandomRanker(context=RunContext(cache_dir=None, seed=0))
    res = scan(r, q, pool)
    mrr = aggregate(per_query(res.ranks, q.grades))["RR"]
    expected = np.mean(1.0 / np.arange(1, n_pool + 1))
    assert abs(mrr - expected) < 0.25 * expected
