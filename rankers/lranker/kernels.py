"""Exact K-means (k-means++ seeding, Lloyd iterations) of many small sets in one numba call.

Test-time scaling clusters hundreds of kept subsets per query (the paper's grid, widths 1-10 x
depths 1-5, is 270 sets per query, most of them 40 items), and training clusters 20 partitions
per step. Set by set in numpy, or padded into batched matrix products, the time went to
temporaries and to numpy's non-BLAS loop for stacked mat-vec products; here each set is one
sequential loop over its own rows, kept in cache, and the sets are spread over the cores.

The result is ``aggregation.lloyd_labels`` set for set, not an approximation of it:

- each set's random draws are the ones its seeded ``numpy.random.Generator`` gives
  ``lloyd_labels`` (``first_index``: ``integers(n)`` from one raw 64-bit draw; then one double per
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

U53 = 1.0 / 9007199254740992.0  # numpy's Generator.random(): (next_uint64 >> 11) * 2**-53
MARGIN = 1e-9  # relative gap below which a decision is not trusted (float64 noise is ~1e-13)


def first_index(raw: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``Generator.integers(n)`` from one raw 64-bit draw each (numpy's buffered Lemire method:
    the low 32 bits); False where numpy would reject that draw (then the set is redone exactly)."""
    lo = (raw & np.uint64(0xFFFFFFFF)).astype(np.uint64)
    nn = n.astype(np.uint64)
    m = lo * nn  # < 2**64: both factors < 2**32
    left = m & np.uint64(0xFFFFFFFF)
    threshold = (np.uint64(1 << 32) - nn) % nn
    return (m >> np.uint64(32)).astype(np.int64), ~((left < nn) & (left < threshold))


@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def _dot(x, i, y, j, a):  # pragma: no cover - compiled (not inlined by numba: the flags must stay its own)
    acc = 0.0
    for t in range(a):
        acc += x[i, t] * y[j, t]
    return acc


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
    for j in range(1, k):
        c = idx[j - 1]
        for i in range(n):
            v = sq[i] - 2.0 * _dot(x, lo + i, x, lo + c, a) + sq[c]
            if v < 0.0:
                v = 0.0
            if j == 1 or v < d2[i]:
                d2[i] = v
        total = 0.0
        for i in range(n):
            total += d2[i]
        if not total > 1e-6 * scale:  # (near) all duplicates of the chosen centres
            return False
        run = 0.0
        for i in range(n):  # Generator.choice: cumsum(p), divided by its last value
            run += d2[i] / total
            cdf[i] = run
        last = cdf[n - 1]
        uu = u[j - 1]
        pick = 0
        for i in range(n):
            cdf[i] /= last
            if cdf[i] <= uu:
                pick += 1
        if pick > n - 1:
            pick = n - 1
        tol = margin + n * a * 1e-15 * scale / total
        if pick > 0 and not uu - cdf[pick - 1] > tol:
            return False
        if not cdf[pick] - uu > tol:
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
            best = np.inf
            second = np.inf
            bj = -1
            for j in range(k):
                v = sq[i] - 2.0 * _dot(x, lo + i, cent, j, a) + cn[j]
                lbk[i, j] = np.sqrt(max(v, 0.0))
                if v < best:
                    second = best
                    best = v
                    bj = j
                elif v < second:
                    second = v
            if not second - best > margin * (scale + abs(best)):
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
        for i in range(n):
            v = sq[i] - 2.0 * g[c, i] + sq[c]
            if v < 0.0:
                v = 0.0
            if j == 1 or v < d2[i]:
                d2[i] = v
        total = 0.0
        for i in range(n):
            total += d2[i]
        if not total > 1e-6 * scale:
            return False
        run = 0.0
        for i in range(n):
            run += d2[i] / total
            cdf[i] = run
        last = cdf[n - 1]
        uu = u[j - 1]
        pick = 0
        for i in range(n):
            cdf[i] /= last
            if cdf[i] <= uu:
                pick += 1
        if pick > n - 1:
            pick = n - 1
        tol = margin + n * a * 1e-15 * scale / total
        if pick > 0 and not uu - cdf[pick - 1] > tol:
            return False
        if not cdf[pick] - uu > tol:
            return False
        idx[j] = pick
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
            best = np.inf
            second = np.inf
            bj = -1
            for j in range(k):
                v = sq[i] - 2.0 * dotc[i, j] + cn[j]
                if v < best:
                    second = best
                    best = v
                    bj = j
                elif v < second:
                    second = v
            if not second - best > margin * (scale + abs(best)):
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


