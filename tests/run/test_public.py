"""The Python face (rbench.public, re-exported by rbench): the README example runs as written;
the CLI and the API give the same RunRecord; multi-run with --overwrite; rankers from a file."""

from __future__ import annotations

import dataclasses
import json
import textwrap

import pandas as pd
import pytest

import rbench
from rbench.public import _sets
from rbench.rankers import available_rankers, load_ranker_class, ranker_config
from tests.helpers import cli, one_line
from tests.tasks.test_readme_tasks import section_blocks

VOLATILE = {"created", "timings", "peak_rss_bytes", "peak_rss_by_phase", "machine"}


def test_readme_python_example_runs_as_written(capsys):
    (block,) = section_blocks("Python")
    namespace: dict = {}
    exec(compile(block, "README.md:Python", "exec"), namespace)
    table, mine = namespace["table"], namespace["mine"]
    assert list(table.index) == ["markov", "pop"] and list(table.columns) == ["nDCG@10", "RR"]
    assert isinstance(mine.per_query, pd.DataFrame) and len(mine.per_query) == mine.n_queries
    assert mine.per_query["RR"].mean() == pytest.approx(mine.metrics["RR"], abs=1e-9)
    assert "nDCG@10" in capsys.readouterr().out


def test_public_names_are_listed_once():
    assert set(rbench.__all__) == {"__version__", "compare", "evaluate", "evaluate_many", "list_rankers", "list_tasks",
                                   "load_results", "load_task", "table"}
    assert "ml-100k" in rbench.list_tasks() and "bm25" in rbench.list_rankers()
    data = rbench.load_task("ml-100k", history_len=10)
    assert len(data.test) > 0 and max(len(h) for h in data.test.history) <= 10


def _strip(path) -> dict:
    rec = json.loads(path.read_text())
    return {k: v for k, v in rec.items() if k not in VOLATILE}


def test_cli_and_api_give_the_same_record(capsys, tmp_path):
    code, _, err = cli(capsys, "run", "-r", "bm25", "-t", "ml-100k", "--max-queries", "40", "--set", "k1=1.2",
                       "--results-dir", str(tmp_path / "cli"), "-q")
    assert code == 0, err
    rec = rbench.evaluate("bm25", "ml-100k", max_queries=40, options={"k1": 1.2}, results_dir=tmp_path / "api")
    (a,) = (tmp_path / "cli" / "large" / "ml-100k").glob("bm25*.json")
    (b,) = (tmp_path / "api" / "large" / "ml-100k").glob("bm25*.json")
    assert a.name == b.name and _strip(a) == _strip(b)
    assert (a.parent / rec.per_query_file).read_bytes() == (b.parent / rec.per_query_file).read_bytes()
    assert rec.metrics == json.loads(a.read_text())["metrics"]
    frame = rbench.load_results(tmp_path / "api", scenario="large", ranker="bm25")
    assert set(frame["measure"]) >= {"nDCG@10", "RR"} and (frame["n_queries"] == 40).all()
    assert frame.set_index("measure").loc["RR", "value"] == rec.metrics["RR"]
    lb = rbench.table("large", tmp_path / "api")
    frame = lb.frame()
    column = ("ml-100k (max_queries=40)", "MRR")
    assert list(frame.index) == ["bm25 (k1=1.2)"] and column in frame.columns
    assert frame.loc["bm25 (k1=1.2)", column] == pytest.approx(100 * rec.metrics["RR"])


def test_multi_run_only_missing_skips_and_never_overwrites_another_config(capsys, tmp_path):
    args = ("run", "-r", "pop", "-r", "random", "-t", "ml-100k", "--max-queries", "30", "--results-dir",
            str(tmp_path), "-q")
    code, out, err = cli(capsys, *args)
    assert code == 0, err
    assert "2 runs" in out and out.count("written") >= 2
    records = sorted((tmp_path / "large" / "ml-100k").glob("*.json"))
    before = {p.name: p.read_bytes() for p in records}
    assert len(before) == 2
    code, out, err = cli(capsys, *args)  # the same runs again: both kept
    assert code == 0, err
    assert out.count("skipped") == 2 and "kept" in out
    assert {p.name: p.read_bytes() for p in records} == before
    code, out, err = cli(capsys, "run", "-r", "pop", "-t", "ml-100k", "--max-queries", "31", "--results-dir",
                         str(tmp_path), "-q")  # another config: its own file, the others untouched
    assert code == 0, err
    after = {p.name: p.read_bytes() for p in (tmp_path / "large" / "ml-100k").glob("*.json")}
    assert len(after) == 3 and all(after[k] == v for k, v in before.items())
    code, out, err = cli(capsys, "run", "-r", "pop", "-t", "ml-100k", "--max-queries", "30", "--results-dir",
                         str(tmp_path), "-q", "--overwrite", "always")
    assert code == 0 and "skipped" not in out
    code, _, err = cli(capsys, *args, "--overwrite", "sometimes")
    assert code == 2 and "did you mean" in one_line(err) or "only-missing" in one_line(err)


