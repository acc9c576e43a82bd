"""The numba kernel of ``rbench.fused`` (imported only when the engine first uses it: numba
is a heavy import). Module level, so that numba's on-disk cache keys it reliably."""

from __future__ import annotations

import numba
import numpy as np


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
    hv/hi, unordered: everything above the k-th best score, then the first of those tied
    with it (the lower pool index wins)."""
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

@numba.njit(fastmath={"nnan", "nsz", "reassoc"}, inline="always")
def count_max(row, lo, hi, t):
    """Over row[lo:hi]: how many scores are > t and == t, and their maximum, in one vectorised
    loop (scores are never NaN: the engine checks them; -inf, excluded candidates, is allowed)."""
    h = 0
    e = 0
    m = -np.inf
    for c in range(lo, hi):
        x = row[c]
        h += x > t
        e += x == t
        m = max(m, x)
    return h, e, m


@numba.njit(parallel=True, cache=True, nogil=True)
def scan(s, a, thr, count_finite, higher, equal, finite, hv, hi, hn):
    B, C = s.shape
    P = thr.shape[1]
    k = hv.shape[1]
    # the chunk's columns in groups (G of them when k > 0): the first positive's counts and each
    # group's maximum come out of one pass over the row
    G = max(4 * k, 256) if k > 0 else 1
    size = -(-C // G) if C > 2 * G else C
    n_groups = -(-C // size) if C else 0
    for r in numba.prange(B):
        row = s[r]
        maxima = np.empty(n_groups, dtype=row.dtype)
        t0 = thr[r, 0] if P else np.inf
        h0 = 0
        e0 = 0
        for g in range(n_groups):
            h, e, m = count_max(row, g * size, min(C, (g + 1) * size), t0)
            h0 += h
            e0 += e
            maxima[g] = m
        if P:
            higher[r, 0] += h0
            equal[r, 0] += e0
        for j in range(1, P):  # further positives (graded qrels): one branch-free loop each
            t = thr[r, j]
            h = 0
            e = 0
            for c in range(C):
                x = row[c]
                h += x > t
                e += x == t
            higher[r, j] += h
            equal[r, j] += e
        if count_finite:
            n_fin = 0
            for c in range(C):
                n_fin += row[c] != -np.inf
            finite[r] += n_fin
        if k == 0:
            continue
        n0 = hn[r]
        # a lower bound of this chunk's k-th best: the k-th best group maximum (k of the chunk's
        # scores are at least that); with a full carried top-k, its k-th best too
        gmin = kth_largest(maxima, n_groups, k) if n_groups >= k and size < C else -np.inf
        carried = -np.inf
        strict = False
        if n0 >= k:
            carried = hv[r, 0]
            for i in range(n0):
                carried = min(carried, hv[r, i])
            strict = True
        # collect, in ascending pool index: the carried entries (earlier chunks), then this
        # chunk's candidates that can enter, looked for only in the groups whose maximum can
        bv = np.empty(n0 + C, dtype=hv.dtype)  # untouched beyond what is collected
        bi = np.empty(n0 + C, dtype=np.int64)
        order = np.argsort(hi[r, :n0])
        for i in range(n0):
            bv[i] = hv[r, order[i]]
            bi[i] = hi[r, order[i]]
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
        n = keep_best(bv, bi, n, k, hv[r], hi[r])
        hn[r] = n
