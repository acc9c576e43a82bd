"""The engine's running top-k: exact (ties to the lower pool index) when asked for, absent and
free when not (``topk=0``, what ``rbench run`` asks for)."""

from __future__ import annotations

import numpy as np
import pytest

from rbench.engine.scan import _RunningTopK, _sparse_nonzero, merge, scan
from tests.helpers import TableRanker, make_pool, make_queries, table_scorer


def _reference(table: np.ndarray, k: int, exclude=None, candidates=None) -> np.ndarray:
    """Top-k by (score desc, pool index asc); -1 where fewer candidates are ranked."""
    out = np.full((len(table), k), -1, dtype=np.int64)
    for i, row in enumerate(table):
        cand = np.arange(len(row)) if candidates is None else np.asarray(candidates[i])
        if exclude is not None:
            cand = np.setdiff1d(cand, exclude[i])
        best = cand[np.lexsort((cand, -row[cand]))][:k]
        out[i, : len(best)] = best
    return out


@pytest.mark.parametrize("seed", range(4))
def test_top_k_is_exact_over_many_chunks_with_ties(seed):
    rng = np.random.default_rng(seed)
    n_q, n_pool = 23, 700
    table = rng.integers(0, 40 if seed % 2 else 4000, size=(n_q, n_pool)).astype(np.float64)  # many ties
    positives = [[int(p)] for p in rng.integers(0, n_pool, n_q)]
    exclude = [np.setdiff1d(rng.choice(n_pool, 30, replace=False), p).tolist() for p in positives]
    queries = make_queries(positives, exclude=exclude if seed >= 2 else None)
    for k in (1, 10, 60):
        res = scan(TableRanker(table), queries, make_pool(n_pool), batch_size=5, chunk_size=64, topk=k)
        np.testing.assert_array_equal(res.topk_index, _reference(table, k, exclude if seed >= 2 else None))
        expect = np.take_along_axis(table, np.maximum(res.topk_index, 0), axis=1)
        np.testing.assert_array_equal(res.topk_score, np.where(res.topk_index < 0, -np.inf, expect))


@pytest.mark.parametrize("k", [3, 20])
def test_per_query_lists_over_several_chunks(k):
    """Per-query lists come in no index order: a later candidate tied with the k-th best may
    still win on its lower pool index."""
    rng = np.random.default_rng(5)
    n_q, n_pool, m = 9, 3000, 1500
    table = rng.integers(0, 80, size=(n_q, n_pool)).astype(np.float64)
    cand = np.stack([rng.permutation(n_pool)[:m] for _ in range(n_q)])
    queries = make_queries([[int(c[0])] for c in cand], candidates=cand)
    res = scan(TableRanker(table), queries, make_pool(n_pool), chunk_size=64, topk=k)
    np.testing.assert_array_equal(res.topk_index, _reference(table, k, candidates=cand))


def test_top_k_zero_keeps_nothing_and_changes_no_rank():
    rng = np.random.default_rng(1)
    table = rng.standard_normal((30, 500))
    queries = make_queries([[int(p)] for p in rng.integers(0, 500, 30)])
    pool = make_pool(500)
    with_k = scan(TableRanker(table), queries, pool, chunk_size=64, topk=100)
    without = scan(TableRanker(table), queries, pool, chunk_size=64, topk=0)
    assert without.topk_index.shape == (30, 0) and without.topk_score.shape == (30, 0)
    np.testing.assert_array_equal(without.ranks.values, with_k.ranks.values)
    parts = [scan(None, queries, pool, chunk_size=64, topk=0, pool_range=r, scorer=table_scorer(table))
             for r in ((0, 128), (128, 500))]
    merged = merge(parts)
    assert merged.topk_index.shape == (30, 0)
    np.testing.assert_array_equal(merged.ranks.values, with_k.ranks.values)
    top = _RunningTopK(0)
    top.add(table, np.arange(500))
    assert top.idx is None


def test_sparse_nonzero_matches_numpy():
    rng = np.random.default_rng(2)
    for shape in ((7, 64), (3, 61), (1, 8), (5, 800)):
        mask = rng.random(shape) < 0.03
        for got, want in zip(_sparse_nonzero(mask), np.nonzero(mask)):
            np.testing.assert_array_equal(got, want)
    empty = np.zeros((4, 16), dtype=bool)
    assert all(len(a) == 0 for a in _sparse_nonzero(empty))
