"""rbench's own GEMM (rbench/engine/kernels/gemm.py) and the engine's fused GEMM + scan over it.

The GEMM is checked against an fp64 product (within the fp32 dot-product error bound, as
OpenBLAS is), for the same bits whatever the row blocking, batch or thread count, and for its
packing layout; the fused GEMM + scan against the engine's numpy passes over the scores the GEMM
writes (``RBENCH_FUSED=0``): every rank count and the top-k identical, ties and exclusions
included."""

from __future__ import annotations

import numpy as np
import pytest

from rbench.engine import fused
from rbench.engine.scorers import vector_scorer
from tests.helpers import assert_same_eval as _check_same
from tests.helpers import assert_shards_merge, make_pool, make_queries
from tests.helpers import fused_and_reference as _both

pytestmark = pytest.mark.skipif(not fused.own_gemm(128), reason="numba not installed")


def _gemm(q, e):
    out = np.full((len(q), len(e)), np.nan, dtype=np.float32)
    return fused.gemm(q, fused.pack(e), out)


@pytest.mark.parametrize("shape", [(1, 1, 1), (5, 17, 3), (6, 16, 8), (13, 33, 128), (49, 161, 64),
                                   (40, 1000, 512), (7, 5, 300)])
def test_gemm_within_the_fp32_error_bound(shape):
    """Every score within K * eps * sum(|q_k e_k|) of the exact product (the bound a sequential fp32
    dot product meets), and as close as numpy's: edges of MR-row and NR-column tiles included."""
    B, C, K = shape
    rng = np.random.default_rng(K)
    q = rng.standard_normal((B, K)).astype(np.float32)
    e = rng.standard_normal((C, K)).astype(np.float32)
    got = _gemm(q, e)
    exact = q.astype(np.float64) @ e.T.astype(np.float64)
    bound = K * np.finfo(np.float32).eps * (np.abs(q).astype(np.float64) @ np.abs(e).T.astype(np.float64))
    assert np.isfinite(got).all()
    assert (np.abs(got - exact) <= bound + 1e-30).all()
    np.testing.assert_allclose(got, q @ e.T, rtol=1e-4, atol=1e-4 * np.sqrt(K))


def test_gemm_same_bits_whatever_the_blocking():
    """A score is one fma chain over k in order: the same bits for any subset of rows (other row
    blocks and tiles), any thread count, and in the fused scan's blocks."""
    import numba

    rng = np.random.default_rng(2)
    q = rng.standard_normal((130, 96)).astype(np.float32)
    e = rng.standard_normal((1001, 96)).astype(np.float32)
    whole = _gemm(q, e)
    for rows in (slice(0, 1), slice(7, 60), slice(53, 130)):
        np.testing.assert_array_equal(_gemm(q[rows], e), whole[rows])
    np.testing.assert_array_equal(_gemm(q, e[300:700]), whole[:, 300:700])
    threads = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        np.testing.assert_array_equal(_gemm(q, e), whole)
    finally:
        numba.set_num_threads(threads)


