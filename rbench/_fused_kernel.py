"""The numba kernels of ``rbench.fused`` (imported only when the engine first uses them: numba
is a heavy import). Module level, so that numba's on-disk cache keys them reliably.

Speed notes (2-core AMD Zen 3, numba 0.68): a count written as ``h = int32(h + int32(x > t))``
vectorises (8 lanes); a float ``max`` reduction does not (LLVM keeps it scalar), so group maxima
cost about a cycle a score (the first positive's counts ride along with them). Rows are split into one contiguous block per thread,
so that each thread allocates its collection buffer once per call, not once per row."""

from __future__ import annotations

import numba
import numpy as np

_FAST = {"nnan", "nsz", "reassoc"}  # scores are never NaN (the engine checks); -inf is allowed


@numba.njit
def kth_largest(vals, n, k):
    """The k-th largest of vals[:n] (1 <= k <= n) by quickselect on a copy (numba's own
    sorts cost tens of microseconds on a few hundred values; this costs a few)."""
    work = vals[:n].copy()
    want = n - k  # its position in ascending order
    lo, hi = 0, n - 1
    while lo < hi:
        mid = (lo + hi) // 2
        a, b, c = work[lo], work[mid], work[hi]  # median of three as the pivot
        pivot = max(min(a, b), min(max(a, b), c))
        i, j = lo, hi
        while i <= j:
            while work[i] < pivot:
                i += 1
            while work[j] > pivot:
                j -= 1
            if i <= j:
                work[i], work[j] = work[j], work[i]
                i += 1
                j -= 1
        if want <= j:
            hi = j
        elif want >= i:
            lo = i
        else:
            break
    return work[want]


@numba.njit
def keep_best(bv, bi, n, k, hv, hi):
    """Write the k best of the first n buffer entries (held in ascending pool index) to
    hv/hi, in the same order: everything above the k-th best score, then the first of those
    tied with it (the lower pool index wins)."""
    if n <= k:
        for i in range(n):
            hv[i] = bv[i]
            hi[i] = bi[i]
        return n
    t = kth_largest(bv, n, k)
    room = k
    for i in range(n):
        room -= bv[i] > t
    m = 0
    for i in range(n):
        x = bv[i]
        if x > t or (x == t and room > 0):
            if x == t:
                room -= 1
            hv[m] = x
            hi[m] = bi[i]
            m += 1
    return m


@numba.njit(fastmath=_FAST, inline="always")
def count_above(row, t):
    """How many of row's scores are > t and == t (int32 lanes: this loop vectorises)."""
    h = np.int32(0)
    e = np.int32(0)
    for c in range(row.shape[0]):
        x = row[c]
        h = np.int32(h + np.int32(x > t))
        e = np.int32(e + np.int32(x == t))
    return h, e


@numba.njit(fastmath=_FAST, inline="always")
def count_finite(row):
    """How many of row's scores are not -inf (excluded candidates are -inf)."""
    n = np.int32(0)
    for c in range(row.shape[0]):
        n = np.int32(n + np.int32(row[c] != -np.inf))
    return n


@numba.njit(fastmath=_FAST, inline="always")
def count_max(row, lo, hi, t):
    """Over row[lo:hi]: how many scores are > t and == t, and their maximum, in one loop. (A float
    max reduction stays scalar in numba, about 1 cycle a score: measured, the maxima cost the same
    computed alone, so the first positive's counts ride along for free.)"""
    h = 0
    e = 0
    m = -np.inf
    for c in range(lo, hi):
        x = row[c]
        h += x > t
        e += x == t
        m = max(m, x)
    return h, e, m


@numba.njit(inline="always")
def rank_counts(row, r, a, thr, pos, higher, equal, first):
    """Add to higher/equal[r] how many of the chunk's candidates score above / tie with each
    positive from the first-th on (the earlier ones are counted by the caller), then take back
    the positives' own contributions (a positive in this chunk is counted like any candidate)."""
    C = row.shape[0]
    P = thr.shape[1]
    for j in range(first, P):
        h, e = count_above(row, thr[r, j])
        higher[r, j] += h
        equal[r, j] += e
    for j in range(P):
        p = pos[r, j]
        if p >= a and p < a + C:
            v = row[p - a]
            for jj in range(P):
                higher[r, jj] -= v > thr[r, jj]
                equal[r, jj] -= v == thr[r, jj]


