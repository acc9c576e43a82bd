"""Files and names a user hands over, read one way (issue 42, classes 5 and 7).

- Measure names: ASCII digits only, at most 9 of them (``nDCG@²``, ``RR(rel=²)``, ``P@١``, a
  10,000-digit cutoff crashed ``rbench run`` and ``rbench table``).
- Run files and qrels go through ``rbench.core.inputs.iter_text_lines``: a UTF-8 BOM at the start
  is dropped (it silently dropped a run file's first line: RR 0.0078 -> 0.0006, exit 0), CRLF is
  one line end, a line is capped.
- Grades are integers (``building.GRADE_RULE``): a fractional grade is refused at import, and the
  exported qrels never hold one (ir_measures crashed on them).
- ``--results-dir ''`` is refused (it wrote records into the working folder).
- A RunRecord never holds NaN or Infinity: it is refused before any of its files is written.
"""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from rbench.core.errors import DataError, RBenchError
from rbench.core.measures import parse_measure
from tests.helpers import cli, make_pool, make_queries, one_line

# --------------------------------------------------------------------------------------------
# measure names
# --------------------------------------------------------------------------------------------

HOSTILE_MEASURES = ["nDCG@²", "RR(rel=²)", "P@١٠", "R@𝟙𝟘", "nDCG@" + "9" * 10_000, "RR(rel=" + "7" * 5_000 + ")",
                    "nDCG@1000000000"]


@pytest.mark.parametrize("spec", HOSTILE_MEASURES, ids=range(len(HOSTILE_MEASURES)))
def test_a_measure_number_is_ascii_digits_and_bounded(spec):
    with pytest.raises(RBenchError) as info:
        parse_measure(spec)
    text = str(info.value)
    assert "\n" not in text and len(text) < 600 and "ASCII digits, at most 9" in text


def test_the_largest_cutoff_is_taken():
    assert parse_measure("nDCG@999999999").cutoff == 999_999_999
    assert parse_measure("RR(rel=2)@10").rel == 2


@pytest.mark.parametrize("command", [["table", "-s", "large"], ["run", "-r", "pop", "-t", "ml-100k", "-q", "--no-write"]])
@pytest.mark.parametrize("spec", ["nDCG@²", "RR(rel=²)", "nDCG@" + "9" * 10_000])
def test_the_cli_refuses_a_hostile_measure_in_one_line(capsys, tmp_path, command, spec):
    code, _, err = cli(capsys, *command, "--results-dir", str(tmp_path), "--measure", spec)
    line = one_line(err)
    assert code == 2 and "measure" in line and len(line) < 700


# --------------------------------------------------------------------------------------------
# run files: BOM, CRLF, line cap
# --------------------------------------------------------------------------------------------

RUN = "q0 Q0 d1 1 0.9 t\nq0 Q0 d2 2 0.5 t\nq1 Q0 d3 1 0.7 t\nq2 Q0 d4 1 0.2 t\n"  # q0's positive: d1


def _read(path):
    from rbench.engine.runfile import read_run

    queries, pool = make_queries([[1], [2, 3], [4]]), make_pool(30)
    return read_run(path, queries.ids, pool.ids)


@pytest.mark.parametrize("how", ["bom", "crlf", "bom+crlf", "gzip+bom"])
def test_a_run_file_reads_the_same_with_a_bom_or_crlf(tmp_path, how):
    plain = tmp_path / "plain.run"
    plain.write_text(RUN)
    text = RUN.replace("\n", "\r\n") if "crlf" in how else RUN
    data = (b"\xef\xbb\xbf" if "bom" in how else b"") + text.encode()
    other = tmp_path / "other.run"
    other.write_bytes(gzip.compress(data) if "gzip" in how else data)
    assert _read(other) == _read(plain)
    assert _read(other)[0] == {1: 0.9, 2: 0.5}  # the first line (q0's positive) is there


