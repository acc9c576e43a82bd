"""faiss indexes are measured against the exact scan and never change the headline metrics."""

from __future__ import annotations

import numpy as np
import pytest

from rbench.core.errors import RBenchError
from rbench.engine.ann import exact_topk, measure

pytest.importorskip("faiss")


def _data(n=2000, d=32, nq=100):
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((40, d)).astype(np.float32)
    emb = centers[rng.integers(0, 40, n)] + 0.3 * rng.standard_normal((n, d)).astype(np.float32)
    q = centers[rng.integers(0, 40, nq)] + 0.3 * rng.standard_normal((nq, d)).astype(np.float32)
    return emb, q, [np.array([i]) for i in rng.integers(0, n, nq)]


def test_exact_topk_matches_argsort():
    emb, q, _ = _data(n=500)
    ref = np.argsort(-(q @ emb.T), axis=1, kind="stable")[:, :10]
    np.testing.assert_array_equal(exact_topk(emb, q, 10, chunk=77), ref)


def test_flat_is_exact_and_approximate_ones_are_measured():
    emb, q, pos = _data()
    flat = measure(emb, q, pos, "flat", k=50)
    assert flat["recall@50_vs_exact"] == pytest.approx(1.0)
    assert flat["positives_in_top50_ann"] == flat["positives_in_top50_exact"]
    for backend in ("hnsw", "ivf", "pq"):
        m = measure(emb, q, pos, backend, k=50)
        assert 0.0 < m["recall@50_vs_exact"] <= 1.0
        assert m["build_s"] >= 0 and "exact" in m["note"]
    assert measure(emb, q, pos, "hnsw", k=50)["recall@50_vs_exact"] > 0.8


def test_unknown_backend():
    emb, q, pos = _data(n=100)
    with pytest.raises(RBenchError, match="unknown --ann backend"):
        measure(emb, q, pos, "annoy")


class _HashEmbed:
    """A deterministic toy embedding ranker over ml-100k."""

    name, version = "hashemb", "1"
    config: dict = {}
    cfg = None
    info: dict = {}
    domains = ("recommendation",)

    def __init__(self, config=None, context=None):
        pass

    def fit(self, task):
        return None

    def _vec(self, texts):
        out = np.zeros((len(texts), 16), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().split():
                out[i, hash(w) % 16] += 1.0
        return out

    def encode_pool(self, pool):
        return self._vec(pool.text_batch(np.arange(len(pool))))

    def encode_queries(self, queries):
        return self._vec(list(queries.texts[: len(queries)]) if isinstance(queries.texts, list)
                         else [queries.texts[i] for i in range(len(queries))])


def test_run_with_ann_keeps_exact_metrics(monkeypatch, tmp_path):
    from rbench import rankers as plugins
    from rbench.run.runner import RunOptions, run

    class EP:
        def load(self):
            return _HashEmbed

    real = plugins._entry_points
    monkeypatch.setattr(plugins, "_entry_points", lambda: {**real(), "hashemb": EP()})
    base = run(RunOptions(ranker="hashemb", task="ml-100k", results_dir=tmp_path, max_queries=200))
    with_ann = run(RunOptions(ranker="hashemb", task="ml-100k", results_dir=tmp_path, max_queries=200, ann="hnsw"))
    assert with_ann.record.metrics == base.record.metrics
    info = with_ann.record.ranker_info["ann"]
    assert info["backend"] == "hnsw" and 0 < info["recall@100_vs_exact"] <= 1
    with pytest.raises(RBenchError, match="did you mean 'hnsw'"):
        run(RunOptions(ranker="hashemb", task="ml-100k", results_dir=tmp_path, ann="hnws"))
