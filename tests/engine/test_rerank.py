"""The two-stage rerank protocol (rbench.run.rerank): exact full-pool metrics equal an independent
recomputation from the two stages' scores; the tail-dropped values; the stage-1 cache; a TREC run
file as stage 1; the exhaustive budget; ``rbench run --rerank-from/--rerank-depth`` end to end."""

from __future__ import annotations

import dataclasses
import gzip
import json

import numpy as np
import pytest

from rbench.api import Ragged, TaskData
from rbench.core.errors import DataError, RBenchError
from rbench.core.settings import RunSettings
from rbench.engine.metrics import MEASURES, aggregate, per_query
from rbench.engine.scan import scan
from rbench.results.paired import p_value
from rbench.run import rerank
from rbench.run.recording import record_measures
from rbench.run.runner import RunOptions, choose, make_plan
from rbench.run.strategies import Job
from rbench.tasks.pools import parse_variant
from tests.helpers import TableRanker, cli, make_pool, make_queries, one_line

N_POOL, N_Q = 60, 12


def _table_class(table: np.ndarray, name: str) -> type:
    class Table(TableRanker):
        fits = 0

        def __init__(self, config=None, context=None) -> None:
            super().__init__(table)

        def fit(self, task) -> None:
            type(self).fits += 1

    Table.name = name
    return Table


def _tables(seed: int, n_q: int = N_Q, n: int = N_POOL) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)  # tie-free: permutations of distinct values
    return (np.stack([rng.permutation(n) for _ in range(n_q)]).astype(float) / n,
            np.stack([rng.permutation(n) for _ in range(n_q)]).astype(float) / n)


def _data(seed: int = 0, small: bool = False, n: int = N_POOL) -> TaskData:
    rng = np.random.default_rng(100 + seed)
    positives, grades, exclude, cands = [], [], [], []
    for _ in range(N_Q):
        items = rng.permutation(n)
        k = int(rng.integers(1, 4))
        if small:
            row = items[:20]  # each query's own list of 20
            cands.append(row)
            positives.append(row[:k].tolist())
            exclude.append(row[k: k + 2].tolist())
        else:
            positives.append(items[:k].tolist())
            exclude.append(items[k: k + 5].tolist())
        grades.append(rng.integers(1, 4, size=k).astype(float).tolist())
    q = make_queries(positives, grades, exclude, np.array(cands) if small else None)
    pool = make_pool(n)
    from rbench.tasks.registry import resolve

    return TaskData(spec=resolve("ml-100k").spec, pool=pool, train=q, valid=q, test=q)


def _plan(S: type, depth: int | None, variant: str = "original", seed: int = 0, **kw):
    plan = make_plan(RunOptions(ranker="pop", task="ml-100k", variant=variant, write=False))
    rp = rerank.RerankPlan(S.name, depth, ranker=S.name, ranker_cls=S, ranker_config=None, **kw)
    plan = dataclasses.replace(plan, rerank=rp, ranker="table-r", batch_size=5, seed=seed)
    settings = RunSettings(**{f.name: getattr(plan, f.name) for f in dataclasses.fields(RunSettings)})
    return dataclasses.replace(plan, strategy=choose(settings, rp, False, "table-r", plan.variant))


def _score(plan, ranker, data):
    """The plan's strategy on ``data`` (as ``execute`` calls it): result, rerank entry, dropped values."""
    job = Job(plan.ranker, plan.topk, None, _no_progress, record_measures(plan.measures))
    scored = plan.strategy.score(ranker, data, job)
    return scored.result, scored.rerank, scored.dropped


def _no_progress(_d, _t):
    return lambda _n: None


