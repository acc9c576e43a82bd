"""The ``prior`` floor (train/valid positives last, else random) and the ``▽`` mark against the
floors present in a column (issue 40: pools built from positives)."""

from __future__ import annotations

import numpy as np

from rbench.api import RunContext, TaskData, TaskSpec
from rbench.engine.metrics import aggregate, per_query
from rbench.engine.scan import scan
from rbench.results.leaderboard import POP, PRIOR, RANDOM, Leaderboard, prior_note, to_markdown
from rbench.results.record import ColumnKey, RowKey, RunRecord
from rbench_rankers.floors import PriorRanker, RandomRanker
from tests.helpers import make_pool, make_queries

SPEC = TaskSpec(name="toy", title="toy", scenario="large", domain="product", description="",
                paper_candidates=None, paper_queries=None, sources=(), license="", how_to_get="",
                pool_from_positives=True)


def _task(train_pos, valid_pos, test_pos, n_pool=12) -> TaskData:
    return TaskData(spec=SPEC, pool=make_pool(n_pool), train=make_queries([[p] for p in train_pos]),
                    valid=make_queries([[p] for p in valid_pos]), test=make_queries([[p] for p in test_pos]))


def _fitted(task: TaskData, seed: int = 0) -> PriorRanker:
    r = PriorRanker(context=RunContext(cache_dir=None, seed=seed))
    r.fit(task.for_fit())
    r.index(task.pool.for_ranker())
    return r


def test_prior_puts_train_and_valid_positives_last_by_popularity():
    task = _task(train_pos=[1, 1, 1, 2, 2, 3], valid_pos=[4], test_pos=[8, 9, 10])
    s = _fitted(task).score(task.test, np.arange(12))
    fit_pos, fresh = [1, 2, 3, 4], [0, 5, 6, 7, 8, 9, 10, 11]
    assert s[:, fresh].min() > s[:, fit_pos].max()  # every query: never-seen candidates first
    # the pushed-down ones by training popularity (1 thrice, 2 twice, 3 once, valid-only 4 never)
    assert (s[:, 1] > s[:, 2]).all() and (s[:, 2] > s[:, 3]).all() and (s[:, 3] > s[:, 4]).all()
    # the test positives get no credit: another test split changes nothing
    other = _task(train_pos=[1, 1, 1, 2, 2, 3], valid_pos=[4], test_pos=[0, 5, 6])
    np.testing.assert_array_equal(_fitted(other).score(other.test, np.arange(12)), s)


def test_prior_orders_the_rest_as_random_does_and_equals_it_with_nothing_to_push():
    pool = make_pool(400)
    q = make_queries([[i] for i in range(30)])
    rnd = RandomRanker(context=RunContext(cache_dir=None, seed=3))
    rnd.index(pool)
    expected = np.argsort(-rnd.score(q, np.arange(400)), axis=1, kind="stable")
    empty = TaskData(spec=SPEC, pool=pool, train=make_queries([]), valid=make_queries([]), test=q)
    got = _fitted(empty, seed=3).score(q, np.arange(400))
    np.testing.assert_array_equal(np.argsort(-got, axis=1, kind="stable"), expected)
    # with fit positives the rest keeps random's relative order
    task = TaskData(spec=SPEC, pool=pool, train=make_queries([[i] for i in range(100, 300)]),
                    valid=make_queries([]), test=q)
    got = _fitted(task, seed=3).score(q, np.arange(400))
    rest = np.r_[0:100, 300:400]
    np.testing.assert_array_equal(np.argsort(-got[:, rest], axis=1, kind="stable"),
                                  np.argsort(-rnd.score(q, rest), axis=1, kind="stable"))
    # batch invariance: a subset of queries and candidates scores the same
    np.testing.assert_array_equal(_fitted(task, seed=3).score(q.take(np.arange(5, 9)), np.arange(50, 350)),
                                  got[5:9, 50:350])


def test_prior_reaches_the_pushdown_level_on_a_pool_of_positives():
    """A pool that is one positive per query, 90% of them train/valid: prior's MRR is chance on
    the remaining tenth (H(k)/k), far above chance on the whole pool (H(n)/n)."""
    n, n_test = 600, 60
    pool = make_pool(n)
    perm = np.random.default_rng(1).permutation(n)
    task = TaskData(spec=SPEC, pool=pool, train=make_queries([[int(p)] for p in perm[:480]]),
                    valid=make_queries([[int(p)] for p in perm[480:540]]),
                    test=make_queries([[int(p)] for p in perm[540:]]))
    mrr = aggregate(per_query(scan(_fitted(task), task.test, pool).ranks, task.test.grades))["RR"]
    rest = np.mean(1.0 / np.arange(1, n_test + 1))
    chance = np.mean(1.0 / np.arange(1, n + 1))
    assert abs(mrr - rest) < 0.3 * rest and mrr > 4 * chance


