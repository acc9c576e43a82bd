"""The harness is the judge: no route a ranker can take gets it a number it did not earn.

One test per cheating route of issue 28, each written as a plugin author would write it from the
contract alone. Engine-level routes run on synthetic tasks (fast); the routes through ``fit`` run
the real runner on ml-100k (150 test queries), where an honest popularity ranker scores about 3%.
"""

from __future__ import annotations

import numpy as np
import pytest

from rbench.api import BaseRanker, Pool, Queries, Ragged
from rbench.core.errors import RankerOutputError, RBenchError
from rbench.engine.metrics import MEASURES, aggregate, per_query
from rbench.engine.scan import scan
from tests.helpers import make_pool, make_queries

N_POOL, N_Q = 400, 60


def _table(seed: int = 0, n_q: int = N_Q, n_pool: int = N_POOL) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n_q, n_pool))


def _rows(queries: Queries) -> np.ndarray:
    return np.array([int(q[1:]) for q in queries.ids])


class Honest(BaseRanker):
    """Scores from a fixed table: what each cheating ranker below is compared with."""

    name, version = "honest", "1"

    def __init__(self, table: np.ndarray) -> None:
        super().__init__()
        self.table = table

    def logits(self, queries: Queries, candidates: np.ndarray) -> np.ndarray:
        rows = _rows(queries)
        if candidates.ndim == 1:
            return self.table[np.ix_(rows, candidates)]
        return np.take_along_axis(self.table[rows], candidates, axis=1)

    def score(self, queries: Queries, candidates: np.ndarray) -> np.ndarray:
        return self.logits(queries, candidates)


class Softmax(Honest):
    """A listwise head: softmax over the candidates of the call."""

    name = "softmax"

    def score(self, queries, candidates):
        z = self.logits(queries, candidates)
        e = np.exp(z - z.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)


class RankPositions(Honest):
    """1 / (1 + position) of each candidate in the call's own sorted order."""

    name = "rank-positions"

    def score(self, queries, candidates):
        z = self.logits(queries, candidates)
        order = np.argsort(-z, axis=1, kind="stable")
        ranks = np.empty_like(order)
        np.put_along_axis(ranks, order, np.arange(z.shape[1])[None, :].repeat(len(z), 0), axis=1)
        return 1.0 / (1.0 + ranks)


class ReadsPositives(Honest):
    """Boosts whatever the harness labels as positives in ``score``."""

    name = "reads-positives"

    def score(self, queries, candidates):
        z = self.logits(queries, candidates).copy()
        for i in range(len(queries)):
            row = candidates if candidates.ndim == 1 else candidates[i]
            z[i, np.isin(row, queries.positives[i])] += 100.0
            if queries.exclude is not None:
                z[i, np.isin(row, queries.exclude[i])] += 50.0
        return z


class IgnoresCandidates(Honest):
    """Returns the first ``len(candidates)`` columns of its full-pool scores."""

    name = "ignores-candidates"

    def score(self, queries, candidates):
        width = candidates.shape[-1]
        return self.table[_rows(queries)][:, :width]


class RemembersShortCalls(Honest):
    """Never reads a label: a call narrower than the widest seen so far is remembered per query
    and its candidates are boosted, consistently, in that call and every later one (a call of
    the positives alone would hand it the answers)."""

    name = "remembers"

    def __init__(self, table):
        super().__init__(table)
        self.widest = 0
        self.seen: dict[str, set[int]] = {}

    def score(self, queries, candidates):
        rows = candidates if candidates.ndim == 2 else np.broadcast_to(candidates, (len(queries), candidates.size))
        if 0 < rows.shape[1] < self.widest:
            for qid, row in zip(queries.ids, rows):
                self.seen.setdefault(str(qid), set()).update(int(c) for c in row)
        self.widest = max(self.widest, rows.shape[1])
        z = self.logits(queries, candidates).copy()
        for i, qid in enumerate(queries.ids):
            z[i, np.isin(rows[i], list(self.seen.get(str(qid), ())))] += 100.0
        return z


class Mutates(Honest):
    """Writes over what it is handed: the candidates (after flipping ``writeable``) and the
    queries' fields."""

    name = "mutates"

    def score(self, queries, candidates):
        z = self.logits(queries, candidates)
        candidates.setflags(write=True)  # a private copy: allowed, and harmless
        candidates[...] = 0
        queries.ids.setflags(write=True)
        queries.ids[...] = "q0"
        queries.texts.clear()
        return z


