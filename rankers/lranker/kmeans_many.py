"""Exact K-means (k-means++ seeding, Lloyd iterations) of many sets in one numba call.

Test-time scaling clusters hundreds of kept subsets per query (the paper's grid, widths 1-10 x
depths 1-5, is 270 sets per query, most of them 40 items), and training clusters 20 partitions
per step. Set by set in numpy, or padded into batched matrix products, the time went to
temporaries and to numpy's non-BLAS loop for stacked mat-vec products; here each set's rows are
gathered once into a float64 block local to its thread (read in place from the pool: a slice of
its columns, a memory map), the set is one sequential loop over that block, kept in cache, and
the sets are spread over the cores. Sets of at most ``GRAM_SET_MAX`` rows iterate on their own
inner products (an iteration costs n x (points moved)), larger ones on their rows with Elkan's
bounds; distances are taken four at a time (one dot product at a time waits on the adder).

The result is ``aggregation.lloyd_labels`` set for set, not an approximation of it:

- each set's random draws are the ones its seeded ``numpy.random.Generator`` gives
  ``lloyd_labels`` (``streams.seeded_draws``: ``integers(n)`` from one raw 64-bit draw; then one double per
  k-means++ pick, as ``Generator.choice(p=...)`` consumes them);
- the arithmetic differs from numpy's only in summation order, so every decision (each k-means++
  pick against its cumulative probabilities, each point's nearest centre against the second
  nearest) is checked for a margin far above that rounding noise; a set with one decision inside
  the margin (duplicate points, fewer distinct points than K, a near-tie) is reported not ``ok``
  and the caller redoes it with the reference.
"""

from __future__ import annotations

from collections.abc import Sequence

import numba
import numpy as np

from .streams import seeded_draws
from .threads import parallel_ok

MARGIN = 1e-9  # relative gap below which a decision is not trusted (float64 noise is ~1e-13)


@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def _dot(x, i, y, j, a):  # pragma: no cover - compiled (not inlined by numba: the flags must stay its own)
    acc = 0.0
    for t in range(a):
        acc += x[i, t] * y[j, t]
    return acc


@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def _dist_all(xs, i, cent, k, a, sq, cn, dist):  # pragma: no cover - compiled
    """Squared distances of row i to every centre, four centres per pass over the row
    (independent sums: one dot product at a time is bound by the adder's latency)."""
    j = 0
    while j + 4 <= k:
        s0 = 0.0
        s1 = 0.0
        s2 = 0.0
        s3 = 0.0
        for t in range(a):
            v = xs[i, t]
            s0 += v * cent[j, t]
            s1 += v * cent[j + 1, t]
            s2 += v * cent[j + 2, t]
            s3 += v * cent[j + 3, t]
        dist[j] = sq[i] - 2.0 * s0 + cn[j]
        dist[j + 1] = sq[i] - 2.0 * s1 + cn[j + 1]
        dist[j + 2] = sq[i] - 2.0 * s2 + cn[j + 2]
        dist[j + 3] = sq[i] - 2.0 * s3 + cn[j + 3]
        j += 4
    while j < k:
        dist[j] = sq[i] - 2.0 * _dot(xs, i, cent, j, a) + cn[j]
        j += 1


@numba.njit(cache=True, nogil=True)
def _nearest(dist, scale, margin):  # pragma: no cover - compiled
    """(index, value) of the smallest squared distance; index -1 when the second smallest is not
    clear of it by the margin (the caller redoes the set)."""
    best = np.inf
    second = np.inf
    bj = -1
    for j in range(len(dist)):
        v = dist[j]
        if v < best:
            second = best
            best = v
            bj = j
        elif v < second:
            second = v
    if not second - best > margin * (scale + abs(best)):
        return -1, best
    return bj, best


@numba.njit(cache=True, nogil=True)
def _kpp_step(d2, cdf, ip, sq, c, first, a, scale, uu, margin):  # pragma: no cover - compiled
    """One k-means++ step after centre ``c`` (``ip``: every point's inner product with it): each
    point's squared distance to its nearest centre so far, then the next pick (``_kpp_pick``)."""
    n = len(d2)
    for i in range(n):
        v = sq[i] - 2.0 * ip[i] + sq[c]
        if v < 0.0:
            v = 0.0
        if first or v < d2[i]:
            d2[i] = v
    return _kpp_pick(d2, cdf, n, a, scale, uu, margin)


