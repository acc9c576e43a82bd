"""Ray path: sharded scoring and Ray Data embedding give exactly the single-process results
(a local 2-CPU cluster started by the test)."""

from __future__ import annotations

import numpy as np
import pytest

from rbench.distributed import _FixedEmbeddings, embed_pool_ray, evaluate_sharded, score_shard, shard_bounds
from rbench.engine import evaluate, merge
from rbench.metrics import aggregate, per_query
from tests.helpers import make_pool, make_queries

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    yield
    ray.shutdown()


def _data(tmp_path, n_pool=3000, n_q=60, d=16):
    rng = np.random.default_rng(0)
    emb = np.round(rng.standard_normal((n_pool, d)), 1).astype(np.float32)  # coarse values: real ties
    qv = rng.standard_normal((n_q, d)).astype(np.float32)
    path = tmp_path / "emb.npy"
    np.save(path, emb)
    positives = [rng.choice(n_pool, size=int(rng.integers(1, 3)), replace=False).tolist() for _ in range(n_q)]
    return emb, qv, path, make_queries(positives)


def test_shard_function_matches_single_process(tmp_path):
    emb, qv, path, q = _data(tmp_path)
    ranker = _FixedEmbeddings(emb, qv, {str(i): k for k, i in enumerate(q.ids)})
    whole = evaluate(ranker, q, make_pool(len(emb)))
    parts = [score_shard(str(path), qv, q, b) for b in shard_bounds(len(emb), 3)]
    np.testing.assert_array_equal(merge(parts).ranks.values, whole.ranks.values)


def test_ray_sharded_metrics_identical(tmp_path, cluster):
    emb, qv, path, q = _data(tmp_path)
    ranker = _FixedEmbeddings(emb, qv, {str(i): k for k, i in enumerate(q.ids)})
    whole = evaluate(ranker, q, make_pool(len(emb)))
    sharded = evaluate_sharded(path, qv, q, n_shards=4)
    np.testing.assert_array_equal(sharded.ranks.values, whole.ranks.values)
    assert aggregate(per_query(sharded.ranks, q.grades)) == aggregate(per_query(whole.ranks, q.grades))
    np.testing.assert_array_equal(sharded.topk_score, whole.topk_score)


def test_ray_data_embedding_in_order(tmp_path, cluster):
    texts = [f"candidate number {i} " + "x" * (i % 7) for i in range(500)]

    def make_encoder():
        def encode(batch):
            return np.array([[len(t), sum(map(ord, t)) % 101, 1.0] for t in batch], dtype=np.float32)
        return encode

    out = embed_pool_ray(texts, make_encoder, tmp_path / "pool.npy", workers=2, batch_size=64)
    np.testing.assert_array_equal(out, make_encoder()(texts))
