"""Tables and plots from bad or mismatched RunRecords: an error naming the file (exit 2) or a
note, never an emptied leaderboard, a shared column across data versions, ``nan*`` or a
traceback; a RunRecord and its per-query file always belong to the same run (issue 14).

Choices: a malformed RunRecord stops the table with one line naming the file (a table silently
missing a row would be wrong); a per-query file that is missing, truncated or not the record's
own is a note naming it, and that run gets no significance test (its metrics stay in the record).
"""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from rbench.results import record as results
from rbench.results.leaderboard import build, to_csv, to_json, to_markdown
from rbench.results.record import (
    ColumnKey,
    RowKey,
    RunRecord,
    per_query_bytes,
    read_per_query,
    read_record,
    record_path,
    write_run,
)
from tests.helpers import cli, one_line


def record(ranker, rr, fingerprint="f" * 64, variant="original", task_info=None, created="2026-11-22T00:00:00+00:00"):
    rr = np.asarray(rr, dtype=float)
    values = {"nDCG@10": rr * 0.9, "RR": rr, "R@10": (rr > 0.1).astype(float), "R@100": np.ones_like(rr)}
    rec = RunRecord(task="ml-100k", variant=variant, scenario="large", task_fingerprint=fingerprint,
                    ranker={"name": ranker, "version": "1", "config": {}}, seed=0, n_queries=len(rr),
                    metrics={k: float(v.mean()) for k, v in values.items()}, timings={}, peak_rss_bytes=0,
                    created=created, task_info=task_info or {})
    pq = per_query_bytes(np.array([f"q{i}" for i in range(len(rr))]), values, np.ones(len(rr), dtype=int))
    return rec, pq


def write(res, ranker, rr, stem="", **kw):
    rec, pq = record(ranker, rr, **kw)
    key = "ml-100k" if rec.variant == "original" else f"ml-100k~{rec.variant}"
    return write_run(rec, record_path(res, "large", key, ranker, stem), pq)


@pytest.fixture
def res(tmp_path):
    rng = np.random.default_rng(0)
    base = rng.random(200) * 0.5
    out = tmp_path / "results"
    write(out, "pop", base)
    write(out, "bm25", np.clip(base + 0.2, 0, 1))
    return out


# --------------------------------------------------------------------------------------------
# tables emptied with exit 0
# --------------------------------------------------------------------------------------------


def test_a_mistyped_results_dir_is_an_error_and_keeps_the_table(capsys, res, tmp_path):
    md = tmp_path / "large.md"
    assert cli(capsys, "table", "--scenario", "large", "--results-dir", str(res), "-o", str(md))[0] == 0
    before = md.read_bytes()
    code, _, err = cli(capsys, "table", "--scenario", "large", "--results-dir", str(tmp_path / "reslts"),
                       "-o", str(md))
    assert code == 2 and "does not exist (did you mean 'results'?)" in one_line(err)
    assert md.read_bytes() == before


def test_an_empty_table_never_replaces_one_with_rows(capsys, res, tmp_path):
    md = tmp_path / "small.md"
    md.write_text("| Ranker | rec-music MRR |\n|---|---|\n| pop | 39.49 |\n")
    code, _, err = cli(capsys, "table", "--scenario", "small", "--results-dir", str(res), "-o", str(md))
    assert code == 2 and "left as it is" in one_line(err) and str(md) in err
    assert "pop | 39.49" in md.read_text()
    fresh = tmp_path / "fresh.md"  # nothing to lose: written, with a note
    code, _, err = cli(capsys, "table", "--scenario", "small", "--results-dir", str(res), "-o", str(fresh))
    assert code == 0 and "the table is empty" in one_line(err) and "No results yet." in fresh.read_text()


def test_an_unknown_variant_is_an_error_with_a_suggestion(capsys, res, tmp_path):
    md = tmp_path / "t.md"
    code, _, err = cli(capsys, "table", "--scenario", "large", "--variant", "mixd", "--results-dir", str(res),
                       "-o", str(md))
    assert code == 2 and "did you mean 'mixed'" in one_line(err) and not md.exists()


# --------------------------------------------------------------------------------------------
# runs on other data never share a column or a significance test
# --------------------------------------------------------------------------------------------