@numba.njit(cache=True, nogil=True)
def _kpp_pick(d2, cdf, n, a, scale, uu, margin):  # pragma: no cover - compiled
    """The k-means++ pick ``Generator.choice(n, p=d2 / d2.sum())`` makes with the uniform ``uu``
    (numpy: cumsum(p), divided by its last value, searched on the right); -1 when the sum is
    (near) zero or ``uu`` falls within the margin of a boundary (the caller redoes the set)."""
    total = 0.0
    for i in range(n):
        total += d2[i]
    if not total > 1e-6 * scale:  # (near) all duplicates of the chosen centres
        return -1
    run = 0.0
    for i in range(n):
        run += d2[i] / total
        cdf[i] = run
    last = cdf[n - 1]
    pick = 0
    for i in range(n):
        cdf[i] /= last
        if cdf[i] <= uu:
            pick += 1
    if pick > n - 1:
        pick = n - 1
    tol = margin + n * a * 1e-15 * scale / total
    if pick > 0 and not uu - cdf[pick - 1] > tol:
        return -1
    if not cdf[pick] - uu > tol:
        return -1
    return pick


@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def _gather(view, items, lo, hi):  # pragma: no cover - compiled
    """The set's assignment rows as one float64 block (n, a), local to the thread (cache-resident
    for the set's passes; the source may be float32, a strided view, a memory map's pages)."""
    n = hi - lo
    a = view.shape[1]
    xs = np.empty((n, a))
    for i in range(n):
        r = items[lo + i]
        for t in range(a):
            xs[i, t] = view[r, t]
    return xs


@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def _gram_local(xs):  # pragma: no cover - compiled
    """Inner products of every pair of the set's rows, symmetric, four rows per pass over a row
    (independent sums keep the FMA units busy). The same four-sum loop as ``_dist_all``, written
    out in each: a shared helper measured 3-8% slower in both (returning a tuple, or writing an
    array slice, kept the sums out of registers; numba's own inlining drops the fastmath flags,
    1.7x slower)."""
    n, a = xs.shape
    g = np.empty((n, n))
    for i in range(n):
        m = 0
        while m + 4 <= i + 1:
            s0 = 0.0
            s1 = 0.0
            s2 = 0.0
            s3 = 0.0
            for t in range(a):
                v = xs[i, t]
                s0 += v * xs[m, t]
                s1 += v * xs[m + 1, t]
                s2 += v * xs[m + 2, t]
                s3 += v * xs[m + 3, t]
            g[i, m] = s0
            g[m, i] = s0
            g[i, m + 1] = s1
            g[m + 1, i] = s1
            g[i, m + 2] = s2
            g[m + 2, i] = s2
            g[i, m + 3] = s3
            g[m + 3, i] = s3
            m += 4
        while m <= i:
            s0 = _dot(xs, i, xs, m, a)
            g[i, m] = s0
            g[m, i] = s0
            m += 1
    return g


@numba.njit(cache=True, nogil=True)
def _one_set(view, items, lo, hi, k, first, u, max_iter, margin, gram_max, labels):  # pragma: no cover
    """One set's k-means++ and Lloyd iterations, labels written into ``labels[lo:hi]``; False when
    a decision fell inside the margin. Sets of at most ``gram_max`` rows iterate on their inner
    products (``_lloyd_gram``), larger ones on their rows (``_lloyd_rows``)."""
    n = hi - lo
    xs = _gather(view, items, lo, hi)
    a = xs.shape[1]
    gram = n <= gram_max
    g = _gram_local(xs) if gram else np.empty((0, 0))
    sq = np.empty(n)
    scale = 0.0
    for i in range(n):
        sq[i] = g[i, i] if gram else _dot(xs, i, xs, i, a)
        if sq[i] > scale:
            scale = sq[i]
    scale += 1e-300
    idx = np.empty(k, dtype=np.int64)
    idx[0] = first
    d2 = np.empty(n)
    cdf = np.empty(n)
    ip = np.empty(n)
    for j in range(1, k):
        c = idx[j - 1]
        if gram:
            pick = _kpp_step(d2, cdf, g[c], sq, c, j == 1, a, scale, u[j - 1], margin)
        else:
            for i in range(n):
                ip[i] = _dot(xs, i, xs, c, a)
            pick = _kpp_step(d2, cdf, ip, sq, c, j == 1, a, scale, u[j - 1], margin)
        if pick < 0:
            return False
        idx[j] = pick
    lab = np.full(n, -1, dtype=np.int64)
    if gram:
        ok = _lloyd_gram(g, sq, scale, idx, k, max_iter, margin, lab)
    else:
        ok = _lloyd_rows(xs, sq, scale, idx, k, max_iter, margin, lab)
    if ok:
        for i in range(n):
            labels[lo + i] = lab[i]
    return ok