class Recorder(Honest):
    """Records every call: what it was shown."""

    name = "recorder"

    def __init__(self, table):
        super().__init__(table)
        self.calls: list[tuple] = []
        self.views: list[Queries] = []

    def score(self, queries, candidates):
        self.calls.append((tuple(queries.ids), candidates.copy()))
        self.views.append(queries)
        return self.logits(queries, candidates)


def _metrics(res, queries) -> dict[str, float]:
    return aggregate(per_query(res.ranks, queries.grades, MEASURES))


def _shared_task(seed: int = 1) -> tuple[Queries, Pool]:
    rng = np.random.default_rng(seed)
    positives = [rng.choice(N_POOL, size=int(rng.integers(1, 4)), replace=False).tolist() for _ in range(N_Q)]
    exclude = [[int(e) for e in rng.choice(N_POOL, 6, replace=False) if e not in p] for p in positives]
    return make_queries(positives, exclude=exclude), make_pool(N_POOL)


def _list_task(seed: int = 2, m: int = 20) -> tuple[Queries, Pool]:
    rng = np.random.default_rng(seed)
    cand = np.stack([rng.choice(N_POOL, m, replace=False) for _ in range(N_Q)])
    positives = [[int(row[rng.integers(m)])] for row in cand]
    return make_queries(positives, candidates=cand), make_pool(N_POOL)


TASKS = {"shared pool": _shared_task, "per-query lists": _list_task}


@pytest.mark.parametrize("layout", list(TASKS))
@pytest.mark.parametrize("cls", [Softmax, RankPositions])
def test_set_dependent_scores_get_the_honest_twins_metrics_when_declared(layout, cls):
    queries, pool = TASKS[layout]()
    table = _table()
    honest = _metrics(scan(Honest(table), queries, pool, batch_size=16), queries)
    ranker = cls(table)
    ranker.set_dependent = True
    got = _metrics(scan(ranker, queries, pool, batch_size=16), queries)
    assert got == pytest.approx(honest, abs=1e-12)


@pytest.mark.parametrize("layout", list(TASKS))
@pytest.mark.parametrize("cls", [Softmax, RankPositions])
def test_undeclared_set_dependent_scores_are_refused(layout, cls):
    queries, pool = TASKS[layout]()
    with pytest.raises(RankerOutputError, match=f"ranker '{cls.name}'.*set_dependent = True"):
        scan(cls(_table()), queries, pool, batch_size=16)


def test_set_dependent_ranker_on_a_pool_above_one_call_is_refused():
    queries, pool = _shared_task()
    ranker = Softmax(_table())
    ranker.set_dependent = True
    with pytest.raises(RBenchError, match="'softmax'.*--rerank-from"):
        scan(ranker, queries, pool, chunk_size=100)


@pytest.mark.parametrize("layout", list(TASKS))
def test_reading_positives_in_score_finds_nothing(layout):
    queries, pool = TASKS[layout]()
    table = _table()
    honest = _metrics(scan(Honest(table), queries, pool), queries)
    got = _metrics(scan(ReadsPositives(table), queries, pool), queries)
    assert got == honest


@pytest.mark.parametrize("layout", list(TASKS))
def test_what_score_receives_carries_no_labels_and_cannot_change_the_harness(layout):
    queries, pool = TASKS[layout]()
    before = (queries.ids.copy(), list(queries.texts), queries.candidates.copy() if queries.candidates is not None else None)
    ranker = Recorder(_table())
    scan(ranker, queries, pool, batch_size=16)
    for view in ranker.views:
        assert not view.labelled and len(view.positives.values) == 0 and len(view.grades.values) == 0
        assert view.exclude is None and view.meta == {}
        assert not view.ids.flags.writeable
        assert view.ids is not queries.ids and not np.shares_memory(view.ids, queries.ids)
        if view.candidates is not None:
            assert not view.candidates.flags.writeable and not np.shares_memory(view.candidates, queries.candidates)
    for _, cand in ranker.calls:
        assert cand.dtype == np.int64
    np.testing.assert_array_equal(queries.ids, before[0])
    assert queries.texts == before[1]
    if before[2] is not None:
        np.testing.assert_array_equal(queries.candidates, before[2])


@pytest.mark.parametrize("layout", list(TASKS))
def test_mutating_what_score_receives_changes_nothing(layout):
    queries, pool = TASKS[layout]()
    table = _table()
    honest = scan(Honest(table), queries, pool, batch_size=16)
    got = scan(Mutates(table), queries, pool, batch_size=16)
    np.testing.assert_array_equal(got.ranks.values, honest.ranks.values)
    np.testing.assert_array_equal(got.topk_index, honest.topk_index)