def test_records_on_other_data_get_columns_of_their_own(res):
    write(res, "random", np.full(200, 0.9), fingerprint="a" * 64)  # data prepared from other inputs
    lb = build(res, "large")
    labels = sorted(lb.label(t) for t in lb.tasks)
    assert labels == [f"ml-100k [data {'a' * 8}]", f"ml-100k [data {'f' * 8}]"]
    own = {t.fingerprint: t for t in lb.tasks}
    assert (RowKey("random"), own["a" * 64]) in lb.cells and (RowKey("random"), own["f" * 64]) not in lb.cells
    sig = lb.significance()
    assert (RowKey("pop"), own["f" * 64], "RR") in sig  # tested against bm25 on the same data ...
    assert not any(t == own["a" * 64] for _, t, _ in sig)  # ... never against the run on other data
    assert lb.rank_marks()[(RowKey("random"), own["a" * 64], "RR")] == "best"
    assert f"ml-100k [data {'a' * 8}] MRR" in to_markdown(lb)


def test_a_variant_delta_is_measured_against_the_data_it_was_built_from(res):
    # pop on other data (an older record beside the fixture's newer one): the mixed pool was built from it
    write(res, "pop", np.full(200, 0.5), stem="older", fingerprint="a" * 64, created="2026-11-01T00:00:00+00:00")
    write(res, "pop", np.full(200, 0.1), fingerprint="m" * 64, variant="mixed",
          task_info={"original_fingerprint": "a" * 64})
    lb = build(res, "large", "mixed")
    (col,) = lb.tasks
    assert lb.deltas[(RowKey("pop"), col)] == pytest.approx((0.1 - 0.5) / 0.5)


# --------------------------------------------------------------------------------------------
# malformed RunRecords: one line naming the file
# --------------------------------------------------------------------------------------------


def _edit(data: dict, case: str):
    if case == "renamed metric keys":
        data["metrics"] = {"MRR": data["metrics"]["RR"], "NDCG@10": data["metrics"]["nDCG@10"]}
    elif case == "None metric":
        data["metrics"]["RR"] = None
    elif case == "string metric":
        data["metrics"]["nDCG@10"] = "0.41"
    elif case == "ranker as a string":
        data["ranker"] = "bm25"
    elif case == "n_queries as a string":
        data["n_queries"] = "200"
    elif case == "a list":
        data = [data]
    return json.dumps(data).encode()


MALFORMED = ["renamed metric keys", "None metric", "string metric", "ranker as a string", "n_queries as a string",
             "a list", "binary"]


@pytest.mark.parametrize("case", MALFORMED)
def test_a_malformed_record_is_one_line_naming_the_file(capsys, res, tmp_path, case):
    path = res / "large" / "ml-100k" / "bm25.json"
    raw = b"\x89PNG\r\n\x1a\n\x00\xff\xfe" * 20 if case == "binary" else _edit(json.loads(path.read_text()), case)
    path.write_bytes(raw)
    with pytest.raises(results.DataError, match=str(path)):
        read_record(path)
    code, _, err = cli(capsys, "table", "--scenario", "large", "--results-dir", str(res), "-o", str(tmp_path / "t.md"))
    assert code == 2 and str(path) in one_line(err)
    code, _, err = cli(capsys, "plot", "scaling", "-t", "ml-100k", "-r", "bm25", "--results-dir", str(res),
                       "-o", str(tmp_path / "s.png"))
    assert code == 2 and str(path) in one_line(err)


