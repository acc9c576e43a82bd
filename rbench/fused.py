"""One fused pass over a chunk of scores: the rank counts and the top-k candidates together.

Why: after the GEMM, numpy needs a separate pass over the (queries x candidates) scores for each
quantity the engine keeps (how many candidates score above / equal to each positive, how many
are ranked, which may enter the top-k), and each pass streams the whole matrix from memory. At
d = 128 those passes cost more than the GEMM itself. This kernel walks each row once while it
sits in cache (rows in parallel), so exact evaluation with a top-100 costs little more than the
GEMM (``benchmarks/engine_scale.py``).

It is an accelerator, not a second definition: ``rbench.engine`` keeps its numpy passes as the
reference (``RBENCH_FUSED=0`` selects them; ``tests/test_fused.py`` checks both give identical
results, ties and exclusions included), and falls back to them where numba is not installed.

Conventions (the engine's): the chunk ``s`` holds finite scores, ``-inf`` for excluded
candidates, and covers pool indices ``a .. a+C-1`` of a shared pool, chunks in ascending order.
Positives are *not* masked: the kernel counts them like any candidate and the engine subtracts
their own contribution afterwards, so the top-k sees them as it must. The top-k of each row is
carried across chunks in a buffer kept in ascending pool index; a later candidate enters only
with a strictly higher score than the k-th best so far (an equal score never enters: the lower
pool index wins, as in one selection over everything), and the buffer is cut back to the k best
when it fills; blocks of 16 columns none of which can enter are
skipped after one vectorised test.
"""

from __future__ import annotations

import os
from functools import cache
from typing import Any

import numpy as np


def enabled() -> bool:
    """Whether the fused kernel is used (numba importable and not switched off)."""
    return os.environ.get("RBENCH_FUSED", "1") != "0" and _kernel() is not None


BLOCK = 16  # columns tested at once before any is looked at alone


@cache
def _kernel() -> Any:
    try:
        import numba
    except ImportError:  # numba is optional at run time: the numpy passes take over
        return None

    @numba.njit
    def compact(bv, bi, n, k):
        """Keep the k best of the buffer's n entries (entries sit in ascending pool index, so
        among scores tied at the k-th best the first ones win); returns the new size."""
        if n <= k:
            return n
        t = np.sort(bv[:n])[n - k]  # the k-th best score
        above = 0
        for i in range(n):
            above += bv[i] > t
        room = k - above  # how many of those tied at t stay
        m = 0
        for i in range(n):
            x = bv[i]
            if x > t or (x == t and room > 0):
                if x == t:
                    room -= 1
                bv[m] = x
                bi[m] = bi[i]
                m += 1
        return m

    @numba.njit(parallel=True, cache=True, nogil=True)
    def scan(s, a, thr, count_finite, higher, equal, finite, hv, hi, hn):
        B, C = s.shape
        P = thr.shape[1]
        k = hv.shape[1]
        for r in numba.prange(B):
            row = s[r]
            # counts: one branch-free, vectorised loop per positive over a row held in cache
            for j in range(P):
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
            cap = 8 * k + BLOCK
            bv = np.empty(cap + BLOCK, dtype=hv.dtype)  # entries in ascending pool index
            bi = np.empty(cap + BLOCK, dtype=np.int64)
            n = hn[r]
            # the carried top-k, in ascending pool index (earlier chunks: all lower than this one's)
            order = np.argsort(hi[r, :n])
            for i in range(n):
                bv[i] = hv[r, order[i]]
                bi[i] = hi[r, order[i]]
            c = 0
            floor = -np.inf
            if n < k:  # first chunk: its first 8k candidates enter whatever their score
                while c < C and n < 8 * k:
                    bv[n] = row[c]
                    bi[n] = a + c
                    n += 1
                    c += 1
                if n >= k:
                    n = compact(bv, bi, n, k)
            if n >= k:
                floor = bv[0]
                for i in range(n):
                    floor = min(floor, bv[i])
            while c < C:  # blocks: one vectorised test, then a branch-free append of those that enter
                end = min(c + BLOCK, C)
                hit = False
                for cc in range(c, end):
                    hit |= row[cc] > floor
                if hit:
                    for cc in range(c, end):
                        x = row[cc]
                        bv[n] = x
                        bi[n] = a + cc
                        n += x > floor  # an equal score from a higher pool index never enters
                    if n > cap - BLOCK:
                        n = compact(bv, bi, n, k)
                        floor = bv[0]
                        for i in range(n):
                            floor = min(floor, bv[i])
                c = end
            n = compact(bv, bi, n, k)
            for i in range(n):
                hv[r, i] = bv[i]
                hi[r, i] = bi[i]
            hn[r] = n

    return scan


def scan(s: np.ndarray, a: int, thr: np.ndarray, count_finite: bool, hv: np.ndarray, hi: np.ndarray,
         hn: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Run the kernel over chunk ``s`` (B x C, pool indices from ``a``), updating the top-k heaps
    ``hv``/``hi``/``hn`` (B x k scores, pool indices, sizes) in place. Returns higher, equal
    (B x P, the positives' own contribution included) and finite counts (B)."""
    thr = np.ascontiguousarray(thr, dtype=s.dtype)
    higher = np.zeros(thr.shape, dtype=np.int64)
    equal = np.zeros(thr.shape, dtype=np.int64)
    finite = np.zeros(s.shape[0], dtype=np.int64)
    _kernel()(np.ascontiguousarray(s), int(a), thr, bool(count_finite), higher, equal, finite, hv, hi, hn)
    return higher, equal, finite