@pytest.mark.parametrize("layout", list(TASKS))
@pytest.mark.parametrize("chunk", [64, 65536])
def test_no_call_depends_on_the_labels(layout, chunk):
    """Two label sets for the same queries: the calls (queries, candidates, order) are identical."""
    queries, pool = TASKS[layout]()
    rng = np.random.default_rng(9)
    if queries.candidates is not None:
        other = [[int(row[rng.integers(row.size)])] for row in queries.candidates]
        relabelled = make_queries(other, candidates=queries.candidates)
    else:
        other = [rng.choice(N_POOL, size=int(rng.integers(1, 5)), replace=False).tolist() for _ in range(N_Q)]
        relabelled = make_queries(other)
    first, second = Recorder(_table()), Recorder(_table())
    scan(first, queries, pool, batch_size=16, chunk_size=chunk)
    scan(second, relabelled, pool, batch_size=16, chunk_size=chunk)
    assert len(first.calls) == len(second.calls) > 0
    for (ids_a, cand_a), (ids_b, cand_b) in zip(first.calls, second.calls):
        assert ids_a == ids_b
        np.testing.assert_array_equal(cand_a, cand_b)


@pytest.mark.parametrize("layout", list(TASKS))
def test_remembering_short_calls_gains_nothing(layout):
    queries, pool = TASKS[layout]()
    table = _table()
    honest = _metrics(scan(Honest(table), queries, pool, batch_size=8), queries)
    try:
        got = _metrics(scan(RemembersShortCalls(table), queries, pool, batch_size=8), queries)
    except RankerOutputError:
        return  # refused: its boosts made two calls disagree
    assert got["RR"] <= honest["RR"] + 0.05


@pytest.mark.parametrize("layout", list(TASKS))
def test_a_ranker_that_ignores_candidates_is_refused(layout):
    queries, pool = TASKS[layout]()
    with pytest.raises(RankerOutputError, match="'ignores-candidates'.*about the candidates passed"):
        scan(IgnoresCandidates(_table()), queries, pool)


def test_a_nondeterministic_ranker_is_refused():
    class Noisy(Honest):
        name = "noisy"

        def score(self, queries, candidates):
            return self.logits(queries, candidates) + np.random.default_rng().normal(0, 1e-3, candidates.shape[-1])

    queries, pool = _shared_task()
    with pytest.raises(RankerOutputError, match="'noisy'.*deterministic"):
        scan(Noisy(_table()), queries, pool)


def test_a_stated_tolerance_admits_small_differences_only():
    class Jitter(Honest):
        name, score_tolerance = "jitter", 1e-3

        def score(self, queries, candidates):
            return self.logits(queries, candidates) + np.random.default_rng().uniform(0, 1e-4, candidates.shape[-1])

    queries, pool = _shared_task()
    scan(Jitter(_table()), queries, pool)  # within 1e-3: accepted
    Jitter.score_tolerance = 1e-6
    with pytest.raises(RankerOutputError, match="tolerance 1e-06"):
        scan(Jitter(_table()), queries, pool)


def test_the_two_stage_lists_carry_no_stand_in_positives():
    """rank_lists ranks lists without any positive as they are: no invented positive reaches the
    ranker or the ranks."""
    from rbench.engine.scorers import make_scorer
    from rbench.run.rerank import rank_lists

    queries, pool = _shared_task()
    table = _table()
    lists = Ragged.from_rows([np.argsort(-table[i])[:10].tolist() for i in range(N_Q)])
    ranker = Recorder(table)
    scorer, _ = make_scorer(ranker, pool)
    ranks, top_idx, _ = rank_lists(ranker, scorer, queries, pool, lists, 10, 16, 65536)
    assert all(len(v.positives.values) == 0 for v in ranker.views)
    for i in range(N_Q):
        pos = queries.positives[i]
        got = ranks[queries.positives.offsets[i] : queries.positives.offsets[i + 1]]
        inside = np.isin(pos, lists[i])
        assert (got[~inside] == 0).all() and (got[inside] > 0).all()
        np.testing.assert_array_equal(top_idx[i], lists[i])  # the table's own order


# --------------------------------------------------------------------------------------------
# through the runner: fit's view of the task (ml-100k, 150 test queries)
# --------------------------------------------------------------------------------------------


