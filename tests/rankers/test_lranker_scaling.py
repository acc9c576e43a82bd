"""LRanker's aggregation and graph-based test-time scaling, without a model (fast, numpy only):
centroids/ordering/padding, the elimination rule, the E^(t) recursion, the score identity and the
valid-split grid search."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rbench_rankers.lranker.aggregation import (
    Aggregator,
    centroids_from_labels,
    fit_pca,
    hierarchical_slots,
    kmeans_slots,
    sample_slots,
)
from rbench_rankers.lranker.elimination import candidate_scores, eliminate_many, partition_order
from rbench_rankers.lranker.scaling import (
    RowView,
    chunk_rows,
    concat_outputs,
    eliminate,
    graph_tts,
    min_part_size,
    select_width_depth,
)


def clustered(sizes: list[int], d: int = 16, assign: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Clusters well separated in the first ``assign`` dims; the other dims carry a per-cluster
    offset plus noise (so full-vector means differ from any truncated statistic)."""
    rng = np.random.default_rng(seed)
    rows, labels = [], []
    for c, n in enumerate(sizes):
        centre = np.zeros(d)
        centre[: assign] = rng.normal(0, 1, assign) + 20 * c
        centre[assign:] = rng.normal(5 * c, 1, d - assign)
        rows.append(centre + rng.normal(0, 0.05, (n, d)))
        labels += [c] * n
    return np.concatenate(rows).astype(np.float32), np.array(labels)


@pytest.mark.parametrize("backend", ["auto", "sklearn"])  # numpy Lloyd (small sets) / MiniBatchKMeans
def test_kmeans_centroids_are_full_vector_means_in_canonical_order(backend):
    sizes = [5, 30, 12]
    x, lab = clustered(sizes)
    slots = kmeans_slots(x, k=3, assign_dims=4, seed=0, backend=backend)
    expected = [x[lab == c].mean(0) for c in np.argsort(sizes)[::-1]]  # biggest cluster first
    np.testing.assert_allclose(slots, np.stack(expected), rtol=1e-5, atol=1e-5)


def test_small_set_kmeans_agrees_with_minibatch_kmeans_on_separable_data():
    x, _ = clustered([40, 25, 60, 10, 33], d=12, assign=6, seed=4)
    a = kmeans_slots(x, k=5, assign_dims=6, seed=1, backend="auto")
    b = kmeans_slots(x, k=5, assign_dims=6, seed=1, backend="sklearn")
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    # larger than one mini-batch: the auto backend hands over to MiniBatchKMeans
    big = np.repeat(x, 9, axis=0)
    np.testing.assert_allclose(kmeans_slots(big, 5, 6, 1, batch_size=1024), a, rtol=1e-5, atol=1e-5)


def test_kmeans_assignments_use_only_the_truncated_dims():
    # two groups that differ only beyond the first 4 dims: truncated K-means cannot see them
    rng = np.random.default_rng(1)
    x = rng.normal(0, 1, (40, 12)).astype(np.float32)
    x[:20, 4:] += 50.0
    truncated = kmeans_slots(x, k=2, assign_dims=4, seed=0)
    full = kmeans_slots(x, k=2, assign_dims=0, seed=0)
    full_split = np.sort(full[:, 4:].mean(1))
    assert full_split[1] - full_split[0] > 40  # all dims: the two groups separate
    assert abs(truncated[0, 4:].mean() - truncated[1, 4:].mean()) < 30  # truncated: they mix


def test_fewer_items_than_k_are_tiled_cyclically():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    slots = kmeans_slots(x, k=7, assign_dims=2, seed=0)
    assert slots.shape == (7, 4)
    distinct = {tuple(r) for r in slots}
    assert distinct == {tuple(r) for r in x}
    np.testing.assert_array_equal(slots[3:6], slots[:3])  # cyclic repetition
    # duplicates: fewer distinct clusters than k, still k rows of real centroids
    dup = np.repeat(x[:2], 10, axis=0)
    s2 = kmeans_slots(dup, k=5, assign_dims=0, seed=0)
    assert s2.shape == (5, 4) and {tuple(r) for r in s2} <= {tuple(r) for r in x[:2]}


def test_empty_clusters_are_dropped():
    x = np.array([[0, 0], [1, 1], [2, 2]], dtype=np.float32)
    out = centroids_from_labels(x, np.array([0, 0, 3]), x, k=4)
    np.testing.assert_allclose(out[0], [0.5, 0.5])
    np.testing.assert_allclose(out[1], [2, 2])
    np.testing.assert_allclose(out[2], out[0])


