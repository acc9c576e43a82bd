"""Every paper task and every pool variant prepares and runs with BM25 (and the floors) through
the same path as `rbench run`, on small files written in the real formats."""

from __future__ import annotations

import numpy as np
import pytest

from rbench.core import paths
from rbench.run.runner import RunOptions, run
from tests.tasks.test_tasks_passages import qna_records, write_esci, write_qna_parquet
from tests.tasks.test_tasks_recsys import (
    distinct_movie_ratings,
    random_interactions,
    toy_reviews,
    write_atomic_music,
    write_gz,
    write_ml1m_dat,
    write_toy,
)
from tests.tasks.test_tasks_routing import make_rows, write_csv


def _raw(task):
    d = paths.raw_dir(task)
    d.mkdir(parents=True, exist_ok=True)
    return d


def _clothing(d):
    rows = random_interactions(40, 60, seed=5, lo=3, hi=12)
    write_gz(d / "Clothing_Shoes_and_Jewelry.jsonl.gz",
             [f'{{"user_id": "{u}", "parent_asin": "{i}", "rating": 4.0, "timestamp": {t * 1000}}}'
              for u, i, t in rows])
    write_gz(d / "meta_Clothing_Shoes_and_Jewelry.jsonl.gz",
             [f'{{"parent_asin": "i{k}", "title": "Dress {k}", "store": "S", "categories": []}}'
              for k in range(60)])


WRITERS = {
    "rec-movie": lambda d: write_ml1m_dat(d, distinct_movie_ratings()),
    "rec-toy": lambda d: write_toy(d, toy_reviews()),
    "rec-clothing": _clothing,
    "rec-music": lambda d: write_atomic_music(d, random_interactions(30, 60, seed=2, lo=3, hi=15), 60),
    "routing-balance": lambda d: write_csv(d / "router_data.csv", make_rows(n_tasks=2, per_task=10)),
    "msmarco": lambda d: write_qna_parquet(d / "train.parquet", qna_records(60)),
    "esci": lambda d: write_esci(d, n_queries=40),
}


@pytest.fixture
def all_tasks():
    for task, write in WRITERS.items():
        write(_raw(task))


@pytest.mark.parametrize("task", sorted(WRITERS))
def test_every_task_runs_with_bm25(all_tasks, task, tmp_path):
    out = run(RunOptions(ranker="bm25", task=task, results_dir=tmp_path))
    rec = out.record
    assert out.path.exists() and rec.n_queries > 0
    assert all(0.0 <= v <= 1.0 for v in rec.metrics.values())
    assert rec.task_fingerprint
    floor = run(RunOptions(ranker="random", task=task, results_dir=tmp_path))
    assert floor.record.task_fingerprint == rec.task_fingerprint  # same prepared data


@pytest.mark.parametrize("task,variant", [("rec-movie", "mixed"), ("esci", "mixed"), ("rec-toy", "shift"),
                                          ("msmarco", "shift"), ("rec-movie", "scaled:60")])
def test_variants_run_with_bm25(all_tasks, task, variant, tmp_path):
    base = run(RunOptions(ranker="bm25", task=task, results_dir=tmp_path)).record
    out = run(RunOptions(ranker="bm25", task=task, variant=variant, results_dir=tmp_path))
    rec = out.record
    assert rec.variant == variant and "~" in out.path.parent.name
    assert rec.task_info["pool_size"] > base.task_info["pool_size"] or variant.startswith("scaled")
    if variant.startswith("scaled"):
        assert rec.task_info["pool_size"] == int(variant.split(":")[1])
    assert rec.n_queries == base.n_queries  # only the pool changes, never the test queries
    assert rec.task_info["n_train"] == base.task_info["n_train"]
    assert np.isfinite(rec.metrics["RR"])