class _FitRanker:
    """A popularity ranker whose ``fit`` may also cheat (``how``)."""

    name, version = "fit-cheat", "1"

    def __init__(self, how: str = "") -> None:
        self.how = how
        self.seen_test: Queries | None = None
        self.seen_labels: tuple = ()
        self.counts: np.ndarray | None = None

    @property
    def config(self):
        return {"how": self.how}

    def fit(self, task):
        self.counts = np.bincount(task.train.positives.values, minlength=len(task.pool)).astype(np.float64)
        self.seen_test = task.test
        self.seen_labels = (task.test.labelled, len(task.test.positives.values), task.test.exclude)
        if self.how == "remember":  # boost the test answers
            for i in range(len(task.test)):
                self.counts[task.test.positives[i]] += 1e6
        elif self.how == "overwrite":  # make every test query's positive the most popular item
            top = int(np.argmax(self.counts))
            for arr in (task.test.positives.values, task.test.positives.offsets):
                arr.setflags(write=True)
            task.test.positives = Ragged.from_rows([[top]] * len(task.test))
            task.test.grades = Ragged.from_rows([[1.0]] * len(task.test), dtype=np.float64)
            task.pool.ids.setflags(write=True)
            task.pool.ids[0] = "changed"

    def index(self, pool):
        return None

    def score(self, queries, candidates):
        c = self.counts[candidates]
        return np.broadcast_to(c, (len(queries), len(candidates))).copy() if candidates.ndim == 1 else c


@pytest.fixture(scope="module")
def honest_pop():
    import rbench

    return rbench.evaluate(_FitRanker(), "ml-100k", max_queries=150)


@pytest.mark.parametrize("how", ["remember", "overwrite"])
def test_fit_cannot_read_or_change_the_test_labels(how, honest_pop):
    import rbench

    ranker = _FitRanker(how)
    rec = rbench.evaluate(ranker, "ml-100k", max_queries=150)
    assert ranker.seen_labels == (False, 0, None)
    assert rec.metrics == honest_pop.metrics
    assert honest_pop.metrics["RR"] < 0.1


def test_records_carry_the_rankers_source_digest(honest_pop, tmp_path, monkeypatch):
    """A reviewer can tell which code gave a row: the record holds the sha256 of the ranker's
    source, and editing that source changes it."""
    import importlib
    import sys

    from rbench.core.hashing import source_digest

    assert honest_pop.ranker["source_sha256"] == source_digest(_FitRanker) != ""
    module = tmp_path / "my_ranker.py"
    module.write_text("class R:\n    name = 'r'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    first = source_digest(importlib.import_module("my_ranker").R)
    module.write_text("class R:\n    name = 'r'  # edited\n")
    del sys.modules["my_ranker"]
    assert source_digest(importlib.import_module("my_ranker").R) != first


_PLUGIN = '''
import numpy as np

class Softmax:
    name, version, config = "listwise", "1", {}
    set_dependent = {declared}

    def __init__(self, config=None, context=None):
        self.counts = None

    def fit(self, task):
        self.counts = np.bincount(task.train.positives.values, minlength=len(task.pool)).astype(float)

    def index(self, pool):
        pass

    def score(self, queries, candidates):
        z = np.broadcast_to(self.counts[candidates], (len(queries), candidates.shape[-1]))
        e = np.exp((z - z.max(axis=1, keepdims=True)) / 10.0)
        return e / e.sum(axis=1, keepdims=True)
'''


@pytest.mark.parametrize("declared", [True, False])
def test_the_cli_refuses_in_one_line_and_writes_nothing(declared, tmp_path, capsys):
    """A declared set-dependent ranker on a pool above one call, and an undeclared one on any
    pool: exit 2, one line naming the ranker and what to do, no RunRecord."""
    from tests.helpers import cli, one_line

    plugin = tmp_path / "listwise.py"
    plugin.write_text(_PLUGIN.replace("{declared}", str(declared)))
    out = tmp_path / "results"
    code, _, err = cli(capsys, "run", "-r", f"{plugin}:Softmax", "-t", "ml-100k", "--max-queries", "30",
                       "--chunk-size", "1000", "--results-dir", str(out), "-q")
    assert code == 2
    line = one_line(err)
    assert "listwise" in line
    assert ("--rerank-from" in line) if declared else ("set_dependent = True" in line)
    assert not list(out.rglob("*.json"))


def test_a_declared_set_dependent_ranker_is_refused_before_it_fits(tmp_path, capsys):
    from tests.helpers import cli, one_line

    plugin = tmp_path / "listwise.py"
    plugin.write_text(_PLUGIN.replace("{declared}", "True").replace(
        "    def fit(self, task):\n", "    def fit(self, task):\n        raise AssertionError('fitted')\n"))
    code, _, err = cli(capsys, "run", "-r", f"{plugin}:Softmax", "-t", "ml-100k", "--max-queries", "30",
                       "--chunk-size", "1000", "--no-write", "-q")
    assert code == 2 and "--rerank-from" in one_line(err)


def _reachable(roots: list) -> list:
    """Every object reachable from ``roots`` through references (modules, classes and functions
    not followed: they lead to the whole program, not to what the harness handed over)."""
    import gc
    import types

    seen: dict[int, object] = {}
    todo = list(roots)
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType)):
            continue
        seen[id(obj)] = obj
        todo.extend(gc.get_referents(obj))
    return list(seen.values())