@numba.njit(cache=True, nogil=True)
def _lloyd_rows(xs, sq, scale, idx, k, max_iter, margin, lab):  # pragma: no cover - compiled
    """Lloyd iterations from the centres ``xs[idx]`` with Elkan's per-centre lower bounds: a point
    whose upper bound on the distance to its centre stays below its lower bound on the distance
    to each other centre (every bound moved by the centres' shifts) keeps its label without
    computing a distance. The bounds carry a slack far above rounding error and the skip also
    demands the reference's margin, so a skipped point is one whose label ``lloyd_labels`` would
    also keep. (Pruning centre by centre as well computed ~4 distances per open point instead of
    20 but measured 1.6x slower here: its data-dependent branches cost more than the distances.)"""
    n, a = xs.shape
    cent = np.empty((k, a))
    for j in range(k):
        for t in range(a):
            cent[j, t] = xs[idx[j], t]
    ub = np.empty(n)
    dist = np.empty(k)
    lbk = np.empty((n, k))
    cn = np.empty(k)
    prev = np.empty(n, dtype=np.int64)
    shift = np.zeros(k)
    sums = np.empty((k, a))
    cnt = np.empty(k, dtype=np.int64)
    root = np.sqrt(scale)
    for it in range(max_iter):
        for j in range(k):
            cn[j] = _dot(cent, j, cent, j, a)
        tol = 1e-6 * root * (it + 1)
        changed = False
        for i in range(n):
            own = lab[i]
            if it > 0:
                low = np.inf
                for j in range(k):
                    if j != own and lbk[i, j] < low:
                        low = lbk[i, j]
                lo_b = low - tol
                hi_b = ub[i] + tol
                if lo_b > hi_b and lo_b * lo_b - hi_b * hi_b > margin * (scale + hi_b * hi_b):
                    continue
                v = sq[i] - 2.0 * _dot(xs, i, cent, own, a) + cn[own]  # tighten the upper bound
                ub[i] = np.sqrt(max(v, 0.0))
                hi_b = ub[i] + tol
                if lo_b > hi_b and lo_b * lo_b - hi_b * hi_b > margin * (scale + hi_b * hi_b):
                    continue
            _dist_all(xs, i, cent, k, a, sq, cn, dist)
            for j in range(k):
                lbk[i, j] = np.sqrt(max(dist[j], 0.0))
            bj, best = _nearest(dist, scale, margin)
            if bj < 0:
                return False
            ub[i] = np.sqrt(max(best, 0.0))
            if bj != own:
                changed = True
                lab[i] = bj
        if not changed:
            break
        if it == 0:  # the first assignment: the sums from scratch; later, only the points that moved
            sums[:, :] = 0.0
            cnt[:] = 0
            for i in range(n):
                j = lab[i]
                cnt[j] += 1
                for t in range(a):
                    sums[j, t] += xs[i, t]
                prev[i] = j
        else:
            for i in range(n):
                j = lab[i]
                if j != prev[i]:
                    p = prev[i]
                    cnt[p] -= 1
                    cnt[j] += 1
                    for t in range(a):
                        sums[p, t] -= xs[i, t]
                        sums[j, t] += xs[i, t]
                    prev[i] = j
        for j in range(k):
            shift[j] = 0.0
            if cnt[j] > 0:
                d = 0.0
                for t in range(a):
                    c = sums[j, t] / cnt[j]
                    d += (c - cent[j, t]) ** 2
                    cent[j, t] = c
                shift[j] = np.sqrt(d)
        for i in range(n):
            ub[i] += shift[lab[i]]
            for j in range(k):
                lbk[i, j] -= shift[j]
    return True


@numba.njit(cache=True, nogil=True, fastmath={"contract"})
def _add_row(St, j, g, i, n, sign):  # pragma: no cover - compiled
    for r in range(n):
        St[j, r] += sign * g[i, r]


