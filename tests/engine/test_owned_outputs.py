"""Issue 40, item 1: no ranker-made object is ever indexed with label-derived indices.

Everything a ranker returns (``score``'s scores, ``encode_pool``'s and ``encode_queries``' vectors)
is copied into a plain array the engine owns before the engine touches it, then checked: dtype
(real numbers only), shape, finiteness. The route of the issue: an ``encode_pool`` that returns an
``np.ndarray`` subclass whose ``__getitem__`` sees the positives' indices (the engine read their
scores through it) and boosts exactly those rows: RR 1.0 on ml-100k before the fix.
"""

from __future__ import annotations

import numpy as np
import pytest

import rbench
from rbench.api import BaseRanker
from rbench.core.errors import RankerOutputError
from rbench.engine.scan import scan
from tests.helpers import make_pool, make_queries


class Popular:
    """An honest embedding ranker: a candidate's vector is its train popularity, every query's the
    same, so the score is popularity (about RR 0.03 on ml-100k)."""

    name, version = "vec-pop", "1"
    config: dict = {}

    def __init__(self) -> None:
        self.counts: np.ndarray | None = None
        self.calls: list[str] = []

    def fit(self, task) -> None:
        self.counts = np.bincount(task.train.positives.values, minlength=len(task.pool)).astype(np.float32)

    def vectors(self, n: int) -> np.ndarray:
        out = np.zeros((n, 4), dtype=np.float32)
        out[:, 0] = self.counts[:n]
        return out

    def encode_pool(self, pool):
        return self.vectors(len(pool))

    def encode_queries(self, queries):
        q = np.zeros((len(queries), 4), dtype=np.float32)
        q[:, 0] = 1.0
        return q


class Learns(np.ndarray):
    """The cheating matrix: indexed with a 2-D integer array (the positives of a batch), it
    returns those rows boosted; every call to its code is logged."""

    log: list[str] = []

    def __getitem__(self, key):
        Learns.log.append("getitem")
        rows = super().__getitem__(key)
        if isinstance(key, np.ndarray) and key.ndim == 2:  # the positives' indices
            rows = np.asarray(rows) * 0 + 1e6
        return rows

    def astype(self, *args, **kwargs):
        Learns.log.append("astype")
        return super().astype(*args, **kwargs)


class Cheats(Popular):
    name = "vec-cheat"

    def encode_pool(self, pool):
        return self.vectors(len(pool)).view(Learns)


@pytest.fixture(scope="module")
def honest():
    return {topk: rbench.evaluate(Popular(), "ml-100k", max_queries=150, topk=topk).metrics for topk in (0, 100)}


@pytest.mark.parametrize("topk", [0, 100])
def test_an_ndarray_subclass_from_encode_pool_learns_nothing(topk, honest):
    """--topk 0 and the default: the honest twin's numbers, and none of the subclass's code runs
    once encode_pool has returned."""
    Learns.log.clear()
    got = rbench.evaluate(Cheats(), "ml-100k", max_queries=150, topk=topk).metrics
    assert Learns.log == []
    assert got == honest[topk]
    assert honest[topk]["RR"] < 0.1


def test_what_encode_pool_returned_is_not_what_the_engine_keeps():
    """A plain array the ranker holds is edited after it returned: the numbers do not move."""

    class EditsLater(Popular):
        name = "vec-edit"

        def encode_pool(self, pool):
            self.kept = self.vectors(len(pool))
            return self.kept

        def encode_queries(self, queries):
            self.kept[:] = 0.0  # every candidate ties: each positive would fall to the bottom
            return super().encode_queries(queries)

    assert rbench.evaluate(EditsLater(), "ml-100k", max_queries=150, topk=0).metrics == \
        rbench.evaluate(Popular(), "ml-100k", max_queries=150, topk=0).metrics


class Table(BaseRanker):
    name, version = "table", "1"

    def __init__(self, table, kind=None) -> None:
        super().__init__()
        self.table, self.kind = table, kind

    def score(self, queries, candidates):
        rows = np.array([int(q[1:]) for q in queries.ids])
        s = self.table[np.ix_(rows, candidates)] if candidates.ndim == 1 else \
            np.take_along_axis(self.table[rows], candidates, axis=1)
        return s if self.kind is None else s.astype(self.kind)