@numba.njit(inline="always")
def topk_row(row, a, k, hv, hi, n0, t0, maxima, bv, bi):
    """Merge the chunk row's candidates into the carried top-k hv/hi (n0 entries, ascending pool
    index); returns (new size, how many scores are > t0, == t0). Only candidates at or above a
    lower bound of the chunk's k-th best (the k-th best of its group maxima) and above the carried
    k-th best are collected."""
    C = row.shape[0]
    G = maxima.shape[0]
    size = -(-C // G) if C > 2 * G else C
    n_groups = -(-C // size) if C else 0
    h0 = 0
    e0 = 0
    for g in range(n_groups):
        h, e, maxima[g] = count_max(row, g * size, min(C, (g + 1) * size), t0)
        h0 += h
        e0 += e
    gmin = kth_largest(maxima, n_groups, k) if n_groups >= k and size < C else -np.inf
    carried = -np.inf
    strict = n0 >= k  # a full carried top-k: a later candidate must beat its k-th best
    if strict:
        carried = hv[0]
        for i in range(n0):
            carried = min(carried, hv[i])
    for i in range(n0):  # carried entries first: they hold lower pool indices
        bv[i] = hv[i]
        bi[i] = hi[i]
    n = n0
    for g in range(n_groups):
        m = maxima[g]
        if m < gmin or (strict and m <= carried):
            continue
        for c in range(g * size, min(C, (g + 1) * size)):
            x = row[c]
            if (x >= gmin) and ((x > carried) or not strict):
                bv[n] = x
                bi[n] = a + c
                n += 1
    return keep_best(bv, bi, n, k, hv, hi), h0, e0


@numba.njit(parallel=True, cache=True, nogil=True)
def scan(s, a, thr, pos, want_finite, higher, equal, finite, hv, hi, hn, n_threads):
    """One pass per row of chunk s (pool indices from a): rank counts into higher/equal, finite
    counts into finite (when want_finite), the carried top-k hv/hi/hn updated in place."""
    B, C = s.shape
    P = thr.shape[1]
    k = hv.shape[1]
    n_blocks = max(1, min(B, n_threads))
    for t in numba.prange(n_blocks):
        G = max(4 * k, 256) if k > 0 else 1
        maxima = np.empty(G, dtype=s.dtype)
        bv = np.empty(k + C if k > 0 else 0, dtype=hv.dtype)
        bi = np.empty(k + C if k > 0 else 0, dtype=np.int64)
        for r in range(t * B // n_blocks, (t + 1) * B // n_blocks):
            row = s[r]
            first = 0
            if k > 0 and P > 0:  # the first positive's counts come with the group maxima
                hn[r], h0, e0 = topk_row(row, a, k, hv[r], hi[r], hn[r], thr[r, 0], maxima, bv, bi)
                higher[r, 0] += h0
                equal[r, 0] += e0
                first = 1
            elif k > 0:
                hn[r], h0, e0 = topk_row(row, a, k, hv[r], hi[r], hn[r], np.inf, maxima, bv, bi)
            rank_counts(row, r, a, thr, pos, higher, equal, first)
            if want_finite:
                finite[r] += count_finite(row)


def threads() -> int:
    """How many threads the parallel kernels run on (numba's setting)."""
    return int(numba.get_num_threads())


@numba.njit(parallel=True, cache=True, nogil=True)
def finish(hv, hi, hn, out_v, out_i):
    """Each row's carried top-k in rank order (score descending; ties: the lower pool index,
    which comes first in the carried order, so a stable sort keeps it) into out_v/out_i,
    -inf/-1 beyond a row's size."""
    B, k = hv.shape
    for r in numba.prange(B):
        n = hn[r]
        order = np.argsort(-hv[r, :n], kind="mergesort")
        for i in range(n):
            out_v[r, i] = hv[r, order[i]]
            out_i[r, i] = hi[r, order[i]]
        for i in range(n, k):
            out_v[r, i] = -np.inf
            out_i[r, i] = -1