@numba.njit(cache=True, nogil=True)
def _lloyd_gram(g, sq, scale, idx, k, max_iter, margin, lab):  # pragma: no cover - compiled
    """Lloyd iterations from the centres ``idx`` on the set's inner products ``g``: a centre is a
    mean of set members, so x_i . c_j is the mean of the members' inner products with x_i, and
    an iteration costs n x (points moved), not n x K x a."""
    n = len(sq)
    dist = np.empty(k)
    dotc = np.empty((n, k))  # x_i . c_j
    cn = np.empty(k)  # |c_j|^2
    for j in range(k):
        cn[j] = sq[idx[j]]
        for i in range(n):
            dotc[i, j] = g[idx[j], i]
    St = np.zeros((k, n))  # St[j, i]: sum of cluster j's members' inner products with x_i
    cnt = np.zeros(k, dtype=np.int64)
    acc = np.empty(k)
    for _ in range(max_iter):
        changed = False
        for i in range(n):
            for j in range(k):
                dist[j] = sq[i] - 2.0 * dotc[i, j] + cn[j]
            bj, _ = _nearest(dist, scale, margin)
            if bj < 0:
                return False
            old = lab[i]
            if bj != old:
                changed = True
                lab[i] = bj
                cnt[bj] += 1
                _add_row(St, bj, g, i, n, 1.0)
                if old >= 0:
                    cnt[old] -= 1
                    _add_row(St, old, g, i, n, -1.0)
        if not changed:
            break
        acc[:] = 0.0
        for i in range(n):
            acc[lab[i]] += St[lab[i], i]
        for j in range(k):
            if cnt[j] > 0:  # an empty cluster keeps its centre, as in the reference
                inv = 1.0 / cnt[j]
                cn[j] = acc[j] * inv * inv
                for i in range(n):
                    dotc[i, j] = St[j, i] * inv
    return True


@numba.njit(parallel=True, cache=True, nogil=True)
def _all_sets(view, items, offsets, order, block_starts, k, first, u, max_iter, margin, gram_max, labels,
              ok):  # pragma: no cover - compiled
    for b in numba.prange(len(block_starts) - 1):
        for q in range(block_starts[b], block_starts[b + 1]):
            s = order[q]
            if ok[s]:
                ok[s] = _one_set(view, items, offsets[s], offsets[s + 1], k, first[s], u[s], max_iter, margin,
                                 gram_max, labels)


def balanced_blocks(cost: np.ndarray, n_blocks: int) -> tuple[np.ndarray, np.ndarray]:
    """An order of the sets and block boundaries such that each of ``n_blocks`` contiguous blocks
    carries about the same total ``cost`` (longest first, each to the lightest block), so that a
    static split of the blocks over the threads keeps every core busy."""
    n_blocks = max(1, min(n_blocks, len(cost)))
    loads = np.zeros(n_blocks)
    owner = np.empty(len(cost), dtype=np.int64)
    for s in np.argsort(-cost, kind="stable"):
        b = int(loads.argmin())
        owner[s] = b
        loads[b] += cost[s]
    order = np.argsort(owner, kind="stable")
    starts = np.searchsorted(owner[order], np.arange(n_blocks + 1))
    return order.astype(np.int64), starts.astype(np.int64)


GRAM_SET_MAX = 400  # larger sets: their n^2 inner products cost more than the bounded row iterations


def lloyd_many(view: np.ndarray, items: np.ndarray, offsets: np.ndarray, k: int, seeds: Sequence[int],
               max_iter: int = 100) -> tuple[np.ndarray, np.ndarray]:
    """``lloyd_labels`` of every set s (each with more than ``k`` rows), set s being the rows
    ``view[items[offsets[s]:offsets[s + 1]]]`` of an assignment view (float32 or float64, any
    strides: a slice of the source's columns is not copied): labels (rows,) and ``ok`` (sets,),
    False for a set whose labels must come from the reference instead (a draw numpy would
    reject, or a decision inside the margin). Each set's rows are gathered once into a float64
    block local to its thread; sets of at most ``GRAM_SET_MAX`` rows then iterate on their
    inner products (an iteration costs n x (points moved), not n x K x a), larger ones on their
    rows with Elkan's bounds."""
    offsets = np.asarray(offsets, dtype=np.int64)
    items = np.ascontiguousarray(items, dtype=np.int64)
    ns = np.diff(offsets)
    first, u, ok = seeded_draws(seeds, ns, k)
    labels = np.full(int(offsets[-1]) if len(offsets) else 0, -1, dtype=np.int64)
    if view.dtype not in (np.float32, np.float64):
        view = np.asarray(view, dtype=np.float32)
    gram_max = GRAM_SET_MAX
    if parallel_ok():
        nf = ns.astype(np.float64)
        cost = np.where(ns <= gram_max, nf * nf, nf * k * 6.0)
        order, starts = balanced_blocks(cost, 4 * numba.get_num_threads())
        _all_sets(view, items, offsets, order, starts, k, first, u, max_iter, MARGIN, gram_max, labels, ok)
    else:
        for s in np.flatnonzero(ok):
            ok[s] = _one_set(view, items, offsets[s], offsets[s + 1], k, first[s], u[s], max_iter, MARGIN, gram_max,
                             labels)
    return labels, ok


