"""The certified scan of a BLAS tile (``rbench.engine.blas_tiles``): exact rank counts and top-k
of rbench's own GEMM arithmetic, read from scores a faster GEMM computed.

Why: the engine's scores are defined by one fp32 fma chain per (query, candidate) over k = 0 ..
K-1 (``kernels.gemm``); a BLAS (MKL through torch, OpenBLAS) sums in another order and may differ
by a few ulps. Both are within the proven bound of fp32 dot products, |s - exact| <= gamma_K
sum |q_k e_k| <= gamma_K |q| |e| (gamma_K = K u / (1 - K u), any summation order, fma or not), so
two of them differ by at most eps = 2 gamma_K |q| |e|. A BLAS score more than eps above a
positive's exact score is an exact "higher", more than eps below a "lower"; only the few in
between (the band) are recomputed by the exact chain and compared. The top-k: a candidate whose
BLAS score is below (a lower bound of the k-th best) - 2 eps has k candidates exactly above it;
the others are recomputed exactly (about k per row) and kept in a buffer of exact scores, so the
buffer's selection, tie rule and sort are those of ``kernels.fused``. Every recomputed score is
also checked against the bound: a BLAS beyond it (reduced precision, a bug) is reported, not
trusted.
"""

from __future__ import annotations

import numba
import numpy as np
from numba.cpython.unsafe.numbers import trailing_zeros

from rbench.engine.kernels.fused import finish_row, keep_best, kth_largest, sort_scratch
from rbench.engine.kernels.gemm import fma32

STRIDE = 16  # the first threshold's sample: every STRIDE-th score of a row
F32_LOWEST = np.float32(-3.4028234663852886e38)  # x >= it: x is finite (-inf is excluded)


@numba.njit(inline="always")
def band_counts(row, hi, lo):
    """(#scores > hi, #scores >= lo) (int32 lanes: vectorises)."""
    h = np.int32(0)
    g = np.int32(0)
    for c in range(row.shape[0]):
        x = row[c]
        h = np.int32(h + np.int32(x > hi))
        g = np.int32(g + np.int32(x >= lo))
    return h, g


@numba.njit(inline="always")
def flag_ge(row, cut, fl, at):
    """fl[c] = row[c] >= cut (one byte each); returns #scores >= at (both vectorise)."""
    n = np.int32(0)
    for c in range(row.shape[0]):
        x = row[c]
        fl[c] = np.uint8(x >= cut)
        n = np.int32(n + np.int32(x >= at))
    return n


@numba.njit(inline="always")
def exact_dot(qr, er):
    """The exact score: one fp32 fma chain over k = 0 .. K-1 from 0 (``kernels.gemm``'s bits)."""
    acc = np.float32(0.0)
    for k in range(qr.shape[0]):
        acc = fma32(qr[k], er[k], acc)
    return acc


@numba.njit(cache=True)
def exact_dots(qr, e, cols, n, out):
    """out[j] = exact_dot(qr, e[cols[j]]) for j < n: the chains run side by side (k outer, the
    candidates inner: independent lanes, gathered loads), each still in k order."""
    for j in range(n):
        out[j] = np.float32(0.0)
    for k in range(qr.shape[0]):
        x = qr[k]
        for j in range(n):
            out[j] = fma32(x, e[cols[j], k], out[j])


@numba.njit(inline="always")
def positives_within(row, a, pos_r, lo, hi):
    """How many of the row's positives lie in this tile with a BLAS score in [lo, hi]."""
    n = 0
    for p in pos_r:
        if p >= a and p < a + row.shape[0]:
            x = row[p - a]
            n += x >= lo and x <= hi
    return n


