"""The certified BLAS-tile scan (rbench.engine.blas_tiles) against the engine's numpy passes over
its own GEMM's bits (the reference): identical rank counts, ties and top-k even when the tile
GEMM's scores are moved anywhere within the proven fp32 error bound, and an error when a GEMM
leaves the bound."""

from __future__ import annotations

import importlib.util
import threading

import numpy as np
import pytest

from rbench.core.errors import RBenchError
from rbench.engine import blas_tiles, fused
from rbench.engine.scorers import vector_scorer
from tests.helpers import assert_same_eval, fused_and_reference, make_pool, make_queries

pytestmark = pytest.mark.skipif(not fused.enabled(), reason="numba not installed")


@pytest.fixture(autouse=True)
def _tile_road(monkeypatch):
    """The BLAS-tile road whatever this CPU's vectors (``RBENCH_GEMM=auto`` takes rbench's own
    GEMM on a CPU without AVX-512)."""
    monkeypatch.setenv("RBENCH_GEMM", "tile")


def _adversarial(scale: float, seed: int = 0):
    """A tile GEMM (``blas_tiles.tile_gemm``'s) whose every score is moved by up to scale x the
    bound (random signs and sizes, some exactly at it): a BLAS as far from the exact chain as the
    bound allows (scale < 1)."""
    rng = np.random.default_rng(seed)
    real = blas_tiles.gemm

    def gemm(q, e, out):
        real(q, e, out)
        eps = blas_tiles.bound(q, e)[:, None] / 2.0  # the most one computation may be off
        u = rng.uniform(-1.0, 1.0, out.shape)
        edge = rng.random(out.shape) < 0.3
        u[edge] = np.sign(u[edge])  # (a third exactly at the limit)
        out[:] = (out.astype(np.float64) + scale * eps * u).astype(np.float32)

    return lambda q, e, starts, width: lambda s0, s1, t, out: gemm(q[s0:s1], e[starts[t] : starts[t] + width], out)


