"""The fused scan (rbench.engine.fused) against the engine's numpy passes, its slow reference: every
rank count, n_ranked and the top-k (ties to the lower pool index) identical, over several
chunks, with ties, exclusions, several graded positives, fp32 and fp64 scores."""

from __future__ import annotations

import numpy as np
import pytest

from rbench.engine import fused
from tests.helpers import (
    TableRanker,
    assert_shards_merge,
    engine_scorer,
    make_pool,
    make_queries,
    table_scorer,
)
from tests.helpers import assert_same_eval as _check_same
from tests.helpers import fused_and_reference as _both

pytestmark = pytest.mark.skipif(not fused.enabled(), reason="numba not installed")


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
        _check_same(ref, got)


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
    from rbench.engine.scorers import vector_scorer

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


# The threshold top-k (rbench/engine/kernels/fused.py): rows of >= ~830 candidates take a threshold from
# every 16th score (positions 8, 24, 40, ...); shorter chunks collect every finite candidate.

@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("k", [1, 10, 100, 300])
def test_threshold_topk_long_rows(monkeypatch, seed, k):
    """Long rows (the sampled threshold), with heavy ties (the buffer fills and is compacted),
    some ties, none; exclusions; chunks long and short, so the first chunk of a row may be too
    short to sample and the threshold is set by a compaction instead."""
    rng = np.random.default_rng(100 + seed)
    n_q, n_pool = 9, 6000
    levels = (4, 50, 10**9, 10**9)[seed]
    table = rng.integers(0, levels, size=(n_q, n_pool)).astype(np.float32 if seed % 2 else np.float64)
    positives = [rng.choice(n_pool, int(rng.integers(1, 4)), replace=False).tolist() for _ in range(n_q)]
    exclude = [np.setdiff1d(rng.choice(n_pool, 500, replace=False), p).tolist() for p in positives] \
        if seed >= 2 else None
    queries = make_queries(positives, exclude=exclude)
    for chunk in (500, 2048, 6000, 65536):
        _check_same(*_both(monkeypatch, TableRanker(table), queries, make_pool(n_pool), batch_size=4,
                           chunk_size=chunk, topk=k))


def test_threshold_too_high_falls_back(monkeypatch):
    """Rows whose sampled positions hold their largest scores: the sample's threshold is reached
    by fewer than k scores. Row 0: the lower second threshold is enough; row 1: it is not either
    (every finite candidate is collected); row 2: the sample's own top is tied with most of the
    row; row 3: a row holding only -inf but its positive and a few candidates."""
    rng = np.random.default_rng(5)
    n_pool, k = 4000, 100
    sampled = np.arange(8, n_pool, 16)
    table = rng.standard_normal((4, n_pool))
    table[0, sampled[:30]] = 10 + rng.random(30)  # 30 high sampled scores: second try suffices
    table[1, sampled] = 10 + rng.random(len(sampled))  # every sampled score high: all collected
    table[2] = np.round(table[2])
    table[2, sampled] = 3.0
    queries = make_queries([[1], [2], [3], [4]],
                           exclude=[[], [], [], sorted(set(range(n_pool)) - {4, 100, 2000, 3999})])
    for chunk in (4000, 1000):
        ref, got = _both(monkeypatch, TableRanker(table.astype(np.float32)), queries, make_pool(n_pool),
                         batch_size=4, chunk_size=chunk, topk=k)
        _check_same(ref, got)
        assert (got.topk_index[3, 4:] == -1).all() and got.n_ranked[3] == 4


def test_ties_across_chunks_and_threshold(monkeypatch):
    """The k-th best score tied across chunk edges and at the threshold: the lower pool index
    wins, whichever chunk holds it."""
    n_pool = 5000
    table = np.zeros((3, n_pool), dtype=np.float32)
    table[0, ::7] = 1.0  # 715 tied at the top: the first 100 by pool index
    table[1, 4000:] = 2.0  # the top in the last chunk, ties below it everywhere
    table[1, :4000:3] = 1.0
    table[2] = np.arange(n_pool) % 100  # 50 tied at every level
    queries = make_queries([[7], [4001], [99]])
    for chunk in (1024, 1000, 5000):
        for k in (1, 100, 120):
            _check_same(*_both(monkeypatch, TableRanker(table), queries, make_pool(n_pool), batch_size=3,
                               chunk_size=chunk, topk=k))


class _MixedRanker(TableRanker):
    """fp64 scores for some chunks, fp32 for others (a threshold taken from fp64 scores need not
    be an fp32 value)."""

    def score(self, queries, candidates):
        out = super().score(queries, candidates)
        return out.astype(np.float32) if candidates.ndim == 1 and candidates[0] % 2000 else out