def test_pack_layout():
    """Panels of 16 candidates: packed[p, k, j] = e[16 p + j, k], zeros past the last candidate."""
    e = np.arange(37 * 5, dtype=np.float32).reshape(37, 5)
    p = fused.pack(e)
    assert p.shape == (3, 5, 16)
    for c in range(48):
        want = e[c] if c < 37 else np.zeros(5, dtype=np.float32)
        np.testing.assert_array_equal(p[c // 16, :, c % 16], want)


def test_own_gemm_choice(monkeypatch):
    """rbench's GEMM at every dimension unless ``RBENCH_GEMM=blas``; numpy's (OpenBLAS) then, and
    the engine has no fused GEMM + scan to use."""
    assert fused.own_gemm(1) and fused.own_gemm(4096) and not fused.own_gemm(0)
    emb = np.ones((10, 8), dtype=np.float32)
    queries = make_queries([[0]])
    assert vector_scorer(emb, np.ones((1, 8), np.float32), queries).gemm_operands is not None
    monkeypatch.setenv("RBENCH_GEMM", "blas")
    assert not fused.own_gemm(8)
    assert vector_scorer(emb, np.ones((1, 8), np.float32), queries).gemm_operands is None


@pytest.mark.parametrize("K", [1, 7, 64, 130, 1030])
def test_pair_dots_are_the_gemm_bits(K):
    """A (query, candidate) score computed alone has the bits of its GEMM column: rows and
    columns at tile edges, dims with and without a remainder of the 8-lane vectors."""
    rng = np.random.default_rng(K)
    q = rng.standard_normal((13, K)).astype(np.float32)
    e = rng.standard_normal((37, K)).astype(np.float32)
    full = _gemm(q, e)
    cols = rng.integers(0, 37, (13, 5))
    got = fused.pair_dots(q, e[cols])
    np.testing.assert_array_equal(got, np.take_along_axis(full, cols, axis=1))


@pytest.mark.parametrize("dim", [64, 1030])
@pytest.mark.parametrize("stored", [np.float32, np.float16])
def test_a_candidate_identical_to_a_positive_ties_with_it(monkeypatch, dim, stored):
    """Pools hold duplicates (identical texts embed identically): each positive's twin must count
    as tied with it (``equal``), in the fused scan, the numpy passes and per-query candidate
    lists, at small and large d and for fp16-stored vectors. Scores of the positives computed
    apart (einsum, or numpy's GEMM of a gathered subset) miss most of these ties by an ulp."""
    rng = np.random.default_rng(dim)
    n_pool, n_q = 600, 40
    emb = rng.standard_normal((n_pool, dim)).astype(stored)
    pos = rng.choice(n_pool // 2, n_q, replace=False) * 2  # even: each twin (odd) is nobody's positive
    emb[pos + 1] = emb[pos]
    qv = rng.standard_normal((n_q, dim)).astype(np.float32)
    queries = make_queries([[int(p)] for p in pos])
    pool = make_pool(n_pool)
    ref, got = _both(monkeypatch, None, queries, pool, scorer=vector_scorer(emb, qv, queries), batch_size=16,
                     chunk_size=256)
    _check_same(ref, got)
    assert (got.equal == 1).all(), np.bincount(got.equal)
    cand = np.stack([np.roll(np.arange(n_pool), -int(p))[:50] for p in pos])  # positive first, twin second
    lists = make_queries([[int(p)] for p in pos], candidates=cand)
    from rbench.engine.scan import scan

    per_query = scan(None, lists, pool, scorer=vector_scorer(emb, qv, lists), batch_size=16)
    assert (per_query.equal == 1).all(), np.bincount(per_query.equal)


@pytest.mark.parametrize("case", ["gaussian", "ties", "exclusions"])
@pytest.mark.parametrize("k", [0, 1, 100])
def test_fused_gemm_scan_equals_numpy_passes(monkeypatch, case, k):
    """The dense scorer's fused GEMM + scan against the numpy passes over the same GEMM's scores:
    rows in several MC blocks on each of two threads (a batch of 2 MC + 13), a pool not a multiple of 16 in one
    chunk and in uneven chunks, several graded positives, coarse vectors (heavy ties at the
    positives and at the top-k threshold), exclusions inside and across chunks."""
    from rbench.engine.kernels.gemm import MC

    rng = np.random.default_rng(5)
    n_pool, n_q, dim = 7003, 2 * MC + 13, 24
    emb = rng.standard_normal((n_pool, dim)).astype(np.float32)
    q = rng.standard_normal((n_q, dim)).astype(np.float32)
    if case == "ties":
        emb, q = np.round(emb).astype(np.float32), np.round(q).astype(np.float32)
    positives = [rng.choice(n_pool, int(rng.integers(1, 4)), replace=False).tolist() for _ in range(n_q)]
    grades = [rng.integers(1, 4, len(p)).astype(float).tolist() for p in positives]
    exclude = None
    if case == "exclusions":
        exclude = [np.setdiff1d(rng.choice(n_pool, 300, replace=False), p).tolist() for p in positives]
        exclude[3] = sorted(set(range(n_pool)) - set(positives[3]) - set(range(0, n_pool, 97)))  # few left
    queries = make_queries(positives, grades, exclude)
    scorer = vector_scorer(emb, q, queries, pool_checked=True)
    calls = []
    real = fused.gemm_scan
    monkeypatch.setattr(fused, "gemm_scan", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    for chunk in (65536, 2500):
        ref, got = _both(monkeypatch, None, queries, make_pool(n_pool), scorer=scorer, batch_size=n_q,
                         chunk_size=chunk, topk=k)
        _check_same(ref, got)
    # one chunk, then three, each in parts of gemm_width(): the fused path ran (not the numpy passes)
    parts = [-(-size // fused.gemm_width()) for size in (n_pool, 2500, 2500, n_pool - 5000)]
    assert len(calls) == sum(parts)
    if k:
        s = q.astype(np.float64) @ emb.T.astype(np.float64)
        if exclude is not None:
            for r, ex in enumerate(exclude):
                s[r, ex] = -np.inf
        best = s.argmax(axis=1)
        assert (np.take_along_axis(s, got.topk_index[:, :1], axis=1)[:, 0] == s[np.arange(n_q), best]).all()


def test_fused_gemm_scan_shards(monkeypatch):
    """Shards (pool_range) through the fused GEMM + scan equal the numpy passes and merge into
    the whole scan."""
    rng = np.random.default_rng(8)
    emb = rng.standard_normal((5000, 40)).astype(np.float32)
    q = rng.standard_normal((20, 40)).astype(np.float32)
    queries = make_queries([[i * 240 + 7] for i in range(20)])
    scorer = vector_scorer(emb, q, queries, pool_checked=True)
    assert_shards_merge(monkeypatch, None, queries, make_pool(5000), ((0, 1999), (1999, 5000)), scorer=scorer,
                        chunk_size=2048, topk=100)


def test_evaluations_reuse_buffers_without_sharing_results(monkeypatch):
    """The top-k and packing buffers one evaluation leaves are reused by the next (a shorter last
    batch inside the same buffers): results equal fresh ones, and an earlier result's arrays are
    never overwritten by a later evaluation."""
    from rbench.engine.scan import scan

    rng = np.random.default_rng(5)
    emb = rng.standard_normal((700, 24)).astype(np.float32)
    qv = rng.standard_normal((250, 24)).astype(np.float32)
    queries = make_queries([[int(p)] for p in rng.integers(0, 700, 250)])
    pool = make_pool(700)

    def run(q):
        return scan(None, queries, pool, scorer=vector_scorer(emb, q, queries), batch_size=101, topk=20)

    monkeypatch.setattr(fused, "_SPARES", {})
    first = run(qv)
    kept = (first.topk_index.copy(), first.topk_score.copy(), first.ranks.values.copy())
    assert "topk" in fused._SPARES and fused._SPARES["topk"].scores.shape[0] == 48  # the last batch's rows
    other = run(rng.standard_normal((250, 24)).astype(np.float32))  # overwrites the spare buffers
    assert not np.array_equal(other.topk_index, kept[0])
    for got, want in zip((first.topk_index, first.topk_score, first.ranks.values), kept):
        np.testing.assert_array_equal(got, want)
    again = run(qv)
    monkeypatch.setattr(fused, "_SPARES", {})
    fresh = run(qv)
    _check_same(fresh, again)
    _check_same(fresh, first)