@numba.njit(cache=True, nogil=True)
def _centroid_one(V, rows, lo, hi, labels, k, out):  # pragma: no cover - compiled
    """One set's slots into ``out`` (k, D); False when two equal-sized clusters' keys are too
    close to order (the caller takes the set from the reference)."""
    D = V.shape[1]
    sums = np.zeros((k, D))
    cnt = np.zeros(k, dtype=np.int64)
    key = np.zeros(k)
    for i in range(lo, hi):
        c = labels[i]
        r = rows[i]
        cnt[c] += 1
        key[c] += V[r, 0]
        for t in range(D):
            sums[c, t] += V[r, t]
    order = np.empty(k, dtype=np.int64)
    m = 0
    for c in range(k):
        if cnt[c] > 0:
            key[c] /= cnt[c]
            order[m] = c
            m += 1
    for a in range(1, m):  # insertion sort by (-size, key); stable like numpy's lexsort
        c = order[a]
        b = a - 1
        while b >= 0 and (cnt[order[b]] < cnt[c] or (cnt[order[b]] == cnt[c] and key[order[b]] > key[c])):
            order[b + 1] = order[b]
            b -= 1
        order[b + 1] = c
    big = 0.0
    for a in range(m):
        if abs(key[order[a]]) > big:
            big = abs(key[order[a]])
    for a in range(m - 1):
        c, d = order[a], order[a + 1]
        if cnt[c] == cnt[d] and abs(key[d] - key[c]) <= 1e-5 * (big + 1e-30):
            return False
    for j in range(k):
        c = order[j % m]
        for t in range(D):
            out[j, t] = np.float32(sums[c, t] / cnt[c])
    return True


@numba.njit(parallel=True, cache=True, nogil=True)
def _centroids(V, rows, offsets, labels, k, todo, out, dest, ambiguous):  # pragma: no cover - compiled
    for s in numba.prange(len(offsets) - 1):
        if todo[s]:
            ambiguous[s] = not _centroid_one(V, rows, offsets[s], offsets[s + 1], labels, k, out[dest[s]])


def centroid_slots(V: np.ndarray, rows: np.ndarray, offsets: np.ndarray, labels: np.ndarray, k: int,
                   todo: np.ndarray, out: np.ndarray, dest: np.ndarray) -> np.ndarray:
    """``centroids_from_labels`` of every set s with ``todo[s]`` (its rows ``V[rows[offsets[s]:
    offsets[s + 1]]]``), written as float32 slots into ``out[dest[s]]`` (k, D); returns
    ``ambiguous`` (S,). The float64 cluster sums are the same sequential row sums as the
    reference's ``mean(axis=0, dtype=float64)``; the order key (the mean first coordinate, a
    float32 mean in the reference) is a float64 mean here, so a set where two equal-sized
    clusters have keys too close to order that way is ``ambiguous``: the caller takes it from the
    reference (its row of ``out`` then holds nothing to use)."""
    S = len(offsets) - 1
    ambiguous = np.zeros(S, dtype=np.bool_)
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    offsets = np.asarray(offsets, dtype=np.int64)
    labels = np.ascontiguousarray(labels, dtype=np.int64)
    dest = np.ascontiguousarray(dest, dtype=np.int64)
    todo = np.asarray(todo, dtype=np.bool_)
    if parallel_ok():
        _centroids(V, rows, offsets, labels, k, todo, out, dest, ambiguous)
    else:
        for s in np.flatnonzero(todo):
            ambiguous[s] = not _centroid_one(V, rows, offsets[s], offsets[s + 1], labels, k, out[dest[s]])
    return ambiguous