@numba.njit(inline="always")
def rank_row(row, qr, e, r, a, thr, his, los, pos, higher, equal, eps):
    """Row r's exact rank counts over this tile: BLAS scores outside each positive's band
    counted at once, those inside recomputed. The row's positives in the tile are then taken
    back (their own contributions, as they were added; a band holding only positives is not
    looked into: they would be taken back). Returns the bound's violations."""
    C = row.shape[0]
    P = thr.shape[1]
    bad = 0
    for j in range(P):
        t, hi, lo = thr[r, j], his[r, j], los[r, j]
        h, g = band_counts(row, hi, lo)
        higher[r, j] += h
        look = g - h > positives_within(row, a, pos[r], lo, hi)  # the band: more than positives
        if look:
            for c in range(C):
                x = row[c]
                if x >= lo and x <= hi:
                    y = exact_dot(qr, e[c])
                    bad += abs(np.float64(x) - np.float64(y)) > eps
                    higher[r, j] += y > t
                    equal[r, j] += y == t
        for jj in range(P):
            p = pos[r, jj]
            if p >= a and p < a + C and row[p - a] != -np.inf:
                x = row[p - a]
                if x > hi:
                    higher[r, j] -= 1
                elif x >= lo and look:
                    y = exact_dot(qr, e[p - a])
                    higher[r, j] -= y > t
                    equal[r, j] -= y == t
    return bad


@numba.njit(inline="always")
def down32(v):
    """The largest fp32 value <= v (v: fp64): a cut that errs towards admitting more."""
    y = np.float32(v)
    if np.float64(y) > v:
        y = np.nextafter(y, np.float32(-np.inf))
    return y


@numba.njit(inline="always")
def up32(v):
    """The smallest fp32 value >= v (v: fp64)."""
    y = np.float32(v)
    if np.float64(y) < v:
        y = np.nextafter(y, np.float32(np.inf))
    return y


@numba.njit(inline="always")
def gather_flagged(row, fl, cols, xs):
    """The flagged columns (ascending) and their scores into cols/xs; returns how many. The flags
    are read eight bytes at a time: only non-zero words are looked at."""
    words = fl.view(np.uint64)
    m = 0
    for j in range(words.shape[0]):  # (flags past the row's end are zero)
        w = words[j]
        while w != 0:
            c = 8 * j + (trailing_zeros(w) >> 3)
            w &= w - np.uint64(1)
            cols[m] = c
            xs[m] = row[c]
            m += 1
    return m


