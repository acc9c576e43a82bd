"""``--measure`` / ``measures=[...]`` from the CLI and the API to the RunRecord and the tables.

What is pinned: requested measures land in ``metrics`` (and the per-query file) beside the
paper's defaults, which do not move; the record's file (its identity) is the same with or without
them; ``--overwrite only-missing`` runs a record again when it lacks a requested measure and keeps
it once it has them; ``rbench table --measure`` shows the column and ``n/r`` with a note for a
record without it; a bad name is one line, exit 2.
"""

from __future__ import annotations

import json
import warnings

import pytest

import rbench
from rbench.core.errors import RBenchError
from rbench.results.record import read_per_query, read_record
from tests.helpers import cli, one_line

RUN = {"max_queries": 30, "topk": 0}
DEFAULTS = ("nDCG@10", "RR", "R@10", "R@100", "RR@100")


def _record_file(tmp_path, ranker="pop"):
    (path,) = (tmp_path / "large" / "ml-100k").glob(f"{ranker}*.json")
    return path


def _rerun_command(record):
    """benchmarks/rerun_records.py's command for a record (it re-asks for the record's measures)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("rerun_records", Path(__file__).parents[2] / "benchmarks" /
                                                  "rerun_records.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.command(record)


def test_requested_measures_sit_beside_the_unmoved_defaults(tmp_path):
    plain = rbench.evaluate("pop", "ml-100k", results_dir=tmp_path / "plain", **RUN)
    rec = rbench.evaluate("pop", "ml-100k", results_dir=tmp_path / "more", measures=["P@100", "AP(rel=2)@100",
                                                                                      "MRR@10", "nDCG@10"], **RUN)
    assert list(rec.metrics) == [*DEFAULTS, "P@100", "AP(rel=2)@100", "RR@10"]  # canonical, no default twice
    assert {m: rec.metrics[m] for m in DEFAULTS} == plain.metrics
    assert _record_file(tmp_path / "plain").name == _record_file(tmp_path / "more").name  # the same identity
    assert rec.config_hash == plain.config_hash and rec.run_options == plain.run_options
    frame = read_per_query(_record_file(tmp_path / "more"), read_record(_record_file(tmp_path / "more")))
    assert frame is not None and list(frame.columns) == ["query_id", *DEFAULTS, "P@100", "AP(rel=2)@100", "RR@10", "rank"]
    assert frame["P@100"].mean() == pytest.approx(rec.metrics["P@100"], abs=1e-9)
    # ml-100k has one positive a query (grade 1): P@100 is R@100 / 100, query by query
    assert (frame["P@100"] * 100).tolist() == pytest.approx(frame["R@100"].tolist(), abs=1e-8)
    assert rec.metrics["P@100"] > 0
    assert rec.metrics["AP(rel=2)@100"] == 0.0  # ml-100k's grades are all 1: nothing reaches rel=2
    assert rec.metrics["RR@10"] <= rec.metrics["RR@100"] <= rec.metrics["RR"]
    written = json.loads(_record_file(tmp_path / "more").read_text())["metrics"]
    assert written["P@100"] == rec.metrics["P@100"]


def test_only_missing_runs_again_when_a_requested_measure_is_missing(tmp_path):
    rbench.evaluate("pop", "ml-100k", results_dir=tmp_path, **RUN)
    first = _record_file(tmp_path).read_bytes()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a kept record warns: this one must run
        rec = rbench.evaluate("pop", "ml-100k", results_dir=tmp_path, measures=["P@5"], **RUN)
    assert "P@5" in rec.metrics and _record_file(tmp_path).read_bytes() != first
    with pytest.warns(UserWarning, match="kept the existing RunRecord"):  # it has them now: kept
        kept = rbench.evaluate("pop", "ml-100k", results_dir=tmp_path, measures=["P@5", "RR"], **RUN)
    assert kept.metrics == rec.metrics
    with pytest.warns(UserWarning, match="kept the existing RunRecord"):  # fewer measures asked: kept too
        rbench.evaluate("pop", "ml-100k", results_dir=tmp_path, **RUN)
    # another measure: run again; the record then holds the defaults and what this run asked for
    rec = rbench.evaluate("pop", "ml-100k", results_dir=tmp_path, measures=["Success@10"], **RUN)
    assert list(rec.metrics) == [*DEFAULTS, "Success@10"]
    with pytest.warns(UserWarning, match="kept the existing RunRecord"):  # never: whatever it lacks
        kept = rbench.evaluate("pop", "ml-100k", results_dir=tmp_path, measures=["AP"], overwrite="never", **RUN)
    assert "AP" not in kept.metrics


def test_a_bad_measure_is_refused_before_any_work(capsys, tmp_path):
    with pytest.raises(RBenchError, match="measure 'Judged@10': Judged counts the judged documents"):
        rbench.evaluate("pop", "ml-100k", results_dir=tmp_path, measures=["P@5", "Judged@10"], **RUN)
    code, _, err = cli(capsys, "run", "-r", "pop", "-t", "ml-100k", "--max-queries", "30", "--measure", "P",
                       "--results-dir", str(tmp_path), "-q")
    assert code == 2 and one_line(err).startswith("error: measure 'P': P needs a cutoff (P@K); expected NAME")
    assert not (tmp_path / "large").exists()


def test_cli_measure_and_table_column(capsys, tmp_path):
    code, out, err = cli(capsys, "run", "-r", "pop", "-t", "ml-100k", "--max-queries", "30", "--topk", "0",
                         "--measure", "P@5", "-m", "AP@100", "--results-dir", str(tmp_path))
    assert code == 0, err
    assert "P@5" in out and "AP@100" in out
    assert _rerun_command(_record_file(tmp_path))[-9:-5] == ["--measure", "AP@100", "--measure", "P@5"]  # as stored
    assert rbench.evaluate("random", "ml-100k", results_dir=tmp_path, **RUN).metrics.keys() == set(DEFAULTS)
    pop = read_record(_record_file(tmp_path))
    md = tmp_path / "table.md"
    code, out, err = cli(capsys, "table", "-s", "large", "--results-dir", str(tmp_path), "--measure", "P@5",
                         "--measure", "R@10", "-o", str(md))
    assert code == 0, err
    text = md.read_text()
    header = next(line for line in text.splitlines() if line.startswith("| Ranker"))
    assert header.endswith("ml-100k (max_queries=30) MRR | ml-100k (max_queries=30) P@5 | ml-100k (max_queries=30) R@10 |")
    random_row = next(line for line in text.splitlines() if line.startswith("| random"))
    assert random_row.split("|")[4].strip() == "n/r"  # the random run was not asked for P@5
    assert "`n/r`: not recorded (P@5 in 1 of 2 runs)" in text and "`n/r`: not recorded" in out
    pop_row = next(line for line in text.splitlines() if line.startswith("| pop"))
    assert f"{100 * pop.metrics['P@5']:.2f}" in pop_row.split("|")[4]
    assert f"{100 * pop.metrics['R@10']:.2f}" in pop_row.split("|")[5]  # a default every record holds
    csv_file = tmp_path / "table.csv"
    code, _, err = cli(capsys, "table", "-s", "large", "--results-dir", str(tmp_path), "-m", "P@5", "-f", "csv",
                       "-o", str(csv_file))
    assert code == 0, err
    head, *rows = csv_file.read_text().splitlines()
    assert head.startswith("ranker,task,n_queries,nDCG@10,MRR,P@5,delta_MRR_percent")
    assert {r.split(",")[0]: r.split(",")[5] for r in rows} == {"pop": f"{100 * pop.metrics['P@5']:.2f}", "random": ""}
    lb = rbench.table("large", tmp_path, measures=["P@5"])
    assert ("ml-100k (max_queries=30)", "P@5") in lb.frame().columns
    from rbench.results.leaderboard import to_json

    rows = {r["ranker"]: r for r in json.loads(to_json(lb))["rows"]}
    assert rows["pop"]["P@5"] == round(100 * pop.metrics["P@5"], 4) and rows["random"]["P@5"] is None
    code, _, err = cli(capsys, "table", "-s", "large", "--results-dir", str(tmp_path), "-m", "Judged@5")
    assert code == 2 and "Judged counts the judged documents" in one_line(err)


def test_the_default_table_is_unchanged_by_the_feature(tmp_path):
    """No --measure: the columns are the paper's two, and no note."""
    from rbench.results.leaderboard import to_csv, to_markdown

    rbench.evaluate("pop", "ml-100k", results_dir=tmp_path, measures=["P@5"], **RUN)
    lb = rbench.table("large", tmp_path)
    assert [label for _, _, label in lb.columns()] == ["nDCG@10", "MRR"]
    assert "n/r" not in to_markdown(lb) and to_csv(lb).startswith("ranker,task,n_queries,nDCG@10,MRR,delta_MRR_percent")