def test_mixed_precision_chunks(monkeypatch):
    rng = np.random.default_rng(11)
    table = rng.standard_normal((5, 6000)) * 1e-3 + 1.0  # fp64 values fp32 cannot hold
    queries = make_queries([[i * 100] for i in range(5)])
    _check_same(*_both(monkeypatch, None, queries, make_pool(6000), scorer=engine_scorer(_MixedRanker(table)),
                       batch_size=5, chunk_size=1000, topk=100))


def test_dense_scorer_long_rows(monkeypatch):
    """The engine's GEMM path on rows long enough for the sampled threshold (one chunk, and
    chunks that split the pool unevenly)."""
    from rbench.engine.scorers import vector_scorer

    rng = np.random.default_rng(4)
    emb = rng.standard_normal((9000, 32)).astype(np.float32)
    q = rng.standard_normal((70, 32)).astype(np.float32)
    queries = make_queries([rng.choice(9000, 2, replace=False).tolist() for _ in range(70)])
    scorer = vector_scorer(emb, q, queries, pool_checked=True)
    for chunk in (9000, 2500):
        _check_same(*_both(monkeypatch, None, queries, make_pool(9000), scorer=scorer, batch_size=64,
                           chunk_size=chunk, topk=100))


def test_shards(monkeypatch):
    """A shard's scan (pool_range) ends before the pool does: its last chunk still finishes the
    top-k; shard results equal the numpy passes' and merge into the whole scan's."""
    rng = np.random.default_rng(12)
    table = rng.standard_normal((6, 7000)).astype(np.float32)
    queries = make_queries([[i * 1000 + 3] for i in range(6)])
    assert_shards_merge(monkeypatch, None, queries, make_pool(7000), ((0, 4096), (4096, 7000)), scorer=table_scorer(table),
                        chunk_size=2048, topk=100)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", ["gaussian", "ties", "signed_zeros", "few_finite"])
def test_finish_sorts_as_the_kernel_does(dtype, case):
    """``fused.finish`` (numpy: a top-k the last scan left unsorted) equals the kernel's own
    sort (the same chunks, the last scanned with more=False): score descending, ties to the
    lower pool index, -0.0 tied with 0.0, -1/-inf past the finite candidates."""
    rng = np.random.default_rng(21)
    n_q, n_pool, k = 5, 3000, 60
    s = rng.standard_normal((n_q, n_pool))
    if case == "ties":
        s = rng.integers(0, 4, (n_q, n_pool)).astype(float)
    elif case == "signed_zeros":
        s = np.where(rng.random((n_q, n_pool)) < 0.5, -rng.random((n_q, n_pool)), 0.0)
        s[:, ::3] = -0.0
    elif case == "few_finite":
        s[rng.random((n_q, n_pool)) < 0.99] = -np.inf  # (excluded: ~30 finite a row, k = 60)
    s = s.astype(dtype)
    pos = np.zeros((n_q, 1), dtype=np.int64)

    def topk(sort_by_kernel: bool) -> tuple[np.ndarray, np.ndarray]:
        top = fused.TopK(n_q, k)
        higher, equal = np.zeros((n_q, 1), dtype=np.int64), np.zeros((n_q, 1), dtype=np.int64)
        finite = np.zeros(n_q, dtype=np.int64)
        for a in (0, 1000, 2000):
            more = a < 2000 or not sort_by_kernel
            fused.scan(s[:, a : a + 1000].copy(), a, s[:, :1], pos, True, higher, equal, finite, top, more=more)
        assert top.done == sort_by_kernel
        idx, val = fused.finish(top)
        return idx.copy(), val.copy()

    (i_np, v_np), (i_kernel, v_kernel) = topk(False), topk(True)
    np.testing.assert_array_equal(i_np, i_kernel)
    np.testing.assert_array_equal(v_np, v_kernel)
    if case == "few_finite":
        assert (i_np == -1).any() and np.isneginf(v_np[i_np == -1]).all()


# The block-maxima threshold (fp32 chunks of >= k blocks of 64 scores): the k-th largest block
# maximum (to a histogram bucket) is reached by >= k scores, so the top-k lies at or above it.

@pytest.mark.parametrize("case", ["gaussian", "heavy_ties", "signed_zeros", "excluded_blocks", "few_finite_blocks",
                                  "tail_block"])
