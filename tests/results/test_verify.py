"""Records that prove themselves (issue 40, item 5): a record whose metrics disagree with its own
files is a marked row and a note, ``rbench verify`` recomputes every metric from the run file and
the task's qrels, and ``-r run:PATH`` scores an existing TREC run file as a row, pessimistically.

Each test names the bug it catches (planted by hand while writing it; see the test's docstring).
"""

from __future__ import annotations

import gzip
import io
import json
import shutil
import warnings

import numpy as np
import pandas as pd
import pytest

from tests.helpers import cli

N = 40  # test queries per run: enough to differ, cheap on two cores


@pytest.fixture(scope="module")
def honest(tmp_path_factory):
    """An honest pop run on ml-100k (40 test queries, the default run file of depth 100)."""
    from rbench.public import run_outcome

    res = tmp_path_factory.mktemp("honest") / "results"
    out = run_outcome("pop", "ml-100k", max_queries=N, results_dir=res)
    return res, out


def _copy(honest, tmp_path):
    res, out = honest
    dst = tmp_path / "results"
    shutil.copytree(res, dst)
    return dst, dst / out.path.relative_to(res)


def _edit(path, **fields):
    data = json.loads(path.read_text())
    for key, value in fields.items():
        data[key] = value
    path.write_text(json.dumps(data))


def _pq(path):
    data = json.loads(path.read_text())
    return path.with_name(data["per_query_file"]), data


def test_an_honest_record_verifies(capsys, honest):
    """Bug caught: ``verify`` reporting MISMATCH on an honest record (e.g. ranks read optimistically
    from the run file, or the mean compared without the tolerance)."""
    res, out = honest
    code, text, err = cli(capsys, "verify", str(res))
    assert code == 0, text + err
    assert f"OK {out.path}" in text and "1 records: 1 OK, 0 MISMATCH, 0 SKIP" in text


