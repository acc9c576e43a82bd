"""Exact K-means (k-means++ seeding, Lloyd iterations) of many sets in one numba call.

Test-time scaling clusters hundreds of kept subsets per query (the paper's grid, widths 1-10 x
depths 1-5, is 270 sets per query, most of them 40 items), and training clusters 20 partitions
per step. Set by set in numpy, or padded into batched matrix products, the time went to
temporaries and to numpy's non-BLAS loop for stacked mat-vec products; here each set is one
sequential loop over its own rows, kept in cache, and the sets are spread over the cores.

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


@numba.njit(cache=True, nogil=True)
def _one_set(x, lo, hi, k, first, u, max_iter, margin, labels):  # pragma: no cover - compiled
    """One set's k-means++ and Lloyd iterations, labels written into ``labels[lo:hi]``; False when
    a decision fell inside the margin."""
    n = hi - lo
    a = x.shape[1]
    sq = np.empty(n)
    scale = 0.0
    for i in range(n):
        v = _dot(x, lo + i, x, lo + i, a)
        sq[i] = v
        if v > scale:
            scale = v
    scale += 1e-300
    idx = np.empty(k, dtype=np.int64)
    idx[0] = first
    d2 = np.empty(n)
    cdf = np.empty(n)
    ip = np.empty(n)
    for j in range(1, k):
        c = idx[j - 1]
        for i in range(n):
            ip[i] = _dot(x, lo + i, x, lo + c, a)
        pick = _kpp_step(d2, cdf, ip, sq, c, j == 1, a, scale, u[j - 1], margin)
        if pick < 0:
            return False
        idx[j] = pick
    cent = np.empty((k, a))
    for j in range(k):
        for t in range(a):
            cent[j, t] = x[lo + idx[j], t]
    for i in range(n):
        labels[lo + i] = -1
    return _lloyd_bounded(x, lo, n, k, a, sq, scale, cent, max_iter, margin, labels)


@numba.njit(cache=True, nogil=True)
def _lloyd_bounded(x, lo, n, k, a, sq, scale, cent, max_iter, margin, labels):  # pragma: no cover - compiled
    """Lloyd iterations from ``cent`` with Elkan's per-centre lower bounds: a point whose upper
    bound on the distance to its centre stays below its lower bound on the distance to each
    other centre (every bound moved by the centres' shifts) keeps its label without computing a
    distance. The bounds carry a slack far above rounding error and the skip also demands the
    reference's margin, so a skipped point is one whose label ``lloyd_labels`` would also keep."""
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
            own = labels[lo + i]
            if it > 0:
                low = np.inf
                for j in range(k):
                    if j != own and lbk[i, j] < low:
                        low = lbk[i, j]
                lo_b = low - tol
                hi_b = ub[i] + tol
                if lo_b > hi_b and lo_b * lo_b - hi_b * hi_b > margin * (scale + hi_b * hi_b):
                    continue
                v = sq[i] - 2.0 * _dot(x, lo + i, cent, own, a) + cn[own]  # tighten the upper bound
                ub[i] = np.sqrt(max(v, 0.0))
                hi_b = ub[i] + tol
                if lo_b > hi_b and lo_b * lo_b - hi_b * hi_b > margin * (scale + hi_b * hi_b):
                    continue
            for j in range(k):
                dist[j] = sq[i] - 2.0 * _dot(x, lo + i, cent, j, a) + cn[j]
                lbk[i, j] = np.sqrt(max(dist[j], 0.0))
            bj, best = _nearest(dist, scale, margin)
            if bj < 0:
                return False
            ub[i] = np.sqrt(max(best, 0.0))
            if bj != own:
                changed = True
                labels[lo + i] = bj
        if not changed:
            break
        if it == 0:  # the first assignment: the sums from scratch; later, only the points that moved
            sums[:, :] = 0.0
            cnt[:] = 0
            for i in range(n):
                j = labels[lo + i]
                cnt[j] += 1
                for t in range(a):
                    sums[j, t] += x[lo + i, t]
                prev[i] = j
        else:
            for i in range(n):
                j = labels[lo + i]
                if j != prev[i]:
                    p = prev[i]
                    cnt[p] -= 1
                    cnt[j] += 1
                    for t in range(a):
                        sums[p, t] -= x[lo + i, t]
                        sums[j, t] += x[lo + i, t]
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
            ub[i] += shift[labels[lo + i]]
            for j in range(k):
                lbk[i, j] -= shift[j]
    return True


@numba.njit(cache=True, nogil=True, fastmath={"contract"})
def _add_row(St, j, g, i, n, sign):  # pragma: no cover - compiled
    for r in range(n):
        St[j, r] += sign * g[i, r]


@numba.njit(cache=True, nogil=True)
def _one_set_gram(G, items, lo, hi, k, a, first, u, max_iter, margin, labels):  # pragma: no cover - compiled
    """``_one_set`` from inner products: ``G`` is the Gram matrix of the source vectors and the set
    is ``items[lo:hi]``. A centre is a mean of set members, so x_i . c_j is the mean of the
    members' inner products with x_i: a Lloyd iteration costs n x (points moved), not n x K x a."""
    n = hi - lo
    g = np.empty((n, n))
    for i in range(n):
        pi = items[lo + i]
        for m in range(n):
            g[i, m] = G[pi, items[lo + m]]
    sq = np.empty(n)
    scale = 0.0
    for i in range(n):
        sq[i] = g[i, i]
        if sq[i] > scale:
            scale = sq[i]
    scale += 1e-300
    idx = np.empty(k, dtype=np.int64)
    idx[0] = first
    d2 = np.empty(n)
    cdf = np.empty(n)
    for j in range(1, k):
        c = idx[j - 1]
        pick = _kpp_step(d2, cdf, g[c], sq, c, j == 1, a, scale, u[j - 1], margin)
        if pick < 0:
            return False
        idx[j] = pick
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
    lab = np.full(n, -1, dtype=np.int64)
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
    for i in range(n):
        labels[lo + i] = lab[i]
    return True


@numba.njit(parallel=True, cache=True, nogil=True)
def _all_sets_gram(G, items, offsets, order, block_starts, k, a, first, u, max_iter, margin, labels,
                   ok):  # pragma: no cover
    for b in numba.prange(len(block_starts) - 1):
        for q in range(block_starts[b], block_starts[b + 1]):
            s = order[q]
            if ok[s]:
                ok[s] = _one_set_gram(G, items, offsets[s], offsets[s + 1], k, a, first[s], u[s], max_iter,
                                      margin, labels)


@numba.njit(parallel=True, cache=True, nogil=True)
def _all_sets(x, offsets, order, block_starts, k, first, u, max_iter, margin, labels, ok):  # pragma: no cover
    for b in numba.prange(len(block_starts) - 1):
        for q in range(block_starts[b], block_starts[b + 1]):
            s = order[q]
            if ok[s]:
                ok[s] = _one_set(x, offsets[s], offsets[s + 1], k, first[s], u[s], max_iter, margin, labels)


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


GRAM_SET_MAX = 400  # larger sets: gathering their n x n inner products costs more than the direct path saves


def lloyd_many(offsets: np.ndarray, k: int, seeds: Sequence[int], max_iter: int = 100, *,
               x: np.ndarray | None = None, gram: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
    """``lloyd_labels`` of every set s (each with more than ``k`` rows): labels (rows,) and ``ok``
    (sets,), False for a set whose labels must come from the reference instead (a draw numpy
    would reject, or a decision inside the margin). The rows of set s are either
    ``x[offsets[s]:offsets[s + 1]]`` (assignment views, concatenated) or, with
    ``gram=(G, items, view)``, the rows ``view[items[offsets[s]:offsets[s + 1]]]`` of a source
    whose inner products ``G`` holds (``gram_matrix(view)``): sets of at most ``GRAM_SET_MAX``
    rows then run on inner products (a Lloyd iteration costs n x (points moved), not n x K x a),
    larger ones on their gathered rows."""
    offsets = np.asarray(offsets, dtype=np.int64)
    ns = np.diff(offsets)
    first, u, ok = seeded_draws(seeds, ns, k)
    if gram is None:
        assert x is not None
        return _lloyd_rows(x, offsets, k, first, u, ok, max_iter)
    labels = np.full(int(offsets[-1]) if len(offsets) else 0, -1, dtype=np.int64)
    threads = 4 * numba.get_num_threads()
    G, items, view = gram
    items = np.ascontiguousarray(items, dtype=np.int64)
    small = ns <= GRAM_SET_MAX
    if small.any():
        nf = np.where(small, ns, 0).astype(np.float64)
        order, starts = balanced_blocks(nf * nf + nf * k, threads)
        todo = ok & small
        if parallel_ok():
            _all_sets_gram(G, items, offsets, order, starts, k, view.shape[1], first, u, max_iter, MARGIN,
                           labels, todo)
        else:
            for s in np.flatnonzero(todo):
                todo[s] = _one_set_gram(G, items, offsets[s], offsets[s + 1], k, view.shape[1], first[s], u[s],
                                        max_iter, MARGIN, labels)
        ok = np.where(small, todo, ok)
    direct = ~small
    big = np.flatnonzero(direct)
    if len(big):  # only the large sets' rows, laid end to end
        rows = np.concatenate([items[offsets[s] : offsets[s + 1]] for s in big])
        sub = np.r_[0, np.cumsum(ns[big])]
        sub_labels, sub_ok = _lloyd_rows(view[rows], sub, k, first[big], u[big], ok[big].copy(), max_iter)
        for j, s in enumerate(big):
            labels[offsets[s] : offsets[s + 1]] = sub_labels[sub[j] : sub[j + 1]]
        ok[big] = sub_ok
    return labels, ok


def _lloyd_rows(x: np.ndarray, offsets: np.ndarray, k: int, first: np.ndarray, u: np.ndarray, ok: np.ndarray,
                max_iter: int) -> tuple[np.ndarray, np.ndarray]:
    """``lloyd_many``'s row path for sets laid end to end in ``x``, their draws given."""
    ns = np.diff(offsets)
    labels = np.full(int(offsets[-1]) if len(offsets) else 0, -1, dtype=np.int64)
    x = np.ascontiguousarray(x, dtype=np.float64)
    if parallel_ok():
        order, starts = balanced_blocks(ns.astype(np.float64) * (k + 8), 4 * numba.get_num_threads())
        _all_sets(x, offsets, order, starts, k, first, u, max_iter, MARGIN, labels, ok)
    else:
        for s in np.flatnonzero(ok):
            ok[s] = _one_set(x, offsets[s], offsets[s + 1], k, first[s], u[s], max_iter, MARGIN, labels)
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
def _centroids(V, rows, offsets, labels, k, todo, out, ambiguous):  # pragma: no cover - compiled
    for s in numba.prange(len(offsets) - 1):
        if todo[s]:
            ambiguous[s] = not _centroid_one(V, rows, offsets[s], offsets[s + 1], labels, k, out[s])


def centroid_slots(V: np.ndarray, rows: np.ndarray, offsets: np.ndarray, labels: np.ndarray, k: int,
                   todo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``centroids_from_labels`` of every set s with ``todo[s]`` (its rows ``V[rows[offsets[s]:
    offsets[s + 1]]]``): (S, k, D) float32 slots and ``ambiguous`` (S,). The float64 cluster sums
    are the same sequential row sums as the reference's ``mean(axis=0, dtype=float64)``; the
    order key (the mean first coordinate, a float32 mean in the reference) is a float64 mean
    here, so a set where two equal-sized clusters have keys too close to order that way is
    ``ambiguous``: the caller takes it from the reference."""
    S = len(offsets) - 1
    out = np.zeros((S, k, V.shape[1]), dtype=np.float32)
    ambiguous = np.zeros(S, dtype=np.bool_)
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    offsets = np.asarray(offsets, dtype=np.int64)
    labels = np.ascontiguousarray(labels, dtype=np.int64)
    if parallel_ok():
        _centroids(V, rows, offsets, labels, k, np.asarray(todo, dtype=np.bool_), out, ambiguous)
    else:
        for s in np.flatnonzero(todo):
            ambiguous[s] = not _centroid_one(V, rows, offsets[s], offsets[s + 1], labels, k, out[s])
    return out, ambiguous


def gram_matrix(assign: np.ndarray) -> np.ndarray:
    """Inner products of every pair of (assignment-view) source rows, float64."""
    a = np.asarray(assign, dtype=np.float64)
    return a @ a.T
