"""Hostile input (issue 29, part 3): JSON nested 100,000 deep or holding a 5,000-digit integer,
a FIFO or a symlink to /dev/zero where a file is read, user text that rich would turn into emoji
or markup, a label that would break a Markdown table. Each is one line naming the file (exit 2),
a note, or the text printed as it is; never an internal error, a hang or memory run out.

Choices: a donor task whose files fail to load is left out of a pool variant with a note naming
it (``rbench.tasks.pools``' module doc: "a donor whose data is not present (or fails to load) is left
out and named"), so one bad donor never stops the runs of other tasks; a per-query file that is
not a regular file is a note like any other bad per-query file (its record's metrics stay valid).
Tests that could hang or read without end run in a child process with a timeout and a 4 GiB
address-space limit, so a regression fails instead of stalling the suite or exhausting memory.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rbench.core import paths
from rbench.core.errors import DataError
from rbench.results.record import read_record, record_path, write_run
from rbench.tasks.families.imported import read_beir
from rbench.tasks.registry import import_task, load_task
from tests.helpers import cli, one_line
from tests.reliability.test_reliability_tables import record, write
from tests.tasks.test_tasks_imported import beir
from tests.tasks.test_tasks_recsys import (
    distinct_movie_ratings,
    toy_meta_lines,
    toy_reviews,
    write_gz,
    write_ml1m_dat,
    write_toy,
)
from tests.tasks.test_tasks_routing import make_rows, write_csv

ROOT = Path(__file__).resolve().parents[2]
DEEP = "[" * 100_000 + "]" * 100_000
HOSTILE = {"deep nesting": DEEP, "a 5,000-digit integer": "7" * 5000}


def run_process(*args: str, timeout: float = 60) -> tuple[int, str, str]:
    """``python ARGS`` in a child process, killed after ``timeout`` s (a hang fails the test) and
    held to 4 GiB of address space (reading /dev/zero ends there, not in the machine's memory)."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    try:
        done = subprocess.run([sys.executable, *args], capture_output=True, text=True,
                              timeout=timeout, preexec_fn=limit, cwd=ROOT, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"python {' '.join(args)[:200]} hung (killed after {timeout:g} s)")
    return done.returncode, done.stdout, done.stderr


def cli_process(*args: str) -> tuple[int, str, str]:
    """``rbench ARGS`` in a child process (``run_process``)."""
    return run_process("-m", "rbench.cli.app", *args)


@pytest.fixture
def res(tmp_path):
    out = tmp_path / "results"
    write(out, "pop", np.linspace(0.05, 0.5, 50))
    write(out, "bm25", np.linspace(0.1, 0.9, 50))
    return out


def _raw(task: str) -> Path:
    d = paths.raw_dir(task)
    d.mkdir(parents=True, exist_ok=True)
    return d


def _record_with(res: Path, value: str) -> Path:
    path = res / "large" / "ml-100k" / "bm25.json"
    text = path.read_text()
    path.write_text(text[: text.rindex("}")] + f', "hostile": {value}}}\n')
    return path


# --------------------------------------------------------------------------------------------
# 1. hostile JSON
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_record_is_one_line_naming_it(capsys, res, tmp_path, case):
    path = _record_with(res, HOSTILE[case])
    with pytest.raises(DataError, match=str(path)):
        read_record(path)
    code, _, err = cli(capsys, "table", "--scenario", "large", "--results-dir", str(res), "-o", str(tmp_path / "t.md"))
    assert code == 2 and str(path) in one_line(err)


def test_a_hostile_existing_record_is_replaced_by_the_run(capsys, tmp_path):
    out = tmp_path / "r"
    path = record_path(out, "large", "ml-100k", "pop", "")
    path.parent.mkdir(parents=True)
    path.write_text('{"task": ' + DEEP + "}")
    code, _, err = cli(capsys, "run", "--ranker", "pop", "--task", "ml-100k", "--results-dir", str(out), "-q")
    assert code == 0, err
    assert read_record(path).ranker["name"] == "pop"  # a damaged record is replaced (runner._existing)


def test_a_record_over_the_size_limit_is_refused_unread(res, monkeypatch):
    from rbench.core import inputs

    monkeypatch.setattr(inputs, "MAX_JSON_BYTES", 100)
    path = res / "large" / "ml-100k" / "bm25.json"
    with pytest.raises(DataError, match=f"{path}: larger than 100 bytes: not a RunRecord"):
        read_record(path)


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_beir_line_names_file_and_line(tmp_path, case):
    d, _ = beir(tmp_path)
    with open(d / "corpus.jsonl", "a") as fh:
        fh.write('{"_id": "x", "text": "t", "extra": ' + HOSTILE[case] + "}\n")
    with pytest.raises(DataError) as err:
        read_beir(d / "corpus.jsonl", d / "queries.jsonl", d / "qrels.tsv")
    assert err.value.line == 41 and "corpus.jsonl" in str(err.value)


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_task_json_is_named_and_other_commands_go_on(capsys, tmp_path, case):
    d, _ = beir(tmp_path)
    target = import_task("mine", d / "corpus.jsonl", d / "queries.jsonl", d / "qrels.tsv")
    (target / "task.json").write_text('{"name": "mine", "tags": ' + HOSTILE[case] + "}")
    with pytest.raises(DataError, match=r"mine/task.json"):
        load_task("mine")
    code, out, err = cli(capsys, "tasks")
    assert code == 0 and "Traceback" not in err and "ml-100k" in out


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_amazon_meta_line_names_file_and_line(case):
    rows = toy_reviews()
    d = paths.raw_dir("rec-toy")
    d.mkdir(parents=True)
    write_toy(d, rows)
    lines = toy_meta_lines(sorted({r[1] for r in rows}))
    lines.insert(3, json.dumps({"asin": rows[0][1], "title": "x"})[:-1] + ', "rank": ' + HOSTILE[case] + "}")
    write_gz(d / "meta_Toys_and_Games.json.gz", lines)
    with pytest.raises(DataError) as err:
        load_task("rec-toy")
    assert err.value.line == 4 and "meta_Toys_and_Games.json.gz" in str(err.value)


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_candidate_models_json_is_named(case):
    d = paths.raw_dir("routing-balance")
    d.mkdir(parents=True)
    write_csv(d / "router_data.csv", make_rows())
    (d / "candidate_models.json").write_text('{"llm-a": {"feature": "x", "price": ' + HOSTILE[case] + "}}")
    with pytest.raises(DataError, match="candidate_models.json"):
        load_task("routing-balance")


def test_a_hostile_prepared_manifest_is_skipped_not_a_crash(capsys):
    entry = paths.prepared_dir("esci") / "0123abcd"  # a cache entry of rbench's own, damaged
    entry.mkdir(parents=True)
    (entry / "manifest.json").write_text('{"sizes": ' + DEEP + "}")
    code, out, err = cli(capsys, "tasks")
    assert code == 0 and "Traceback" not in err and "esci" in out


def test_a_bad_donor_is_left_out_of_a_mixed_pool_with_a_note(capsys, tmp_path):
    write_ml1m_dat(_raw("rec-movie"), distinct_movie_ratings())
    rows = toy_reviews()
    toy = _raw("rec-toy")
    write_toy(toy, rows)
    lines = toy_meta_lines(sorted({r[1] for r in rows}))
    lines.insert(0, json.dumps({"asin": rows[0][1]})[:-1] + ', "x": ' + DEEP + "}")
    write_gz(toy / "meta_Toys_and_Games.json.gz", lines)
    out = tmp_path / "r"
    code, _, err = cli(capsys, "run", "--ranker", "pop", "--task", "ml-100k", "--variant", "mixed",
                       "--results-dir", str(out), "-q")
    assert code == 0, err
    assert "rec-toy left out" in err and "meta_Toys_and_Games.json.gz" in err and "Traceback" not in err
    (path,) = out.rglob("pop.json")
    rec = read_record(path)
    assert "rec-toy" in rec.task_info["variant_skipped"] and "rec-movie" in rec.task_info["variant_sources"]


# --------------------------------------------------------------------------------------------
# 2. regular files only
# --------------------------------------------------------------------------------------------


def test_a_fifo_named_like_a_record_is_one_line(res, tmp_path):
    fifo = res / "large" / "ml-100k" / "late.json"
    os.mkfifo(fifo)
    code, _, err = cli_process("table", "--scenario", "large", "--results-dir", str(res), "-o", str(tmp_path / "t.md"))
    line = one_line(err)
    assert code == 2 and str(fifo) in line and "FIFO" in line


def test_a_record_symlinked_to_dev_zero_is_one_line(res, tmp_path):
    link = res / "large" / "ml-100k" / "zero.json"
    link.symlink_to("/dev/zero")
    code, _, err = cli_process("table", "--scenario", "large", "--results-dir", str(res), "-o", str(tmp_path / "t.md"))
    line = one_line(err)
    assert code == 2 and str(link) in line and "character device" in line


def test_a_fifo_as_a_per_query_file_is_a_note(res, tmp_path):
    rec_path = res / "large" / "ml-100k" / "bm25.json"
    pq = rec_path.with_name(read_record(rec_path).per_query_file)
    pq.unlink()
    os.mkfifo(pq)
    md = tmp_path / "t.md"
    code, _, err = cli_process("table", "--scenario", "large", "--results-dir", str(res), "-o", str(md))
    line = one_line(err)
    assert code == 0 and pq.name in line and "FIFO" in line and "no significance test" in line
    assert "| pop |" in md.read_text()


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_task_input_that_is_not_a_regular_file_is_one_line(tmp_path, kind):
    d, _ = beir(tmp_path)
    bad = tmp_path / "corpus.jsonl"
    os.mkfifo(bad) if kind == "fifo" else bad.symlink_to("/dev/zero")
    code, _, err = cli_process("data", "import", "mine", "--corpus", str(bad), "--queries", str(d / "queries.jsonl"),
                               "--qrels", str(d / "qrels.tsv"))
    line = one_line(err)
    assert code == 2 and str(bad) in line
    assert ("FIFO" if kind == "fifo" else "character device") in line


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_the_line_reader_refuses_what_is_not_a_regular_file(tmp_path, kind):
    bad = tmp_path / "qrels.tsv"
    os.mkfifo(bad) if kind == "fifo" else bad.symlink_to("/dev/zero")
    code, _, err = run_process("-c", "from rbench.tasks.building import iter_lines; import sys; next(iter_lines(sys.argv[1]))",
                               str(bad))
    assert code == 1 and "DataError" in err and "expected a regular file" in err, err


# --------------------------------------------------------------------------------------------
# 3. user text printed as it is
# --------------------------------------------------------------------------------------------

TRICKY = ":100: [red]x[/red] :A:"


def test_a_label_with_emoji_codes_and_markup_prints_as_it_is(capsys, tmp_path):
    rec, pq = record("bm25", np.linspace(0.1, 0.9, 20))
    rec.ranker["label"] = TRICKY
    res = tmp_path / "results"
    write_run(rec, record_path(res, "large", "ml-100k", "bm25", ""), pq)
    code, out, err = cli(capsys, "table", "--scenario", "large", "--results-dir", str(res), "-o", str(tmp_path / "t.md"))
    assert code == 0, err
    assert TRICKY in out and "\N{HUNDRED POINTS SYMBOL}" not in out


def test_an_error_naming_a_path_with_emoji_codes_and_markup_prints_it_as_it_is(capsys, tmp_path):
    bad = tmp_path / f"results {TRICKY}"
    code, _, err = cli(capsys, "table", "--scenario", "large", "--results-dir", str(bad))
    assert code == 2 and str(bad) in one_line(err)
    code, _, err = cli(capsys, "run", "--ranker", "pop", "--task", TRICKY)
    assert code == 2 and f"unknown task {TRICKY!r}" in one_line(err)


# --------------------------------------------------------------------------------------------
# 4. Markdown cells
# --------------------------------------------------------------------------------------------


def _pipes(line: str) -> int:
    """The cell separators of a Markdown table row: pipes not escaped by a backslash."""
    count, escaped = 0, False
    for c in line:
        if c == "|" and not escaped:
            count += 1
        escaped = c == "\\" and not escaped
    return count


def test_a_label_with_a_pipe_or_a_newline_keeps_the_markdown_table_whole(tmp_path):
    from rbench.results.leaderboard import build, to_markdown

    res = tmp_path / "results"
    write(res, "pop", np.linspace(0.05, 0.5, 20))
    rec, pq = record("bm25", np.linspace(0.1, 0.9, 20))
    rec.ranker["label"] = "a|b\nc\\|d"
    write_run(rec, record_path(res, "large", "ml-100k", "bm25", ""), pq)
    md = to_markdown(build(res, "large"))
    rows = [line for line in md.splitlines() if line.startswith("|")]
    assert len(rows) == 5 and len({_pipes(r) for r in rows}) == 1, md  # head, rule, n, 2 rankers
    assert any(r.startswith("| a\\|b c\\\\\\|d |") for r in rows), md


def test_a_reproduced_table_escapes_its_cells(tmp_path):
    from rbench.audit import reproduce

    recipe = reproduce.get("smoke")
    row = {"ranker": "x|y", "task": "ml-100k", "variant": "orig|inal", "measure": "MRR", "rbench": 1.0,
           "paper": None, "delta": None, "status": "ran\nok"}
    md = reproduce.to_markdown(recipe, "cpu", [row])
    rows = [line for line in md.splitlines() if line.startswith("|")]
    assert len(rows) == 3 and len({_pipes(r) for r in rows}) == 1, md