def seeded_draws(seeds: Sequence[int], ns: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each set's first centre (``integers(n)``), its k - 1 k-means++ uniforms and whether numpy
    would have accepted that first draw, from ``default_rng(seed)``'s raw stream."""
    S = len(ns)
    raw = raw_draws(seeds, k) if S else np.zeros((0, k), dtype=np.uint64)
    first, ok = first_index(raw[:, 0], ns)
    u = np.ascontiguousarray((raw[:, 1:] >> np.uint64(11)).astype(np.float64) * U53)
    if k == 1:
        u = np.zeros((S, 1))
    return first, u, ok


GRAM_SET_MAX = 400  # larger sets: gathering their n x n inner products costs more than the direct path saves


def lloyd_many(offsets: np.ndarray, k: int, seeds: Sequence[int], max_iter: int = 100, *,
               x: np.ndarray | None = None, gram: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
               _draws: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
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
    first, u, ok = seeded_draws(seeds, ns, k) if _draws is None else _draws
    ok = ok.copy()
    labels = np.full(int(offsets[-1]) if len(offsets) else 0, -1, dtype=np.int64)
    threads = 4 * numba.get_num_threads()
    if gram is not None:
        G, items, view = gram
        items = np.ascontiguousarray(items, dtype=np.int64)
        small = ns <= GRAM_SET_MAX
        if small.any():
            nf = np.where(small, ns, 0).astype(np.float64)
            order, starts = balanced_blocks(nf * nf + nf * k, threads)
            todo = ok & small
            _all_sets_gram(G, items, offsets, order, starts, k, view.shape[1], first, u, max_iter, MARGIN, labels,
                           todo)
            ok = np.where(small, todo, ok)
        direct = ~small
        big = np.flatnonzero(direct)
        if len(big):  # only the large sets' rows, laid end to end
            rows = np.concatenate([items[offsets[s] : offsets[s + 1]] for s in big])
            sub = np.r_[0, np.cumsum(ns[big])]
            sub_labels, sub_ok = lloyd_many(sub, k, [0] * len(big), max_iter, x=view[rows],
                                            _draws=(first[big], u[big], ok[big]))
            for j, s in enumerate(big):
                labels[offsets[s] : offsets[s + 1]] = sub_labels[sub[j] : sub[j + 1]]
            ok[big] = sub_ok
        return labels, ok
    assert x is not None
    order, starts = balanced_blocks(ns.astype(np.float64) * (k + 8), threads)
    _all_sets(np.ascontiguousarray(x, dtype=np.float64), offsets, order, starts, k, first, u, max_iter, MARGIN,
              labels, ok)
    return labels, ok


@numba.njit(parallel=True, cache=True, nogil=True)
def _centroids(V, rows, offsets, labels, k, todo, out, ambiguous):  # pragma: no cover - compiled
    D = V.shape[1]
    for s in numba.prange(len(offsets) - 1):
        if not todo[s]:
            continue
        sums = np.zeros((k, D))
        cnt = np.zeros(k, dtype=np.int64)
        key = np.zeros(k)
        for i in range(offsets[s], offsets[s + 1]):
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
                ambiguous[s] = True
        if ambiguous[s]:
            continue
        for j in range(k):
            c = order[j % m]
            for t in range(D):
                out[s, j, t] = np.float32(sums[c, t] / cnt[c])


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
    _centroids(V, np.ascontiguousarray(rows, dtype=np.int64), np.asarray(offsets, dtype=np.int64),
               np.ascontiguousarray(labels, dtype=np.int64), k, np.asarray(todo, dtype=np.bool_), out, ambiguous)
    return out, ambiguous


def gram_matrix(assign: np.ndarray) -> np.ndarray:
    """Inner products of every pair of (assignment-view) source rows, float64."""
    a = np.asarray(assign, dtype=np.float64)
    return a @ a.T


# ------------------------------------------------------------------------------------------
# test-time scaling: one elimination round of many queries
# ------------------------------------------------------------------------------------------

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def _splitmix(seed: int, j: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = np.uint64(seed) + (np.asarray(j, dtype=np.uint64) + np.uint64(1)) * _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        return z ^ (z >> np.uint64(31))


def partition_order(seed: int, n: int) -> np.ndarray:
    """The random permutation of an elimination round: Fisher-Yates, position j (from n - 1 down
    to 1) swapped with position splitmix64(seed, j) mod (j + 1). It depends only on (seed, n);
    ``kernels._shuffle`` is the same loop compiled (this one is the readable reference)."""
    perm = np.arange(n, dtype=np.int64)
    draws = _splitmix(seed, np.arange(n))
    for j in range(n - 1, 0, -1):
        r = int(draws[j] % np.uint64(j + 1))
        perm[j], perm[r] = perm[r], perm[j]
    return perm


@numba.njit(cache=True, nogil=True)
def _shuffle(seed, n):  # pragma: no cover - compiled; the same permutation as partition_order
    perm = np.arange(n)
    s = np.uint64(seed)
    for j in range(n - 1, 0, -1):
        z = s + np.uint64(j + 1) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
        r = np.int64(z % np.uint64(j + 1))
        t = perm[j]
        perm[j] = perm[r]
        perm[r] = t
    return perm


@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def _score(vectors, r, cur, i):  # pragma: no cover - compiled
    acc = 0.0
    for t in range(vectors.shape[1]):
        acc += np.float64(vectors[r, t]) * np.float64(cur[i, t])
    return acc


@numba.njit(cache=True, nogil=True)
def _scores_of(vectors, items, e):  # pragma: no cover - compiled
    out = np.empty(len(items))
    for j in range(len(items)):
        out[j] = _score(vectors, items[j], e, 0)
    return out


def candidate_scores(vectors: np.ndarray, items: np.ndarray, e: np.ndarray) -> np.ndarray:
    """<e, vectors[c]> for c in ``items``, float64, by the arithmetic of ``eliminate_many`` (the
    same bits, so that the per-query reference sees the same ties)."""
    return _scores_of(np.asarray(vectors), np.ascontiguousarray(items, dtype=np.int64),
                      np.ascontiguousarray(np.asarray(e, dtype=np.float32).reshape(1, -1)))


@numba.njit(parallel=True, cache=True, nogil=True)
def _eliminate_all(vectors, cur, surv, offsets, seeds, width, frac, min_keep, kept, part_sizes):  # pragma: no cover - compiled
    for i in numba.prange(len(offsets) - 1):
        lo, hi = offsets[i], offsets[i + 1]
        n = hi - lo
        if n == 0:
            continue
        sc = np.empty(n)
        for j in range(n):
            sc[j] = _score(vectors, surv[lo + j], cur, i)
        parts = width if min_keep <= 0 else max(1, min(width, n // min_keep))
        perm = _shuffle(seeds[i], n)
        base, extra = n // parts, n % parts
        start = 0
        w = lo
        for p in range(parts):
            size = base + (1 if p < extra else 0)
            if size == 0:
                continue
            pos = perm[start : start + size]
            start += size
            n_keep = max(1, min_keep, int(np.ceil(size * frac - 1e-9)))
            if n_keep > size:
                n_keep = size
            part_sizes[i, p] = n_keep
            _top(surv, lo, sc, pos, n_keep, kept, w)
            w += n_keep


@numba.njit(cache=True, nogil=True)
def _top(surv, lo, sc, pos, n_keep, kept, w):  # pragma: no cover - compiled
    """The ``n_keep`` best of the part ``pos`` by (score descending, item ascending), in that
    order, written to ``kept[w:w + n_keep]``: a partition to the n_keep-th score, then a sort of
    the few kept (not of the whole part)."""
    size = len(pos)
    if n_keep < size:
        neg = np.empty(size)
        for j in range(size):
            neg[j] = -sc[pos[j]]
        thr = np.partition(neg, n_keep - 1)[n_keep - 1]  # the n_keep-th best score, negated
        cand = np.empty(size, dtype=np.int64)
        m = 0
        for j in range(size):  # everything at least as good as the threshold (ties included)
            if -sc[pos[j]] <= thr:
                cand[m] = pos[j]
                m += 1
        cand = cand[:m]
    else:
        cand = pos.copy()
    items = surv[lo + cand]
    by_item = np.argsort(items, kind="mergesort")
    neg2 = np.empty(len(cand))
    for j in range(len(cand)):
        neg2[j] = -sc[cand[by_item[j]]]
    best = by_item[np.argsort(neg2, kind="mergesort")]  # by score, ties by the lower item
    for j in range(n_keep):
        kept[w + j] = items[best[j]]


def eliminate_many(vectors: np.ndarray, cur: np.ndarray, survivors: np.ndarray, offsets: np.ndarray,
                   seeds: Sequence[int], width: int, keep: float, min_keep: int) -> tuple[np.ndarray, np.ndarray]:
    """One elimination round (``scaling.eliminate``) of every query i: its survivors
    ``survivors[offsets[i]:offsets[i + 1]]`` scored by <cur[i], vectors[c]> (float64 sums), split
    by ``partition_order(seeds[i], n)``. Returns the kept items (laid out at the same offsets,
    each query's kept subsets one after the other) and the kept subsets' sizes (queries, width;
    0 for a part not used)."""
    frac = keep if keep > 0 else 1.0 / width
    offsets = np.asarray(offsets, dtype=np.int64)
    kept = np.full(len(survivors), -1, dtype=np.int64)
    sizes = np.zeros((len(offsets) - 1, width), dtype=np.int64)
    _eliminate_all(np.asarray(vectors), np.ascontiguousarray(cur, dtype=np.float32),
                   np.ascontiguousarray(survivors, dtype=np.int64), offsets,
                   np.asarray([int(s) for s in seeds], dtype=np.uint64), int(width), float(frac), int(min_keep),
                   kept, sizes)
    return kept, sizes


# ------------------------------------------------------------------------------------------
# numpy's default_rng(seed).bit_generator.random_raw(k), for many seeds at once
# ------------------------------------------------------------------------------------------

_M32 = np.uint64(0xFFFFFFFF)
_PCG_MULT = (np.uint64(0x2360ED051FC65DA4), np.uint64(0x4385DF649FCCF645))


def _u32(x: np.ndarray) -> np.ndarray:
    return x & _M32


def _mulhi64(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """High 64 bits of the 128-bit products a * b (uint64 arrays), from 32-bit halves."""
    a_lo, a_hi, b_lo, b_hi = a & _M32, a >> np.uint64(32), b & _M32, b >> np.uint64(32)
    ll, lh, hl, hh = a_lo * b_lo, a_lo * b_hi, a_hi * b_lo, a_hi * b_hi
    mid = (ll >> np.uint64(32)) + (lh & _M32) + (hl & _M32)
    return hh + (lh >> np.uint64(32)) + (hl >> np.uint64(32)) + (mid >> np.uint64(32))


def _mul128(a_hi: np.ndarray, a_lo: np.ndarray, b_hi: np.uint64, b_lo: np.uint64) -> tuple[np.ndarray, np.ndarray]:
    lo = a_lo * b_lo
    hi = _mulhi64(a_lo, np.full_like(a_lo, b_lo)) + a_hi * b_lo + a_lo * b_hi
    return hi, lo


def _add128(a_hi, a_lo, b_hi, b_lo):
    lo = a_lo + b_lo
    return a_hi + b_hi + (lo < a_lo).astype(np.uint64), lo


def raw_draws(seeds: Sequence[int], k: int) -> np.ndarray:
    """(len(seeds), k) uint64: ``np.random.default_rng(s).bit_generator.random_raw(k)`` for each
    seed s in [0, 2**32), computed together: numpy's SeedSequence (a pool of 4 words mixed from
    the one entropy word, then ``generate_state(4, uint64)``) seeding PCG64 (128-bit LCG, XSL-RR
    output), vectorised over the seeds. Bit for bit numpy's stream (tested against it); about
    50x faster than constructing one Generator per set, which test-time scaling did 270 times
    per query."""
    s = np.asarray([int(x) for x in seeds], dtype=np.int64)
    if len(s) and (s.min() < 0 or s.max() > 0xFFFFFFFF):
        return np.stack([np.random.default_rng(int(x)).bit_generator.random_raw(k) for x in seeds])
    with np.errstate(over="ignore"):
        ent = s.astype(np.uint64)
        hash_a = np.uint64(0x43B0D7E5)

        def hashmix(v: np.ndarray, const: np.uint64) -> tuple[np.ndarray, np.uint64]:
            v = _u32(v ^ const)
            const = np.uint64((int(const) * 0x931E8875) & 0xFFFFFFFF)
            v = _u32(v * const)
            return _u32(v ^ (v >> np.uint64(16))), const

        def mix(x: np.ndarray, y: np.ndarray) -> np.ndarray:
            r = _u32(_u32(np.uint64(0xCA01F9DD) * x) - _u32(np.uint64(0x4973F715) * y))
            return _u32(r ^ (r >> np.uint64(16)))

        pool = []
        for i in range(4):
            v, hash_a = hashmix(ent if i == 0 else np.zeros_like(ent), hash_a)
            pool.append(v)
        for i_src in range(4):
            for i_dst in range(4):
                if i_src != i_dst:
                    h, hash_a = hashmix(pool[i_src], hash_a)
                    pool[i_dst] = mix(pool[i_dst], h)
        hash_b = 0x8B51F9DD
        words = []
        for i in range(8):  # generate_state(4, uint64): 8 uint32 words, cycling over the pool
            v = _u32(pool[i % 4] ^ np.uint64(hash_b))
            hash_b = (hash_b * 0x58F38DED) & 0xFFFFFFFF
            v = _u32(v * np.uint64(hash_b))
            words.append(_u32(v ^ (v >> np.uint64(16))))
        w64 = [words[2 * i] | (words[2 * i + 1] << np.uint64(32)) for i in range(4)]
        # pcg64_set_seed: state = 0; inc = (initseq << 1) | 1; step; state += initstate; step
        init_hi, init_lo, seq_hi, seq_lo = w64
        inc_hi = (seq_hi << np.uint64(1)) | (seq_lo >> np.uint64(63))
        inc_lo = (seq_lo << np.uint64(1)) | np.uint64(1)
        st_hi, st_lo = inc_hi.copy(), inc_lo.copy()  # 0 * mult + inc
        st_hi, st_lo = _add128(st_hi, st_lo, init_hi, init_lo)
        st_hi, st_lo = _add128(*_mul128(st_hi, st_lo, *_PCG_MULT), inc_hi, inc_lo)
        out = np.empty((len(s), k), dtype=np.uint64)
        for j in range(k):
            st_hi, st_lo = _add128(*_mul128(st_hi, st_lo, *_PCG_MULT), inc_hi, inc_lo)
            x = st_hi ^ st_lo
            rot = st_hi >> np.uint64(58)
            out[:, j] = (x >> rot) | (x << ((np.uint64(64) - rot) & np.uint64(63)))
    return out