@pytest.mark.parametrize("damage", ["truncated", "not gzip", "swapped"])
def test_a_bad_per_query_file_is_a_note_and_no_significance(capsys, res, tmp_path, damage):
    rec_path = res / "large" / "ml-100k" / "bm25.json"
    rec = read_record(rec_path)
    pq = rec_path.with_name(rec.per_query_file)
    raw = pq.read_bytes()
    if damage == "truncated":
        pq.write_bytes(raw[: len(raw) // 2])
    elif damage == "not gzip":
        pq.write_bytes(b"query_id,RR\nq0,1.0\n")
    else:  # a valid per-query file of another run
        pq.write_bytes(gzip.compress(gzip.decompress(raw).replace(b"q1,", b"q9,")))
    md = tmp_path / "t.md"
    code, _, err = cli(capsys, "table", "--scenario", "large", "--results-dir", str(res), "-o", str(md))
    assert code == 0 and pq.name in one_line(err) and "no significance test" in err
    pop_row = next(line for line in md.read_text().splitlines() if line.startswith("| pop |"))
    assert "*" not in pop_row.replace("**", "")  # not tested against bm25, so no significance mark
    bm25_row = next(line for line in md.read_text().splitlines() if line.startswith("| bm25 |"))
    assert "‼" in bm25_row and "**" not in bm25_row  # its record cannot be checked: marked, not compared


def test_a_nan_metric_shows_as_n_a_without_marks(res):
    path = res / "large" / "ml-100k" / "bm25.json"
    data = json.loads(path.read_text())
    data["metrics"]["RR"] = float("nan")
    path.write_text(json.dumps(data))
    lb = build(res, "large")
    md = to_markdown(lb)
    assert "nan" not in md.lower().replace("n/a", "") and "| bm25 |" in md
    bm25_row = next(line for line in md.splitlines() if line.startswith("| bm25 |"))
    assert [c.strip() for c in bm25_row.strip("|").split("|")][2] == "n/a"  # ranker, nDCG@10, MRR
    assert lb.rank_marks()[(RowKey("pop"), ColumnKey("ml-100k"), "RR")] == "best"
    assert "nan" not in to_csv(lb).lower()
    rows = json.loads(to_json(lb))["rows"]  # strict JSON: null, not NaN
    assert next(r for r in rows if r["ranker"] == "bm25")["MRR"] is None and "NaN" not in to_json(lb)


@pytest.mark.parametrize("kind", ["scaling", "training"])
def test_a_plot_under_a_file_is_one_line(capsys, tmp_path, kind):
    out = tmp_path / "results"
    rec, pq = record("pop", np.full(10, 0.2))
    rec.task_info = {"pool_size": 1682}
    rec.ranker_info = {"training_curve": [{"epoch": 1.0, "step": 10, "examples": 100, "train_loss": 1.0,
                                           "valid_MRR": 0.1, "seconds": 1.0}]}
    write_run(rec, record_path(out, "large", "ml-100k", "pop", ""), pq)
    (tmp_path / "blocker").write_text("a file")
    png = tmp_path / "blocker" / "fig.png"
    code, _, err = cli(capsys, "plot", kind, "-t", "ml-100k", "-r", "pop", "--results-dir", str(out), "-o", str(png))
    assert code == 2 and "blocker is a file, not a folder" in one_line(err)
    code, _, err = cli(capsys, "plot", kind, "-t", "ml-100k", "-r", "pop", "--results-dir", str(tmp_path / "reslts"),
                       "-o", str(tmp_path / "fig.png"))
    assert code == 2 and "does not exist (did you mean 'results'?)" in one_line(err)


# --------------------------------------------------------------------------------------------
# a RunRecord and its per-query file always belong to the same run
# --------------------------------------------------------------------------------------------


def test_an_interrupt_between_the_two_writes_keeps_the_old_pair(tmp_path, monkeypatch):
    path = record_path(tmp_path, "large", "ml-100k", "pop", "")
    old, old_pq = record("pop", np.full(50, 0.2))
    write_run(old, path, old_pq)
    new, new_pq = record("pop", np.full(50, 0.7), created="2026-11-23T00:00:00+00:00")
    real = results.atomic_write_bytes

    def killed_at_the_record(target, data):
        if target == path:
            raise KeyboardInterrupt  # after the per-query file, before the record
        real(target, data)

    monkeypatch.setattr(results, "atomic_write_bytes", killed_at_the_record)
    with pytest.raises(KeyboardInterrupt):
        write_run(new, path, new_pq)
    monkeypatch.setattr(results, "atomic_write_bytes", real)
    kept = read_record(path)
    assert kept.metrics["RR"] == pytest.approx(0.2)
    frame = read_per_query(path, kept)
    assert frame is not None and np.allclose(frame["RR"], 0.2)  # the old run's own per-query values
    # the next complete write publishes the new pair and removes the files of the runs before it
    write_run(new, path, new_pq)
    assert np.allclose(read_per_query(path, read_record(path))["RR"], 0.7)
    assert sorted(p.name for p in path.parent.iterdir()) == sorted([path.name, new.per_query_file])


def test_a_record_names_its_per_query_file_by_content_hash(tmp_path):
    import hashlib

    path = record_path(tmp_path, "large", "ml-100k", "pop", "")
    rec, pq = record("pop", np.full(5, 0.3))
    (path.parent).mkdir(parents=True)
    legacy = path.with_name("pop.perquery.csv.gz")  # the unhashed name of earlier versions
    legacy.write_bytes(pq)
    write_run(rec, path, pq)
    data = json.loads(path.read_text())
    assert data["per_query_sha256"] == hashlib.sha256(pq).hexdigest()
    assert data["per_query_file"] == f"pop.{data['per_query_sha256'][:12]}.perquery.csv.gz"
    assert not legacy.exists()
    write_run(rec, path, None)  # a record without per-query values leaves none behind
    assert [p.name for p in path.parent.iterdir()] == ["pop.json"]
