"""Pool variants (mixed, shift, scaled:N) on small synthetic tasks with injected donor pools,
plus one run through the registry with a donor prepared from real-format ESCI files."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from rbench.api import Pool, Queries, Ragged, TaskData
from rbench.core.errors import RBenchError
from rbench.tasks import pools, store
from rbench.tasks.registry import TASKS
from rbench.tasks.text_columns import ArrowTextColumn, MergedTexts


def make_pool(name: str, n: int, word: str) -> Pool:
    return Pool(ids=np.array([f"{word[0]}{i}" for i in range(n)], dtype=object),
                texts=np.array([f"{word} {i}" for i in range(n)], dtype=object), name=name, fingerprint=f"fp-{name}-{n}")


def make_queries(n: int, pool_n: int, seed: int) -> Queries:
    rng = np.random.default_rng(seed)
    pos = [[int(rng.integers(pool_n))] for _ in range(n)]
    hist = [sorted(set(rng.integers(pool_n, size=3).tolist()) - set(p)) for p in pos]
    return Queries(ids=np.array([f"q{seed}-{i}" for i in range(n)], dtype=object),
                   texts=[f"query {i}" for i in range(n)], positives=Ragged.from_rows(pos),
                   grades=Ragged.from_rows([[1.0]] * n, dtype=np.float64), history=Ragged.from_rows(hist),
                   exclude=Ragged.from_rows(hist))


def task(name: str = "rec-toy", n: int = 12) -> TaskData:
    pool = make_pool(name, n, "toy")
    return TaskData(spec=TASKS[name], pool=pool, train=make_queries(20, n, 1), valid=make_queries(4, n, 2),
                    test=make_queries(6, n, 3), info={"source": "synthetic"})


DONOR_POOLS = {"rec-movie": make_pool("rec-movie", 8, "movie"), "msmarco": make_pool("msmarco", 10, "passage"),
               "esci": make_pool("esci", 6, "product")}
DONORS = pools.Donors.of(TASKS.values(), DONOR_POOLS)


def texts_of(pool: Pool, idx) -> list[str]:
    return [pool.texts[int(i)] for i in idx]


def check_test_reindexed(orig: TaskData, var: TaskData) -> None:
    """Every test index points at the same candidate (id and text) as before."""
    for field in ("positives", "history", "exclude"):
        a, b = getattr(orig.test, field), getattr(var.test, field)
        np.testing.assert_array_equal(a.offsets, b.offsets)
        assert texts_of(orig.pool, a.values) == texts_of(var.pool, b.values)
        assert list(orig.pool.ids[a.values]) == list(var.pool.ids[b.values])


def test_mixed_pool_is_the_union_and_test_indices_follow_their_candidates():
    orig = task()
    var = pools.apply_variant(orig, "mixed", seed=0, donors=DONORS)
    assert len(var.pool) == 12 + 8 + 10 + 6
    check_test_reindexed(orig, var)
    assert not np.array_equal(var.test.positives.values, orig.test.positives.values)  # really re-indexed
    # the original pool is a subset: same ids (unprefixed) and texts
    where = {pid: k for k, pid in enumerate(var.pool.ids)}
    for pid, text in zip(orig.pool.ids, orig.pool.texts):
        assert var.pool.texts[where[pid]] == text
    assert {pid for pid in var.pool.ids if pid.startswith("rec-movie:")} == {f"rec-movie:m{i}" for i in range(8)}
    assert var.pool.texts[where["msmarco:p3"]] == "passage 3"
    assert dict(zip(*np.unique(var.pool.domains, return_counts=True))) == \
        {"rec-toy": 12, "rec-movie": 8, "msmarco": 10, "esci": 6}
    assert all(var.pool.domains[where[p]] == "rec-toy" for p in orig.pool.ids)
    # training side untouched
    assert var.train is orig.train and var.valid is orig.valid and var.train_pool is orig.pool
    assert var.fit_pool is orig.pool and var.variant == "mixed"
    assert var.info["variant_sources"] == ["rec-toy", "rec-movie", "msmarco", "esci"]
    assert var.info["source"] == "synthetic" and var.info["original_pool_size"] == 12
    assert var.fingerprint != orig.fingerprint and len(set(var.pool.ids)) == len(var.pool)


def test_mixed_order_is_fixed_per_task_and_mixes_sources():
    a = pools.apply_variant(task(), "mixed", seed=0, donors=DONORS)
    b = pools.apply_variant(task(), "mixed", seed=7, donors=DONORS)
    assert list(a.pool.ids) == list(b.pool.ids) and a.fingerprint == b.fingerprint
    first = list(a.pool.domains[:12])
    assert first != ["rec-toy"] * 12  # shuffled: own items are not simply first


def test_shift_uses_the_domain_partner_only():
    rec = pools.apply_variant(task("rec-toy"), "shift", seed=0, donors=DONORS)
    assert rec.info["variant_sources"] == ["rec-toy", "rec-movie"] and len(rec.pool) == 20
    passage = task("msmarco", n=10)
    var = pools.apply_variant(passage, "shift", seed=0, donors=DONORS)
    assert var.info["variant_sources"] == ["msmarco", "esci"] and len(var.pool) == 16
    check_test_reindexed(passage, var)
    routing = dataclasses.replace(task(), spec=TASKS["rec-toy"].__class__(**{**dataclasses.asdict(TASKS["rec-toy"]),
                                                                             "domain": "routing", "sources": ()}))
    with pytest.raises(RBenchError, match="shift: defined for recommendation"):
        pools.apply_variant(routing, "shift", seed=0, donors=DONORS)


def test_scaled_has_exactly_n_candidates_and_is_seeded():
    orig = task()
    a = pools.apply_variant(orig, "scaled:30", seed=1, donors=DONORS)
    b = pools.apply_variant(orig, "scaled:30", seed=1, donors=DONORS)
    c = pools.apply_variant(orig, "scaled:30", seed=2, donors=DONORS)
    assert len(a.pool) == 30 and len(set(a.pool.ids)) == 30 and a.variant == "scaled:30"
    assert list(a.pool.ids) == list(b.pool.ids) and list(a.pool.texts) == list(b.pool.texts)
    assert a.fingerprint == b.fingerprint != c.fingerprint
    assert set(a.pool.ids) != set(c.pool.ids)  # another seed draws other donor items
    assert set(orig.pool.ids) <= set(a.pool.ids)
    assert sum(a.info["variant_counts"].values()) == 30 and a.info["variant_counts"]["rec-toy"] == 12
    check_test_reindexed(orig, a)
    every = pools.apply_variant(orig, "scaled:36", seed=0, donors=DONORS)  # all 24 donor items
    assert len(every.pool) == 36
    same = pools.apply_variant(orig, "scaled:12", seed=0, donors=DONORS)
    assert sorted(same.pool.ids) == sorted(orig.pool.ids)


def test_scaled_refuses_impossible_sizes_and_no_donors():
    with pytest.raises(RBenchError, match="largest possible N is 36"):
        pools.apply_variant(task(), "scaled:37", seed=0, donors=DONORS)
    with pytest.raises(RBenchError, match="at least that"):
        pools.apply_variant(task(), "scaled:5", seed=0, donors=DONORS)
    with pytest.raises(RBenchError, match="no other prepared pool"):
        pools.apply_variant(task(), "scaled:20", seed=0, donors=pools.Donors.of(TASKS.values(), {}))
    for bad in ("scaled", "scaled:abc", "scaled:0"):
        with pytest.raises(RBenchError, match="scaled"):
            pools.parse_variant(bad)
    with pytest.raises(RBenchError, match="did you mean 'mixed'"):
        pools.parse_variant("mixd")
    assert pools.parse_variant("scaled:1_000_000").n == 1_000_000


def test_small_scenario_and_repeated_variants_are_refused():
    small = task()
    small = dataclasses.replace(small, test=dataclasses.replace(small.test, candidates=np.zeros((6, 3), dtype=np.int64)))
    with pytest.raises(RBenchError, match="small-scenario"):
        pools.apply_variant(small, "mixed", seed=0, donors=DONORS)
    music = dataclasses.replace(task(), spec=TASKS["rec-music"])
    with pytest.raises(RBenchError, match="small-scenario"):
        pools.apply_variant(music, "scaled:20", seed=0, donors=DONORS)
    once = pools.apply_variant(task(), "mixed", seed=0, donors=DONORS)
    with pytest.raises(RBenchError, match="already"):
        pools.apply_variant(once, "mixed", seed=0, donors=DONORS)
    assert pools.apply_variant(task(), "original", seed=0) is not None


def test_missing_donors_are_recorded_and_none_at_all_is_refused():
    with pytest.warns(UserWarning, match="left out"):
        var = pools.apply_variant(task(), "mixed", seed=0, donors=pools.Donors.of(TASKS.values(), {"esci": DONOR_POOLS["esci"]}))
    assert var.info["variant_sources"] == ["rec-toy", "esci"]
    assert set(var.info["variant_skipped"]) == {"rec-movie", "msmarco"}
    with pytest.raises(RBenchError, match="needs at least one of rec-movie"):
        with pytest.warns(UserWarning):
            pools.apply_variant(task(), "shift", seed=0, donors=pools.Donors.of(TASKS.values(), {"esci": DONOR_POOLS["esci"]}))


def test_colliding_ids_are_an_error():
    orig = task()
    orig.pool.ids[0] = "rec-movie:p0"
    with pytest.raises(RBenchError, match="occurs twice"):
        pools.apply_variant(orig, "shift", seed=0, donors=pools.Donors.of(TASKS.values(), {"rec-movie": make_pool("esci", 3, "product")}))


def test_lazy_text_columns_stay_lazy():
    import pyarrow as pa

    orig = task()
    lazy = dataclasses.replace(orig, pool=Pool(ids=orig.pool.ids, texts=ArrowTextColumn(pa.array(list(orig.pool.texts))),
                                               name=orig.pool.name, fingerprint=orig.pool.fingerprint))
    var = pools.apply_variant(lazy, "mixed", seed=0, donors=DONORS)
    assert isinstance(var.pool.texts, MergedTexts)
    eager = pools.apply_variant(orig, "mixed", seed=0, donors=DONORS)
    assert [var.pool.texts[i] for i in range(len(var.pool))] == list(eager.pool.texts)
    assert list(var.pool.texts[np.array([5, 0, 29])]) == [eager.pool.texts[i] for i in (5, 0, 29)]
    check_test_reindexed(lazy, var)


def test_registry_donors_come_from_prepared_tasks(tmp_path):
    from rbench.core import paths
    from rbench.tasks.registry import BUILTIN, donor_pool
    from tests.cli.test_cli_data import write_esci_files

    donors = pools.Donors(tuple(t.spec for t in BUILTIN.values()), donor_pool(0))
    orig = task("msmarco", n=10)
    with pytest.raises(RBenchError, match="needs at least one of"):
        with pytest.warns(UserWarning):
            pools.apply_variant(orig, "shift", seed=0, donors=donors)
    write_esci_files(paths.raw_dir("esci"))
    var = pools.apply_variant(orig, "shift", seed=0, donors=donors)
    assert var.info["variant_sources"] == ["msmarco", "esci"]
    n_esci = var.info["variant_counts"]["esci"]
    assert n_esci > 0 and len(var.pool) == 10 + n_esci
    assert store.prepared_sizes(TASKS["esci"])["pool"] == n_esci  # the donor was prepared on the way
    check_test_reindexed(orig, var)
