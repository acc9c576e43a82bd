"""Issue 40, items 3 and 6: the isolation machinery's secondary paths.

A spy ranker records every object it is handed, in every call (``fit``, ``index``, ``score``,
``encode_pool``, ``encode_queries``, the engine's consistency re-check included), and walks each
one through every reference: no label, grade, routing outcome or exclusion of the evaluated
queries may be reachable, on a recommendation task (ml-100k, exclusions), a routing task (its
outcomes live in ``Queries.meta``) and a two-stage run. A ranker that keeps references to what it
returned and what it was handed and edits them later moves no number and no harness array.
The two-stage cache (every positive's stage-1 rank) is not where a ranker keeps its files.

Which planted bug each test catches (each checked by planting it):
(a) the consistency re-check hands the labelled query (``_verify``'s ``sub`` labelled, marked
    label-free): ``test_the_spy_is_handed_no_label`` (ml-100k, routing);
(b) ``Queries.unlabelled`` keeps ``meta``: ``test_routing_outcomes_on_a_scored_split_do_not_reach_the_spy``
    (and the edits of ``test_editing_what_was_returned_or_handed_moves_nothing`` reach the
    harness's ``meta``);
(c) the engine writes ``-inf`` into the array a ranker returned, not its own copy:
    ``test_editing_what_was_returned_or_handed_moves_nothing``;
(d) ``fit`` can change the valid split the harness keeps (``TaskData.for_fit`` hands ``valid``
    itself): ``test_fit_cannot_change_the_splits_the_harness_keeps``.
"""

from __future__ import annotations

import copy
import gc
import types
from pathlib import Path

import numpy as np
import pytest

import rbench
from rbench.api import Queries, Ragged
from rbench.core import paths
from rbench.engine.scan import scan
from tests.tasks.test_tasks_routing import write_routing_task


def _walk(roots: list) -> list:
    """Every object reachable from ``roots`` (attributes, items, array bases), modules, classes and
    functions not followed (they lead to the whole program, not to what was handed over)."""
    seen: dict[int, object] = {}
    todo = list(roots)
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, (types.ModuleType, type, types.FunctionType,
                                                types.BuiltinFunctionType, types.MethodType)):
            continue
        seen[id(obj)] = obj
        todo.extend(gc.get_referents(obj))
    return list(seen.values())


def leaks(roots: list) -> list[str]:
    """What of the evaluated queries' answers is reachable from ``roots``: a labelled ``Queries``,
    one carrying positives, grades, exclusions or meta, or a routing outcome."""
    found = []
    for obj in _walk(roots):
        if isinstance(obj, Queries):
            if obj.labelled or len(obj.positives.values) or len(obj.grades.values) or obj.exclude is not None \
                    or obj.meta:
                found.append(f"Queries labelled={obj.labelled} positives={len(obj.positives.values)} "
                             f"exclude={obj.exclude is not None} meta={sorted(obj.meta)}")
        elif isinstance(obj, dict) and any(isinstance(k, str) and "outcome" in k for k in obj):
            found.append(f"a dict with {sorted(k for k in obj if isinstance(k, str) and 'outcome' in k)}")
    return found


class Spy:
    """Scores by train popularity; records what every call is handed and what it can reach."""

    name, version = "spy", "1"
    config: dict = {}

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []  # (call, rows of the queries handed)
        self.found: list[str] = []
        self.counts: np.ndarray | None = None

    def _see(self, call: str, *handed) -> None:
        rows = next((len(h) for h in handed if isinstance(h, Queries)), 0)
        self.calls.append((call, rows))
        self.found += [f"{call}: {x}" for x in leaks(list(handed))]

    def fit(self, task) -> None:
        # train and valid carry labels by design (the training signal); everything else must not
        self._see("fit", task.spec, task.pool, task.test, task.train_pool, task.info)
        self.counts = np.bincount(task.train.positives.values, minlength=len(task.fit_pool)).astype(np.float64)

    def index(self, pool) -> None:
        self._see("index", pool)

    def score(self, queries, candidates):
        self._see("score", queries, candidates)
        c = self.counts[candidates] if self.counts is not None and len(self.counts) > int(candidates.max()) \
            else candidates.astype(np.float64)
        return np.broadcast_to(c, (len(queries), len(candidates))).copy() if candidates.ndim == 1 else c


