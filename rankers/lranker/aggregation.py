"""Candidate aggregation: a set of candidate embeddings -> K "slot" vectors for the projector.

The paper's encoder (Section 3.1, Appendix "Implementation details") clusters the candidates'
offline embeddings with K-means (scikit-learn MiniBatchKMeans) and represents the set by the K
centroids, concatenated and projected to one soft-prompt vector. Assignments are computed on the
first 128 dimensions (Matryoshka truncation, ``assign_dims``); each centroid is the mean of the
FULL vectors of its cluster.

Choices the paper leaves open, made here:

- Order of the centroids. A concatenation fed to an MLP depends on the order, and K-means labels
  are arbitrary, so centroids are put in a canonical order: larger clusters first, ties by the
  centroid's first assignment coordinate. The projector thus sees "the biggest cluster" in slot 1.
- Fewer than K items (small pools, late test-time-scaling rounds, a 20-item pool split into 10
  parts): every item is its own cluster; empty clusters are dropped; the m < K distinct
  centroids (canonical order) are repeated cyclically to fill K slots. Repeating keeps the
  input's scale independent of m, where zero-padding would make it shrink with the pool size.
- Small sets: a set no larger than one mini-batch (``kmeans_batch_size``, 1024) is clustered with
  plain Lloyd iterations in numpy (k-means++ initialisation, at most 100 iterations) -- what
  MiniBatchKMeans converges to when every batch is the whole set -- because scikit-learn's
  per-call overhead dominated here (~165 ms per 10-item set with torch loaded in the process,
  measured) and test-time scaling clusters thousands of small subsets. Larger sets (the pool,
  training partitions of big pools) use MiniBatchKMeans. ``kmeans_backend=sklearn`` forces
  MiniBatchKMeans for every set.
- Seeds: every clustering call takes an explicit seed (derived from the run seed, the query and
  the part), so results do not depend on batch composition or call order.

Alternatives (Appendix "Comparative Study of K-Means and Alternative Clustering Techniques"), all
producing K slots so the LLM still receives one token:

- ``hierarchical``: Ward agglomerative clustering (scikit-learn) with the same K, on the same
  truncated vectors; centroids of the full vectors. It is O(n^2) in memory, so sets larger than
  ``hierarchical_max_items`` are clustered on a seeded sample and the remaining items join the
  nearest sample-cluster centroid (assignment space).
- ``pca``: candidate vectors are reduced to ``pca_dim`` (256) dimensions by a PCA fitted once
  on the training pool (kept with the checkpoint, so test pools use the same basis), then
  K-means on all reduced dimensions; the slots are the 256-d centroids.
- ``set-encoder``: K candidates are sampled from the set (seeded; all of them, repeated, if fewer)
  and their full vectors are the slots; the model runs a learnable cross-attention over them
  (K learned queries attend to the samples, ``model.SetAttention``) before the projector.
"""

from __future__ import annotations

import warnings
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

METHODS = ("kmeans", "hierarchical", "pca", "set-encoder")


def derive_seed(*parts: object) -> int:
    """A 31-bit seed that depends only on ``parts`` (stable across processes, unlike hash())."""
    return zlib.crc32("\x1f".join(map(str, parts)).encode()) & 0x7FFFFFFF


def seed_stem(*parts: object) -> int:
    """The running CRC of ``parts`` and a separator: ``seed_from_stem(seed_stem(*a), b)`` is
    ``derive_seed(*a, b)``, without joining and hashing ``a`` again for every ``b`` (test-time
    scaling derives one seed per kept subset, ~270 per query)."""
    return zlib.crc32("".join(f"{p}\x1f" for p in parts).encode())


def seed_from_stem(stem: int, last: object) -> int:
    return zlib.crc32(str(last).encode(), stem) & 0x7FFFFFFF


def _assign_view(vectors: np.ndarray, assign_dims: int) -> np.ndarray:
    if assign_dims and assign_dims < vectors.shape[1]:
        return np.ascontiguousarray(vectors[:, :assign_dims], dtype=np.float32)
    return np.ascontiguousarray(vectors, dtype=np.float32)


def centroids_from_labels(vectors: np.ndarray, labels: np.ndarray, assign: np.ndarray, k: int) -> np.ndarray:
    """Means of the full vectors per cluster, canonical order, tiled to ``k`` rows."""
    sizes = np.bincount(labels, minlength=k)
    present = np.flatnonzero(sizes)
    cents = np.stack([vectors[labels == c].mean(axis=0, dtype=np.float64) for c in present])
    first = np.stack([assign[labels == c, 0].mean() for c in present])
    order = np.lexsort((first, -sizes[present]))
    return tile_slots(cents[order], k)


