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
# batched exact Lloyd: many small sets at once, the same result as ``lloyd_labels`` per set
# ------------------------------------------------------------------------------------------

_U53 = 1.0 / 9007199254740992.0  # numpy's Generator.random(): (next_uint64 >> 11) * 2**-53
_MARGIN = 1e-9  # relative gap below which a batched decision is not trusted (float64 noise is ~1e-13)
_BUCKET_ELEMENTS = 1 << 22  # float64 elements of one padded (sets, items, dims) block


def _first_index(raw: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``Generator.integers(n)`` from one raw 64-bit draw each (numpy's buffered Lemire method:
    the low 32 bits); False where numpy would reject that draw (then the set is redone exactly)."""
    lo = (raw & np.uint64(0xFFFFFFFF)).astype(np.uint64)
    nn = n.astype(np.uint64)
    m = lo * nn  # < 2**64: both factors < 2**32
    left = m & np.uint64(0xFFFFFFFF)
    threshold = (np.uint64(1 << 32) - nn) % nn
    return (m >> np.uint64(32)).astype(np.int64), ~((left < nn) & (left < threshold))


def _lloyd_block(x: np.ndarray, n: np.ndarray, k: int, seeds: Sequence[int],
                 max_iter: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact K-means of S padded sets ``x`` (S, m, a) float64 with ``n`` (S,) real rows each
    (all > k): labels (S, m) and a mask of the sets whose every decision (k-means++ draw, each
    assignment) had a margin far above rounding noise, so ``lloyd_labels`` would take them too."""
    S, m, _ = x.shape
    valid = np.arange(m)[None, :] < n[:, None]
    ok = np.ones(S, dtype=bool)
    raw = np.stack([np.random.default_rng(int(s)).bit_generator.random_raw(k) for s in seeds])
    sq = (x * x).sum(2)  # (S, m), the same per-row sums as lloyd_labels
    scale = sq.max(1) + 1e-300
    x2 = 2 * x
    rows = np.arange(S)
    first, good = _first_index(raw[:, 0], n)
    ok &= good
    idx = np.empty((S, k), dtype=np.int64)
    idx[:, 0] = first
    d2 = None
    u = (raw[:, 1:] >> np.uint64(11)).astype(np.float64) * _U53
    for j in range(1, k):
        c = idx[:, j - 1]
        new = np.maximum(sq - (x2 @ x[rows, c][:, :, None])[:, :, 0] + sq[rows, c][:, None], 0.0)
        new[~valid] = 0.0
        d2 = new if d2 is None else np.minimum(d2, new)
        total = d2.sum(1)
        ok &= total > 1e-6 * scale  # (near) all duplicates of the chosen centres: redo exactly
        safe = np.where(total > 0, total, 1.0)
        cdf = np.cumsum(d2 / safe[:, None], axis=1)
        cdf /= np.where(ok, cdf[rows, n - 1], 1.0)[:, None]
        pick = np.minimum((cdf <= u[:, j - 1 : j]).sum(1), n - 1)
        lo = np.where(pick > 0, cdf[rows, np.maximum(pick - 1, 0)], -np.inf)
        # each d2 may differ from lloyd_labels' by ~a * eps * |x|^2 (another summation order)
        tol = _MARGIN + n * x.shape[2] * 1e-15 * scale / safe
        ok &= (u[:, j - 1] - lo > tol) & (cdf[rows, pick] - u[:, j - 1] > tol)
        idx[:, j] = pick
    centres = x[rows[:, None], idx]  # (S, k, a)
    labels = np.full((S, m), -1, dtype=np.int64)
    eye = np.eye(k, dtype=np.float64)
    # working copies of the sets still iterating, compacted when half of them have converged
    act = np.flatnonzero(ok)
    wx, wx2, wsq, wva, wsc, wc, wl = x[act], x2[act], sq[act], valid[act], scale[act], centres[act], labels[act]
    pos = np.arange(len(act))
    for _ in range(max_iter):
        if len(pos) == 0:
            break
        if len(pos) <= len(act) // 2:
            labels[act] = wl
            act = act[pos]
            wx, wx2, wsq, wva, wsc, wc, wl = (w[pos] for w in (wx, wx2, wsq, wva, wsc, wc, wl))
            pos = np.arange(len(act))
        sel = slice(None) if len(pos) == len(act) else pos
        c, va = wc[sel], wva[sel]
        ct = np.ascontiguousarray(c.transpose(0, 2, 1))
        dist = wsq[sel][:, :, None] - wx2[sel] @ ct + (c * c).sum(2)[:, None, :]
        two = np.partition(dist, 1, axis=2)[:, :, :2] if k > 1 else np.concatenate([dist, dist + np.inf], 2)
        gap = (two[:, :, 1] - two[:, :, 0]) > _MARGIN * (wsc[sel][:, None] + np.abs(two[:, :, 0]))
        sure = (gap | ~va).all(1)
        ok[act[pos[~sure]]] = False
        new = dist.argmin(axis=2)
        new[~va] = -1
        moved = (new != wl[sel]).any(1) & sure
        pos, new = pos[moved], new[moved]
        if len(pos) == 0:
            break
        wl[pos] = new
        onehot = eye[np.maximum(new, 0)] * (new >= 0)[:, :, None]  # (A, m, k)
        counts = onehot.sum(1)
        sums = np.ascontiguousarray(onehot.transpose(0, 2, 1)) @ wx[pos]
        filled = counts > 0
        upd = wc[pos]
        upd[filled] = sums[filled] / counts[filled][:, None]
        wc[pos] = upd
    labels[act] = wl
    return labels, ok


def _slots_from_labels(vectors: Sequence[np.ndarray], firsts: Sequence[np.ndarray], labels: Sequence[np.ndarray],
                       k: int) -> np.ndarray:
    """``centroids_from_labels`` for many sets at once: (S, k, D). The float64 cluster sums are
    the same sequential row sums as ``mean(axis=0)``; the tie-breaking key (mean first
    assignment coordinate, float32 in the reference) is taken from the reference for any set
    where two equal-sized clusters have keys too close to order by a float64 mean."""
    S = len(vectors)
    D = vectors[0].shape[1]
    out = np.empty((S, k, D), dtype=np.float32)
    sizes = np.array([len(v) for v in vectors])
    set_of = np.repeat(np.arange(S), sizes)
    lab = np.concatenate(labels)
    key = set_of * k + lab
    order = np.argsort(key, kind="stable")
    counts = np.bincount(key, minlength=S * k)
    present = np.flatnonzero(counts)
    starts = np.r_[0, np.cumsum(counts[present])[:-1]]
    full = np.concatenate(vectors)[order].astype(np.float64)
    sums = np.add.reduceat(full, starts, axis=0)
    means = sums / counts[present][:, None]
    f64 = np.add.reduceat(np.concatenate(firsts)[order].astype(np.float64), starts) / counts[present]
    owner = present // k
    bounds = np.searchsorted(owner, np.arange(S + 1))
    for s in range(S):
        a, b = bounds[s], bounds[s + 1]
        sz, fk = counts[present[a:b]], f64[a:b]
        o = np.lexsort((fk, -sz))
        ssz, sf = sz[o], fk[o]
        close = (ssz[1:] == ssz[:-1]) & (np.abs(sf[1:] - sf[:-1]) <= 1e-5 * (np.abs(sf).max() + 1e-30))
        if close.any():
            first = np.array([firsts[s][labels[s] == c].mean() for c in present[a:b] - s * k])
            o = np.lexsort((first, -sz))
        out[s] = tile_slots(means[a:b][o], k)
    return out


def kmeans_slots_many(vector_sets: Sequence[np.ndarray], k: int, assign_dims: int = 128,
                      seeds: Sequence[int] = (), batch_size: int = 1024, backend: str = "auto",
                      max_iter: int = 100) -> np.ndarray:
    """``kmeans_slots`` of many sets in one call: (S, k, D), set for set the same slots.

    Sets of at most ``batch_size`` items (backend ``auto``) are clustered together: padded
    blocks of similar sizes run k-means++ (each set's draws come from its own seeded stream,
    exactly as ``lloyd_labels`` consumes it) and Lloyd iterations as batched matrix products.
    Every random draw and every assignment is checked for a margin far above float64 rounding
    noise; a set where one is not (ties: duplicate points, fewer distinct points than K) is
    redone by ``kmeans_slots``, as are larger sets (MiniBatchKMeans) and sets of <= k items."""
    seeds = list(seeds)
    if len(seeds) != len(vector_sets):
        raise ValueError("kmeans_slots_many needs one seed per set")
    S = len(vector_sets)
    if S == 0:
        return np.zeros((0, k, 0), dtype=np.float32)
    vecs = [np.asarray(v, dtype=np.float32) for v in vector_sets]
    ns = np.array([len(v) for v in vecs])
    if (ns == 0).any():
        raise ValueError("cannot aggregate an empty candidate set")
    out: list[np.ndarray | None] = [None] * S
    small = np.flatnonzero(ns <= k)
    for s in small:  # every item its own cluster: order by the first assignment coordinate
        first = _assign_view(vecs[s][:, :1], 1)[:, 0] if vecs[s].shape[1] else np.zeros(ns[s], np.float32)
        out[s] = tile_slots(vecs[s][np.argsort(first, kind="stable")], k)
    batched = np.flatnonzero((ns > k) & (ns <= batch_size)) if backend == "auto" else np.zeros(0, dtype=np.int64)
    done = set(small.tolist())
    if len(batched):
        a_dim = _assign_view(vecs[batched[0]][:1], assign_dims).shape[1]
        by_size = batched[np.argsort(ns[batched], kind="stable")]
        pos = 0
        while pos < len(by_size):  # blocks of similar sizes: padding <= 25% + 8 rows
            lo = ns[by_size[pos]]
            end = pos + 1
            while (end < len(by_size) and ns[by_size[end]] <= lo * 1.25 + 8
                   and (end - pos + 1) * ns[by_size[end]] * a_dim <= _BUCKET_ELEMENTS):
                end += 1
            block = by_size[pos:end]
            pos = end
            m = int(ns[block].max())
            x = np.zeros((len(block), m, a_dim), dtype=np.float64)
            assigns = []
            for i, s in enumerate(block):
                av = _assign_view(vecs[s], assign_dims)
                assigns.append(av)
                x[i, : ns[s]] = av
            labels, ok = _lloyd_block(x, ns[block], k, [seeds[s] for s in block], max_iter)
            keep = np.flatnonzero(ok)
            if len(keep):
                res = _slots_from_labels([vecs[block[i]] for i in keep], [assigns[i][:, 0] for i in keep],
                                         [labels[i, : ns[block[i]]] for i in keep], k)
                for j, i in enumerate(keep):
                    out[block[i]] = res[j]
                    done.add(int(block[i]))
    for s in range(S):
        if s not in done:
            out[s] = kmeans_slots(vecs[s], k, assign_dims, seeds[s], batch_size, backend)
    return np.stack(out)  # type: ignore[arg-type]


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
        self.stats["calls"] += len(subsets)
        self.stats["items"] += int(sum(len(x) for x in subsets))
        if self.method == "kmeans" or self.method == "pca":
            if self.method == "pca" and self.pca is None:
                raise RuntimeError("aggregation=pca needs fit_pca() on the training pool first")
            tf = self.pca.transform if self.method == "pca" and self.pca is not None else None
            sets = [np.asarray(source[np.asarray(sub)], dtype=np.float32) for sub in subsets]
            if tf is not None:
                sets = [tf(x) for x in sets]
            return kmeans_slots_many(sets, self.k, 0 if tf is not None else self.assign_dims, seeds,
                                     self.batch_size, self.backend)
        self.stats["calls"] -= len(subsets)  # counted again by __call__
        self.stats["items"] -= int(sum(len(x) for x in subsets))
        return np.stack([self(np.asarray(source[np.asarray(sub)]), sd) for sub, sd in zip(subsets, seeds)])