class VectorSpy(Spy):
    name = "vector-spy"

    def encode_pool(self, pool):
        self._see("encode_pool", pool)
        return np.stack([self.counts[: len(pool)], np.ones(len(pool))], axis=1)

    def encode_queries(self, queries):
        self._see("encode_queries", queries)
        return np.tile([1.0, 0.0], (len(queries), 1))


@pytest.mark.parametrize("task", ["ml-100k", "routing"])
@pytest.mark.parametrize("cls", [Spy, VectorSpy])
def test_the_spy_is_handed_no_label(task, cls):
    name = write_routing_task() if task == "routing" else task
    spy = cls()
    rbench.evaluate(spy, name, max_queries=60)
    assert spy.found == []
    made = {c for c, _ in spy.calls}
    assert made >= ({"fit", "encode_pool", "encode_queries"} if cls is VectorSpy else {"fit", "index", "score"})
    if cls is Spy:  # the consistency re-check was made (one query), and seen
        assert ("score", 1) in spy.calls


def test_routing_outcomes_on_a_scored_split_do_not_reach_the_spy():
    """The test split of a routing task never carries outcomes, but a split that does (valid, an
    imported task's) may be scored through the engine: the label-free view drops ``meta``."""
    from rbench.tasks.families.routing import OUTCOMES_KEY

    data = rbench.load_task(write_routing_task())
    assert OUTCOMES_KEY in data.valid.meta  # (what is at stake)
    for cls in (Spy, VectorSpy):
        spy = cls()
        spy.fit(data.for_fit())
        spy.found.clear()
        scan(spy, data.valid, data.pool)
        assert spy.found == [] and len(spy.calls) > 1


def test_the_spy_finds_a_planted_leak():
    """The walk itself: a labelled query, meta and an outcome dict are found through references."""
    data = rbench.load_task("ml-100k")
    assert leaks([data.test.unlabelled()]) == []
    assert leaks([[{"x": data.test}]])
    assert leaks([data.test.unlabelled(), {"routing_outcomes": 1}])
    view = data.test.unlabelled()
    view.meta = {"a": 1}
    assert leaks([(view,)])


def test_a_two_stage_run_hands_the_spy_no_label_and_no_stage1_file():
    """Stage 2 is the spy; it also searches the folder rankers keep their files in (recursively)
    and that folder's parent for the harness's stage-1 file (every positive's stage-1 rank)."""

    class SearchingSpy(Spy):
        name = "searching-spy"

        def score(self, queries, candidates):
            root = paths.cache_dir()
            found = [p for p in root.rglob("*") if p.is_file()] + [p for p in root.parent.iterdir() if p.is_file()]
            self.stage1 += [str(p) for p in found if _holds_ranks(p)]
            return super().score(queries, candidates)

    spy = SearchingSpy()
    spy.stage1 = []
    rec = rbench.evaluate(spy, "ml-100k", max_queries=60, rerank_from="pop", rerank_depth=20)
    assert rec.rerank["depth"] == 20 and not rec.rerank["cached"]
    assert spy.found == [] and ("score", 1) in spy.calls  # (the re-check too)
    assert spy.stage1 == []
    stage1 = [p for p in paths.home().rglob("*.npz") if _holds_ranks(p)]  # it was written: elsewhere
    assert stage1 and all(paths.cache_dir() not in p.parents for p in stage1)


def _holds_ranks(path: Path) -> bool:
    if path.suffix != ".npz":
        return False
    try:
        with np.load(path, allow_pickle=False) as z:
            return "ranks" in z.files
    except Exception:  # noqa: BLE001  (not an archive: not the harness's)
        return False


def test_the_old_stage1_folder_in_the_rankers_cache_is_removed():
    old = paths.cache_dir("rerank")
    old.mkdir(parents=True)
    np.savez(old / "pop-x.npz", ranks=np.arange(3))
    rbench.evaluate("pop", "ml-100k", max_queries=30, rerank_from="pop", rerank_depth=10)
    assert not old.exists()


# --------------------------------------------------------------------------------------------
# a ranker that keeps references and edits them later
# --------------------------------------------------------------------------------------------


