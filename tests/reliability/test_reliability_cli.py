"""Bad command lines and options: each is one line on stderr and exit 2, never a traceback, an
endless loop, a silently different run or a crash after the work is done (issue 14)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib.metadata import EntryPoint

import pytest

from rbench import rankers as plugins
from rbench.api import BaseRanker
from rbench.core.config import parse_assignments
from rbench.core.errors import RBenchError
from rbench.run.runner import RunOptions
from tests.helpers import cli, one_line

# --------------------------------------------------------------------------------------------
# usage errors: typer's bundled click raises its own classes
# --------------------------------------------------------------------------------------------

USAGE = {
    "no arguments": ((), "needs a command"),
    "data without a command": (("data",), "rbench data needs a command"),
    "plot without a command": (("plot",), "rbench plot needs a command"),
    "missing --task": (("run", "--ranker", "bm25"), "--task"),
    "--seed abc": (("run", "--ranker", "bm25", "--task", "ml-100k", "--seed", "abc"), "--seed"),
    "unknown option": (("run", "--frobnicate"), "--frobnicate"),
    "unknown command": (("frobnicate",), "frobnicate"),
    "option without its value": (("run", "--ranker"), "--ranker"),
}


@pytest.mark.parametrize("case", list(USAGE))
def test_usage_errors_are_one_line_and_exit_2(capsys, case):
    args, needle = USAGE[case]
    code, _, err = cli(capsys, *args)
    assert code == 2, err
    line = one_line(err)
    assert line.startswith("error:") and needle in line


def test_no_arguments_still_show_the_help(capsys):
    code, out, err = cli(capsys)
    assert code == 2 and "Usage" in out and "run" in one_line(err)


def test_an_eof_error_is_not_an_internal_abort(capsys, monkeypatch, tmp_path):
    """click turns any EOFError (a truncated gzip read inside a command) into Abort."""
    from rbench.results import leaderboard

    def truncated(*_a, **_k):
        raise EOFError("Compressed file ended before the end-of-stream marker was reached")

    monkeypatch.setattr(leaderboard, "build", truncated)
    code, _, err = cli(capsys, "table", "--scenario", "large", "--results-dir", str(tmp_path))
    assert code == 2 and "truncated" in one_line(err) and "end-of-stream" in err


# --------------------------------------------------------------------------------------------
# numeric options: refused where the run is planned (RunOptions), for the CLI and Python alike
# --------------------------------------------------------------------------------------------

BAD_NUMBERS = [("--chunk-size", "-1"), ("--chunk-size", "0"), ("--batch-size", "0"), ("--max-queries", "-5"),
               ("--max-queries", "0"), ("--ray-shards", "0"), ("--seed", "-1")]


@pytest.mark.parametrize("flag,value", BAD_NUMBERS)
def test_bad_numbers_are_refused_before_any_work(capsys, tmp_path, flag, value):
    code, _, err = cli(capsys, "run", "-r", "pop", "-t", "ml-100k", "-q", "--results-dir", str(tmp_path), flag, value)
    assert code == 2 and flag in one_line(err)
    assert not list(tmp_path.rglob("*.json"))


@pytest.mark.parametrize("field,value", [("chunk_size", -1), ("chunk_size", 0), ("batch_size", 0),
                                         ("max_queries", -5), ("max_queries", 0), ("ray_shards", 0),
                                         ("seed", -1), ("max_queries", "5"), ("batch_size", 2.5), ("topk", -1)])
def test_python_callers_get_the_same_checks(field, value):
    with pytest.raises(RBenchError, match=field.replace("_", "-") if field != "topk" else "topk"):
        RunOptions(ranker="pop", task="ml-100k", **{field: value})


def test_max_queries_zero_leaves_the_full_record_alone(capsys, tmp_path):
    code, _, _ = cli(capsys, "run", "-r", "pop", "-t", "ml-100k", "-q", "--results-dir", str(tmp_path))
    assert code == 0
    record = tmp_path / "large" / "ml-100k" / "pop.json"
    before = record.read_bytes()
    code, _, err = cli(capsys, "run", "-r", "pop", "-t", "ml-100k", "-q", "--results-dir", str(tmp_path),
                       "--max-queries", "0")
    assert code == 2 and "--max-queries" in one_line(err)
    assert record.read_bytes() == before


def test_max_queries_beyond_the_test_split_is_a_full_run(capsys, tmp_path):
    """Choice: a sample as large as the test split or larger is normalised to a full run (same
    RunRecord, same column), with a note; it is not a column of its own."""
    code, out, err = cli(capsys, "run", "-r", "pop", "-t", "ml-100k", "--json", "--results-dir", str(tmp_path),
                         "--max-queries", str(10**12))
    assert code == 0 and "evaluating all of them" in one_line(err)
    rec = json.loads(out)
    assert rec["n_queries"] == 943 and rec["run_options"]["max_queries"] is None and rec["config_hash"] == ""
    assert [p.name for p in (tmp_path / "large" / "ml-100k").glob("*.json")] == ["pop.json"]


def test_a_repeated_set_key_is_refused_naming_it(capsys, tmp_path):
    with pytest.raises(RBenchError, match="--set k1 is given twice"):
        parse_assignments(["k1=1.2", "b=0.5", "k1=0.9"])
    assert parse_assignments(["k1=1.2", "k1=1.2"]) == {"k1": "1.2"}  # an identical repeat says the same
    code, _, err = cli(capsys, "run", "-r", "bm25", "-t", "ml-100k", "--set", "k1=1.2", "--set", "k1=0.9",
                       "--results-dir", str(tmp_path))
    assert code == 2 and "k1" in one_line(err) and "twice" in err


def test_a_file_in_place_of_the_target_folder_fails_before_any_work(capsys, tmp_path, monkeypatch):
    from rbench.run import runner

    (tmp_path / "large").mkdir()
    (tmp_path / "large" / "ml-100k").write_text("not a folder")

    def no_loading(*_a, **_k):
        raise AssertionError("the task was loaded before the results folder was checked")

    monkeypatch.setattr(runner, "load", no_loading)
    code, _, err = cli(capsys, "run", "-r", "pop", "-t", "ml-100k", "-q", "--results-dir", str(tmp_path))
    assert code == 2 and "ml-100k is a file, not a folder" in one_line(err)


# --------------------------------------------------------------------------------------------
# plugins: a broken entry point, a plugin's own option check
# --------------------------------------------------------------------------------------------


@pytest.fixture
def broken_plugin(monkeypatch):
    real = plugins._entry_points

    def eps():
        return {**real(), "broken": EntryPoint("broken", "rbench_rankers.floors:NoSuchRanker", plugins.GROUP)}

    monkeypatch.setattr(plugins, "_entry_points", eps)


def test_one_broken_entry_point_does_not_hide_the_others(capsys, broken_plugin):
    code, out, _ = cli(capsys, "rankers", "--json")
    assert code == 0
    rows = {r["name"]: r for r in json.loads(out)}
    assert rows["pop"]["available"] and rows["bm25"]["available"]
    assert not rows["broken"]["available"] and "NoSuchRanker" in rows["broken"]["error"]
    code, out, _ = cli(capsys, "rankers")
    assert code == 0 and "broken" in out and "pop" in out
    code, _, err = cli(capsys, "run", "-r", "broken", "-t", "ml-100k")
    assert code == 2 and "'broken'" in one_line(err) and "rbench_rankers.floors:NoSuchRanker" in err


@dataclass
class CheckedOptions:
    alpha: float = 1.0
    width: int = 2

    def __post_init__(self) -> None:
        if self.width > 100:
            raise ValueError("width above 100 is not supported")

    def validate(self) -> None:
        if self.alpha <= 0:
            raise ValueError("alpha must be positive")


class CheckedRanker(BaseRanker):
    name = "checked"
    Config = CheckedOptions


@pytest.fixture
def checked_plugin(monkeypatch):
    real = plugins._entry_points

    class _EP:
        value = "tests:CheckedRanker"

        def load(self):
            return CheckedRanker

    monkeypatch.setattr(plugins, "_entry_points", lambda: {**real(), "checked": _EP()})


@pytest.mark.parametrize("setting,needle", [("alpha=-1", "alpha must be positive"),
                                            ("width=500", "width above 100")])
def test_a_plugins_value_error_is_one_line_naming_the_option(capsys, tmp_path, checked_plugin, setting, needle):
    code, _, err = cli(capsys, "run", "-r", "checked", "-t", "ml-100k", "--set", setting, "--results-dir", str(tmp_path))
    line = one_line(err)
    assert code == 2 and needle in line and setting in line and "'checked'" in line
