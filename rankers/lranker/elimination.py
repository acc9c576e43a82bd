"""One elimination round of graph test-time scaling for many queries, in numba (the per-query
reference is ``scaling.eliminate``): score the survivors, split them at random, keep each part's
best."""

from __future__ import annotations

from collections.abc import Sequence

import numba
import numpy as np

from .threads import parallel_ok

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
    ``_shuffle`` is the same loop compiled (this one is the readable reference)."""
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


@numba.njit(cache=True, nogil=True)
def _eliminate_one(vectors, cur, surv, lo, hi, i, seed, width, frac, min_keep, kept, part_sizes):  # pragma: no cover
    """Query i's round: its survivors ``surv[lo:hi]`` scored, shuffled, split, each part's best kept."""
    n = hi - lo
    if n == 0:
        return
    sc = np.empty(n)
    for j in range(n):
        sc[j] = _score(vectors, surv[lo + j], cur, i)
    parts = width if min_keep <= 0 else max(1, min(width, n // min_keep))
    perm = _shuffle(seed, n)
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


@numba.njit(parallel=True, cache=True, nogil=True)
def _eliminate_all(vectors, cur, surv, offsets, seeds, width, frac, min_keep, kept, part_sizes):  # pragma: no cover
    for i in numba.prange(len(offsets) - 1):
        _eliminate_one(vectors, cur, surv, offsets[i], offsets[i + 1], i, seeds[i], width, frac, min_keep, kept,
                       part_sizes)


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
    args = (np.asarray(vectors), np.ascontiguousarray(cur, dtype=np.float32),
            np.ascontiguousarray(survivors, dtype=np.int64))
    seeds_u = np.asarray([int(s) for s in seeds], dtype=np.uint64)
    if parallel_ok():
        _eliminate_all(*args, offsets, seeds_u, int(width), float(frac), int(min_keep), kept, sizes)
    else:  # a forked worker (``threads.parallel_ok``): the queries one after the other
        for i in range(len(offsets) - 1):
            _eliminate_one(*args, offsets[i], offsets[i + 1], i, seeds_u[i], int(width), float(frac), int(min_keep),
                           kept, sizes)
    return kept, sizes


