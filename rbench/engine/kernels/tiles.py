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

from rbench.engine.kernels.fused import (
    finish_row,
    flag_scratch,
    keep_best,
    kth_largest,
    load_u64,
    sample_threshold,
    sort_scratch,
)
from rbench.engine.kernels.gemm import fma32
from rbench.engine.kernels.pipeline import BODY, HELPER

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


@numba.njit(inline="always")
def dots8(qr, e0, e1, e2, e3, e4, e5, e6, e7, out, j):
    """out[j .. j+7] = the exact scores of qr with e0 .. e7: eight chains side by side (scalar
    registers: two fma units x four cycles of latency), each still in k order."""
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = np.float32(0.0)
    for k in range(qr.shape[0]):
        x = qr[k]
        a0 = fma32(x, e0[k], a0)
        a1 = fma32(x, e1[k], a1)
        a2 = fma32(x, e2[k], a2)
        a3 = fma32(x, e3[k], a3)
        a4 = fma32(x, e4[k], a4)
        a5 = fma32(x, e5[k], a5)
        a6 = fma32(x, e6[k], a6)
        a7 = fma32(x, e7[k], a7)
    out[j], out[j + 1], out[j + 2], out[j + 3] = a0, a1, a2, a3
    out[j + 4], out[j + 5], out[j + 6], out[j + 7] = a4, a5, a6, a7


