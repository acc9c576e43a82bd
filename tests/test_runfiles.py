"""Run files: every run writes its top-k as a gzipped TREC run beside the RunRecord (named by its
sha256, which the record holds), and ``rbench data qrels`` writes the task's qrels, so that
ir_measures (and ranx, where installed) reproduce the record's nDCG@10 and RR from the two files."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from rbench import plugins
from rbench.results import RUN_SUFFIX, read_record
from rbench.runner import RunOptions, run
from tests.helpers import cli
from tests.test_end_to_end import all_tasks  # noqa: F401  (fixture: every task's raw files)

ir_measures = pytest.importorskip("ir_measures")


class _EP:
    def __init__(self, obj):
        self.obj = obj

    def load(self):
        return self.obj


class TieFree:
    """Scores from a 64-bit mix of (query id, pool index): no two candidates of a query tie."""

    name, version, config = "tie-free", "1", {}

    def __init__(self, config=None, context=None):
        pass

    def fit(self, task):
        return None

    def index(self, pool):
        return None

    def score(self, queries, candidates):
        q = np.array([int(hashlib.sha256(str(i).encode()).hexdigest()[:12], 16) for i in queries.ids], np.uint64)
        cand = candidates if candidates.ndim == 2 else np.broadcast_to(candidates, (len(queries), len(candidates)))
        with np.errstate(over="ignore"):
            z = cand.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + q[:, None]
            z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            z = z ^ (z >> np.uint64(31))
        return (z >> np.uint64(11)).astype(np.float64) / float(1 << 53)


@pytest.fixture
def tie_free(monkeypatch):
    real = plugins._entry_points
    monkeypatch.setattr(plugins, "_entry_points", lambda: {**real(), "tie-free": _EP(TieFree)})


def _read_run(path: Path) -> list[list[str]]:
    return [line.split() for line in gzip.decompress(path.read_bytes()).decode().splitlines()]


def _check_with_ir_measures(capsys, tmp_path: Path, rec_path: Path, task: str, variant: str = "original",
                            max_queries: int | None = None) -> None:
    rec = read_record(rec_path)
    assert rec.run_file.endswith(RUN_SUFFIX) and rec.run_file.startswith(rec_path.stem + ".")
    run_path = rec_path.with_name(rec.run_file)
    assert hashlib.sha256(run_path.read_bytes()).hexdigest() == rec.run_sha256
    qrels = tmp_path / "qrels.txt"
    code, _, err = cli(capsys, "data", "qrels", task, "--variant", variant, "--output", str(qrels))
    assert code == 0, err
    run_rows = _read_run(run_path)
    assert all(len(r) == 6 and r[1] == "Q0" for r in run_rows)
    run_qids = {r[0] for r in run_rows}
    judged = [line for line in qrels.read_text().splitlines() if line.split()[0] in run_qids]
    assert len(run_qids) == rec.n_queries
    if max_queries:  # a sample: judge only the sampled queries
        qrels.write_text("\n".join(judged) + "\n")
    measures = [ir_measures.parse_measure("nDCG@10"), ir_measures.parse_measure("RR")]
    got = ir_measures.calc_aggregate(measures, ir_measures.read_trec_qrels(str(qrels)),
                                     ir_measures.read_trec_run(str(run_path)))
    assert got[measures[0]] == pytest.approx(rec.metrics["nDCG@10"], abs=1e-9)
    assert got[measures[1]] == pytest.approx(rec.metrics["RR"], abs=1e-9)
    try:  # ranx too, where installed (it is optional)
        import ranx
    except ImportError:
        return
    r = ranx.evaluate(ranx.Qrels.from_file(str(qrels), kind="trec"), ranx.Run.from_file(str(run_path), kind="trec"),
                      ["ndcg@10", "mrr"])
    assert r["ndcg@10"] == pytest.approx(rec.metrics["nDCG@10"], abs=1e-6)


def test_large_task_with_exclusions_round_trips_through_ir_measures(tie_free, capsys, tmp_path):
    # ml-100k: a shared pool with each user's seen items excluded; top-k >= the pool: every positive is inside
    res = tmp_path / "res"
    code, out, err = cli(capsys, "run", "-r", "tie-free", "-t", "ml-100k", "--max-queries", "40", "--topk", "5000",
                         "--results-dir", str(res), "--json", "--quiet")
    assert code == 0, err
    rec_path = next(res.rglob("tie-free*.json"))
    rec = read_record(rec_path)
    run_rows = _read_run(rec_path.with_name(rec.run_file))
    # excluded candidates never appear: each query lists exactly its ranked candidates
    per_q: dict[str, int] = {}
    for r in run_rows:
        per_q[r[0]] = per_q.get(r[0], 0) + 1
    assert rec.task_info["mean_ranked"] == pytest.approx(np.mean(list(per_q.values())))
    assert rec.task_info["mean_ranked"] < rec.task_info["pool_size"]  # something was excluded
    scores = [float(r[4]) for r in run_rows if r[0] == run_rows[0][0]]
    assert scores == sorted(scores, reverse=True) and [int(r[3]) for r in run_rows[: len(scores)]] == \
        list(range(1, len(scores) + 1))
    _check_with_ir_measures(capsys, tmp_path, rec_path, "ml-100k", max_queries=40)


def test_small_scenario_lists_each_querys_own_candidates(all_tasks, tie_free, capsys, tmp_path):  # noqa: F811
    out = run(RunOptions(ranker="tie-free", task="routing-balance", results_dir=tmp_path / "res", topk=1000))
    rows = _read_run(out.path.with_name(out.record.run_file))
    from rbench.tasks.registry import load, resolve

    task = resolve("routing-balance")
    data = load(task, task.options({}), seed=0)
    ids = np.asarray(data.pool.ids).astype(str)
    for i in (0, len(data.test) // 2):
        qid = str(data.test.ids[i])
        listed = [r[2] for r in rows if r[0] == qid]
        assert sorted(listed) == sorted(ids[data.test.candidates[i]].tolist())
    _check_with_ir_measures(capsys, tmp_path, out.path, "routing-balance")


def test_variant_uses_the_variant_pool_ids(all_tasks, tie_free, capsys, tmp_path):  # noqa: F811
    out = run(RunOptions(ranker="tie-free", task="rec-movie", variant="scaled:60", results_dir=tmp_path / "res",
                         topk=100_000))
    assert out.record.task_info["pool_size"] <= 100_000
    _check_with_ir_measures(capsys, tmp_path, out.path, "rec-movie", variant="scaled:60")


def test_default_top100_topk0_and_replacement(tie_free, tmp_path):
    opts = dict(ranker="tie-free", task="ml-100k", max_queries=20, results_dir=tmp_path, overwrite="always")
    first = run(RunOptions(**opts))
    rows = _read_run(first.path.with_name(first.record.run_file))
    assert len(rows) == 20 * 100 and {r[5] for r in rows} == {"tie-free"}
    again = run(RunOptions(**opts))  # deterministic bytes: the same file, nothing left over
    assert again.record.run_file == first.record.run_file
    assert sorted(p.name for p in first.path.parent.glob(f"*{RUN_SUFFIX}")) == [first.record.run_file]
    ten = run(RunOptions(**opts, topk=10))
    assert [p.name for p in ten.path.parent.glob(f"*{RUN_SUFFIX}")] == [ten.record.run_file]
    assert len(_read_run(ten.path.with_name(ten.record.run_file))) == 200
    none = run(RunOptions(**opts, topk=0))
    assert none.record.run_file == "" and not list(none.path.parent.glob(f"*{RUN_SUFFIX}"))
    assert json.loads(none.path.read_text())["run_file"] == ""
    assert none.record.metrics == first.record.metrics


def test_qrels_command(capsys, tmp_path):
    code, out, err = cli(capsys, "data", "qrels", "ml-100k")
    assert code == 0, err
    lines = out.splitlines()
    assert lines and all(len(line.split()) == 4 and line.split()[1] == "0" for line in lines)
    code, _, err = cli(capsys, "data", "qrels", "ml-100k", "--split", "bogus")
    assert code == 2 and "--split" in err
    gz = tmp_path / "q.txt.gz"
    assert cli(capsys, "data", "qrels", "ml-100k", "--split", "valid", "-o", str(gz))[0] == 0
    assert gzip.decompress(gz.read_bytes()).decode().count("\n") > 0
