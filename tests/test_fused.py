"""The fused scan (rbench.fused) against the engine's numpy passes, its slow reference: every
rank count, n_ranked and the top-k (ties to the lower pool index) identical, over several
chunks, with ties, exclusions, several graded positives, fp32 and fp64 scores."""

from __future__ import annotations

import numpy as np
import pytest

from rbench import fused
from rbench.engine import evaluate
from tests.helpers import TableRanker, make_pool, make_queries

pytestmark = pytest.mark.skipif(not fused.enabled(), reason="numba not installed")


def _both(monkeypatch, *args, **kw):
    monkeypatch.setenv("RBENCH_FUSED", "0")
    ref = evaluate(*args, **kw)
    monkeypatch.setenv("RBENCH_FUSED", "1")
    got = evaluate(*args, **kw)
    return ref, got


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("k", [0, 1, 7, 100])
def test_fused_equals_numpy_passes(monkeypatch, seed, k):
    rng = np.random.default_rng(seed)
    n_q, n_pool = 17, 900
    levels = (5, 300, 10**6)[seed % 3]  # heavy ties, some ties, nearly none
    table = rng.integers(0, levels, size=(n_q, n_pool)).astype(np.float32 if seed % 2 else np.float64)
    positives = [rng.choice(n_pool, int(rng.integers(1, 5)), replace=False).tolist() for _ in range(n_q)]
    grades = [rng.integers(1, 4, len(p)).astype(float).tolist() for p in positives]
    exclude = [np.setdiff1d(rng.choice(n_pool, 40, replace=False), p).tolist() for p in positives] \
        if seed >= 3 else None
    queries = make_queries(positives, grades, exclude)
    for chunk in (64, 250, 4096):
        ref, got = _both(monkeypatch, TableRanker(table), queries, make_pool(n_pool), batch_size=6,
                         chunk_size=chunk, topk=k)
        np.testing.assert_array_equal(got.ranks.values, ref.ranks.values)
        np.testing.assert_array_equal(got.higher, ref.higher)
        np.testing.assert_array_equal(got.equal, ref.equal)
        np.testing.assert_array_equal(got.n_ranked, ref.n_ranked)
        np.testing.assert_array_equal(got.topk_index, ref.topk_index)
        np.testing.assert_array_equal(got.topk_score, ref.topk_score)


def test_scores_rising_with_the_index(monkeypatch):
    """The worst case for a running top-k (every candidate enters): still exact."""
    table = np.tile(np.arange(5000, dtype=np.float64), (3, 1))
    queries = make_queries([[0], [4999], [2500]])
    ref, got = _both(monkeypatch, TableRanker(table), queries, make_pool(5000), chunk_size=1000, topk=50)
    np.testing.assert_array_equal(got.topk_index, ref.topk_index)
    np.testing.assert_array_equal(got.ranks.values, ref.ranks.values)
    assert got.topk_index[0, 0] == 4999


def test_fewer_finite_candidates_than_k(monkeypatch):
    """Rows left with fewer candidates than k after exclusions (the rest -inf): the top-k is
    padded with -1 / -inf, n_ranked counts only the finite ones, positives on chunk edges."""
    rng = np.random.default_rng(7)
    n_pool = 300
    table = rng.standard_normal((4, n_pool)).astype(np.float32)
    keep = [[0, 63, 64], [127, 128, 255], [5], list(range(0, 300, 2))]
    exclude = [sorted(set(range(n_pool)) - set(k)) for k in keep]
    queries = make_queries([[63], [128], [5], [298]], exclude=exclude)
    for chunk in (64, 1000):
        ref, got = _both(monkeypatch, TableRanker(table), queries, make_pool(n_pool), batch_size=3,
                         chunk_size=chunk, topk=20)
        np.testing.assert_array_equal(got.ranks.values, ref.ranks.values)
        np.testing.assert_array_equal(got.n_ranked, ref.n_ranked)
        np.testing.assert_array_equal(got.topk_index, ref.topk_index)
        np.testing.assert_array_equal(got.topk_score, ref.topk_score)
        assert (got.topk_index[2, 1:] == -1).all() and np.isneginf(got.topk_score[2, 1:]).all()


def test_dense_scorer_fp32(monkeypatch):
    """The engine's own GEMM path (fp32 scores, scratch buffer reused between chunks)."""
    from rbench.engine import vector_scorer

    rng = np.random.default_rng(3)
    emb = np.round(rng.standard_normal((2000, 16)), 1).astype(np.float32)  # coarse values: ties
    q = np.round(rng.standard_normal((9, 16)), 1).astype(np.float32)
    queries = make_queries([rng.choice(2000, 3, replace=False).tolist() for _ in range(9)])
    scorer = vector_scorer(emb, q, queries, pool_checked=True)
    for chunk in (300, 4096):
        ref, got = _both(monkeypatch, None, queries, make_pool(2000), scorer=scorer, batch_size=4,
                         chunk_size=chunk, topk=50)
        np.testing.assert_array_equal(got.ranks.values, ref.ranks.values)
        np.testing.assert_array_equal(got.topk_index, ref.topk_index)
        np.testing.assert_array_equal(got.topk_score, ref.topk_score)