def _recompute(data: TaskData, s: np.ndarray | None, r: np.ndarray, depth: int, file_lists=None):
    """The final ranking built explicitly: top-depth by S (or a run file's list), reranked by R,
    then the rest in stage-1 order; every positive's position (and inf where dropped)."""
    t = data.test
    exact, dropped = [], []
    for i in range(len(t)):
        cands = t.candidates[i] if t.candidates is not None else np.arange(len(data.pool))
        cands = [int(c) for c in cands if c not in set(t.exclude[i].tolist())]
        if file_lists is None:
            order = sorted(cands, key=lambda c: -s[i, c])
        else:
            listed = [c for c in file_lists[i] if c in cands]
            missing = [c for c in cands if c not in listed]
            g = dict(zip(t.positives[i].tolist(), t.grades[i].tolist()))
            # missing positives last: ascending grade, then descending pool index
            miss_pos = sorted([c for c in missing if c in g], key=lambda c: (g[c], -c))
            order = listed + [c for c in missing if c not in g] + miss_pos
        top, rest = order[:depth], order[depth:]
        final = sorted(top, key=lambda c: -r[i, c]) + rest
        where = {c: k + 1 for k, c in enumerate(final)}
        exact.append([where[int(p)] for p in t.positives[i]])
        dropped.append([where[int(p)] if int(p) in top else np.inf for p in t.positives[i]])
    grades = t.grades
    return (per_query(Ragged.from_rows(exact), grades), per_query(Ragged.from_rows(dropped, dtype=float), grades),
            Ragged.from_rows(exact))


def _check(values: dict, expected: dict) -> None:
    for m in MEASURES:
        np.testing.assert_allclose(values[m], expected[m], rtol=0, atol=1e-12, err_msg=m)


@pytest.mark.parametrize("small,depth", [(False, 10), (False, 1), (False, 200), (True, 5), (True, 30)])
def test_protocol_equals_recomputation(small, depth):
    data = _data(small=small)
    s, r = _tables(1)
    S, R = _table_class(s, "table-s"), _table_class(r, "table-r")
    plan = _plan(S, depth)
    result, info, dropped = _score(plan, R(), data)
    exact, exp_dropped, ranks = _recompute(data, s, r, depth)
    _check(per_query(result.ranks, data.test.grades), exact)
    np.testing.assert_array_equal(result.ranks.values, ranks.values)
    _check({m.removesuffix(rerank.DROPPED): v for m, v in dropped.items()}, exp_dropped)
    lists = [len(set(data.test.candidates[i]) - set(data.test.exclude[i])) if small
             else N_POOL - len(data.test.exclude[i]) for i in range(N_Q)]
    assert info["pairs_scored"] == sum(min(depth, n) for n in lists)  # short lists scored whole
    assert info["depth"] == depth and info["label"] == f"table-s@{depth}"
    assert 0 <= info["first_stage_recall@depth"] <= 1


def test_outside_positive_keeps_stage1_rank_and_dropped_differs():
    data = _data()
    s, r = _tables(2)
    S, R = _table_class(s, "table-s"), _table_class(r, "table-r")
    depth = 5
    result, info, dropped = _score(_plan(S, depth), R(), data)
    stage1 = scan(S(), data.test, data.pool, topk=0)
    outside = stage1.ranks.values > depth
    assert outside.any() and info["positives_outside"] == int(outside.sum())
    np.testing.assert_array_equal(result.ranks.values[outside], stage1.ranks.values[outside])
    assert (result.ranks.values[~outside] <= depth).all()
    exact = aggregate(per_query(result.ranks, data.test.grades))
    firsts = np.minimum.reduceat(result.ranks.values, result.ranks.offsets[:-1])
    assert (firsts > depth).any()  # some query's best positive is outside: RR-dropped is lower
    assert aggregate(dropped)["RR-dropped"] < exact["RR"]
    assert aggregate(dropped)["R@100-dropped"] < exact["R@100"]


@pytest.mark.parametrize("small", [False, True])
def test_two_stage_record_holds_stage1_metrics_on_the_same_queries(small):
    """Stage 1's own metrics (S scanned alone by the engine, the same queries) and, per measure,
    the rerank's mean change with the paired randomization test of rbench.results.paired."""
    data = _data(small=small)
    s, r = _tables(4)
    S, R = _table_class(s, "table-s"), _table_class(r, "table-r")
    plan = _plan(S, 5, seed=7)  # the test's resamples are drawn from the run's seed
    result, info, _ = _score(plan, R(), data)
    measures = record_measures(())
    first = per_query(scan(S(), data.test, data.pool, topk=0).ranks, data.test.grades, measures)
    final = per_query(result.ranks, data.test.grades, measures)
    assert info["first_stage_metrics"] == pytest.approx(aggregate(first), abs=1e-12)
    assert set(info["vs_first_stage"]) == set(measures)
    for m in measures:
        got = info["vs_first_stage"][m]
        assert got["delta"] == pytest.approx(float(np.mean(final[m] - first[m])), abs=1e-12)
        assert got["p"] == p_value(final[m], first[m], "randomization", seed=plan.seed)
    assert any(v["delta"] != 0 for v in info["vs_first_stage"].values())  # R changed the ranking
    assert json.loads(json.dumps(info)) == info  # stored in the RunRecord's JSON as it is