def test_nothing_handed_to_a_ranker_reaches_the_evaluated_labels():
    """Field by field and through every reference: from what fit, index and score receive, no
    object leads to the harness's evaluated queries or shares memory with their labels,
    exclusions or candidate lists."""
    from rbench.api import TaskData, TaskSpec

    queries, pool = _shared_task()
    lists, _ = _list_task()
    spec = TaskSpec(name="t", title="t", scenario="large", domain="generic", description="", paper_candidates=None,
                    paper_queries=None, sources=(), license="", how_to_get="")
    for test in (queries, lists):
        data = TaskData(spec=spec, pool=pool, train=make_queries([[1]]), valid=make_queries([[2]]), test=test)
        ranker = Recorder(_table())
        scan(ranker, test, pool, batch_size=16)
        handed = [data.for_fit(), *ranker.views, *(c for _, c in ranker.calls)]
        secrets = [a for a in (test.positives.values, test.positives.offsets, test.grades.values,
                               test.exclude.values if test.exclude is not None else None, test.candidates,
                               test.ids) if a is not None]
        for obj in _reachable(handed):
            assert obj is not test and obj is not data.test
            if isinstance(obj, np.ndarray):
                for secret in secrets:
                    assert not np.shares_memory(obj, secret)
        view = data.for_fit().test
        for name in ("positives", "grades"):
            assert len(getattr(view, name).values) == 0, name
        assert view.exclude is None and view.meta == {} and not view.labelled


def test_the_checked_batches_are_fixed_and_few():
    """Batches 0, 15, 255, 4095: about log16(n) + 1 checks (the check's cost stays under 2%)."""
    from rbench.engine.scan import _checked

    assert [b for b in range(70_000) if _checked(b)] == [0, 15, 255, 4095, 65535]
    ranker = Recorder(_table())
    queries, pool = _shared_task()
    scan(ranker, queries, pool, batch_size=2)  # 30 batches: the first and the 16th are checked
    narrow = [ids for ids, cand in ranker.calls if cand.shape[-1] < N_POOL]
    assert len(narrow) == 2 and narrow[0][0] in ("q0", "q1") and narrow[1][0] in ("q30", "q31")


class _Versioned:
    """A popularity ranker whose version 2 reverses its scores."""

    name = "versioned"

    def __init__(self, version: str = "1") -> None:
        self.version = version

    @property
    def config(self):
        return {}

    def fit(self, task):
        self.counts = np.bincount(task.train.positives.values, minlength=len(task.pool)).astype(float)

    def index(self, pool):
        return None

    def score(self, queries, candidates):
        c = self.counts[candidates] * (1 if self.version == "1" else -1)
        return np.broadcast_to(c, (len(queries), len(candidates))).copy() if candidates.ndim == 1 else c


def test_a_changed_ranker_never_gets_an_old_record(tmp_path, monkeypatch):
    """only-missing keeps a record only for the same ranker version, source and effective config,
    and says so from Python too."""
    import warnings

    import rbench
    from rbench.run import runner

    first = rbench.evaluate(_Versioned("1"), "ml-100k", max_queries=60, results_dir=tmp_path)
    with pytest.warns(UserWarning, match="kept the existing RunRecord"):
        again = rbench.evaluate(_Versioned("1"), "ml-100k", max_queries=60, results_dir=tmp_path)
    assert again.metrics == first.metrics
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a re-run, not a kept record
        second = rbench.evaluate(_Versioned("2"), "ml-100k", max_queries=60, results_dir=tmp_path)
    assert second.metrics["RR"] < first.metrics["RR"]
    monkeypatch.setattr(runner, "source_digest", lambda cls: "edited")  # the same version, other code
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rbench.evaluate(_Versioned("2"), "ml-100k", max_queries=60, results_dir=tmp_path)
