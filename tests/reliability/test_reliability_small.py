"""Small holes where bad input was taken silently (issue 29): each is now one line naming the
thing and what was expected (exit 2), found before the work starts, or shown for what it is.

Choices: ``--seed`` is refused outside [0, 2**32) (the splits and samples keep 32 bits of it);
a ranker name that starts with '.' or holds a path separator is refused where the run is planned
(it names the RunRecord file); ``load_results`` takes known scenarios only; a stage-1 run file
that lists none of the evaluated test queries is refused; a record's metrics outside [0, 1] or
``n_queries`` below 1 make it a malformed record (``rbench table`` stops with one line naming the
file and field, as for the other malformed records); ``--variant`` repeats like ``-r``/``-t``:
one run per variant.
"""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest

import rbench
from rbench.core.errors import DataError, RBenchError
from rbench.results.record import read_record, record_path, write_run
from rbench.run import rerank
from rbench.run.runner import RunOptions, make_plan
from tests.helpers import cli, make_pool, make_queries, one_line

# --------------------------------------------------------------------------------------------
# 1. --seed outside [0, 2**32)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [2**32, 2**32 + 7, 2**64])
def test_a_seed_of_32_bits_or_more_is_refused(capsys, tmp_path, seed):
    code, _, err = cli(capsys, "run", "-r", "pop", "-t", "ml-100k", "-q", "--results-dir", str(tmp_path),
                       "--seed", str(seed))
    line = one_line(err)
    assert code == 2 and "--seed" in line and "2**32" in line
    assert not list(tmp_path.rglob("*.json"))
    with pytest.raises(RBenchError, match=r"--seed must be at most 4,294,967,295 \(in \[0, 4,294,967,295\]; below 2\*\*32"):
        RunOptions(ranker="pop", task="ml-100k", seed=seed)
    RunOptions(ranker="pop", task="ml-100k", seed=2**32 - 1)  # the largest seed is taken


# --------------------------------------------------------------------------------------------
# 2. a ranker name that would name a hidden file or a file elsewhere
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [".hidden", "..", "a/b", "a\\b"])
def test_a_ranker_name_that_cannot_name_its_record_is_refused(capsys, tmp_path, name):
    src = tmp_path / "odd.py"
    src.write_text(textwrap.dedent(f"""
        import numpy as np

        class Odd:
            name = {name!r}

            def fit(self, task):
                pass

            def index(self, pool):
                pass

            def score(self, queries, candidates):
                return np.zeros(candidates.shape, dtype=float)
    """))
    results = tmp_path / "results"
    if name.startswith("."):  # a class's own name: '/' is made '-' in a file's class names
        code, _, err = cli(capsys, "run", "-r", f"{src}:Odd", "-t", "ml-100k", "-q", "--results-dir", str(results))
        line = one_line(err)
        assert code == 2 and repr(name) in line and "'.'" in line
        assert not results.exists() or not list(results.rglob("*.json"))
    from rbench.rankers import RankerRef

    ref = RankerRef(name, object, "entry-point")  # a registered (entry point) name as it is resolved
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("rbench.run.runner.resolve_ranker", lambda _r: ref)
        with pytest.raises(RBenchError, match="cannot name its RunRecord file"):
            make_plan(RunOptions(ranker=name, task="ml-100k", write=False))


# --------------------------------------------------------------------------------------------
# 3. load_results(scenario="../..") and a task with a path separator
# --------------------------------------------------------------------------------------------


def test_load_results_takes_known_scenarios_only(tmp_path):
    inner = tmp_path / "a" / "b" / "results"
    inner.mkdir(parents=True)
    outside = tmp_path / "a" / "ml-100k"  # a record outside results_dir, reachable by '../..'
    rec = {"task": "ml-100k", "scenario": "large", "ranker": {"name": "pop"}, "metrics": {"nDCG@10": 0.1, "RR": 0.1}}
    outside.mkdir(parents=True)
    (outside / "pop.json").write_text(json.dumps(rec))
    with pytest.raises(RBenchError, match=r"unknown scenario '\.\./\.\.'.*known: large, small, ultra"):
        rbench.load_results(inner, scenario="../..")
    with pytest.raises(RBenchError, match=r"task '\.\./x'.*expected a task name"):
        rbench.load_results(inner, task="../x")
    assert rbench.load_results(inner, scenario="large").empty