def _lb(cells: dict[RowKey, float], col=ColumnKey("esci")) -> Leaderboard:
    rows = list(cells)
    return Leaderboard(scenario="large", variant="original", tasks=[col], rows=rows,
                       cells={(r, col): {"RR": v} for r, v in cells.items()})


def test_below_floors_uses_the_best_floor_present():
    col = ColumnKey("esci")
    push, bm25, above = RowKey("pushdown"), RowKey("bm25"), RowKey("above")
    lb = _lb({RANDOM: 0.0117, PRIOR: 0.078, push: 0.078, bm25: 0.05, above: 0.0781})
    assert lb.below_floors() == {(push, col), (bm25, col)}  # prior's level is the floor, not random's
    lb = _lb({RANDOM: 0.02, POP: 0.04, PRIOR: 0.03, bm25: 0.035, above: 0.041})
    assert lb.below_floors() == {(bm25, col)}  # pop the best floor here
    lb = _lb({RowKey("prior", "{\"seed\": 1}"): 0.01, PRIOR: 0.05, RANDOM: 0.06})
    assert lb.below_floors() == set()  # floor rows, of any configuration, are never marked
    md = to_markdown(_lb({RANDOM: 0.0117, PRIOR: 0.078, push: 0.078}))
    legend = md.split("`▽`:")[1].split("\n")[0]
    assert "7.80 ▽" in md and "`prior`" in legend and "column's floors" in legend


def _rec(task_info: dict) -> RunRecord:
    return RunRecord(task="esci", variant="original", scenario="large", task_fingerprint="f",
                     ranker={"name": "bm25", "version": "1", "config": {}}, seed=0, n_queries=1,
                     metrics={"RR": 0.5}, timings={}, peak_rss_bytes=0, created="x", task_info=task_info)


def test_a_column_built_from_positives_without_prior_says_so():
    col, bm25 = ColumnKey("esci"), RowKey("bm25")
    lb = _lb({RANDOM: 0.01, bm25: 0.05})
    lb.records = {(bm25, col): _rec({"pool_from_positives": True})}
    assert "No `prior` floor in `esci`" in prior_note(lb) and "rbench run -r prior -t esci" in prior_note(lb)
    assert prior_note(lb) in to_markdown(lb)
    lb.records = {(bm25, col): _rec({"pool_from_positives": False})}
    assert prior_note(lb) == ""
    lb = _lb({RANDOM: 0.01, PRIOR: 0.02, bm25: 0.05})
    lb.records = {(bm25, col): _rec({"pool_from_positives": True})}
    assert prior_note(lb) == ""


def test_a_row_above_the_floor_by_chance_only_is_still_marked(tmp_path):
    """Per-query files present: "push the known positives down" with its own random order lands a
    little above ``prior`` by luck; the one-sided paired test says it did not beat it. A real gain
    is not marked."""
    from rbench.results.leaderboard import build
    from tests.results.test_leaderboard import _write

    rng = np.random.default_rng(0)
    floor = 1.0 / rng.integers(1, 60, size=60)
    lucky = 1.0 / rng.integers(1, 60, size=60)
    lucky *= (floor.mean() + 0.004) / lucky.mean()  # mean just above the floor's, per query unrelated
    _write(tmp_path, "prior", "esci", floor)
    _write(tmp_path, "random", "esci", floor / 8)
    _write(tmp_path, "pushdown", "esci", lucky)
    _write(tmp_path, "strong", "esci", np.clip(floor + 0.3, 0, 1))
    lb = build(tmp_path, "large")
    col = ColumnKey("esci")
    assert lb.cells[(RowKey("pushdown"), col)]["RR"] > lb.cells[(PRIOR, col)]["RR"]
    assert lb.below_floors() == {(RowKey("pushdown"), col)}
    assert not lb.beats_floor(RowKey("pushdown"), PRIOR, col) and lb.beats_floor(RowKey("strong"), PRIOR, col)