def test_stage1_cache_hit_and_keys():
    data = _data()
    s, r = _tables(3)
    S, R = _table_class(s, "table-s"), _table_class(r, "table-r")
    first = _score(_plan(S, 10), R(), data)
    assert S.fits == 1 and first[1]["cached"] is False
    second = _score(_plan(S, 10), R(), data)
    assert S.fits == 1 and second[1]["cached"] is True  # no fit, no scan the second time
    np.testing.assert_array_equal(first[0].ranks.values, second[0].ranks.values)
    _score(_plan(S, 11), R(), data)  # another depth: another entry
    assert S.fits == 2
    # a variant (its own pool, its own label) is its own entry, and exact on that pool
    vdata = _data(seed=0, n=80)
    s2, r2 = _tables(3, n=80)
    S2, R2 = _table_class(s2, "table-s"), _table_class(r2, "table-r")
    res, info, _ = _score(_plan(S2, 10, variant="mixed"), R2(), vdata)
    assert info["cached"] is False
    _check(per_query(res.ranks, vdata.test.grades), _recompute(vdata, s2, r2, 10)[0])
    assert parse_variant("mixed").label != "original"


def _write_run(path, data, s, per_query_n, gz=True):
    lines, lists = [], []
    for i, qid in enumerate(data.test.ids):
        order = np.argsort(-s[i])[:per_query_n]
        lists.append([int(c) for c in order])
        lines += [f"{qid} Q0 {data.pool.ids[c]} {k + 1} {s[i, c]:.6f} test" for k, c in enumerate(order)]
    text = "\n".join(lines) + "\n"
    if gz:
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return lists


@pytest.mark.parametrize("gz", [True, False])
def test_run_file_stage1(tmp_path, gz):
    data = _data()
    s, r = _tables(4)
    R = _table_class(r, "table-r")
    run = tmp_path / ("s.run.gz" if gz else "s.run")
    lists = _write_run(run, data, s, 15, gz=gz)  # some positives are missing from the file
    plan = make_plan(RunOptions(ranker="pop", task="ml-100k", write=False, rerank_from=f"run:{run}",
                                rerank_depth="8"))
    plan = dataclasses.replace(plan, ranker="table-r", batch_size=5)
    result, info, dropped = _score(plan, R(), data)
    exact, exp_dropped, ranks = _recompute(data, None, r, 8, file_lists=lists)
    np.testing.assert_array_equal(result.ranks.values, ranks.values)
    _check(per_query(result.ranks, data.test.grades), exact)
    _check({m.removesuffix(rerank.DROPPED): v for m, v in dropped.items()}, exp_dropped)
    assert info["first_stage"]["run_file"] == str(run) and len(info["first_stage"]["sha256"]) == 64
    assert info["label"] == f"{run.name}@8"


def test_run_file_errors(tmp_path):
    data = _data()
    plan = dataclasses.replace(make_plan(RunOptions(ranker="pop", task="ml-100k", write=False)), batch_size=5)
    bad = tmp_path / "bad.run"
    bad.write_text("q0 Q0 d1 1 0.5 t\nq0 Q0 nope 2 0.4 t\n")
    with pytest.raises(DataError, match=r"bad\.run, line 2: document 'nope' is not in the task's pool"):
        rerank.read_run_file(bad, data, 5, plan.batch_size, plan.chunk_size)
    bad.write_text("q0 Q0 d1 1 0.5\n")
    with pytest.raises(DataError, match="line 1: expected 6 fields"):
        rerank.read_run_file(bad, data, 5, plan.batch_size, plan.chunk_size)
    with pytest.raises(RBenchError, match="no such run file"):
        make_plan(RunOptions(ranker="pop", task="ml-100k", rerank_from=f"run:{tmp_path / 'missing.run'}"))