def tile_slots(rows: np.ndarray, k: int) -> np.ndarray:
    """Repeat ``rows`` cyclically to exactly ``k`` rows."""
    if len(rows) == 0:
        raise ValueError("cannot aggregate an empty candidate set")
    return np.asarray(rows[np.arange(k) % len(rows)], dtype=np.float32)


def lloyd_labels(x: np.ndarray, k: int, seed: int, max_iter: int = 100) -> np.ndarray:
    """Exact K-means (k-means++ init, Lloyd iterations) for small sets; cluster labels."""
    rng = np.random.default_rng(seed)
    x = np.asarray(x, dtype=np.float64)
    n = len(x)
    sq = (x * x).sum(1)
    idx = [int(rng.integers(n))]
    d2 = np.maximum(sq - 2 * x @ x[idx[0]] + sq[idx[0]], 0.0)
    for _ in range(1, k):
        total = d2.sum()
        nxt = int(rng.choice(n, p=d2 / total)) if total > 0 else int(rng.integers(n))
        idx.append(nxt)
        d2 = np.minimum(d2, np.maximum(sq - 2 * x @ x[nxt] + sq[nxt], 0.0))
    centres = x[idx].copy()
    labels = np.full(n, -1)
    for _ in range(max_iter):
        dist = sq[:, None] - 2 * x @ centres.T + (centres * centres).sum(1)[None, :]
        new = dist.argmin(axis=1)
        if np.array_equal(new, labels):
            break
        labels = new
        sums = np.zeros_like(centres)
        np.add.at(sums, labels, x)
        counts = np.bincount(labels, minlength=k)
        filled = counts > 0
        centres[filled] = sums[filled] / counts[filled, None]
    return labels


# ------------------------------------------------------------------------------------------
# many sets at once (``kmeans_many.lloyd_many``): the same slots as ``kmeans_slots`` per set
# ------------------------------------------------------------------------------------------


def kmeans_slots_many(vector_sets: Sequence[np.ndarray], k: int, assign_dims: int = 128,
                      seeds: Sequence[int] = (), batch_size: int = 1024, backend: str = "auto",
                      max_iter: int = 100) -> np.ndarray:
    """``kmeans_slots`` of many sets in one call: (S, k, D), set for set the same slots
    (``kmeans_slots_indexed`` over the sets laid end to end)."""
    seeds = list(seeds)  # read once: an iterator would be empty by the time the sets are clustered
    if len(seeds) != len(vector_sets):
        raise ValueError("kmeans_slots_many needs one seed per set")
    if len(vector_sets) == 0:
        return np.zeros((0, k, 0), dtype=np.float32)
    vecs = [np.asarray(v, dtype=np.float32) for v in vector_sets]
    ends = np.cumsum([len(v) for v in vecs])
    subsets = [np.arange(e - len(v), e) for v, e in zip(vecs, ends)]
    return kmeans_slots_indexed(np.concatenate(vecs), subsets, k, assign_dims, seeds, batch_size, backend, max_iter)


