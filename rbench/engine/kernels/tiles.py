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
    load_u64,
    sample_threshold,
    sort_scratch,
)
from rbench.engine.kernels.gemm import fma32
from rbench.engine.kernels.pipeline import BODY, HELPER

STRIDE = 16  # the first threshold's sample: every STRIDE-th score of a row
F32_LOWEST = np.float32(-3.4028234663852886e38)  # x >= it: x is finite (-inf is excluded)
NEG_INF32 = np.float32(-np.inf)  # (compared with fp32 scores: a float64 -inf would widen them)


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
def dots8(qr, e, i0, i1, i2, i3, i4, i5, i6, i7, out, j):
    """out[j .. j+7] = the exact scores of qr with rows i0 .. i7 of e: eight chains side by side
    (scalar registers: two fma units x four cycles of latency), each still in k order. Rows by
    index, not views: a view per row took and dropped a reference (two atomic operations)."""
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = np.float32(0.0)
    for k in range(qr.shape[0]):
        x = qr[k]
        a0 = fma32(x, e[i0, k], a0)
        a1 = fma32(x, e[i1, k], a1)
        a2 = fma32(x, e[i2, k], a2)
        a3 = fma32(x, e[i3, k], a3)
        a4 = fma32(x, e[i4, k], a4)
        a5 = fma32(x, e[i5, k], a5)
        a6 = fma32(x, e[i6, k], a6)
        a7 = fma32(x, e[i7, k], a7)
    out[j], out[j + 1], out[j + 2], out[j + 3] = a0, a1, a2, a3
    out[j + 4], out[j + 5], out[j + 6], out[j + 7] = a4, a5, a6, a7