class KeepsAndEdits(Spy):
    """Keeps every array it returned and everything it was handed; at each later call it edits
    them all (the arrays' values, the handed queries' fields), and records whether anything it
    returned was changed by the engine meanwhile."""

    name = "keeps-and-edits"

    def __init__(self, edit: bool = True) -> None:
        super().__init__()
        self.edit = edit
        self.returned: list[tuple[np.ndarray, np.ndarray]] = []  # (the array, its values when returned)
        self.handed: list = []
        self.changed_by_engine = 0

    def _edit_all(self) -> None:
        for arr, was in self.returned:
            if not np.array_equal(arr, was):
                self.changed_by_engine += 1
        if not self.edit:
            return
        for arr, was in self.returned:
            arr[...] = -was  # every later read of these would rank the list upside down
            was[...] = arr
        for h in self.handed:
            if isinstance(h, np.ndarray):
                h.setflags(write=True)  # (its own private copy: allowed)
                h[...] = 0
            elif isinstance(h, Queries):
                h.texts.clear()
                h.meta["x"] = 1
                for r in (h.positives, h.grades):
                    r.values.setflags(write=True)

    def score(self, queries, candidates):
        self._edit_all()
        out = np.ascontiguousarray(super().score(queries, candidates), dtype=np.float64)
        self.returned.append((out, out.copy()))
        self.handed += [queries, candidates]
        return out


def _snapshot(q: Queries) -> list:
    return copy.deepcopy([q.ids, [str(t) for t in q.texts], q.positives.values, q.positives.offsets, q.grades.values, q.candidates,
                          q.exclude.values if q.exclude is not None else None, q.history.values
                          if q.history is not None else None, q.meta])


def _same(a: list, b: list) -> bool:
    return all((x is None and y is None) or (isinstance(x, np.ndarray) and np.array_equal(x, y))
               or (not isinstance(x, np.ndarray) and x == y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("lists", [False, True], ids=["pool", "lists"])
def test_editing_what_was_returned_or_handed_moves_nothing(lists):
    """ml-100k's test queries (exclusions: the engine writes -inf where they sit), scored over the
    shared pool or over per-query lists: the numbers of the honest twin, the harness's queries and
    pool unchanged, and the engine never wrote into an array the ranker returned."""
    data = rbench.load_task("ml-100k")
    test, pool = data.test.take(np.arange(120)), data.pool
    if lists:  # each query's list: its positive, its exclusions and filler
        rng = np.random.default_rng(0)
        rows = []
        for i in range(len(test)):
            pos, ex = set(test.positives[i].tolist()), test.exclude[i].tolist()[:20]
            rest = [int(c) for c in rng.permutation(len(pool)) if c not in pos and c not in ex][: 40 - len(ex)]
            rows.append(sorted(pos) + ex + rest)
        test.candidates = np.array(rows, dtype=np.int64)
    fitted = data.for_fit()
    honest, cheat = KeepsAndEdits(edit=False), KeepsAndEdits()
    honest.fit(fitted)
    cheat.fit(fitted)
    before, pool_ids = _snapshot(test), pool.ids.copy()
    ref = scan(honest, test, pool, batch_size=16)
    got = scan(cheat, test, pool, batch_size=16)
    assert honest.changed_by_engine == 0 and cheat.changed_by_engine == 0
    assert len(cheat.returned) > len(test) // 16  # every batch, and the re-checks
    assert np.array_equal(ref.ranks.values, got.ranks.values)
    assert _same(before, _snapshot(test)) and np.array_equal(pool_ids, pool.ids)


def test_fit_cannot_change_the_splits_the_harness_keeps():
    """``fit`` edits train, valid and the pools it was handed, in place, every way it can: what
    the harness keeps is unchanged."""
    data = rbench.load_task("ml-100k")
    splits = {name: _snapshot(getattr(data, name)) for name in ("train", "valid", "test")}
    pool_ids = data.pool.ids.copy()
    view = data.for_fit()
    for q in (view.train, view.valid, view.test):
        for r in (q.positives, q.grades, *(x for x in (q.history, q.exclude) if x is not None)):
            for arr in (r.values, r.offsets):
                arr.setflags(write=True)
                arr[...] = 0
        for arr in (q.ids, q.candidates, q.user_ids):
            if arr is not None:
                arr.setflags(write=True)
                arr[...] = arr[0]
        q.texts[:] = ["x"] * len(q.texts)
        q.meta["x"] = 1
        q.positives = Ragged.from_rows([[0]] * len(q))
    view.pool.ids.setflags(write=True)
    view.pool.ids[:] = "x"
    for name, was in splits.items():
        assert _same(was, _snapshot(getattr(data, name))), name
    assert np.array_equal(pool_ids, data.pool.ids)