@numba.njit(inline="always")
def sample_cut(row, k, sample):
    """A score that at least k of the row's scores probably reach (the m-th largest of every
    STRIDE-th score, m ~ 1.25 k / STRIDE + 5: about 2k reach it); -inf when the row is too short
    for a sample (the caller checks the count and falls back to every finite score)."""
    ns = row.shape[0] // STRIDE
    m = (5 * k + 4 * STRIDE - 1) // (4 * STRIDE) + 5
    if ns < 4 * m:
        return -np.inf
    for i in range(ns):
        sample[i] = row[i * STRIDE + STRIDE // 2]
    return np.float64(kth_largest(sample, ns, m))


@numba.njit(inline="always")
def candidates(row, k, T, eps, fl, sample, cols, xs):
    """The tile row's columns that may enter the exact top-k, ascending, their BLAS scores in
    xs: those >= the buffer's k-th best exact score T - eps (T known), or >= (a lower bound of
    the tile's k-th best BLAS score) - 2 eps: a column below has k columns exactly above it.
    Returns how many."""
    if T > -np.inf:
        flag_ge(row, down32(T - eps), fl, F32_LOWEST)
        return gather_flagged(row, fl, cols, xs)
    L = sample_cut(row, k, sample)
    if L > -np.inf and flag_ge(row, down32(L - 2.0 * eps), fl, np.float32(L)) >= k:
        m = gather_flagged(row, fl, cols, xs)
    else:  # too short, or an unlucky sample: every finite score
        flag_ge(row, F32_LOWEST, fl, F32_LOWEST)
        m = gather_flagged(row, fl, cols, xs)
    if m <= k:
        return m
    cut = down32(np.float64(kth_largest(xs, m, k)) - 2.0 * eps)  # the tile's k-th best BLAS score
    n = 0
    for j in range(m):  # (in order: n <= j)
        if xs[j] >= cut:
            cols[n] = cols[j]
            xs[n] = xs[j]
            n += 1
    return n


@numba.njit(inline="always")
def topk_row(row, qr, e, a, k, bv, bi, n, T, eps, fl, sample, cols, xs, ys):
    """Add the tile row's possible top-k to its buffer of exact scores (ascending pool index;
    when full, its k best are kept: ``keep_best``, ties to the lower pool index, and T rises to
    their k-th best). Returns (n, T, the bound's violations)."""
    m = candidates(row, k, T, eps, fl, sample, cols, xs)
    exact_dots(qr, e, cols, m, ys)
    bad = 0
    for j in range(m):
        y = ys[j]
        bad += abs(np.float64(xs[j]) - np.float64(y)) > eps
        if n == bv.shape[0]:
            n, t = keep_best(bv, bi, n, k)
            T = max(T, t)
        if y >= T:
            bv[n] = y
            bi[n] = a + cols[j]
            n += 1
    return n, T, bad


@numba.njit(inline="always")
def finite_count(row):
    """How many of row's scores are not -inf (excluded candidates are -inf)."""
    n = np.int32(0)
    for c in range(row.shape[0]):
        n = np.int32(n + np.int32(row[c] != -np.inf))
    return n


@numba.njit(parallel=True, cache=True, nogil=True)
def tile_scan(s, q, e, a, thr, his, los, pos, ex_off, ex_col, want_finite, higher, equal, finite, eps, k, bv,
              bi, bn, bt, more, out_v, out_i, bad, n_threads):
    """One visit per row of the BLAS tile s (B x C, pool indices from a; q: B x K, e: C x K, the
    operands; row r's excluded columns ex_col[ex_off[r]:ex_off[r+1]] become -inf): exact rank
    counts (his/los: each positive's band, thr +- eps[r] rounded outwards), finite counts, and
    each row's buffer of exact top-k scores bv/bi (bn entries, -1 before the row's first tile;
    bt: its k-th best once cut). more: later tiles follow; else the top-k is sorted into
    out_v/out_i. bad[thread]: recomputed scores beyond the bound."""
    B, C = s.shape
    n_blocks = max(1, min(B, n_threads))
    width = bv.shape[1] if k > 0 else 0
    for th in numba.prange(n_blocks):
        fl = np.zeros(32 * -(-C // 32), dtype=np.uint8)
        sample = np.empty(C // STRIDE + 8, dtype=np.float32)
        cols = np.empty(C, dtype=np.int64)
        xs, ys = np.empty(C, dtype=np.float32), np.empty(C, dtype=np.float32)
        keys, tmp_k, tmp_v, tmp_i, hist, f32 = sort_scratch(width if not more else 0, bv)
        for r in range(th * B // n_blocks, (th + 1) * B // n_blocks):
            row = s[r]
            for j in range(ex_off[r], ex_off[r + 1]):
                row[ex_col[j]] = -np.inf
            if want_finite:
                finite[r] += finite_count(row)
            bad[th] += rank_row(row, q[r], e, r, a, thr, his, los, pos, higher, equal, eps[r])
            if k > 0:
                n, T, b = topk_row(row, q[r], e, a, k, bv[r], bi[r], max(bn[r], 0), bt[r], eps[r], fl, sample,
                                   cols, xs, ys)
                bad[th] += b
                if more and n > k:  # later tiles: only what may beat the k-th best
                    n, T = keep_best(bv[r], bi[r], n, k)
                bn[r], bt[r] = n, T
                if not more:
                    finish_row(bv[r], bi[r], n, k, True, out_v[r], out_i[r], keys, tmp_k, tmp_v, tmp_i, hist, f32)