@numba.njit(cache=True)
def exact_dots(qr, e, base, cols, n, out):
    """out[j] = exact_dot(qr, e[base + cols[j]]) for j < n, eight at a time (the last group
    repeats its last column; out needs room for n rounded up to 8)."""
    last = n - 1
    for j in range(0, n, 8):  # (conditional expressions: a min() compiles an implementation of its own)
        c = (cols[j], cols[j + 1 if j + 1 < last else last], cols[j + 2 if j + 2 < last else last],
             cols[j + 3 if j + 3 < last else last])
        d = (cols[j + 4 if j + 4 < last else last], cols[j + 5 if j + 5 < last else last],
             cols[j + 6 if j + 6 < last else last], cols[j + 7 if j + 7 < last else last])
        dots8(qr, e[base + c[0]], e[base + c[1]], e[base + c[2]], e[base + c[3]], e[base + d[0]], e[base + d[1]],
              e[base + d[2]], e[base + d[3]], out, j)


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
def gather_flagged(row, fl, cols, xs):
    """The flagged columns (ascending) and their scores into cols/xs; returns how many. The flags
    are read eight bytes at a time: only non-zero words are looked at."""
    base = fl.ctypes.data
    m = np.int64(0)  # (not a literal 0: exact_dots, called with it, would compile for Literal[int](0) too)
    for j in range(fl.shape[0] // 8):  # (flags past the row's end are zero)
        w = load_u64(base + 8 * j)
        while w != 0:
            c = 8 * j + (trailing_zeros(w) >> 3)
            w &= w - np.uint64(1)
            cols[m] = c
            xs[m] = row[c]
            m += 1
    return m


@numba.njit(inline="always")
def flag_band(row, lo, hi, fl):
    """fl[c] = lo <= row[c] <= hi (one byte each: vectorises)."""
    for c in range(row.shape[0]):
        x = row[c]
        fl[c] = np.uint8(x >= lo) & np.uint8(x <= hi)


@numba.njit(inline="always")
def rank_row(row, qr, e, c0, r, a, thr, his, los, pos, higher, equal, eps, fl, cols, xs, ys):
    """Row r's exact rank counts over this tile: BLAS scores outside each positive's band
    counted at once, those inside (flagged, gathered) recomputed. The row's positives in the
    tile are then taken back (their own contributions, as they were added; a band holding only
    positives is not looked into: they would be taken back). Returns the bound's violations."""
    C = row.shape[0]
    P = thr.shape[1]
    bad = 0
    for j in range(P):
        t, hi, lo = thr[r, j], his[r, j], los[r, j]
        h, g = band_counts(row, hi, lo)
        higher[r, j] += h
        look = g - h > positives_within(row, a, pos[r], lo, hi)  # the band: more than positives
        if look:
            flag_band(row, lo, hi, fl)
            m = gather_flagged(row, fl, cols, xs)
            exact_dots(qr, e, c0, cols, m, ys)
            for i in range(m):
                y = ys[i]
                bad += abs(np.float64(xs[i]) - np.float64(y)) > eps
                higher[r, j] += y > t
                equal[r, j] += y == t
        for jj in range(P):
            p = pos[r, jj]
            if p >= a and p < a + C and row[p - a] != -np.inf:
                x = row[p - a]
                if x > hi:
                    higher[r, j] -= 1
                elif x >= lo and look:
                    y = exact_dot(qr, e[c0 + p - a])
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
def max32(x, y):
    """The larger of two fp32 cuts (a max() would compile an implementation of its own)."""
    return x if x > y else y


@numba.njit(inline="always")
def up32(v):
    """The smallest fp32 value >= v (v: fp64)."""
    y = np.float32(v)
    if np.float64(y) < v:
        y = np.nextafter(y, np.float32(np.inf))
    return y


@numba.njit(inline="always")
def sample_cut(row, k, sample):
    """A score that at least k of the row's scores probably reach: ``kernels.fused``'s sampled
    threshold (the m-th largest of every 16th score, m ~ 1.25 k / 16 + 5, kept by insertion:
    about 2k reach it); -inf when the row is too short for a sample (the caller checks the
    count and falls back to every finite score)."""
    t, ns, m = sample_threshold(row, k, sample)
    return np.float64(t)


@numba.njit(**HELPER)  # (not inlined: three call sites, each a copy to compile; called a few times a row)
def keep_near_top(px, pc, n, k, eps):
    """Cut the pending (BLAS score, column) list to the entries that may still reach the exact
    top-k: at least k have BLAS scores >= its k-th best L, so exact scores >= L - eps, and an
    entry below L - 2 eps has k entries exactly above it. In place, in order. Returns (n, L)."""
    L = np.float64(kth_largest(px, n, k))
    cut = down32(L - 2.0 * eps)
    m = 0
    for j in range(n):
        if px[j] >= cut:
            px[m] = px[j]
            pc[m] = pc[j]
            m += 1
    return m, L


@numba.njit(inline="always")
def select_row(row, k, T, pt, eps, fl, sample, cols, xs):
    """The tile row's columns that may enter the exact top-k (ascending, BLAS scores in xs):
    those >= the exact buffer's k-th best T - eps and >= (a lower bound of the k-th best BLAS
    score so far) - 2 eps, that bound taken from the pending list (pt) or from a sample of this
    tile (checked: at least k reach it; else every finite score). Returns how many. One flag
    pass written, the second (an unlucky sample) round the loop: each call site of an inlined
    helper is compiled anew."""
    cut = down32(T - eps) if T > -np.inf else F32_LOWEST
    at, sampled = F32_LOWEST, False  # (the flag pass counts the scores >= at)
    if pt > -np.inf:
        first = max32(cut, down32(pt - 2.0 * eps))
    else:
        L = sample_cut(row, k, sample)
        first = cut  # (a row too short for a sample: every finite score)
        if L != -np.inf:
            first, at, sampled = max32(cut, down32(L - 2.0 * eps)), np.float32(L), True
    while flag_ge(row, first, fl, at) < k and sampled:  # an unlucky sample: every finite score
        first, at, sampled = cut, F32_LOWEST, False
    return gather_flagged(row, fl, cols, xs)


@numba.njit(inline="always")
def append_pending(xs, cols, m, j, c0, k, px, pc, pn, pt, eps):
    """Append selected entries j.. to the pending list (cut to ``keep_near_top`` when full).
    Returns (pn, pt, the first entry not appended: m, or less when the list stays full)."""
    while j < m:
        if pn == px.shape[0]:
            pn, pt = keep_near_top(px, pc, pn, k, eps)
            if pn == px.shape[0]:  # all near the top (ties): the caller recomputes them first
                return pn, pt, j
        if pt == -np.inf or xs[j] >= down32(pt - 2.0 * eps):
            px[pn] = xs[j]
            pc[pn] = c0 + cols[j]
            pn += 1
        j += 1
    return pn, pt, j


@numba.njit(inline="always")
def flush_row(qr, e, a, k, bv, bi, n, T, px, pc, pn, eps, ys):
    """The pending list's exact scores (each checked against the bound) into the row's buffer of
    exact scores (ascending pool index; when full its k best are kept, ``keep_best``: ties to
    the lower pool index, and T rises to their k-th best). Returns (n, T, violations)."""
    exact_dots(qr, e, np.int64(0), pc, pn, ys)  # (int64: a literal 0 would compile exact_dots once more)
    bad = 0
    for j in range(pn):
        y = ys[j]
        bad += abs(np.float64(px[j]) - np.float64(y)) > eps
        if n == bv.shape[0]:
            n, t = keep_best(bv, bi, n, k)
            T = t if t > T else T
        if y >= T:
            bv[n] = y
            bi[n] = a + pc[j]
            n += 1
    return n, T, bad


@numba.njit(inline="always")
def finite_count(row):
    """How many of row's scores are not -inf (excluded candidates are -inf)."""
    n = np.int32(0)
    for c in range(row.shape[0]):
        n = np.int32(n + np.int32(row[c] != -np.inf))
    return n


@numba.njit(**BODY)
def tile_scan(s, q, e, c0, a, thr, his, los, pos, ex_off, ex_col, want_finite, higher, equal, finite, eps, k, bv,
              bi, bn, bt, px, pc, pn, pt, last, more, out_v, out_i, r0, r1):
    """One visit per row r0 .. r1-1 (the others: other threads' calls, ``rowblocks.run_blocks``)
    of the BLAS tile s (B x C: columns c0 .. c0+C-1 of the part e, whose pool indices start at
    a; q: B x K; row r's excluded tile columns ex_col[ex_off[r]:ex_off[r+1]]
    become -inf): exact rank counts (his/los: each positive's band, thr +- eps[r] rounded
    outwards), finite counts, and the top-k: candidates pend in px/pc (pn, pt: their count and
    bound; pn = 0 at a part's first tile) and, at its last tile (``last``), are recomputed
    exactly into the rows' buffers bv/bi (bn entries, -1 before the first part; bt: the k-th
    best once cut). more: later parts follow; else the top-k is sorted into out_v/out_i.
    e: read-only (one signature whether the pool is a memory map or not). Returns how many
    recomputed scores were beyond the bound."""
    C = s.shape[1]
    width = bv.shape[1] if k > 0 else 0
    bad = 0
    fl = flag_scratch(C)
    sample = np.empty(C // STRIDE + k + 8, dtype=np.float64)
    cols, xs = np.empty(C, dtype=np.int64), np.empty(C, dtype=np.float64)
    ys = np.empty((C if C > px.shape[1] else px.shape[1]) + 8, dtype=np.float64)
    keys, tmp_k, tmp_v, tmp_i, hist = sort_scratch(width if not more else 0)
    for r in range(r0, r1):
        row = s[r]
        for j in range(ex_off[r], ex_off[r + 1]):
            row[ex_col[j]] = -np.inf
        if want_finite:
            finite[r] += finite_count(row)
        bad += rank_row(row, q[r], e, c0, r, a + c0, thr, his, los, pos, higher, equal, eps[r], fl, cols, xs, ys)
        if k == 0:
            continue
        m = select_row(row, k, bt[r], pt[r], eps[r], fl, sample, cols, xs)
        j = 0
        while True:
            pn[r], pt[r], j = append_pending(xs, cols, m, j, c0, k, px[r], pc[r], pn[r], pt[r], eps[r])
            if j == m and not last:
                break
            if j == m and pn[r] > k:  # the part's last tile: recompute only what may enter
                pn[r], pt[r] = keep_near_top(px[r], pc[r], pn[r], k, eps[r])
            bn[r], bt[r], b = flush_row(q[r], e, a, k, bv[r], bi[r], bn[r] if bn[r] > 0 else 0, bt[r], px[r], pc[r], pn[r],
                                        eps[r], ys)  # (pt stays a bound: its entries moved to bv)
            bad += b
            pn[r] = 0
            if j == m:
                break
        if pn[r] > 2 * k or (pt[r] == -np.inf and pn[r] > k):
            pn[r], pt[r] = keep_near_top(px[r], pc[r], pn[r], k, eps[r])
        if last:
            n, T = bn[r], bt[r]
            if more and n > k:  # later parts: only what may beat the k-th best
                n, T = keep_best(bv[r], bi[r], n, k)
            bn[r], bt[r] = n, T
            if not more:
                finish_row(bv[r], bi[r], n, k, out_v[r], out_i[r], keys, tmp_k, tmp_v, tmp_i, hist, row)
    return bad