def test_ranker_from_a_file(capsys, tmp_path):
    src = tmp_path / "my_rankers.py"
    src.write_text(textwrap.dedent('''
        from dataclasses import dataclass
        import numpy as np
        from rbench.api import BaseRanker

        @dataclass
        class Opts:
            offset: float = 0.0

        class Reverse(BaseRanker):
            name = "reverse"
            version = "1"
            Config = Opts

            def score(self, queries, candidates):
                c = np.asarray(candidates, dtype=float)
                return np.broadcast_to(-c, (len(queries), c.shape[-1])).copy() if c.ndim == 1 else -c
    '''))
    code, out, err = cli(capsys, "run", "-r", f"{src}:Reverse", "-t", "ml-100k", "--max-queries", "20",
                         "--set", "offset=1.5", "--results-dir", str(tmp_path / "res"), "-q")
    assert code == 0, err
    (path,) = (tmp_path / "res" / "large" / "ml-100k").glob("reverse*.json")
    rec = json.loads(path.read_text())
    assert rec["ranker"]["source"] == f"file:{src.resolve()}:Reverse" and rec["ranker"]["config"]["offset"] == 1.5
    code, _, err = cli(capsys, "run", "-r", f"{src}:Revers", "-t", "ml-100k", "--no-write")
    assert code == 2 and "did you mean 'Reverse'" in one_line(err)
    code, _, err = cli(capsys, "run", "-r", f"{tmp_path / 'nope.py'}:X", "-t", "ml-100k", "--no-write")
    assert code == 2 and "no such file" in one_line(err)
    code, _, err = cli(capsys, "run", "-r", f"{src}:Reverse", "-t", "ml-100k", "--set", "offst=1", "--no-write")
    assert code == 2 and "did you mean 'offset'" in one_line(err)


def test_an_object_carries_its_own_options():
    import numpy as np

    from rbench.core.errors import RBenchError

    class Flat:
        name, version, config = "flat", "1", {}

        def score(self, queries, candidates):
            return np.zeros((len(queries), candidates.shape[-1]))

    with pytest.raises(RBenchError, match=r"lacks fit\(\) and index\(\)"):
        rbench.evaluate(Flat(), "ml-100k")
    Flat.fit = lambda self, task: None
    Flat.index = lambda self, pool: None
    with pytest.raises(RBenchError, match="ready-made ranker object"):
        rbench.evaluate(Flat(), "ml-100k", options={"k": 1})
    rec = rbench.evaluate(Flat(), "ml-100k", max_queries=10)
    assert rec.ranker["source"] == "object" and rec.ranker["name"] == "flat" and rec.n_queries == 10


def test_evaluate_many_gives_what_evaluate_gives_for_each_run(tmp_path):
    from rbench.results.record import RunRecord

    many = rbench.evaluate_many(["pop", "random"], ["ml-100k"], max_queries=20, results_dir=tmp_path)
    assert [type(r) for r in many] == [RunRecord, RunRecord]
    assert [r.ranker["name"] for r in many] == ["pop", "random"]
    one = rbench.evaluate("random", "ml-100k", max_queries=20)
    assert many[1].metrics == one.metrics and many[1].per_query is not None
    with pytest.warns(UserWarning, match="kept the existing RunRecord"):  # the same overwrite rule
        again = rbench.evaluate_many(["pop"], ["ml-100k"], max_queries=20, results_dir=tmp_path)
    assert again[0].metrics == many[0].metrics


def test_records_carry_the_peak_memory_of_each_phase(tmp_path):
    from rbench.results.record import read_record

    rec = rbench.evaluate("pop", "ml-100k", max_queries=20, results_dir=tmp_path)
    phases = rec.peak_rss_by_phase
    assert list(phases) == ["load", "fit", "score"]
    assert 0 < phases["load"] <= phases["fit"] <= phases["score"] <= rec.peak_rss_bytes
    assert read_record(next(tmp_path.rglob("*.json"))).peak_rss_by_phase == phases


@pytest.mark.parametrize("name", available_rankers(built_in_only=True))
def test_a_records_typed_config_handed_back_plans_the_same_config(name):
    """``rbench verify --rerun`` and a user hand a record's config back to the API as typed values
    (lists, None, booleans): every built-in ranker's full default config resolves to itself.
    (A list was once sent on as "[0, 1, 2]" and refused: LRanker's records could not be rerun.)"""
    cls = load_ranker_class(name)
    config = ranker_config(cls, {}, name)
    if not dataclasses.is_dataclass(config):
        pytest.skip(f"{name} has no options")
    full = dataclasses.asdict(config)
    assert dataclasses.asdict(ranker_config(cls, _sets(full, None), name)) == full


def test_list_options_reach_the_plan():
    plan = rbench.public.plan_run("lranker", "ml-100k", options={"tts_depths": [0, 1], "tts_widths": (2, 4),
                                                        "learn_temperature": False})
    assert (plan.ranker_config.tts_depths, plan.ranker_config.tts_widths) == ([0, 1], [2, 4])
    assert plan.ranker_config.learn_temperature is False