def test_hierarchical_recovers_clear_clusters_and_subsamples_large_sets():
    x, lab = clustered([8, 20, 14], seed=2)
    want = np.stack([x[lab == c].mean(0) for c in (1, 2, 0)])
    np.testing.assert_allclose(hierarchical_slots(x, 3, assign_dims=4), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(hierarchical_slots(x, 3, assign_dims=4, max_items=20, seed=0), want,
                               rtol=1e-5, atol=1e-5)


def test_pca_and_set_encoder_slots():
    x, _ = clustered([30, 30], d=24)
    agg = Aggregator("pca", k=4)
    agg.fit(x, pca_dim=6, seed=0)
    assert agg.slot_dim(24) == 6 and agg(x, 0).shape == (4, 6)
    state = fit_pca(x, 6)
    np.testing.assert_allclose(state.transform(x).mean(0), 0, atol=1e-4)  # centred basis
    s = sample_slots(x, 5, seed=3)
    assert s.shape == (5, 24) and all(any(np.array_equal(r, y) for y in x) for r in s)
    assert len({tuple(r) for r in s}) == 5  # without replacement


def test_eliminate_keeps_top_of_each_part():
    survivors = np.arange(100, 120)
    scores = np.arange(20, dtype=np.float32)[::-1].copy()  # item 100 best ... 119 worst
    perm = partition_order(0, 20)
    assert sorted(perm.tolist()) == list(range(20)) and perm.tolist() != list(range(20))
    kept = eliminate(survivors, scores, width=4, keep=0.0, seed=0)
    assert [len(k) for k in kept] == [2, 2, 2, 2]  # ceil(5 * 1/4)
    for part, k in zip(np.array_split(perm, 4), kept):
        best = survivors[part][np.argsort(-scores[part])][:2]
        np.testing.assert_array_equal(k, best)
    kept_half = eliminate(survivors, scores, width=2, keep=0.5, seed=1)
    assert [len(k) for k in kept_half] == [5, 5]
    # fewer survivors than parts: only non-empty parts, each keeps its one item
    kept_small = eliminate(np.array([7, 9]), np.array([1.0, 2.0]), width=5, keep=0.0, seed=0)
    assert sorted(int(k[0]) for k in kept_small) == [7, 9]


def test_floor_keeps_at_least_factor_times_k_items_per_subset():
    rng = np.random.default_rng(0)
    scores = rng.normal(0, 1, 1000).astype(np.float32)
    survivors = np.arange(1000)
    min_keep = min_part_size(2, 20)
    assert min_keep == 40 and min_part_size(0, 20) == 0 and min_part_size(1.5, 5) == 8
    kept = eliminate(survivors, scores, width=4, keep=0.0, seed=1, min_keep=min_keep)
    assert [len(k) for k in kept] == [63, 63, 63, 63]  # ceil(250 / 4) >= 40: the floor is inactive
    # 100 survivors, width 4: 4 parts of 25 would keep 7 each; only 100 // 40 = 2 parts, keep 40 each
    kept = eliminate(survivors[:100], scores[:100], width=4, keep=0.0, seed=1,
                     min_keep=min_keep)
    assert [len(k) for k in kept] == [40, 40]
    for k in kept:  # the top 40 of its part
        assert len(set(k.tolist())) == 40
    # fewer survivors than the floor in total: all of them, one subset
    kept = eliminate(survivors[:30], scores[:30], width=4, keep=0.0, seed=1,
                     min_keep=min_keep)
    assert len(kept) == 1 and sorted(kept[0].tolist()) == list(range(30))
    # never a subset of one item repeated K times
    kept = eliminate(survivors[:3], scores[:3], width=5, keep=0.0, seed=1, min_keep=min_keep)
    assert [len(k) for k in kept] == [3]


def test_graph_tts_with_floor_stops_shrinking_at_width_times_floor():
    rng = np.random.default_rng(0)
    N, dim, K = 500, 8, 5
    vectors = rng.normal(0, 1, (N, 8)).astype(np.float32)
    E0 = rng.normal(0, 1, (2, dim)).astype(np.float32)
    rec = Recorder(vectors, dim)
    out = graph_tts(E0, [np.arange(N), np.arange(37)], vectors, 3, 4, rec.encode, rec.aggregate, seeds=[1, 2],
                    min_keep=min_part_size(2, K))
    # 500 -> 3 x 167 keep 56 -> 168 -> 3 x 56 keep 19 -> 3 x 19 keep 10 -> 30 (stable)
    assert [r["survivors"][0] for r in out.trace] == [168, 57, 30, 30]
    # 37 candidates: 37 // 10 = 3 parts of 12-13 keep 10 each -> 30 -> 3 x 10, all kept
    assert [r["survivors"][1] for r in out.trace] == [30, 30, 30, 30]
    assert min(len(s) for s in rec.seen) >= 2 * K
    # E^(t+1) averages over the parts actually used
    assert all(len(r["kept_sizes"][1]) == 3 for r in out.trace)


class Recorder:
    """Fake aggregation (mean of the subset, repeated) and encoder (a fixed linear map of the
    slots); records every subset it is given."""

    def __init__(self, vectors: np.ndarray, dim: int) -> None:
        self.vectors, self.seen = vectors, []
        self.W = np.random.default_rng(5).normal(0, 1, (vectors.shape[1], dim)).astype(np.float32)

    def aggregate(self, sub: np.ndarray, seed: int) -> np.ndarray:
        self.seen.append(sub.copy())
        return np.repeat(sub.mean(0, keepdims=True), 2, axis=0)

    def encode(self, rows: np.ndarray, slots: np.ndarray) -> np.ndarray:
        return slots[:, 0] @ self.W + rows[:, None].astype(np.float32)


def test_graph_tts_rounds_shrink_reaggregate_and_average():
    rng = np.random.default_rng(0)
    N, dim, k, d = 81, 8, 3, 3
    vectors = rng.normal(0, 1, (N, 8)).astype(np.float32)
    E0 = rng.normal(0, 1, (2, dim)).astype(np.float32)
    rec = Recorder(vectors, dim)
    excluded = np.array([0, 5, 6])
    sets = [np.setdiff1d(np.arange(N), excluded), np.arange(N)]
    out = graph_tts(E0, sets, vectors, k, d, rec.encode, rec.aggregate, seeds=[11, 12])
    # survivors: 78 -> 3 parts of 26 -> ceil(26/3)=9 each -> 27 -> 9 -> 3 ; and 81 -> 27 -> 9 -> 3
    assert [r["survivors"] for r in out.trace] == [[27, 27], [9, 9], [3, 3]]
    assert [r["kept_sizes"][0] for r in out.trace] == [[9, 9, 9], [3, 3, 3], [1, 1, 1]]
    # each round re-aggregates exactly the kept subsets: disjoint, inside the previous survivors,
    # never an excluded item
    index = {v.tobytes(): j for j, v in enumerate(vectors)}
    assert len(rec.seen) == 2 * k * d
    prev = [set(sets[0].tolist()), set(sets[1].tolist())]
    i = 0
    for _t in range(d):
        for q in range(2):
            items = [[index[v.tobytes()] for v in sub] for sub in rec.seen[i : i + k]]
            i += k
            flat = {j for sub in items for j in sub}
            assert sum(len(sub) for sub in items) == len(flat)
            assert flat <= prev[q]
            if q == 0:
                assert not flat & set(excluded.tolist())
            prev[q] = flat
    # E^(t+1) = (E^(t) + sum_m E_m) / (k + 1), with E_m the encoder's output on subset m
    i = 0
    for t in range(d):
        for q in range(2):
            parts = [rec.encode(np.array([q]), rec.aggregate(s, 0)[None])[0] for s in rec.seen[i : i + k]]
            i += k
            np.testing.assert_allclose(out.embeddings[t + 1, q], (out.embeddings[t, q] + sum(parts)) / (k + 1),
                                       rtol=1e-5, atol=1e-5)
    # running means, and mean of scores == score of the mean embedding
    np.testing.assert_allclose(out.means[d], out.embeddings.mean(0), rtol=1e-5, atol=1e-5)
    scores = np.einsum("tqd,nd->tqn", out.embeddings, vectors).mean(0)
    np.testing.assert_allclose(scores, out.means[d] @ vectors.T, rtol=1e-4, atol=1e-4)


def test_graph_tts_in_query_chunks_equals_one_batch():
    rng = np.random.default_rng(4)
    vectors = rng.normal(0, 1, (60, 6)).astype(np.float32)
    E0 = rng.normal(0, 1, (5, 6)).astype(np.float32)
    W = rng.normal(0, 1, (6, 6)).astype(np.float32)
    sets = [np.arange(60 - 3 * i) for i in range(5)]
    seeds = [7, 8, 9, 10, 11]

    def agg(sub, seed):
        return np.repeat(sub.mean(0, keepdims=True), 2, axis=0)

    def enc(rows, slots):  # independent of the row's position in the batch
        return slots[:, 0] @ W

    whole = graph_tts(E0, sets, vectors, 3, 2, enc, agg, seeds, min_keep=4)
    parts = [graph_tts(E0[c], RowView(sets, c), vectors, 3, 2, enc, agg, [seeds[i] for i in c], min_keep=4)
             for c in chunk_rows(5, 2)]
    assert [len(c) for c in chunk_rows(5, 2)] == [2, 2, 1]
    joined = concat_outputs(parts)
    np.testing.assert_allclose(joined.means, whole.means, rtol=1e-6, atol=1e-6)
    assert joined.trace == whole.trace


def test_graph_tts_depth_zero_is_direct_and_seeded():
    rng = np.random.default_rng(1)
    vectors = rng.normal(0, 1, (30, 4)).astype(np.float32)
    E0 = rng.normal(0, 1, (3, 4)).astype(np.float32)
    rec = Recorder(vectors, 4)
    out = graph_tts(E0, [np.arange(30)] * 3, vectors, 4, 0, rec.encode, rec.aggregate, seeds=[1, 2, 3])
    np.testing.assert_array_equal(out.means[-1], E0)
    assert rec.seen == []
    a = graph_tts(E0, [np.arange(30)] * 3, vectors, 2, 2, rec.encode, rec.aggregate, seeds=[1, 2, 3])
    b = graph_tts(E0[1:2], [np.arange(30)], vectors, 2, 2, rec.encode, rec.aggregate, seeds=[2])
    # a query's result does not depend on the batch it is in (encoder output depends on row only
    # through the row offset; compare the survivor traces)
    assert a.trace[1]["kept_sizes"][1] == b.trace[1]["kept_sizes"][0]


def grid_run(calls: list):
    """Fake ``run``: the query matrix of (k, d) is filled with 10k + d (so evaluate can tell)."""

    def run(k: int, d_max: int) -> np.ndarray:
        calls.append((k, d_max))
        return np.stack([np.full((2, 3), 10 * k + d, dtype=np.float32) for d in range(d_max + 1)])

    return run


def per_query_eval(values: dict[int, np.ndarray]):
    """Fake ``evaluate``: per-query RR of the setting coded in Q[0, 0] (0 = direct)."""

    def evaluate(Q: np.ndarray) -> dict[str, np.ndarray]:
        v = values[int(Q[0, 0])]
        return {"RR": v, "nDCG@10": v}

    return evaluate


def test_selection_grid_table_and_one_run_per_width():
    rng = np.random.default_rng(0)
    base = rng.uniform(0, 1, 200)
    values = {0: base, 21: base + 0.2, 22: base + 0.2, 41: base + 0.15, 42: base + 0.1}
    calls: list = []
    sel = select_width_depth(np.zeros((2, 3), np.float32), [2, 4], [0, 1, 2], grid_run(calls),
                             per_query_eval(values), "RR")
    assert calls == [(2, 2), (4, 2)]  # one run per width, to the largest depth
    assert [(r["width"], r["depth"]) for r in sel.table] == [(0, 0), (2, 1), (2, 2), (4, 1), (4, 2)]
    assert [r["cost"] for r in sel.table] == [1, 3, 5, 5, 9]
    for r in sel.table:  # means per setting, difference to direct
        assert math.isclose(r["RR"], float(values[10 * r["width"] + r["depth"]].mean()))
        if r["width"]:
            assert math.isclose(r["delta"], r["RR"] - sel.table[0]["RR"], abs_tol=1e-12) and r["se"] < 1e-9
    # (2, 1) is significantly better than direct; (2, 2) ties it and (4, x) are worse: the cheaper wins
    assert (sel.width, sel.depth) == (2, 1) and sel.n_queries == 200
    d = sel.as_dict()
    assert math.isclose(d["margin"], 0.2) and d["p"] < 0.001 and d["n_queries"] == 200
    assert d["vs_beaten"]["width"] == 0 and math.isclose(d["vs_beaten"]["margin"], 0.2)
    import json

    json.dumps(d)  # it goes into the run record


def test_selection_noisy_tiny_gain_loses_to_direct():
    rng = np.random.default_rng(1)
    n = 300
    base = (rng.uniform(0, 1, n) < 0.3).astype(float) / rng.integers(1, 20, n)  # RR-like values
    noise = rng.normal(0, 0.05, n)
    noisy = base + noise - noise.mean() + 0.002  # +0.2 points on average, per-query noise 5 points
    values = {0: base, 21: noisy, 22: noisy + rng.normal(0, 0.05, n), 41: base - 0.001, 42: noisy}
    assert noisy.mean() > base.mean()  # the best mean is NOT direct ...
    sel = select_width_depth(np.zeros((2, 3), np.float32), [2, 4], [0, 1, 2], grid_run([]),
                             per_query_eval(values), "RR")
    assert (sel.width, sel.depth) == (0, 0)  # ... but the gain is noise: direct (cheapest) stays
    assert sel.vs_beaten is None and sel.vs_direct == {"margin": 0.0, "se": 0.0, "p": 1.0}
    row = next(r for r in sel.table if (r["width"], r["depth"]) == (2, 1))
    assert row["p"] > 0.05 and row["se"] > 0.001
    assert all(not s["switch"] for s in sel.steps)


def test_selection_large_consistent_gain_wins_and_costlier_needs_significance():
    rng = np.random.default_rng(2)
    n = 300
    base = rng.uniform(0, 0.5, n)
    gain = base + 0.05 + rng.normal(0, 0.01, n)  # +5 points on every query
    values = {0: base, 21: gain, 22: gain + rng.normal(0.0005, 0.02, n),  # tiny noisy extra: stays (2, 1)
              41: gain + 0.03 + rng.normal(0, 0.01, n),  # clear extra gain at cost 5: wins
              42: gain + 0.03 + rng.normal(0.0005, 0.02, n)}  # not significantly better than (4, 1)
    sel = select_width_depth(np.zeros((2, 3), np.float32), [2, 4], [0, 1, 2], grid_run([]),
                             per_query_eval(values), "RR", alpha=0.05)
    assert (sel.width, sel.depth) == (4, 1)
    assert sel.vs_beaten["width"] == 2 and sel.vs_beaten["depth"] == 1 and sel.vs_beaten["p"] < 0.05
    assert sel.vs_direct["margin"] == pytest.approx(0.08, abs=0.005) and sel.vs_direct["p"] < 0.001
    assert 0 < sel.vs_direct["se"] < 0.002
    # the same grid with a strict alpha: only the huge first gain passes the bar... both do here,
    # and a p-value bar of 0 (alpha tiny) keeps direct
    strict = select_width_depth(np.zeros((2, 3), np.float32), [2, 4], [0, 1, 2], grid_run([]),
                                per_query_eval(values), "RR", alpha=1e-6)
    assert (strict.width, strict.depth) == (0, 0)


def test_selection_without_direct_in_the_grid_starts_from_the_cheapest():
    rng = np.random.default_rng(3)
    base = rng.uniform(0, 1, 100)
    values = {0: base, 21: base + 0.01 * rng.normal(0, 1, 100), 22: base + 0.3, 41: base, 42: base}
    sel = select_width_depth(np.zeros((2, 3), np.float32), [2, 4], [1, 2], grid_run([]),
                             per_query_eval(values), "RR")
    assert [(r["width"], r["depth"]) for r in sel.table] == [(2, 1), (2, 2), (4, 1), (4, 2)]
    assert (sel.width, sel.depth) == (2, 2)
    assert sel.vs_direct["margin"] == pytest.approx(0.3)  # margins are still against direct


@pytest.mark.parametrize("method", ["kmeans", "hierarchical", "pca", "set-encoder"])
def test_aggregator_is_deterministic_per_seed(method):
    x, _ = clustered([25, 25, 25], d=20)
    agg = Aggregator(method, k=4, assign_dims=8)
    agg.fit(x, pca_dim=5, seed=0)
    np.testing.assert_array_equal(agg(x, 7), agg(x, 7))


def test_a_kept_subset_that_is_the_whole_candidate_set_gives_e0_without_clustering():
    """Width 1 keeps every candidate each round (keep = 1/1): its one part is the whole set, the
    view E^(0) already is, so every round adds E^(0) and width 1 ranks as direct ranking does,
    with no clustering and no encoding. Width 2 on the same sets still clusters its halves."""
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((300, 8)).astype(np.float32)
    sets = [np.sort(rng.choice(300, int(n), replace=False)) for n in (250, 120, 60)]
    E0 = rng.standard_normal((3, 8)).astype(np.float32)
    calls = {"encode": 0, "agg": 0}

    def encode(rows, slots):
        calls["encode"] += len(rows)
        return slots.mean(1)

    def agg(v, seed):
        calls["agg"] += 1
        return kmeans_slots(v, 4, 0, seed)

    out = graph_tts(E0, sets, vectors, 1, 3, encode, agg, [1, 2, 3])
    assert calls == {"encode": 0, "agg": 0}
    for t in range(4):
        np.testing.assert_allclose(out.embeddings[t], E0, rtol=1e-6)
        np.testing.assert_allclose(out.means[t], E0, rtol=1e-6)
    assert [r["survivors"] for r in out.trace] == [[250, 120, 60]] * 3
    two = graph_tts(E0, sets, vectors, 2, 1, encode, agg, [1, 2, 3])
    assert calls["agg"] == 6 and calls["encode"] == 6
    assert not np.allclose(two.embeddings[1], E0)
    # a floor above the set's size: its one part keeps everything (the 60-item set), E^(0) again
    floor = graph_tts(E0, sets, vectors, 3, 2, encode, agg, [1, 2, 3], min_keep=100)
    assert [r["kept_sizes"][2] for r in floor.trace] == [[60], [60]]
    np.testing.assert_allclose(floor.embeddings[:, 2], np.stack([E0[2]] * 3), rtol=1e-6)
    assert not np.allclose(floor.embeddings[1, 0], E0[0])


def test_eliminate_many_equals_eliminate_per_query():
    """The batched round (numba) against the per-query reference: the same kept subsets, for
    widths below and above the survivors, with and without the floor, with tied scores (ties go
    to the lower item) and with keep fractions; its shuffle keys are the reference's numbers."""
    from rbench_rankers.lranker import elimination

    rng = np.random.default_rng(8)
    vectors = np.round(rng.standard_normal((400, 6)), 1).astype(np.float32)  # many exact ties
    vectors[200:260] = vectors[100]  # identical candidates: identical scores
    surv = [np.sort(rng.choice(400, int(n), replace=False)) for n in (1, 3, 40, 97, 250, 400)]
    cur = rng.standard_normal((len(surv), 6)).astype(np.float32)
    offsets = np.r_[0, np.cumsum([len(x) for x in surv])]
    for width, keep, floor in [(1, 0.0, 0), (3, 0.0, 0), (5, 0.0, 8), (10, 0.0, 0), (4, 0.5, 0), (7, 0.2, 40)]:
        seeds = [1000 * width + i for i in range(len(surv))]
        kept, sizes = eliminate_many(vectors, cur, np.concatenate(surv), offsets, seeds, width, keep, floor)
        for i, S in enumerate(surv):
            scores = candidate_scores(vectors, S, cur[i])
            np.testing.assert_allclose(scores, vectors[S].astype(np.float64) @ cur[i].astype(np.float64), rtol=1e-9,
                                       atol=1e-9)
            ref = eliminate(S, scores, width, keep, seeds[i], floor)
            used = [int(x) for x in sizes[i] if x > 0]
            assert used == [len(r) for r in ref], (width, i)
            got = kept[offsets[i] : offsets[i] + sum(used)]
            np.testing.assert_array_equal(got, np.concatenate(ref))
    for seed, n in [(123456789, 50), (0, 1), (7, 2), (2**31 - 1, 333)]:
        np.testing.assert_array_equal(elimination._shuffle(seed, n), partition_order(seed, n))
    counts = np.zeros((4, 4))  # every position reaches every place about equally often
    for seed in range(4000):
        counts[np.arange(4), partition_order(seed, 4)] += 1
    assert np.abs(counts / 1000 - 1).max() < 0.12


def test_seed_stem_gives_derive_seeds_value():
    """Test-time scaling derives each kept subset's K-means seed from a stem of its query's
    parts; the seed must be ``derive_seed`` of all the parts (what the per-subset code used)."""
    from rbench_rankers.lranker.aggregation import derive_seed, seed_from_stem, seed_stem

    for parts in [(0, "agg", 2, 0), (2**31 - 1, "agg", 10, 4), ("q-7", "x"), ()]:
        stem = seed_stem(*parts)
        for last in (0, 1, 9, "m", 12345):
            assert seed_from_stem(stem, last) == derive_seed(*parts, last)