def test_a_bom_run_file_gives_the_same_stage_1(tmp_path):
    """The issue's case end to end through the rerank reader: the first line holds a positive."""
    from rbench.api import TaskData
    from rbench.run import rerank
    from rbench.run.runner import RunOptions, make_plan

    pool, queries = make_pool(30), make_queries([[1], [2, 3], [4]])
    data = TaskData(spec=None, pool=pool, train=queries, valid=queries, test=queries)  # type: ignore[arg-type]
    plan = make_plan(RunOptions(ranker="pop", task="ml-100k", write=False))
    plain, bom = tmp_path / "plain.run", tmp_path / "bom.run"
    plain.write_text(RUN)
    bom.write_bytes(b"\xef\xbb\xbf" + RUN.encode())
    a, b = rerank.read_run_file(plain, data, 5, plan.batch_size, plan.chunk_size), rerank.read_run_file(bom, data, 5, plan.batch_size, plan.chunk_size)
    np.testing.assert_array_equal(a.ranks, b.ranks)
    assert a.ranks[0] == 1  # q0's positive d1 is ranked first by the file's first line


def test_a_run_line_is_capped(tmp_path):
    from rbench.engine.runfile import RUN_LINE_BYTES

    path = tmp_path / "long.run"
    path.write_bytes(b"q1 Q0 d1 1 0.9 t\nq1 Q0 " + b"x" * (RUN_LINE_BYTES + 10) + b" 2 0.5 t\n")
    with pytest.raises(DataError, match=r"long\.run, line 2: a line longer than 1 MiB"):
        _read(path)


# --------------------------------------------------------------------------------------------
# qrels: BOM, CRLF, integer grades
# --------------------------------------------------------------------------------------------


def _qrels(tmp_path, body: bytes):
    from rbench.tasks.building import BEIR_QRELS, read_qrels

    path = tmp_path / "qrels.tsv"
    path.write_bytes(body)
    return read_qrels(path, {"q1": 0, "q2": 1}, {"d1": 0, "d2": 1}, BEIR_QRELS)


def test_qrels_with_a_bom_and_crlf_read_as_without(tmp_path):
    body = "query-id\tcorpus-id\tscore\nq1\td1\t2\nq2\td2\t1.0\n"
    plain = _qrels(tmp_path, body.encode())
    odd = _qrels(tmp_path, b"\xef\xbb\xbf" + body.replace("\n", "\r\n").encode())
    assert plain.positives == odd.positives == {0: [(0, 2.0)], 1: [(1, 1.0)]}


@pytest.mark.parametrize("grade", ["0.5", "1.25", "2.000001"])
def test_a_fractional_grade_is_refused_at_import(tmp_path, grade):
    with pytest.raises(DataError, match=rf"qrels\.tsv, line 3, field 'score': expected an integer grade, got '{grade}'"):
        _qrels(tmp_path, f"query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t{grade}\n".encode())


def test_exported_qrels_hold_integer_grades_or_refuse():
    from rbench.cli.data import qrels_text

    pool = make_pool(6)
    text = qrels_text(make_queries([[1], [2, 3]], [[2.0], [1.0, 3.0]]), pool.ids)
    assert [line.split()[3] for line in text.splitlines()] == ["2", "1", "3"]
    with pytest.raises(DataError, match="fractional grade 0.5.*re-import the task"):
        qrels_text(make_queries([[1], [2]], [[1.0], [0.5]]), pool.ids)


# --------------------------------------------------------------------------------------------
# --results-dir '' and NaN in a RunRecord
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [["--results-dir", ""], ["--results-dir="], ["--results-dir", "  "]])
def test_an_empty_results_dir_is_refused(capsys, tmp_path, monkeypatch, args):
    monkeypatch.chdir(tmp_path)
    code, _, err = cli(capsys, "run", "-r", "pop", "-t", "ml-100k", "-q", "--max-queries", "20", *args)
    line = one_line(err)
    assert code == 2 and "--results-dir is empty" in line
    assert not list(tmp_path.rglob("*.json"))


def test_a_record_holding_nan_is_not_written(tmp_path):
    from rbench.results.record import record_path, write_run
    from tests.reliability.test_reliability_tables import record

    rec, pq = record("pop", np.full(20, 0.3))
    rec.ranker["config"] = {"temperature": float("nan")}
    path = record_path(tmp_path, "large", "ml-100k", "pop", "")
    with pytest.raises(RBenchError, match=r"non-finite number at ranker\.config\.temperature"):
        write_run(rec, path, pq)
    assert not path.parent.exists() or not any(path.parent.iterdir())  # nothing half-way
    rec.ranker["config"] = {"temperature": 0.5}
    write_run(rec, path, pq)
    json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"{c} in a record"))