# --------------------------------------------------------------------------------------------
# 4. a stage-1 run file that lists none of the test queries
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("content", ["", "\n\n", "other1 Q0 d1 1 0.5 t\nother2 Q0 d2 1 0.4 t\n"])
def test_a_run_file_listing_no_test_query_is_refused(tmp_path, content):
    from rbench.api import TaskData

    pool, queries = make_pool(30), make_queries([[1], [2, 3], [4]])
    data = TaskData(spec=None, pool=pool, train=queries, valid=queries, test=queries)  # type: ignore[arg-type]
    plan = make_plan(RunOptions(ranker="pop", task="ml-100k", write=False))
    run = tmp_path / "stage1.run"
    run.write_text(content)
    with pytest.raises(DataError, match=r"stage1\.run: lists none of the 3 test queries") as info:
        rerank.read_run_file(run, data, 5, plan.batch_size, plan.chunk_size)
    assert "\n" not in str(info.value)
    run.write_text("q1 Q0 d2 1 0.5 t\n")  # one evaluated query is enough
    rerank.read_run_file(run, data, 5, plan.batch_size, plan.chunk_size)


# --------------------------------------------------------------------------------------------
# 5. hand-edited values out of range in a RunRecord
# --------------------------------------------------------------------------------------------


@pytest.fixture
def res(tmp_path):
    from tests.reliability.test_reliability_tables import record

    out = tmp_path / "results"
    for ranker, rr in (("pop", np.full(20, 0.3)), ("bm25", np.full(20, 0.5))):
        rec, pq = record(ranker, rr)
        write_run(rec, record_path(out, "large", "ml-100k", ranker, ""), pq)
    return out


@pytest.mark.parametrize("field,value", [("nDCG@10", -5.0), ("RR", 1.5), ("R@100", 2), ("n_queries", -7),
                                         ("n_queries", 0)])
def test_an_out_of_range_value_is_a_malformed_record(capsys, res, tmp_path, field, value):
    path = res / "large" / "ml-100k" / "bm25.json"
    data = json.loads(path.read_text())
    if field == "n_queries":
        data["n_queries"] = value
    else:
        data["metrics"][field] = value
    path.write_text(json.dumps(data))
    where = "n_queries" if field == "n_queries" else "metrics"
    with pytest.raises(DataError, match=rf"{path}, field '{where}': .*{field if where == 'metrics' else ''}"):
        read_record(path)
    code, _, err = cli(capsys, "table", "--scenario", "large", "--results-dir", str(res), "-o", str(tmp_path / "t.md"))
    line = one_line(err)
    assert code == 2 and str(path) in line and where in line
    read_record(res / "large" / "ml-100k" / "pop.json")  # in-range records still read


# --------------------------------------------------------------------------------------------
# 6. a repeated --variant: one run per variant, as -r/-t
# --------------------------------------------------------------------------------------------


def test_a_repeated_variant_runs_each(capsys, tmp_path, monkeypatch):
    # shift and scaled:N need donor tasks prepared: the runs are planned for real, executed as stubs
    from rbench import public
    from rbench.run import runner
    planned = []

    def plan(ranker, task, **kw):
        planned.append((ranker, task, kw["variant"]))
        return real_plan(ranker, task, **kw)

    real_plan = public.plan_run
    monkeypatch.setattr(public, "plan_run", plan)
    monkeypatch.setattr(runner, "execute", lambda plan, progress=None: None)
    code, _, err = cli(capsys, "run", "-r", "pop", "-r", "random", "-t", "ml-100k", "--variant", "original",
                       "--variant", "scaled:5000", "-q", "--results-dir", str(tmp_path))
    assert code == 0, err
    assert planned == [("pop", "ml-100k", "original"), ("pop", "ml-100k", "scaled:5000"),
                       ("random", "ml-100k", "original"), ("random", "ml-100k", "scaled:5000")]
    code, _, err = cli(capsys, "run", "-r", "pop", "-t", "ml-100k", "--variant", "original", "--variant", "scaled:x",
                       "-q", "--results-dir", str(tmp_path))
    assert code == 2 and "scaled:x" in one_line(err)  # every variant is checked before the first run
