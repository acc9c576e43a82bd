"""The batched K-means (``aggregation.kmeans_slots_many`` / ``Aggregator.many``) against the
set-by-set reference (``kmeans_slots``): the same slots, bit for bit, so that test-time scaling and
training give the same results whichever path clusters their sets (fast, numpy only)."""

from __future__ import annotations

import numpy as np
import pytest

from rbench_rankers.lranker.aggregation import Aggregator, derive_seed, kmeans_slots, kmeans_slots_many
from rbench_rankers.lranker.scaling import graph_tts
from rbench_rankers.lranker.train import PartitionSampler


def random_sets(n_sets: int, d: int, seed: int) -> list[np.ndarray]:
    """Sets of many kinds: Gaussian, clustered, a large common offset, duplicated rows, fewer
    distinct points than K, and sizes below, at and just above K (20) and the batch size (64)."""
    rng = np.random.default_rng(seed)
    out = []
    for t in range(n_sets):
        n = int(rng.choice([1, 3, 19, 20, 21, 22, 40, 41, 57, 64, 65, 90])) if t % 2 else int(rng.integers(1, 64))
        kind = t % 6
        if kind == 0:
            x = rng.standard_normal((n, d))
        elif kind == 1:  # duplicated rows
            base = rng.standard_normal((max(1, n // 3), d))
            x = base[rng.integers(len(base), size=n)]
        elif kind == 2:  # fewer distinct points than K
            base = rng.standard_normal((5, d))
            x = base[rng.integers(5, size=n)]
        elif kind == 3:  # tight cloud far from the origin (cancellation in |x|^2 - 2 x.c + |c|^2)
            x = 10 + rng.standard_normal((1, d)) + 0.05 * rng.standard_normal((n, d))
        elif kind == 4:  # separated clusters
            c = 3 * rng.standard_normal((8, d))
            x = c[rng.integers(8, size=n)] + 0.3 * rng.standard_normal((n, d))
        else:  # quantised values: exact ties in coordinates
            x = np.round(rng.standard_normal((n, d)) * 2) / 2
        out.append(x.astype(np.float32))
    return out


@pytest.mark.parametrize("assign_dims", [0, 4, 128])
@pytest.mark.parametrize("d", [6, 24])
def test_batched_kmeans_equals_the_per_set_reference(assign_dims, d):
    sets = random_sets(90, d, seed=d + assign_dims)
    seeds = [derive_seed("batched", d, assign_dims, i) for i in range(len(sets))]
    fast = kmeans_slots_many(sets, 20, assign_dims, seeds, batch_size=64)
    assert fast.shape == (len(sets), 20, d) and fast.dtype == np.float32
    for i, (x, s) in enumerate(zip(sets, seeds)):  # n < K, n == K, duplicates, > batch (MiniBatchKMeans)
        np.testing.assert_array_equal(fast[i], kmeans_slots(x, 20, assign_dims, s, batch_size=64),
                                      err_msg=f"set {i}: {len(x)} items, kind {i % 6}")


def test_batched_kmeans_order_and_sklearn_backend_do_not_matter():
    sets = random_sets(30, 8, seed=3)
    seeds = list(range(30))
    a = kmeans_slots_many(sets, 5, 0, seeds)
    perm = np.random.default_rng(0).permutation(30)
    b = kmeans_slots_many([sets[i] for i in perm], 5, 0, [seeds[i] for i in perm])
    np.testing.assert_array_equal(a[perm], b)
    sk = kmeans_slots_many(sets[:6], 5, 0, seeds[:6], backend="sklearn")
    for i in range(6):
        np.testing.assert_array_equal(sk[i], kmeans_slots(sets[i], 5, 0, seeds[i], backend="sklearn"))
    with pytest.raises(ValueError, match="empty"):
        kmeans_slots_many([np.zeros((0, 3), np.float32)], 5, 0, [0])


@pytest.mark.parametrize("method", ["kmeans", "pca", "hierarchical", "set-encoder"])
def test_aggregator_many_equals_calls(method):
    rng = np.random.default_rng(1)
    pool = rng.standard_normal((300, 12)).astype(np.float32)
    agg = Aggregator(method, k=6, assign_dims=8)
    agg.fit(pool, pca_dim=5, seed=0)
    subsets = [rng.choice(300, int(n), replace=False) for n in rng.integers(1, 120, size=25)]
    seeds = [derive_seed("m", i) for i in range(25)]
    got = agg.many(pool, subsets, seeds)
    assert agg.stats["calls"] == 25
    if method == "pca":
        # ``many`` projects the whole pool once, a call projects its subset: two GEMMs of other shapes,
        # whose float32 sums BLAS orders by shape (and thread count), so the projected vectors may differ
        # by one ulp (issue 42: 6 of 30 values, 2.98e-08). Bit for bit where the arithmetic is the same:
        # the clustering of the same projected rows; within float32 rounding against one call per subset
        # (rtol 1e-5: a few ulps of a mean of a few ulp-perturbed rows; a wrong slot is off by O(1)).
        assert agg.pca is not None
        projected = agg.pca.transform(pool)
        for i, (sub, s) in enumerate(zip(subsets, seeds)):
            np.testing.assert_array_equal(got[i], kmeans_slots(projected[sub], 6, 0, s, agg.batch_size, agg.backend))
            np.testing.assert_allclose(got[i], agg(pool[sub], s), rtol=1e-5, atol=1e-6)
        return
    for i, (sub, s) in enumerate(zip(subsets, seeds)):
        np.testing.assert_array_equal(got[i], agg(pool[sub], s))


def test_graph_tts_batched_equals_per_set():
    """Every round's kept subsets of all queries in one ``many`` call: the same outputs as one
    aggregator call per subset (the path of an aggregator without ``many``)."""
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((600, 16)).astype(np.float32)
    sets = [np.sort(rng.choice(600, int(n), replace=False)) for n in (500, 350, 90, 41)]
    E0 = rng.standard_normal((4, 16)).astype(np.float32)
    W = rng.standard_normal((16, 16)).astype(np.float32) / 4

    def encode(rows, slots):
        return np.tanh(slots.mean(1) @ W + E0[rows])

    agg = Aggregator("kmeans", k=10, assign_dims=8, batch_size=128)
    for width in (1, 2, 3, 5):
        fast = graph_tts(E0, sets, vectors, width, 3, encode, agg, [11, 12, 13, 14], min_keep=20)
        slow = graph_tts(E0, sets, vectors, width, 3, encode, lambda v, s: agg(v, s), [11, 12, 13, 14], min_keep=20)
        np.testing.assert_array_equal(fast.means, slow.means)
        assert fast.trace == slow.trace


def test_partition_sampler_slots_many_equals_slots():
    rng = np.random.default_rng(2)
    vectors = rng.standard_normal((400, 10)).astype(np.float32)
    cands = [np.sort(rng.choice(400, int(n), replace=False)) for n in rng.integers(5, 400, size=12)]
    sampler = PartitionSampler(Aggregator("kmeans", 8, 4), vectors, 10, seed=3, candidates=cands)
    qs, rs = list(range(12)), [int(r) for r in rng.integers(10, size=12)]
    np.testing.assert_array_equal(sampler.slots_many(qs, rs), np.stack([sampler.slots(q, r) for q, r in zip(qs, rs)]))
    pool = PartitionSampler(Aggregator("kmeans", 8, 4), vectors, 10, seed=3)  # the whole pool per query
    np.testing.assert_array_equal(pool.slots_many([0, 1], [4, 7]), np.stack([pool.slots(0, 4), pool.slots(1, 7)]))


@pytest.mark.parametrize("gram_max", [0, 400, 10**9])
def test_batched_kmeans_redoes_only_tied_sets(monkeypatch, gram_max):
    """Sets without ties are clustered by the batched path itself (the equality tests above would
    pass trivially if every set fell back to the reference), on inner products (``gram_max``
    above the set sizes), on rows with Elkan's bounds (0) or split by size (400); ties (fewer
    distinct points than K) are redone by the reference."""
    import rbench_rankers.lranker.aggregation as aggregation
    import rbench_rankers.lranker.kmeans_many as kernels

    monkeypatch.setattr(kernels, "GRAM_SET_MAX", gram_max)
    redone: list[int] = []
    ref = aggregation.kmeans_slots

    def counting(vectors, *a, **k):
        redone.append(len(vectors))
        return ref(vectors, *a, **k)

    monkeypatch.setattr(aggregation, "kmeans_slots", counting)
    rng = np.random.default_rng(4)
    plain = [rng.standard_normal((int(n), 16)).astype(np.float32) for n in rng.integers(21, 300, size=40)]
    plain += [3 * rng.standard_normal((1, 16)).astype(np.float32) + rng.standard_normal((n, 16)).astype(np.float32)
              for n in (401, 700, 1000)]
    seeds = list(range(len(plain)))
    got = aggregation.kmeans_slots_many(plain, 20, 8, seeds)
    assert redone == []
    for i in (0, 1, 40, 41, 42):
        np.testing.assert_array_equal(got[i], ref(plain[i], 20, 8, seeds[i]), err_msg=f"set {i}")
    base = rng.standard_normal((5, 16)).astype(np.float32)
    few = [base[rng.integers(5, size=30)] for _ in range(3)]
    out = aggregation.kmeans_slots_many(few, 20, 8, [1, 2, 3])
    assert redone == [30, 30, 30]
    for i in range(3):
        np.testing.assert_array_equal(out[i], ref(few[i], 20, 8, i + 1))


@pytest.mark.parametrize("gram_max", [0, 10**9])
def test_both_kernels_equal_the_reference_on_every_kind_of_set(monkeypatch, gram_max):
    """Every set on inner products, then every set on rows: the reference's slots for each kind
    of set (ties included, redone by the reference)."""
    import rbench_rankers.lranker.kmeans_many as kernels

    monkeypatch.setattr(kernels, "GRAM_SET_MAX", gram_max)
    sets = random_sets(60, 12, seed=9)
    seeds = [derive_seed("paths", i) for i in range(len(sets))]
    got = kmeans_slots_many(sets, 20, 8, seeds)
    for i, (x, s) in enumerate(zip(sets, seeds)):
        np.testing.assert_array_equal(got[i], kmeans_slots(x, 20, 8, s), err_msg=f"set {i}: {len(x)} items")


def test_raw_draws_are_numpys_stream():
    """The vectorised SeedSequence + PCG64 gives ``default_rng(seed)``'s raw words bit for bit
    (the batched K-means' k-means++ draws rest on it); seeds outside [0, 2**32) go through numpy."""
    from rbench_rankers.lranker.streams import raw_draws

    seeds = [0, 1, 2, 255, 65536, 2**31 - 1, 2**32 - 1, *np.random.default_rng(0).integers(0, 2**32, 300).tolist()]
    for k in (1, 20):
        ref = np.stack([np.random.default_rng(s).bit_generator.random_raw(k) for s in seeds])
        np.testing.assert_array_equal(raw_draws(seeds, k), ref)
    odd = [2**40 + 3, -1 + 2**33]
    np.testing.assert_array_equal(raw_draws(odd, 5), np.stack([np.random.default_rng(s).bit_generator.random_raw(5)
                                                               for s in odd]))


def test_sources_are_read_in_place(tmp_path):
    """The pool as a read-only memory map, as float64, or as a wider float32 array whose first
    columns are the assignment view: ``Aggregator.many`` reads them in place (no copy of the
    pool), with the slots of the reference on each set."""
    rng = np.random.default_rng(1)
    np.save(tmp_path / "v.npy", rng.standard_normal((500, 10)).astype(np.float32))
    pool = np.load(tmp_path / "v.npy", mmap_mode="r")
    agg = Aggregator("kmeans", k=5, assign_dims=4)
    subs = [rng.choice(500, n, replace=False) for n in (40, 90, 450)]
    want = np.stack([kmeans_slots(np.asarray(pool[sub]), 5, 4, i) for i, sub in enumerate(subs)])
    np.testing.assert_array_equal(agg.many(pool, subs, [0, 1, 2]), want)
    np.testing.assert_array_equal(agg.many(np.array(pool, dtype=np.float64), subs, [0, 1, 2]), want)
    np.testing.assert_array_equal(agg.many(np.array(pool), subs, [0, 1, 2]), want)


class _WorkerSets:
    """A DataLoader dataset that clusters and eliminates in its (forked) worker processes."""

    def __init__(self, pool, subsets):
        self.pool, self.subsets = pool, subsets

    def __len__(self) -> int:
        return 2

    def __getitem__(self, i):
        from rbench_rankers.lranker.elimination import eliminate_many

        slots = Aggregator("kmeans", k=5, assign_dims=8).many(self.pool, self.subsets, list(range(len(self.subsets))))
        offsets = np.r_[0, np.cumsum([len(s) for s in self.subsets])]
        kept, _ = eliminate_many(self.pool, self.pool[:len(self.subsets)], np.concatenate(self.subsets), offsets,
                                 list(range(len(self.subsets))), 3, 0.0, 0)
        return slots, kept


def test_batched_kernels_run_in_forked_dataloader_workers():
    """Training's DataLoader workers are forked after the parent has used numba's OpenMP layer,
    which terminates a child entering a parallel region: the kernels run serially there
    (``threads.parallel_ok``), with the parent's results."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    pool = rng.standard_normal((300, 16)).astype(np.float32)
    subsets = [rng.choice(300, 60, replace=False) for _ in range(12)]
    ds = _WorkerSets(pool, subsets)
    here = ds[0]  # the parent runs the parallel kernels first
    got = list(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2, collate_fn=lambda x: x))
    assert len(got) == 2
    for slots, kept in got:
        np.testing.assert_array_equal(np.asarray(slots), here[0])
        np.testing.assert_array_equal(np.asarray(kept), here[1])