def test_exhaustive_budget():
    data = _data()
    s, r = _tables(5)
    S, R = _table_class(s, "table-s"), _table_class(r, "table-r")
    pairs = N_Q * N_POOL
    with pytest.raises(RBenchError, match=rf"scores {pairs:,} pairs: about .* pairs/s on a warm-up .*--force"):
        _score(_plan(S, None, pair_budget=pairs - 1), R(), data)
    with pytest.warns(UserWarning, match="--force"):
        result, info, dropped = _score(_plan(S, None, pair_budget=pairs - 1, force=True), R(), data)
    plain = scan(R(), data.test, data.pool, topk=0)
    np.testing.assert_array_equal(result.ranks.values, plain.ranks.values)
    assert info["depth"] == "all" and info["pairs_scored"] == pairs and dropped == {}
    result, _, _ = _score(_plan(S, None, pair_budget=pairs), R(), data)  # within budget


def test_plan_validation():
    opts = dict(ranker="pop", task="ml-100k")
    for bad in ("0", "-3", "ten", "1.5"):
        with pytest.raises(RBenchError, match="--rerank-depth must be a whole number >= 1 or 'all'"):
            make_plan(RunOptions(**opts, rerank_from="bm25", rerank_depth=bad))
    with pytest.raises(RBenchError, match="unknown --rerank-from ranker 'bm52' .*did you mean 'bm25'"):
        make_plan(RunOptions(**opts, rerank_from="bm52"))
    with pytest.raises(RBenchError, match="--rerank-depth needs --rerank-from"):
        make_plan(RunOptions(**opts, rerank_depth="10"))
    plan = make_plan(RunOptions(**opts, rerank_from="bm25"))
    assert plan.rerank.depth == rerank.DEFAULT_DEPTH and plan.rerank.ranker == "bm25"
    assert make_plan(RunOptions(**opts, rerank_from="bm25", rerank_depth="all")).rerank.depth is None


def test_cli_end_to_end(capsys, tmp_path):
    args = ("run", "-r", "pop", "-t", "ml-100k", "--max-queries", "50", "--results-dir", str(tmp_path), "-q")
    code, out, err = cli(capsys, *args, "--rerank-from", "bm25", "--rerank-depth", "20")
    assert code == 0, err
    assert "pop (bm25@20)" in out and "RR-dropped" in out and "stage 1 alone on these queries: nDCG@10" in out
    records = sorted((tmp_path / "large" / "ml-100k").glob("pop*.json"))
    assert len(records) == 1
    rec = json.loads(records[0].read_text())
    assert rec["rerank"]["depth"] == 20 and rec["rerank"]["first_stage"]["name"] == "bm25"
    assert rec["rerank"]["pairs_scored"] <= 50 * 20 and "first_stage_recall@depth" in rec["rerank"]
    assert {"RR", "RR-dropped", "nDCG@10-dropped"} <= set(rec["metrics"])
    assert rec["metrics"]["RR-dropped"] <= rec["metrics"]["RR"]
    code, out, err = cli(capsys, "run", "-r", "bm25", *args[3:], "--no-write", "--json")  # stage 1 alone
    assert code == 0, err
    alone = json.loads(out)["metrics"]
    assert rec["rerank"]["first_stage_metrics"] == pytest.approx({m: alone[m] for m in rec["rerank"]["first_stage_metrics"]},
                                                                 abs=1e-12)
    assert rec["rerank"]["vs_first_stage"]["RR"]["delta"] == pytest.approx(rec["metrics"]["RR"] - alone["RR"], abs=1e-12)
    code, out, err = cli(capsys, *args)  # a plain pop run: another file, another row
    assert code == 0, err
    plain = [p for p in (tmp_path / "large" / "ml-100k").glob("pop*.json") if p not in records]
    assert len(plain) == 1
    from rbench.results.record import read_record

    a, b = read_record(records[0]), read_record(plain[0])
    assert a.row_key != b.row_key and a.label == "pop (bm25@20)" and b.label == "pop"
    assert "rerank" not in json.loads(plain[0].read_text())
    code, out, err = cli(capsys, *args, "--rerank-from", "bm25", "--rerank-depth", "20")
    assert code == 0 and "skipped" in out  # the same run again: kept (--overwrite only-missing)
    code, out, err = cli(capsys, *args, "--rerank-from", "bm25", "--rerank-depth", "20", "--overwrite", "always")
    assert code == 0 and "stage 1 from cache" in out
    code, _, err = cli(capsys, *args, "--rerank-from", "bm2", "--rerank-depth", "20")
    assert code == 2 and "did you mean 'bm25'" in one_line(err)
    code, _, err = cli(capsys, *args, "--rerank-from", "bm25", "--rerank-depth", "0")
    assert code == 2 and "--rerank-depth" in one_line(err)