def kmeans_slots_indexed(source: np.ndarray, subsets: Sequence[np.ndarray], k: int, assign_dims: int = 128,
                         seeds: Sequence[int] = (), batch_size: int = 1024, backend: str = "auto",
                         max_iter: int = 100) -> np.ndarray:
    """``[kmeans_slots(source[sub], k, assign_dims, seed, ...) for sub, seed in ...]`` as one
    (S, k, D) array, set for set the same slots.

    Sets of at most ``batch_size`` items (backend ``auto``) are clustered together by
    ``kmeans_many.lloyd_many`` (numba, one loop per set, the sets spread over the cores): k-means++
    with each set's draws from its own seeded stream, exactly as ``lloyd_labels`` consumes it,
    then Lloyd iterations; their centroids by ``kmeans_many.centroid_slots``. Every random draw and
    every assignment is checked for a margin far above float64 rounding noise; a set where one is
    not (ties: duplicate points, fewer distinct points than K) is redone by ``kmeans_slots``, as
    are larger sets (MiniBatchKMeans) and sets of <= k items. The assignment view is a slice of
    the source's columns, read in place: nothing of the pool is copied but the clustered rows."""
    seeds = [int(x) for x in seeds]
    if len(seeds) != len(subsets):
        raise ValueError("kmeans_slots_many needs one seed per set")
    S = len(subsets)
    D = source.shape[1] if source.ndim == 2 else 0
    if S == 0:
        return np.zeros((0, k, D), dtype=np.float32)
    subs = [np.asarray(sub, dtype=np.int64).reshape(-1) for sub in subsets]
    ns = np.array([len(sub) for sub in subs])
    if (ns == 0).any():
        raise ValueError("cannot aggregate an empty candidate set")
    out = np.empty((S, k, D), dtype=np.float32)
    done = np.zeros(S, dtype=bool)
    for s in np.flatnonzero(ns <= k):  # every item its own cluster: order by the first assignment coordinate
        v = np.asarray(source[subs[s]], dtype=np.float32)
        first = _assign_view(v[:, :1], 1)[:, 0] if D else np.zeros(ns[s], np.float32)
        out[s] = tile_slots(v[np.argsort(first, kind="stable")], k)
        done[s] = True
    batched = np.flatnonzero((ns > k) & (ns <= batch_size)) if backend == "auto" else np.zeros(0, dtype=np.int64)
    if len(batched):
        from .kmeans_many import centroid_slots, lloyd_many

        offsets = np.r_[0, np.cumsum(ns[batched])]
        items = np.concatenate([subs[s] for s in batched])
        if source.dtype == np.float32 or len(source) <= 2 * len(items):
            V, rows = np.asarray(source, dtype=np.float32), items
        else:  # no float32 copy of a large source: only the rows clustered
            V, rows = np.asarray(source[items], dtype=np.float32), np.arange(len(items))
        dims = assign_dims if 0 < assign_dims < D else D
        labels, ok = lloyd_many(V[:, :dims], rows, offsets, k, [seeds[s] for s in batched], max_iter)
        ambiguous = centroid_slots(V, rows, offsets, labels, k, ok, out, batched)
        done[batched[ok & ~ambiguous]] = True
    for s in np.flatnonzero(~done):
        out[s] = kmeans_slots(np.asarray(source[subs[s]], dtype=np.float32), k, assign_dims, seeds[s],
                              batch_size, backend)
    return out


def kmeans_slots(vectors: np.ndarray, k: int, assign_dims: int = 128, seed: int = 0,
                 batch_size: int = 1024, backend: str = "auto") -> np.ndarray:
    """The paper's aggregation: K-means on truncated vectors, full-vector centroids."""
    vectors = np.asarray(vectors, dtype=np.float32)
    assign = _assign_view(vectors, assign_dims)
    n = len(vectors)
    if n <= k:
        return centroids_from_labels(vectors, np.arange(n), assign, k)
    if backend == "auto" and n <= batch_size:
        return centroids_from_labels(vectors, lloyd_labels(assign, k, seed), assign, k)
    from sklearn.cluster import MiniBatchKMeans

    with warnings.catch_warnings():  # duplicate points: fewer distinct clusters, handled below
        warnings.simplefilter("ignore")
        km = MiniBatchKMeans(n_clusters=k, random_state=seed, batch_size=batch_size, n_init=1)
        labels = km.fit_predict(assign)
    return centroids_from_labels(vectors, labels, assign, k)


def hierarchical_slots(vectors: np.ndarray, k: int, assign_dims: int = 128, seed: int = 0,
                       max_items: int = 20000) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    assign = _assign_view(vectors, assign_dims)
    n = len(vectors)
    if n <= k:
        return centroids_from_labels(vectors, np.arange(n), assign, k)
    from sklearn.cluster import AgglomerativeClustering

    if n > max_items:
        sample = np.sort(np.random.default_rng(seed).choice(n, size=max_items, replace=False))
        sub = AgglomerativeClustering(n_clusters=k, linkage="ward").fit_predict(assign[sample])
        centres = np.stack([assign[sample][sub == c].mean(axis=0) for c in range(k)])
        d2 = (assign**2).sum(1)[:, None] - 2 * assign @ centres.T + (centres**2).sum(1)[None, :]
        labels = d2.argmin(axis=1)
    else:
        labels = AgglomerativeClustering(n_clusters=k, linkage="ward").fit_predict(assign)
    return centroids_from_labels(vectors, labels, assign, k)


def sample_slots(vectors: np.ndarray, k: int, seed: int = 0) -> np.ndarray:
    """Set-encoder input: ``k`` candidates drawn without replacement (all of them if fewer)."""
    n = len(vectors)
    pick = np.sort(np.random.default_rng(seed).choice(n, size=min(k, n), replace=False))
    return tile_slots(np.asarray(vectors[pick], dtype=np.float32), k)