@pytest.mark.parametrize("k", [1, 37, 100])
def test_block_threshold_topk(monkeypatch, case, k):
    """fp32 rows long enough for the block path at every k (7,000 scores: 109 blocks and a short
    last one): ties at the threshold overflowing the buffer (the compacting second collection),
    -0.0 tied with 0.0 at the threshold, blocks all -inf (exclusions), fewer finite blocks than
    k (every finite candidate), the row's best scores in the short last block."""
    rng = np.random.default_rng(11)
    n_q, n_pool = 6, 7000
    table = rng.standard_normal((n_q, n_pool)).astype(np.float32)
    exclude = None
    positives = [[0], [1], [2], [3], [4], [6999]]
    if case == "heavy_ties":
        table = rng.integers(0, 3, size=(n_q, n_pool)).astype(np.float32)
    elif case == "signed_zeros":
        table = np.where(rng.random((n_q, n_pool)) < 0.5, -rng.random((n_q, n_pool)), 0.0).astype(np.float32)
        table[:, ::3] = -0.0  # -0.0 and 0.0 both at the top, tied
    elif case in ("excluded_blocks", "few_finite_blocks"):
        blocks = 100 if case == "excluded_blocks" else 108  # of 110: 10 / 2 blocks left
        rows = [np.sort(rng.choice(110, blocks, replace=False)) for _ in range(n_q)]
        exclude = [[c for b in r for c in range(64 * b, min(n_pool, 64 * b + 64)) if c != p[0]]
                   for r, p in zip(rows, positives)]
    elif case == "tail_block":
        table[:, -24:] += 10.0
    queries = make_queries(positives, exclude=exclude)
    for chunk in (7000, 65536, 3000):
        ref, got = _both(monkeypatch, TableRanker(table), queries, make_pool(n_pool), batch_size=4,
                         chunk_size=chunk, topk=k)
        _check_same(ref, got)


def test_openblas_spin_is_short_unless_chosen():
    """rbench sets OpenBLAS's worker spin (read when numpy loads) unless the user chose one."""
    import subprocess
    import sys

    code = "import rbench, os, numpy; print(os.environ['OPENBLAS_THREAD_TIMEOUT'])"
    env = {k: v for k, v in __import__("os").environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.strip() == "4"
    env["OPENBLAS_THREAD_TIMEOUT"] = "12"
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.strip() == "12"


def test_block_maxima_and_masks_equal_numpy():
    """The LLVM-IR helpers of the block path against numpy: each block's maximum (as the
    order-preserving key of its bits; -0.0 and 0.0 as one), the counts above / equal to p, and
    each full block's mask of scores >= t; rows with -inf, signed zeros, ties and a short
    last block."""
    import numba

    from rbench.engine.kernels import fused as kern

    @numba.njit
    def maxima(row, p, count):
        bm = np.empty(row.shape[0] // kern.BLOCK + 1, dtype=np.int32)
        nb, h, e = kern.block_maxima(row, row.view(np.int32), bm, p, count)
        return bm[:nb], h, e

    @numba.njit
    def masks(row, t):
        out = np.empty(row.shape[0] // kern.BLOCK, dtype=np.uint64)
        for b in range(out.shape[0]):
            out[b] = kern.ge_mask(row.ctypes.data + 4 * kern.BLOCK * b, np.float32(t))
        return out

    def key(x):  # the order-preserving int key of fp32 values, -0.0 with 0.0
        x = np.where(x == 0, np.float32(0), x).astype(np.float32).view(np.int32).astype(np.int64)
        return np.where(x < 0, x ^ 0x7FFFFFFF, x)

    rng = np.random.default_rng(5)
    for n in (64, 1000, 7000, 7040):
        row = rng.standard_normal(n).astype(np.float32)
        row[rng.random(n) < 0.1] = -np.inf
        row[rng.random(n) < 0.05] = 0.0
        row[rng.random(n) < 0.05] = -0.0
        row[: min(n, 128)] = np.round(row[: min(n, 128)])  # ties
        for p in (row[3], np.float32(0.0), np.float32(-np.inf), np.float32(10.0)):
            for count in (True, False):
                bm, h, e = maxima(row, p, count)
                blocks = [row[a : a + 64] for a in range(0, n, 64)]
                assert bm.astype(np.int64).tolist() == [int(key(b).max()) for b in blocks]
                assert (h, e) == (((row > p).sum(), (row == p).sum()) if count else (0, 0))
            full = row[: n // 64 * 64].reshape(-1, 64)
            want = np.packbits(full >= p, axis=1, bitorder="little").view(np.uint64).ravel()
            assert np.array_equal(masks(row, p), want)
