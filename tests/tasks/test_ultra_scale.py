"""RBench-Ultra on one box: rec-clothing prepares from Amazon-2023-format files with ~10^6
items (streamed, bounded memory) and a run evaluates against the million-item pool."""

from __future__ import annotations

import gzip
import json
import resource

import numpy as np

from rbench.core import paths
from rbench.run.runner import RunOptions, run

N_ITEMS = 1_000_000
N_USERS = 250_000


def _write_reviews(path, rng):
    # every item appears at least once; users get 4-6 interactions each
    per_user = rng.integers(4, 7, size=N_USERS)
    total = int(per_user.sum())
    items = np.concatenate([rng.permutation(N_ITEMS), rng.integers(0, N_ITEMS, total - N_ITEMS)])
    users = np.repeat(np.arange(N_USERS), per_user)
    ts = 1_600_000_000_000 + rng.integers(0, 10**9, total)
    with gzip.open(path, "wt", compresslevel=1) as fh:
        for start in range(0, total, 200_000):
            end = min(total, start + 200_000)
            fh.write("".join(
                f'{{"rating": 5.0, "title": "ok", "text": "fine", "images": [], "asin": "A{i}", '
                f'"parent_asin": "P{i}", "user_id": "U{u}", "timestamp": {t}, "helpful_vote": 0, '
                f'"verified_purchase": true}}\n'
                for i, u, t in zip(items[start:end].tolist(), users[start:end].tolist(), ts[start:end].tolist())))
    return total


def _write_meta(path):
    with gzip.open(path, "wt", compresslevel=1) as fh:
        for start in range(0, N_ITEMS, 200_000):
            fh.write("".join(
                json.dumps({"main_category": "AMAZON FASHION", "title": f"Shirt model {i}", "store": f"Brand{i % 997}",
                            "categories": [], "parent_asin": f"P{i}"}) + "\n"
                for i in range(start, min(N_ITEMS, start + 200_000))))


def test_rec_clothing_million_item_pool_prepares_and_runs(tmp_path):
    rng = np.random.default_rng(0)
    raw = paths.raw_dir("rec-clothing")
    raw.mkdir(parents=True)
    n_reviews = _write_reviews(raw / "Clothing_Shoes_and_Jewelry.jsonl.gz", rng)
    _write_meta(raw / "meta_Clothing_Shoes_and_Jewelry.jsonl.gz")
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out = run(RunOptions(ranker="pop", task="rec-clothing", max_queries=300, results_dir=tmp_path / "res",
                         ))
    rec = out.record
    assert rec.scenario == "ultra" and rec.task_info["pool_size"] == N_ITEMS
    assert rec.n_queries == 300 and out.path.exists()
    assert 0.0 <= rec.metrics["RR"] <= 1.0
    # bounded memory: far below one Python object per review (~1 KB each would be > 1.2 GB here)
    grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss_before
    assert grew < 3 * 2**30, f"peak RSS grew by {grew / 2**30:.2f} GiB for {n_reviews:,} reviews"