@dataclass
class PCAState:
    """A PCA basis fitted on the training pool (saved with the checkpoint)."""

    mean: np.ndarray
    components: np.ndarray  # (pca_dim, d)

    def transform(self, vectors: np.ndarray) -> np.ndarray:
        return ((np.asarray(vectors, dtype=np.float32) - self.mean) @ self.components.T).astype(np.float32)


def fit_pca(vectors: np.ndarray, dim: int, seed: int = 0, max_fit: int = 100_000) -> PCAState:
    from sklearn.decomposition import PCA

    vectors = np.asarray(vectors, dtype=np.float32)
    if len(vectors) > max_fit:
        vectors = vectors[np.sort(np.random.default_rng(seed).choice(len(vectors), max_fit, replace=False))]
    dim = max(1, min(dim, vectors.shape[1], len(vectors)))
    pca = PCA(n_components=dim, random_state=seed).fit(vectors)
    return PCAState(pca.mean_.astype(np.float32), pca.components_.astype(np.float32))


@dataclass
class Aggregator:
    """Turns a candidate set into (K, slot_dim) slots with the configured method."""

    method: str = "kmeans"
    k: int = 20
    assign_dims: int = 128
    batch_size: int = 1024
    hierarchical_max_items: int = 20000
    backend: str = "auto"
    pca: PCAState | None = None
    stats: dict[str, int] = field(default_factory=lambda: {"calls": 0, "items": 0})

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"unknown aggregation {self.method!r}; known: {', '.join(METHODS)}")

    def slot_dim(self, d: int) -> int:
        if self.method == "pca":
            if self.pca is None:
                raise RuntimeError("aggregation=pca needs fit_pca() on the training pool first")
            return int(self.pca.components.shape[0])
        return d

    def fit(self, pool_vectors: np.ndarray, pca_dim: int, seed: int) -> None:
        if self.method == "pca" and self.pca is None:
            self.pca = fit_pca(pool_vectors, pca_dim, seed)

    def __call__(self, vectors: np.ndarray, seed: int) -> np.ndarray:
        self.stats["calls"] += 1
        self.stats["items"] += len(vectors)
        if self.method == "kmeans":
            return kmeans_slots(vectors, self.k, self.assign_dims, seed, self.batch_size, self.backend)
        if self.method == "hierarchical":
            return hierarchical_slots(vectors, self.k, self.assign_dims, seed, self.hierarchical_max_items)
        if self.method == "pca":
            if self.pca is None:
                raise RuntimeError("aggregation=pca needs fit_pca() on the training pool first")
            return kmeans_slots(self.pca.transform(vectors), self.k, 0, seed, self.batch_size, self.backend)
        return sample_slots(vectors, self.k, seed)

    def many(self, source: np.ndarray, subsets: Sequence[np.ndarray], seeds: Sequence[int]) -> np.ndarray:
        """``[self(source[sub], seed) for sub, seed in zip(subsets, seeds)]`` as one (S, K, slot_dim)
        array, the K-means sets clustered together (``kmeans_slots_many``): the same slots."""
        seeds = [int(x) for x in seeds]
        if len(seeds) != len(subsets):
            raise ValueError("Aggregator.many needs one seed per subset")
        total = int(sum(len(x) for x in subsets))
        self.stats["calls"] += len(subsets)
        self.stats["items"] += total
        if self.method == "kmeans" or self.method == "pca":
            if self.method == "pca" and self.pca is None:
                raise RuntimeError("aggregation=pca needs fit_pca() on the training pool first")
            tf = self.pca.transform if self.method == "pca" and self.pca is not None else None
            dims = 0 if tf is not None else self.assign_dims
            if tf is not None and len(source) > 2 * total:  # transform only what is clustered
                sets = [tf(np.asarray(source[np.asarray(sub)], dtype=np.float32)) for sub in subsets]
                return kmeans_slots_many(sets, self.k, 0, seeds, self.batch_size, self.backend)
            src = tf(source) if tf is not None else source
            return kmeans_slots_indexed(src, subsets, self.k, dims, seeds, self.batch_size, self.backend)
        self.stats["calls"] -= len(subsets)  # counted again by __call__
        self.stats["items"] -= total
        return np.stack([self(np.asarray(source[np.asarray(sub)]), sd) for sub, sd in zip(subsets, seeds)])