def test_forged_metrics_are_a_marked_row_and_fail_verify(capsys, honest, tmp_path):
    """Bug caught: the table (or ``load_results``) trusting a record's ``metrics`` without its
    per-query file's means; ``verify`` not comparing stored with recomputed."""
    from rbench.public import load_results, table
    from rbench.results.leaderboard import to_json, to_markdown

    res, rec_path = _copy(honest, tmp_path)
    data = json.loads(rec_path.read_text())
    true_rr = data["metrics"]["RR"]
    _edit(rec_path, metrics={**data["metrics"], "RR": 0.9})
    code, text, _ = cli(capsys, "verify", str(rec_path))
    assert code == 1 and f"MISMATCH {rec_path}" in text and f"RR: stored 0.900000, recomputed {true_rr:.6f}" in text
    lb = table("large", res)
    md = to_markdown(lb, results_dir=res)
    row = next(line for line in md.splitlines() if line.startswith("| pop |"))
    assert "90.00 ‼" in row and "**" not in row  # marked, and not bold (not compared)
    assert "the record's metrics disagree with its own files" in md and "RR: record 0.900000" in md
    assert "RR: record 0.900000" in json.loads(to_json(lb))["rows"][0]["disagrees"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        frame = load_results(res)
    assert (frame["disagrees"].str.contains("RR: record 0.900000")).all()
    assert any("disagrees with its own files" in str(w.message) for w in caught)
    code, text, err = cli(capsys, "table", "--scenario", "large", "--results-dir", str(res), "-o", str(tmp_path / "t.md"))
    assert code == 0 and "‼" in text and "RR: record 0.900000" in err and "not compared" in err
    _write_second(res)  # rbench compare needs a pair: it says which record disagrees, never silently
    code, text, _ = cli(capsys, "compare", "--task", "ml-100k", "--results-dir", str(res), "-f", "md")
    assert code == 0 and "‼ pop: its RunRecord disagrees with its own files" in text


def _write_second(res):
    """A second, honest run in the same column (so that ``compare`` has a pair)."""
    from rbench.public import run_outcome

    run_outcome("random", "ml-100k", max_queries=N, results_dir=res)


def test_a_tampered_per_query_file_is_marked(capsys, honest, tmp_path):
    """Bug caught: the per-query file's sha256 not checked against the record (a file edited in
    place, under its old name, would pass the means check if metrics were edited alike)."""
    from rbench.public import table

    res, rec_path = _copy(honest, tmp_path)
    pq, data = _pq(rec_path)
    frame = pd.read_csv(io.BytesIO(gzip.decompress(pq.read_bytes())))
    frame["RR"] = 1.0
    pq.write_bytes(gzip.compress(frame.to_csv(index=False).encode()))
    _edit(rec_path, metrics={**data["metrics"], "RR": 1.0})
    lb = table("large", res)
    assert len(lb.disproved) == 1 and "sha256 differs" in next(iter(lb.disproved.values()))
    code, text, _ = cli(capsys, "verify", str(res))
    assert code == 1 and "MISMATCH" in text


def test_consistent_forged_files_fail_verify(capsys, honest, tmp_path):
    """Files forged to agree with each other (per-query values, their sha256 and name, the
    metrics) pass the table's cheap check; ``verify`` recomputes from the run file and fails.
    Bug caught: ``verify`` reading the per-query file instead of ranking the run file's lines."""
    import hashlib

    from rbench.public import table

    res, rec_path = _copy(honest, tmp_path)
    pq, data = _pq(rec_path)
    frame = pd.read_csv(io.BytesIO(gzip.decompress(pq.read_bytes())))
    frame["RR"] = 1.0
    frame["rank"] = 1
    raw = gzip.compress(frame.to_csv(index=False).encode(), mtime=0)
    digest = hashlib.sha256(raw).hexdigest()
    new = pq.with_name(f"{pq.name.split('.')[0]}.{digest[:12]}.perquery.csv.gz")
    pq.unlink()
    new.write_bytes(raw)
    _edit(rec_path, metrics={**data["metrics"], "RR": 1.0}, per_query_file=new.name, per_query_sha256=digest)
    assert table("large", res).disproved == {}  # the cheap check cannot see it
    code, text, _ = cli(capsys, "verify", str(rec_path))
    assert code == 1 and "RR:" in text and "differ from the run file's" in text


def test_verify_bad_input_is_exit_2(capsys, tmp_path):
    """Bug caught: a mistyped path or a malformed record read as 'nothing to verify' (exit 0)."""
    code, _, err = cli(capsys, "verify", str(tmp_path / "nope"))
    assert code == 2 and "does not exist" in err
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    code, _, err = cli(capsys, "verify", str(bad))
    assert code == 2 and str(bad) in err


def test_a_run_file_row_equals_the_rankers_record(capsys, tmp_path):
    """``-r run:PATH`` with the run file a ranker wrote gives that ranker's numbers: with a run
    file holding every candidate (--topk past the pool), every metric bit for bit; the record
    says where its scores came from. Bug caught: run files not resolved (``cannot import run``),
    the file's order read differently from the engine's (ties, direction)."""
    from rbench.results.record import read_record

    res = tmp_path / "results"
    code, _, err = cli(capsys, "run", "-r", "pop", "-t", "ml-100k", "--max-queries", str(N), "--topk", "2000",
                       "-q", "--results-dir", str(res))
    assert code == 0, err
    (pop_path,) = (res / "large" / "ml-100k").glob("pop*.json")
    pop = read_record(pop_path)
    run_file = pop_path.with_name(pop.run_file)
    code, _, err = cli(capsys, "run", "-r", f"run:{run_file}", "-t", "ml-100k", "--max-queries", str(N), "-q",
                       "--results-dir", str(res))
    assert code == 0, err
    (mine,) = [p for p in (res / "large" / "ml-100k").glob("run-*.json")]
    rec = read_record(mine)
    assert rec.metrics == pop.metrics
    assert rec.ranker_info["run_file_sha256"] == pop.run_sha256 and rec.ranker_info["n_missing_candidates"] > 0
    assert rec.label == f"run:{run_file.name}"
    code, text, _ = cli(capsys, "verify", str(mine))
    assert code == 0 and "OK" in text


def test_missing_candidates_rank_last_pessimistically(tmp_path):
    """A run file listing one non-positive per query: each positive (ml-100k has one per query)
    is missing and ranks last among what the query ranks (``n_ranked``), never right after the
    listed line. Bug caught: an optimistic rule (missing candidates tied with the positive first,
    or scored above the listed ones)."""
    from rbench.public import load_task, run_outcome
    from rbench.run.runner import subsample

    data = subsample(load_task("ml-100k"), N, 0)
    lines = []
    for i, q in enumerate(data.test.ids):
        taken = set(data.test.positives[i].tolist()) | set(data.test.exclude[i].tolist())
        free = next(d for d in range(len(data.pool)) if d not in taken)
        lines.append(f"{q} Q0 {data.pool.ids[free]} 1 5.0 mine\n")
    run_file = tmp_path / "one.run"
    run_file.write_text("".join(lines))
    out = run_outcome(f"run:{run_file}", "ml-100k", max_queries=N)
    ranks = out.record.per_query["rank"].to_numpy()
    assert np.array_equal(ranks, out.result.n_ranked)  # last of every candidate the query ranks
    assert out.record.metrics["RR"] == pytest.approx(float(np.mean(1.0 / out.result.n_ranked)))
    assert out.record.ranker_info["n_missing_candidates"] == N * (len(data.pool) - 1)


def test_a_bad_run_file_is_one_line(capsys, tmp_path):
    """Bug caught: a malformed run file failing deep in scoring, not naming its file and line."""
    bad = tmp_path / "bad.run"
    bad.write_text("1 Q0 nosuchdoc 1 1.0 x\n")
    code, _, err = cli(capsys, "run", "-r", f"run:{bad}", "-t", "ml-100k", "--max-queries", "5", "-q", "--no-write")
    assert code == 2 and f"{bad}, line 1" in err and "not in the task's pool" in err
    code, _, err = cli(capsys, "run", "-r", f"run:{tmp_path / 'none.run'}", "-t", "ml-100k", "--no-write")
    assert code == 2 and "no such run file" in err


def test_rerun_catches_a_record_dressed_in_another_runs_files(capsys, honest, tmp_path):
    """pop's record given random's per-query file, run file and metrics (all consistent with each
    other and with the qrels) passes every file check; ``--rerun`` runs pop again and fails it.
    Bug caught: ``--rerun`` not comparing the new run's metrics with the record's."""
    res, rec_path = _copy(honest, tmp_path)
    _write_second(res)
    (other,) = rec_path.parent.glob("random*.json")
    theirs = json.loads(other.read_text())
    # the same folder: pop's record may name random's files as they are
    _edit(rec_path, **{k: theirs[k] for k in ("metrics", "per_query_file", "per_query_sha256", "run_file",
                                               "run_sha256")})
    code, text, _ = cli(capsys, "verify", str(rec_path))
    assert code == 0 and f"OK {rec_path}" in text  # the files agree: only a rerun can tell
    code, text, _ = cli(capsys, "verify", "--rerun", str(rec_path))
    assert code == 1 and "MISMATCH" in text and "rerun: " in text
    code, text, _ = cli(capsys, "verify", "--rerun", str(other))
    assert code == 0 and "rerun agrees" in text