@numba.njit(cache=True)
def exact_dots(qr, e, base, cols, n, out):
    """out[j] = the exact score of qr with e[base + cols[j]] for j < n: one fp32 fma chain over k =
    0 .. K-1 from 0 (``kernels.gemm``'s bits), eight at a time (the last group repeats its last
    column; out needs room for n rounded up to 8)."""
    last = n - 1
    for j in range(0, n, 8):  # (conditional expressions: a min() compiles an implementation of its own)
        dots8(qr, e, base + cols[j], base + cols[j + 1 if j + 1 < last else last],
              base + cols[j + 2 if j + 2 < last else last], base + cols[j + 3 if j + 3 < last else last],
              base + cols[j + 4 if j + 4 < last else last], base + cols[j + 5 if j + 5 < last else last],
              base + cols[j + 6 if j + 6 < last else last], base + cols[j + 7 if j + 7 < last else last], out, j)


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
    are read eight bytes at a time: only non-zero words are looked at. (Taking a flagged block's
    columns without a branch each, the cursor moved by the flags, ran slower: the first tile's
    flags are dense.)"""
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
def row_pass(row, hi, lo, cut, at, fl):
    """The row's one full pass: (#scores > hi, #scores >= lo, #scores >= at) and fl[c] = score >=
    cut (may enter the top-k; one byte each). Lane operations of one width: it vectorises (a
    second flag bit for the band, or a finite count, in the same loop ran it 1.5x slower)."""
    h = np.int32(0)
    g = np.int32(0)
    n = np.int32(0)
    for c in range(row.shape[0]):
        x = row[c]
        h = np.int32(h + np.int32(x > hi))
        g = np.int32(g + np.int32(x >= lo))
        n = np.int32(n + np.int32(x >= at))
        fl[c] = np.uint8(x >= cut)
    return h, g, n


@numba.njit(inline="always")
def count_flag(row, hi, lo, cut, fl):
    """``row_pass`` without the count at ``at``: (#scores > hi, #scores >= lo), fl[c] = score >= cut
    (the pass of every tile after a row's first: one count less is a tenth of the scan)."""
    h = np.int32(0)
    g = np.int32(0)
    for c in range(row.shape[0]):
        x = row[c]
        h = np.int32(h + np.int32(x > hi))
        g = np.int32(g + np.int32(x >= lo))
        fl[c] = np.uint8(x >= cut)
    return h, g


@numba.njit(inline="always")
def finite_count(row):
    """How many of row's scores are not -inf (excluded candidates are -inf)."""
    n = np.int32(0)
    for c in range(row.shape[0]):
        n = np.int32(n + np.int32(row[c] != NEG_INF32))
    return n


@numba.njit(inline="always")
def is_positive(p, pos_r):
    """Whether pool index p is one of the row's positives (pos_r: -1 padded)."""
    for jj in range(pos_r.shape[0]):
        if pos_r[jj] == p:
            return True
    return False


@numba.njit(**HELPER)  # (not inlined: called from two sites, rarely)
def flush_band(qr, e, r, thr, higher, equal, qx, qc, qj, n, eps, ys):
    """The queued band members' exact scores (qc: part columns; qj: whose band; qx: their BLAS
    scores, each checked against the bound eps) compared with their positive's exact score.
    Returns the bound's violations."""
    exact_dots(qr, e, np.int64(0), qc, n, ys)
    bad = 0
    for i in range(n):
        y, t = ys[i], thr[r, qj[i]]
        bad += abs(qx[i] - np.float64(y)) > eps
        higher[r, qj[i]] += y > t
        equal[r, qj[i]] += y == t
    return bad


@numba.njit(**HELPER)  # (not inlined: one call a positive and tile; inlined it took ~1 s of the first compile)
def rank_positive(row, qr, e, c0, r, a, j, h, g, thr, his, los, pos, higher, equal, eps, fl, band, bxs, qx, qc, qj,
                  qn, ys):
    """Positive j's exact rank counts over this tile from its counts (h: BLAS scores above its
    band, g: at or above its band's foot): those above the band counted at once (less the row's
    positives among them), those inside queued for an exact recomputation (qx/qc/qj, qn[r] of
    them: recomputed together at the part's end, ``flush_band``, eight chains at a time whatever
    tile they came from; at once when the queue is full). The band is flagged and gathered only
    when it holds more than the row's positives, which are never queued. fl is overwritten.
    Returns the bound's violations."""
    C = row.shape[0]
    hi, lo = his[r, j], los[r, j]
    bad = 0
    higher[r, j] += h
    for jj in range(pos.shape[1]):  # the row's positives above the band were counted: taken back
        p = pos[r, jj]
        if p >= a and p < a + C and row[p - a] > hi:
            higher[r, j] -= 1
    if g - h > positives_within(row, a, pos[r], lo, hi):  # the band: more than positives
        flag_band(row, lo, hi, fl)
        nb = gather_flagged(row, fl, band, bxs)
        for i in range(nb):
            if is_positive(a + band[i], pos[r]):
                continue
            if qn[r] == qx.shape[1]:
                bad += flush_band(qr, e, r, thr, higher, equal, qx[r], qc[r], qj[r], qn[r], eps, ys)
                qn[r] = 0
            qx[r, qn[r]], qc[r, qn[r]], qj[r, qn[r]] = bxs[i], c0 + band[i], j
            qn[r] += 1
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
def sample_cut(row, k, sample):
    """A score that at least k of the row's scores probably reach: ``kernels.fused``'s sampled
    threshold (the m-th largest of every 16th score, m ~ 1.25 k / 16 + 5, kept by insertion:
    about 2k reach it); -inf when the row is too short for a sample (the caller checks the
    count and falls back to every finite score)."""
    t, ns, m = sample_threshold(row, k, sample)
    return np.float64(t)


@numba.njit(inline="always")
def count_ge(px, n, t):
    """How many of px[:n] are >= t (int64 lanes: it vectorises)."""
    c = np.int64(0)
    for j in range(n):
        c += np.int64(px[j] >= t)
    return c


@numba.njit(**HELPER)  # (not inlined: called from three sites, a few times a row)
def kth_bound(px, n, k, slack):
    """A value L that at least k and (unless ties forbid it) at most k + slack of px[:n] reach
    (k <= n): bisection on the value by counting passes, which vectorise and do not branch on
    the data (a quickselect's partitions mispredict about every other value on a top-k's fresh
    entries: the tile scan's selections ran at ~14 ns a value so)."""
    lo, hi = px[0], px[0]
    for j in range(n):
        x = px[j]
        lo = x if x < lo else lo
        hi = x if x > hi else hi
    c_lo = np.int64(n)  # count_ge(lo) = n >= k; count_ge(hi) >= 1
    if count_ge(px, n, hi) >= k:
        return hi
    for _ in range(64):
        if c_lo <= k + slack:
            break
        mid = lo + 0.5 * (hi - lo)
        if mid <= lo or mid >= hi:  # (adjacent values: ties)
            break
        c = count_ge(px, n, mid)
        if c >= k:
            lo, c_lo = mid, c
        else:
            hi = mid
    return lo


@numba.njit(**HELPER)  # (not inlined: three call sites, each a copy to compile; called a few times a row)
def keep_near_top(px, pc, n, k, eps, slack):
    """Cut the pending (BLAS score, column) list to the entries that may still reach the exact
    top-k: at least k have BLAS scores >= L (``kth_bound``: at most k + slack do), so exact scores
    >= L - eps, and an entry below L - 2 eps has k entries exactly above it. In place, in order.
    Returns (n, L)."""
    L = kth_bound(px, n, k, slack)
    cut = down32(L - 2.0 * eps)
    m = 0
    for j in range(n):  # (branch-free: every entry written, the cursor moved by the comparison)
        px[m] = px[j]
        pc[m] = pc[j]
        m += px[j] >= cut
    return m, L


@numba.njit(inline="always")
def topk_cuts(row, k, T, pt, eps, sample):
    """Where the row's pass flags top-k candidates (bit 0 of ``row_pass``): at or above the exact
    buffer's k-th best T - eps and (a lower bound of the k-th best BLAS score so far) - 2 eps,
    that bound taken from the pending list (pt) or from a sample of this tile. Returns (the cut,
    the sample's threshold ``at`` whose count the pass checks (at least k must reach it, else the
    pass is redone with ``fallback``: every finite score above T - eps), fallback, sampled)."""
    cut = down32(T - eps) if T > -np.inf else F32_LOWEST
    if k == 0:
        return np.float32(np.inf), np.float32(np.inf), np.float32(np.inf), False
    if pt > -np.inf:
        return max32(cut, down32(pt - 2.0 * eps)), F32_LOWEST, cut, False
    L = sample_cut(row, k, sample)
    if L == -np.inf:  # a row too short for a sample: every finite score
        return cut, F32_LOWEST, cut, False
    return max32(cut, down32(L - 2.0 * eps)), np.float32(L), cut, True


@numba.njit(**HELPER)  # (not inlined: once a row and tile; inlined it lengthened the first compile)
def append_pending(xs, cols, m, j, c0, k, px, pc, pn, pt, eps):
    """Append selected entries j.. to the pending list (cut to ``keep_near_top`` when full).
    Returns (pn, pt, the first entry not appended: m, or less when the list stays full)."""
    cut = down32(pt - 2.0 * eps) if pt > -np.inf else F32_LOWEST  # (one nextafter a cut, not an entry)
    while j < m:
        if pn == px.shape[0]:
            pn, pt = keep_near_top(px, pc, pn, k, eps, k // 4 + 8)
            if pn == px.shape[0]:  # all near the top (ties): the caller recomputes them first
                return pn, pt, j
            cut = down32(pt - 2.0 * eps)
        px[pn] = xs[j]  # (branch-free: written always, kept when it reaches the cut)
        pc[pn] = c0 + cols[j]
        pn += xs[j] >= cut
        j += 1
    return pn, pt, j


@numba.njit(**HELPER)  # (not inlined: once a row and part; inlined it lengthened the first compile)
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


@numba.njit(**HELPER)  # (not inlined: once a row and tile)
def pend_row(qr, e, a, c0, k, xs, cols, m, last, more, px, pc, pn, pt, bv, bi, bn, bt, r, eps, ys):
    """Row r's selected entries of this tile (xs/cols[:m]) into its pending list; at the part's
    last tile (or when the list stays full of near-ties) the pending entries recomputed exactly
    into the row's buffer (``flush_row``), cut to what may beat the k-th best when parts follow;
    the list cut to a tight bound when long (fewer entries flagged next). Returns the bound's
    violations."""
    bad = 0
    j = 0
    while True:
        pn[r], pt[r], j = append_pending(xs, cols, m, j, c0, k, px[r], pc[r], pn[r], pt[r], eps)
        if j == m and not last:
            break
        if j == m and pn[r] > k:  # the part's last tile: recompute only what may enter
            pn[r], pt[r] = keep_near_top(px[r], pc[r], pn[r], k, eps, 8)
        bn[r], bt[r], b = flush_row(qr, e, a, k, bv[r], bi[r], bn[r] if bn[r] > 0 else 0, bt[r], px[r], pc[r], pn[r],
                                    eps, ys)  # (pt stays a bound: its entries moved to bv)
        bad += b
        pn[r] = 0
        if j == m:
            break
    if pn[r] > k + k // 2 or (pt[r] == -np.inf and pn[r] > k):  # (a tight bound: fewer entries next)
        pn[r], pt[r] = keep_near_top(px[r], pc[r], pn[r], k, eps, 8)
    if last and more and bn[r] > k:  # later parts: only what may beat the k-th best
        bn[r], bt[r] = keep_best(bv[r], bi[r], bn[r], k)
    return bad


@numba.njit(**BODY)
def tile_scan(s, q, e, c0, a, thr, his, los, pos, ex_off, ex_col, want_finite, higher, equal, finite, eps, k, bv,
              bi, bn, bt, px, pc, pn, pt, qx, qc, qj, qn, last, more, out_v, out_i, r0, r1):
    """One visit per row r0 .. r1-1 of the BLAS tile s (rows r0 .. r1-1: s[r - r0]; columns c0 ..
    c0+C-1 of the part e, whose pool indices start at a; q: the batch's B x K; row r's excluded
    tile columns ex_col[ex_off[r]:ex_off[r+1]] become -inf): finite counts (want_finite), exact rank counts
    (his/los: each positive's band, thr +- eps[r] rounded outwards) and the top-k: candidates
    pend in px/pc (pn, pt: their count and bound; pn = 0 at a part's first tile) and, at its last
    tile (``last``), are recomputed exactly into the rows' buffers bv/bi (bn entries, -1 before
    the first part; bt: the k-th best once cut). more: later parts follow; else the top-k is
    sorted into out_v/out_i. One full pass a row (``row_pass``), one more per further positive
    (and per exclusion list).
    e: read-only (one signature whether the pool is a memory map or not). Returns how many
    recomputed scores were beyond the bound."""
    C = s.shape[1]
    width = bv.shape[1] if k > 0 else 0
    bad = 0
    fl = flag_scratch(C)
    sample = np.empty(C // STRIDE + k + 8, dtype=np.float64)
    cols, xs = np.empty(C, dtype=np.int64), np.empty(C, dtype=np.float64)
    band, bxs = np.empty(C + 8, dtype=np.int64), np.empty(C, dtype=np.float64)
    ys = np.empty((C if C > px.shape[1] else px.shape[1]) + 8, dtype=np.float64)
    keys, tmp_k, tmp_v, tmp_i, hist = sort_scratch(width if not more else 0)
    none = np.float32(np.inf)
    for r in range(r0, r1):
        row = s[r - r0]
        for j in range(ex_off[r], ex_off[r + 1]):
            row[ex_col[j]] = NEG_INF32
        if want_finite:
            finite[r] += finite_count(row)
        hi0, lo0 = (his[r, 0], los[r, 0]) if pos[r, 0] >= 0 else (none, none)
        m, h, g = 0, np.int32(0), np.int32(0)
        if k > 0:  # the top-k's candidates flagged with the first positive's counts (the first
            # tile's cut from a sample, checked: at least k reach it; each helper one call site)
            first, at, fallback, sampled = topk_cuts(row, k, bt[r], pt[r], eps[r], sample)
            n_at = np.int32(0)
            if sampled:
                h, g, n_at = row_pass(row, hi0, lo0, first, at, fl)
            if not sampled or n_at < k:  # (after an unlucky sample: every finite score above T - eps)
                h, g = count_flag(row, hi0, lo0, fallback if sampled else first, fl)
            m = gather_flagged(row, fl, cols, xs)
        for j in range(thr.shape[1]):  # (fl is free now)
            if pos[r, j] < 0:
                continue
            if j > 0 or k == 0:  # (the rank counts alone: two counts a score)
                h, g = band_counts(row, his[r, j], los[r, j])
            bad += rank_positive(row, q[r], e, c0, r, a + c0, j, h, g, thr, his, los, pos, higher, equal, eps[r], fl,
                                 band, bxs, qx, qc, qj, qn, ys)
        if last and qn[r] > 0:  # the part's band members, recomputed together
            bad += flush_band(q[r], e, r, thr, higher, equal, qx[r], qc[r], qj[r], qn[r], eps[r], ys)
            qn[r] = 0
        if k == 0:
            continue
        bad += pend_row(q[r], e, a, c0, k, xs, cols, m, last, more, px, pc, pn, pt, bv, bi, bn, bt, r, eps[r], ys)
        if last and not more:
            finish_row(bv[r], bi[r], bn[r], k, out_v[r], out_i[r], keys, tmp_k, tmp_v, tmp_i, hist, row)
    return bad
