"""CLI behaviour: exit codes, one-line errors for bad input, RunRecords and tables."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pytest

from rbench import rankers as plugins
from rbench.api import BaseRanker
from rbench.cli.app import main


@dataclass
class FakeOptions:
    mode: str = "random"
    scale: float = 1.0
    flag: bool = False


class FakeRanker(BaseRanker):
    """A configurable misbehaving ranker for error-path tests."""

    name = "fake"
    version = "1"
    Config = FakeOptions

    def score(self, queries, candidates):
        shape = candidates.shape if candidates.ndim == 2 else (len(queries), len(candidates))
        mode = self.cfg.mode
        if mode == "nan":
            out = np.zeros(shape)
            out[0, 0] = np.nan
            return out
        if mode == "shape":
            return np.zeros((shape[0], shape[1] + 1))
        if mode == "interrupt":
            raise KeyboardInterrupt
        if mode == "crash":
            raise ZeroDivisionError("boom")
        # deterministic pseudo-random scores keyed by (query id, candidate index)
        qh = np.array([hash(q) % 1000 for q in queries.ids], dtype=np.float64)[:, None]
        cand = candidates if candidates.ndim == 2 else candidates[None, :]
        return np.sin(qh * 12.9898 + cand * 78.233) * self.cfg.scale


class _EP:
    def __init__(self, obj):
        self.obj = obj

    def load(self):
        return self.obj


@pytest.fixture
def fake_ranker(monkeypatch):
    real = plugins._entry_points

    def eps():
        out = dict(real())
        out["fake"] = _EP(FakeRanker)
        return out

    monkeypatch.setattr(plugins, "_entry_points", eps)


def run(capsys, *args):
    code = main(list(args))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_unknown_task_and_ranker_suggest(capsys, fake_ranker):
    code, _, err = run(capsys, "run", "--ranker", "fake", "--task", "ml-10k")
    assert code == 2 and "did you mean 'ml-100k'" in err
    code, _, err = run(capsys, "run", "--ranker", "fak", "--task", "ml-100k")
    assert code == 2 and "did you mean 'fake'" in err
    assert len(err.strip().splitlines()) == 1


def test_bad_set_key_and_type(capsys, fake_ranker, tmp_path):
    code, _, err = run(capsys, "run", "-r", "fake", "-t", "ml-100k", "--set", "scael=2", "--results-dir", str(tmp_path))
    assert code == 2 and "unknown option 'scael'" in err and "did you mean 'scale'" in err
    code, _, err = run(capsys, "run", "-r", "fake", "-t", "ml-100k", "--set", "scale=big", "--results-dir", str(tmp_path))
    assert code == 2 and "expected a number" in err
    code, _, err = run(capsys, "run", "-r", "fake", "-t", "ml-100k", "--set", "flag=maybe", "--results-dir", str(tmp_path))
    assert code == 2 and "boolean" in err
    code, _, err = run(capsys, "run", "-r", "fake", "-t", "ml-100k", "--set", "task.history_lenn=5", "--results-dir", str(tmp_path))
    assert code == 2 and "did you mean 'history_len'" in err
    code, _, err = run(capsys, "run", "-r", "fake", "-t", "ml-100k", "--set", "novalue", "--results-dir", str(tmp_path))
    assert code == 2 and "key=value" in err
    assert not list(tmp_path.rglob("*.json"))


def test_missing_data_says_how_to_get_it(capsys, fake_ranker, tmp_path):
    code, _, err = run(capsys, "run", "-r", "fake", "-t", "rec-movie", "--results-dir", str(tmp_path))
    assert code == 2 and "not present" in err and "--from" in err


@pytest.mark.parametrize("mode,needle", [("nan", "non-finite"), ("shape", "shape")])
def test_bad_ranker_output_names_the_ranker(capsys, fake_ranker, tmp_path, mode, needle):
    code, _, err = run(capsys, "run", "-r", "fake", "-t", "ml-100k", "--set", f"mode={mode}", "-q",
                       "--results-dir", str(tmp_path))
    assert code == 2 and "'fake'" in err and needle in err
    assert not list(tmp_path.rglob("*.json"))


def test_a_ranker_crash_is_the_rankers_exit_2(capsys, fake_ranker, tmp_path):
    """An exception inside ranker code names the ranker (issue 42; rbench's own bugs stay exit 1:
    tests/reliability/test_ranker_faults.py)."""
    code, _, err = run(capsys, "run", "-r", "fake", "-t", "ml-100k", "--set", "mode=crash", "-q",
                       "--results-dir", str(tmp_path))
    assert code == 2 and "ranker 'fake' failed in" in err and "ZeroDivisionError" in err


def test_interrupted_run_leaves_nothing(capsys, fake_ranker, tmp_path):
    code, _, _ = run(capsys, "run", "-r", "fake", "-t", "ml-100k", "--set", "mode=interrupt", "-q",
                     "--results-dir", str(tmp_path))
    assert code == 130
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_unwritable_results_dir(capsys, fake_ranker, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, _, err = run(capsys, "run", "-r", "fake", "-t", "ml-100k", "--results-dir", str(blocker / "sub"))
    assert code == 2 and "not writable" in err


def test_run_writes_record_and_table(capsys, fake_ranker, tmp_path):
    res = tmp_path / "results"
    code, out, _ = run(capsys, "run", "-r", "fake", "-t", "ml-100k", "--json", "--results-dir", str(res))
    assert code == 0
    rec = json.loads(out)
    for key in ("rbench_version", "git_commit", "task", "variant", "scenario", "task_fingerprint", "ranker",
                "seed", "n_queries", "metrics", "timings", "peak_rss_bytes", "tie_rule", "created"):
        assert key in rec, key
    assert set(rec["metrics"]) == {"nDCG@10", "RR", "R@10", "R@100", "RR@100"}
    assert set(rec["timings"]) >= {"fit_s", "index_s", "score_s", "per_query_ms", "compile_s"}
    assert rec["n_queries"] == 943 and rec["scenario"] == "large"
    assert rec["ranker"]["config"] == {"mode": "random", "scale": 1.0, "flag": False}
    path = res / "large" / "ml-100k" / "fake.json"
    assert path.exists() and rec["per_query_file"] == f"fake.{rec['per_query_sha256'][:12]}.perquery.csv.gz"
    assert (res / "large" / "ml-100k" / rec["per_query_file"]).exists()
    # a non-default config gets its own file
    code, _, _ = run(capsys, "run", "-r", "fake", "-t", "ml-100k", "--set", "scale=2", "--max-queries", "50",
                     "-q", "--results-dir", str(res))
    assert code == 0
    other = [p for p in (res / "large" / "ml-100k").glob("fake-*.json")]
    assert len(other) == 1 and json.loads(other[0].read_text())["n_queries"] == 50
    md = tmp_path / "large.md"
    code, out, _ = run(capsys, "table", "--scenario", "large", "--results-dir", str(res), "-o", str(md))
    assert code == 0
    text = md.read_text()
    assert "| fake |" in text and "ml-100k nDCG@10" in text
    code, _, err = run(capsys, "table", "--scenario", "larg", "--results-dir", str(res))
    assert code == 2 and "did you mean" in err


def test_help_and_listing(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "run" in out
    code, out, _ = run(capsys, "tasks", "--json")
    names = {t["name"] for t in json.loads(out)}
    assert {"rec-music", "routing-balance", "rec-movie", "rec-toy", "msmarco", "esci", "rec-clothing",
            "ml-100k"} <= names
    code, out, _ = run(capsys, "rankers", "--json")
    assert code == 0 and any(r["name"] == "bm25" for r in json.loads(out))


def test_malformed_data_file_names_file_and_line(capsys, tmp_path, monkeypatch):
    from rbench.core import paths

    raw = paths.raw_dir("msmarco")
    raw.mkdir(parents=True)
    (raw / "collection.tsv").write_text("0\tfirst passage\n1\tsecond passage\n")
    (raw / "queries.tsv").write_text("10\twhat is first\n")
    (raw / "qrels.txt").write_text("10 0 0 1\n10 0 1 notanumber\n")
    code, _, err = run(capsys, "run", "-r", "bm25", "-t", "msmarco", "--results-dir", str(tmp_path / "res"))
    assert code == 2
    assert "qrels.txt" in err and "line 2" in err
    assert not (tmp_path / "res").exists() or not list((tmp_path / "res").rglob("*.json"))


def test_table_shows_training_budgets_in_every_format(capsys, tmp_path):
    from rbench.results.record import RunRecord, record_path, write_run

    res = tmp_path / "results"
    budget = {"examples_seen": 30000, "epochs": 1.0, "optimizer_steps": 3750, "train_wall_s": 61.0,
              "negatives_per_example": "all 1682 items (full softmax)", "trainable_params": 1200,
              "selection": "best valid MRR of 6 evaluations"}
    for name, info in (("pop", {}), ("sasrec", {"training_budget": budget})):
        rec = RunRecord(task="ml-100k", variant="original", scenario="large", task_fingerprint="f",
                        ranker={"name": name, "version": "1", "config": {}}, seed=0, n_queries=10,
                        metrics={"nDCG@10": 0.1, "RR": 0.1, "R@10": 0.0, "R@100": 0.0}, timings={},
                        peak_rss_bytes=0, created="2026-01-01T00:00:00+00:00", ranker_info=info)
        write_run(rec, record_path(res, "large", "ml-100k", name, ""), None)
    md = tmp_path / "large.md"
    code, out, _ = run(capsys, "table", "--scenario", "large", "--results-dir", str(res), "-o", str(md))
    assert code == 0 and "Training budgets" in out and "1m 01s" in out and "3,750" in out
    assert "| sasrec | ml-100k | 30,000 | 1 | 3,750 | 1m 01s | all 1682 items (full softmax) | 1,200 |" in md.read_text()
    csv_file = tmp_path / "large.csv"
    code, _, _ = run(capsys, "table", "--scenario", "large", "--results-dir", str(res), "-f", "csv", "-o", str(csv_file))
    lines = csv_file.read_text().splitlines()
    assert code == 0 and lines[0].endswith("examples_seen,epochs,optimizer_steps,train_wall_s,negatives_per_example,"
                                           "trainable_params,selection,protocol")
    assert any(line.startswith("sasrec,ml-100k,10,") and ",30000,1.0,3750,61.0," in line for line in lines)