def _task():
    rng = np.random.default_rng(0)
    pool = make_pool(50)
    queries = make_queries([[int(i)] for i in rng.integers(0, 50, 12)])
    return queries, pool, rng.standard_normal((12, 50))


@pytest.mark.parametrize("kind", [np.complex128, np.bool_, object, np.str_])
def test_scores_of_a_non_real_dtype_are_refused_in_one_line(kind):
    queries, pool, table = _task()
    with pytest.raises(RankerOutputError, match=r"ranker 'table': score returned values of dtype .*, expected .* "
                                                r"real numbers") as err:
        scan(Table(table, kind), queries, pool)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("kind", [np.int64, np.float16, np.float32])
def test_real_scores_of_any_width_are_taken(kind):
    queries, pool, table = _task()
    table = np.round(table * 100)
    ref = scan(Table(table), queries, pool)
    got = scan(Table(table, kind), queries, pool)
    assert np.array_equal(ref.ranks.values, got.ranks.values)


class Vectors:
    name, version = "vectors", "1"
    config: dict = {}

    def __init__(self, pool_vecs, query_vecs) -> None:
        self.p, self.q = pool_vecs, query_vecs

    def fit(self, task) -> None:
        pass

    def encode_pool(self, pool):
        return self.p

    def encode_queries(self, queries):
        return self.q[: len(queries)]


@pytest.mark.parametrize("which", ["encode_pool", "encode_queries"])
def test_complex_vectors_are_refused_not_cast(which):
    queries, pool, _ = _task()
    p, q = np.ones((50, 3)), np.ones((12, 3))
    if which == "encode_pool":
        p = p + 1j
    else:
        q = q + 1j
    with pytest.raises(RankerOutputError, match=rf"ranker 'vectors': {which} returned values of dtype complex128"):
        scan(Vectors(p, q), queries, pool)


def test_a_read_only_npy_map_is_reopened_by_the_engine_not_copied(tmp_path):
    """A memory-mapped pool stays memory-mapped (a multi-GB pool is not copied into memory), but
    through the engine's own map: not the object the ranker returned."""
    from rbench.engine.owned import pool_matrix

    path = tmp_path / "emb.npy"
    np.save(path, np.arange(12, dtype=np.float32).reshape(4, 3))
    theirs = np.load(path, mmap_mode="r")
    mine = pool_matrix(theirs, "r", 4)
    assert type(mine) is np.memmap and mine is not theirs and np.array_equal(mine, theirs)
    part = pool_matrix(np.load(path, mmap_mode="r")[1:], "r", 3)  # a view of part of a file: copied
    assert type(part) is np.ndarray and np.array_equal(part, theirs[1:])
    with pytest.raises(RankerOutputError, match=r"encode_pool returned shape \(4, 3\), expected \(5, d\)"):
        pool_matrix(theirs, "r", 5)


def test_the_engines_own_matrix_types_are_opened_again_values_kept(tmp_path):
    """A bfloat16 matrix keeps its uint16 bits (not cast to numbers); a sharded matrix is opened
    again from its folder; a ``BF16Matrix`` over a subclass runs none of the subclass's code."""
    from rbench.engine.embeddings import BF16Matrix, to_bf16_bits
    from rbench.engine.owned import pool_matrix
    from rbench.engine.sharded import finish, write_shard

    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    rows = np.array([[4, 1]])
    Learns.log.clear()
    theirs = BF16Matrix(to_bf16_bits(x).view(Learns))
    mine = pool_matrix(theirs, "r", 5)
    assert type(mine) is BF16Matrix and type(mine.bits) is np.ndarray and mine.bits.dtype == np.uint16
    assert np.array_equal(mine[rows], BF16Matrix(to_bf16_bits(x))[rows]) and Learns.log == []
    write_shard(tmp_path, 0, x[:3])
    write_shard(tmp_path, 3, x[3:])
    sharded = finish(tmp_path, 5)
    again = pool_matrix(sharded, "r", 5)
    assert again is not sharded and np.array_equal(again[rows], x[rows])
    assert pool_matrix(np.arange(10).reshape(5, 2), "r", 5).dtype == np.float32