def _near_ties(dim: int, seed: int):
    """Pools full of exact twins of the positives and of near-twins one ulp away in one
    coordinate (scores within an ulp or two of the positives' and of each other), plus Gaussians."""
    rng = np.random.default_rng(seed)
    n_pool, n_q = 5000, 37
    emb = rng.standard_normal((n_pool, dim)).astype(np.float32)
    q = rng.standard_normal((n_q, dim)).astype(np.float32)
    pos = rng.choice(n_pool // 4, n_q, replace=False) * 4
    emb[pos + 1] = emb[pos]  # twins: tie with the positive exactly
    emb[pos + 2] = emb[pos]
    emb[pos + 2, 0] = np.nextafter(emb[pos, 0], np.float32(np.inf))  # one ulp away: a near-tie
    emb[pos + 3] = emb[pos]
    emb[pos + 3, 1] = np.nextafter(emb[pos, 1], np.float32(-np.inf))
    top = rng.choice(n_pool, 40, replace=False)  # near-ties at the top-k boundary too
    emb[top] = emb[top[0]]
    emb[top[20:], 2] = np.nextafter(emb[top[20:], 2], np.float32(np.inf))
    q[:, 0] = np.abs(q[:, 0]) + 3.0
    emb[top, 0] = 10.0  # (these score near the top of every row)
    extra = [[int(p)] + ([int(p) + 7] if i % 3 == 0 else []) for i, p in enumerate(pos)]
    exclude = [[int(p) + 5, int(top[1])] for p in pos]
    return emb, q, make_queries(extra, exclude=exclude)


@pytest.mark.parametrize("dim", [16, 128, 1030])
@pytest.mark.parametrize("k", [0, 10, 100])
def test_tiles_equal_the_reference_under_adversarial_blas(monkeypatch, dim, k):
    """Ties, near-ties (an ulp apart) at the positives and at the top-k boundary, exclusions,
    two positives in some rows, several tiles and chunks: the tile path's every count and its
    top-k (indices and scores) equal the reference's, with the tile GEMM moved by up to 0.99 of
    the bound (so no decision can rest on its bits)."""
    emb, q, queries = _near_ties(dim, seed=dim + k)
    monkeypatch.setattr(blas_tiles, "TILE_COLS", 1536)
    monkeypatch.setattr(blas_tiles, "TILE_ROWS", 3)  # (each thread's rows in several tiles)
    monkeypatch.setattr(blas_tiles, "tile_gemm", _adversarial(0.99, seed=k))
    calls = []
    real = blas_tiles.scan
    monkeypatch.setattr(blas_tiles, "scan", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    scorer = vector_scorer(emb, q, queries, pool_checked=True)
    for chunk in (65536, 2100):
        ref, got = fused_and_reference(monkeypatch, None, queries, make_pool(len(emb)), scorer=scorer,
                                       batch_size=16, chunk_size=chunk, topk=k)
        assert_same_eval(ref, got)
    assert len(calls) >= 2 * (1 + 3)  # batches x (one chunk, then three): the tile path ran
    assert (got.equal[queries.positives.offsets[:-1]] >= 1).all()  # each first positive's twin ties with it


@pytest.mark.parametrize("k", [1, 10, 100])
def test_top_scores_rising_by_an_ulp_across_tiles(monkeypatch, k):
    """The best candidates' scores rise by one ulp with the pool index, so every later tile
    holds candidates exactly above the k-th best so far whose tile scores (moved within the
    bound) fall below it: each must still be recomputed and enter the top-k."""
    rng = np.random.default_rng(k)
    n_pool, n_q, dim = 6000, 9, 128
    emb = rng.standard_normal((n_pool, dim)).astype(np.float32)
    q = rng.standard_normal((n_q, dim)).astype(np.float32)
    q[:, 0] = 1.0
    best = np.sort(rng.choice(n_pool, 400, replace=False))
    emb[best] = 0.0
    emb[best, 0] = 200.0 + np.arange(len(best)) * np.spacing(np.float32(200.0))  # exact scores: 200 + j ulp
    queries = make_queries([[int(rng.integers(n_pool))] for _ in range(n_q)])
    monkeypatch.setattr(blas_tiles, "TILE_COLS", 1024)
    monkeypatch.setattr(blas_tiles, "tile_gemm", _adversarial(0.99, seed=k))
    ref, got = fused_and_reference(monkeypatch, None, queries, make_pool(n_pool),
                                   scorer=vector_scorer(emb, q, queries, pool_checked=True), batch_size=9,
                                   chunk_size=65536, topk=k)
    assert_same_eval(ref, got)
    assert (got.topk_index[:, 0] == best[-1]).all()


@pytest.mark.parametrize("k", [10, 100])
def test_more_tied_best_candidates_than_the_pending_list_holds(monkeypatch, k):
    """1,500 best candidates within the bound of each other, rising by an ulp every third (ties
    and near-ties a BLAS cannot cut: the pending list overflows and is recomputed early, and
    the best come last): the top-k and the ties equal the reference's."""
    rng = np.random.default_rng(7)
    n_pool, n_q, dim = 9000, 5, 64
    emb = rng.standard_normal((n_pool, dim)).astype(np.float32)
    q = rng.standard_normal((n_q, dim)).astype(np.float32)
    q[:, 0] = 1.0
    best = np.sort(rng.choice(n_pool, 1500, replace=False))
    emb[best] = 0.0
    emb[best, 0] = 200.0 + (np.arange(len(best)) // 3) * np.spacing(np.float32(200.0))
    queries = make_queries([[int(best[i * 7])] for i in range(n_q)])
    monkeypatch.setattr(blas_tiles, "TILE_COLS", 2048)
    monkeypatch.setattr(blas_tiles, "tile_gemm", _adversarial(0.99, seed=k))
    ref, got = fused_and_reference(monkeypatch, None, queries, make_pool(n_pool),
                                   scorer=vector_scorer(emb, q, queries, pool_checked=True), batch_size=5,
                                   chunk_size=65536, topk=k)
    assert_same_eval(ref, got)
    assert (got.topk_index[:, 0] == best[-3]).all() and (got.equal == 2).all()  # (ties: the lowest index)


def test_exact_blas_bits_differ_from_the_engine_yet_results_equal(monkeypatch):
    """The real backend (torch's MKL or numpy's BLAS) without noise, at d = 256 (its bits differ
    from the engine's chain in many scores)."""
    emb, q, queries = _near_ties(256, seed=3)
    monkeypatch.setattr(blas_tiles, "TILE_COLS", 2048)
    scorer = vector_scorer(emb, q, queries, pool_checked=True)
    ref, got = fused_and_reference(monkeypatch, None, queries, make_pool(len(emb)), scorer=scorer,
                                   batch_size=37, chunk_size=65536, topk=100)
    assert_same_eval(ref, got)


def test_a_gemm_beyond_the_bound_is_refused(monkeypatch):
    """A tile GEMM off by up to 4x the bound (a reduced-precision or broken BLAS) is caught by
    the recomputed scores: an error, not numbers."""
    emb, q, queries = _near_ties(64, seed=5)
    monkeypatch.setattr(blas_tiles, "tile_gemm", _adversarial(8.0))
    monkeypatch.setenv("RBENCH_FUSED", "1")
    from rbench.engine.scan import scan

    with pytest.raises(RBenchError, match="beyond the proven fp32 error bound"):
        scan(None, queries, make_pool(len(emb)), scorer=vector_scorer(emb, q, queries, pool_checked=True),
             batch_size=37, topk=10)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed")
def test_each_thread_runs_its_own_one_thread_gemm_and_torch_threads_are_restored(monkeypatch):
    """The tile path's GEMMs run one BLAS thread each, from the kernel threads themselves (each
    its own rows' tiles), and torch's thread count is the user's again afterwards."""
    import torch

    from rbench.engine.kernels import rowblocks

    emb, q, queries = _near_ties(32, seed=2)
    monkeypatch.setenv("RBENCH_TILE_BLAS", "torch")
    monkeypatch.setattr(fused._kernels(), "threads", lambda: 2)
    seen = []
    real = blas_tiles.tile_gemm

    def spy(*a):
        mm = real(*a)

        def call(s0, s1, t, out):
            seen.append((threading.get_ident(), torch.get_num_threads(), s0))
            mm(s0, s1, t, out)

        return call

    monkeypatch.setattr(blas_tiles, "tile_gemm", spy)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        ref, got = fused_and_reference(monkeypatch, None, queries, make_pool(len(emb)),
                                       scorer=vector_scorer(emb, q, queries, pool_checked=True), batch_size=37,
                                       chunk_size=65536, topk=10)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert_same_eval(ref, got)
    assert {n for _, n, _ in seen} == {1}
    assert len({ident for ident, _, _ in seen}) == 2 and len({s0 for _, _, s0 in seen}) == 2  # a row block each
    assert rowblocks.row_blocks(37, 2) == [(0, 18), (18, 37)]


def test_bound_holds_for_fp64_rounded_scores():
    """The bound covers the exact chain and a correctly rounded product (the two extremes of
    summation error) at d = 4096 with large, correlated values."""
    rng = np.random.default_rng(9)
    q = (rng.standard_normal((8, 4096)) + 3).astype(np.float32)
    e = (rng.standard_normal((300, 4096)) + 3).astype(np.float32)
    own = np.empty((8, 300), dtype=np.float32)
    fused.gemm(q, fused.pack(e), own)
    exact = (q.astype(np.float64) @ e.T.astype(np.float64)).astype(np.float32)
    eps = blas_tiles.bound(q, e)
    gap = np.abs(own.astype(np.float64) - exact.astype(np.float64))
    assert (gap <= eps[:, None]).all() and gap.max() > 0
    assert eps.max() < 1e-3 * np.abs(exact).max()  # and it is tight enough to decide nearly everything


def test_bands_round_outwards():
    thr = np.array([[1.0, -3.0]], dtype=np.float32)
    hi, lo = blas_tiles.bands(thr, np.array([1e-9]))
    assert (hi.astype(np.float64) >= thr + 1e-9).all() and (lo.astype(np.float64) <= thr - 1e-9).all()
    assert (hi > thr).all() and (lo < thr).all()


@pytest.mark.parametrize("mode", ["own", "tile"])
def test_both_fused_gemm_paths_equal_the_reference(monkeypatch, mode):
    """RBENCH_GEMM=own (rbench's GEMM fused with the scan, packed operands) and tile (BLAS tiles,
    raw candidates): each equals the reference on near-ties, so both give the same ranks."""
    emb, q, queries = _near_ties(48, seed=11)
    monkeypatch.setenv("RBENCH_GEMM", mode)
    seen = []
    real = fused.gemm_scan
    monkeypatch.setattr(fused, "gemm_scan",
                        lambda q_, ops, *a, **kw: seen.append(type(ops).__name__) or real(q_, ops, *a, **kw))
    ref, got = fused_and_reference(monkeypatch, None, queries, make_pool(len(emb)),
                                   scorer=vector_scorer(emb, q, queries, pool_checked=True), batch_size=37,
                                   chunk_size=65536, topk=50)
    assert_same_eval(ref, got)
    assert set(seen) == {"ndarray" if mode == "own" else "Candidates"}  # packed panels / raw candidates


def test_a_bad_gemm_mode_is_refused(monkeypatch):
    monkeypatch.setenv("RBENCH_GEMM", "fast")
    with pytest.raises(RBenchError, match="RBENCH_GEMM must be auto, tile, own or blas"):
        fused.own_gemm(8)


@pytest.mark.parametrize("avx512", [True, False])
def test_auto_takes_the_road_of_the_cpus_widest_vectors(monkeypatch, avx512):
    """RBENCH_GEMM unset (auto): BLAS tiles where the CPU has AVX-512 (the BLAS kernels are twice
    as wide as rbench's micro-kernel), rbench's GEMM fused with the scan where it has not."""
    from llvmlite import binding

    assert fused.host_avx512() is bool(binding.get_host_cpu_features().get("avx512f"))
    monkeypatch.delenv("RBENCH_GEMM")
    monkeypatch.setattr(fused, "host_avx512", lambda: avx512)
    assert fused.tile_gemm() is avx512
    assert fused.own_gemm(128)  # (both roads give rbench's own bits)


@pytest.mark.parametrize("intel", [True, False])
def test_tile_blas_auto_is_mkl_on_intel_only(monkeypatch, intel):
    """RBENCH_TILE_BLAS=auto: torch's MKL on an Intel CPU (when torch imports), OpenBLAS through
    numpy elsewhere (MKL ran 1.6-1.9x slower than OpenBLAS on a Zen 3); a choice always wins."""
    pytest.importorskip("torch")
    monkeypatch.delenv("RBENCH_TILE_BLAS", raising=False)
    monkeypatch.setattr(blas_tiles, "_intel", lambda: intel)
    assert blas_tiles.backend() == ("torch" if intel else "numpy")
    monkeypatch.setenv("RBENCH_TILE_BLAS", "torch")
    assert blas_tiles.backend() == "torch"


def test_tiles_narrow_as_the_dimension_grows():
    """A tile's candidates' vectors stay within TILE_BYTES (what each GEMM call packs), and the
    tile norms the scorer keeps are one per tile of that width."""
    assert [blas_tiles.tile_cols(d) for d in (16, 128, 256, 1024, 10**6)] == [4096, 4096, 2048, 512, 256]
    e = np.ones((1100, 1024), dtype=np.float32)
    e[600] = 2.0
    assert blas_tiles.tile_norms(e).tolist() == [1024.0, 4096.0, 1024.0]  # columns 0-511, 512-1023, 1024-1099
