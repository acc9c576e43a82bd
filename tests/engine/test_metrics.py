"""Engine + metrics against ir_measures (trec_eval semantics) and the pessimistic tie rule."""

from __future__ import annotations

import ir_measures
import numpy as np
import pytest
from ir_measures import RR, R, nDCG

from rbench.engine.metrics import MEASURES, aggregate, per_query
from rbench.engine.scan import scan
from tests.helpers import TableRanker, make_pool, make_queries, table_scorer

IRM = {"nDCG@10": nDCG @ 10, "RR": RR, "R@10": R @ 10, "R@100": R @ 100}


def _ir_measures(table, positives, grades, exclude=None, candidates=None):
    qrels, run = [], []
    for qi in range(table.shape[0]):
        for p, g in zip(positives[qi], grades[qi]):
            qrels.append(ir_measures.Qrel(f"q{qi}", f"d{p}", int(g)))
        docs = candidates[qi] if candidates is not None else np.arange(table.shape[1])
        skip = set(exclude[qi]) if exclude else set()
        for d in docs:
            if int(d) not in skip:
                run.append(ir_measures.ScoredDoc(f"q{qi}", f"d{d}", float(table[qi, d])))
    out = {}
    for name, m in IRM.items():
        vals = {r.query_id: r.value for r in ir_measures.iter_calc([m], qrels, run)}
        out[name] = np.array([vals.get(f"q{i}", 0.0) for i in range(table.shape[0])])
    return out


@pytest.mark.parametrize("seed", range(6))
def test_matches_ir_measures_on_random_tie_free_runs(seed):
    rng = np.random.default_rng(seed)
    n_q, n_pool = 40, int(rng.integers(150, 400))
    table = rng.permutation(n_q * n_pool).reshape(n_q, n_pool).astype(np.float64) / 7.0  # tie-free
    positives, grades, exclude = [], [], []
    for _ in range(n_q):
        k = int(rng.integers(1, 5)) if seed % 2 else 1
        pos = rng.choice(n_pool, size=k, replace=False)
        positives.append(pos.tolist())
        grades.append(rng.integers(1, 4, size=k).astype(float).tolist())
        rest = np.setdiff1d(np.arange(n_pool), pos)
        exclude.append(rng.choice(rest, size=int(rng.integers(0, 20)), replace=False).tolist())
    queries = make_queries(positives, grades, exclude=exclude)
    # small batches and chunks so that merging across chunks is exercised
    res = scan(TableRanker(table), queries, make_pool(n_pool), batch_size=7, chunk_size=37, topk=15)
    ours = per_query(res.ranks, queries.grades)
    ref = _ir_measures(table, positives, grades, exclude)
    for name in MEASURES:
        np.testing.assert_allclose(ours[name], ref[name], atol=1e-9, rtol=0, err_msg=name)
    # the running top-k equals the true top-k of the non-excluded candidates
    for qi in range(n_q):
        s = table[qi].copy()
        s[exclude[qi]] = -np.inf
        np.testing.assert_array_equal(res.topk_index[qi], np.argsort(-s, kind="stable")[:15])
    assert (res.n_ranked == n_pool - np.array([len(e) for e in exclude])).all()


def test_per_query_candidate_lists_match_ir_measures():
    rng = np.random.default_rng(11)
    n_q, n_pool, m = 30, 500, 20
    table = rng.permutation(n_q * n_pool).reshape(n_q, n_pool).astype(np.float64)
    cands = np.stack([rng.choice(n_pool, size=m, replace=False) for _ in range(n_q)])
    positives = [[int(c[rng.integers(m)])] for c in cands]
    queries = make_queries(positives, candidates=cands)
    res = scan(TableRanker(table), queries, make_pool(n_pool), batch_size=8)
    ours = per_query(res.ranks, queries.grades)
    ref = _ir_measures(table, positives, [[1.0]] * n_q, candidates=cands)
    for name in MEASURES:
        np.testing.assert_allclose(ours[name], ref[name], atol=1e-9, err_msg=name)
    assert (res.n_ranked == m).all()


@pytest.mark.parametrize("chunk", [1000, 64])
def test_constant_scorer_ranks_positive_last(chunk):
    n_pool = 500
    queries = make_queries([[3], [499], [0, 7]])
    res = scan(TableRanker(np.zeros((3, n_pool))), queries, make_pool(n_pool), chunk_size=chunk)
    assert res.ranks[0].tolist() == [n_pool]
    assert res.ranks[1].tolist() == [n_pool]
    assert sorted(res.ranks[2].tolist()) == [n_pool - 1, n_pool]  # two positives tied with all
    rr = aggregate(per_query(res.ranks, queries.grades))["RR"]
    assert rr == pytest.approx(np.mean([1 / n_pool, 1 / n_pool, 1 / (n_pool - 1)]))


def test_tie_rule_cases():
    # positive ties with 2 others, 1 candidate strictly higher -> rank 4
    table = np.array([[5.0, 3.0, 3.0, 3.0, 1.0, 0.0]])
    res = scan(TableRanker(table), make_queries([[2]]), make_pool(6))
    assert res.ranks[0].tolist() == [4]
    # tied positives: the lower grade goes first among them (pessimistic for nDCG)
    table = np.array([[1.0, 1.0, 0.0]])
    q = make_queries([[0, 1]], grades=[[3.0, 1.0]])
    res = scan(TableRanker(table), q, make_pool(3))
    assert res.ranks[0].tolist() == [2, 1]


def test_exclusion_removes_candidates_from_ranking():
    table = np.array([[9.0, 8.0, 7.0, 1.0]])
    res = scan(TableRanker(table), make_queries([[2]], exclude=[[0, 1]]), make_pool(4))
    assert res.ranks[0].tolist() == [1]
    assert res.topk_index[0, :2].tolist() == [2, 3]
    assert res.topk_index[0, 2] == -1


def test_memory_bounded_by_batch_times_chunk():
    class Spy(TableRanker):
        biggest = 0

        def score(self, queries, candidates):
            out = super().score(queries, candidates)
            Spy.biggest = max(Spy.biggest, out.size)
            return out

    table = np.random.default_rng(0).random((50, 3000))
    queries = make_queries([[i] for i in range(50)])
    scan(Spy(table), queries, make_pool(3000), batch_size=10, chunk_size=256)
    assert Spy.biggest <= 10 * 256


def test_shards_merge_exactly_into_the_single_scan():
    from rbench.engine.scan import merge

    rng = np.random.default_rng(5)
    n_q, n_pool = 30, 700
    table = np.round(rng.random((n_q, n_pool)) * 50) / 50  # many ties on purpose
    positives = [rng.choice(n_pool, size=int(rng.integers(1, 4)), replace=False).tolist() for _ in range(n_q)]
    exclude = [rng.choice(n_pool, size=5, replace=False).tolist() for _ in range(n_q)]
    exclude = [[e for e in ex if e not in pos] for ex, pos in zip(exclude, positives)]
    q = make_queries(positives, exclude=exclude)
    pool = make_pool(n_pool)
    whole = scan(None, q, pool, chunk_size=100, topk=20, scorer=table_scorer(table))
    bounds = [0, 123, 400, 401, n_pool]
    parts = [scan(None, q, pool, chunk_size=64, topk=20, pool_range=(a, b), scorer=table_scorer(table))
             for a, b in zip(bounds[:-1], bounds[1:])]
    merged = merge(parts)
    np.testing.assert_array_equal(merged.ranks.values, whole.ranks.values)
    np.testing.assert_array_equal(merged.n_ranked, whole.n_ranked)
    np.testing.assert_array_equal(merged.topk_score, whole.topk_score)


def test_dense_path_refuses_non_finite_vectors():
    from rbench.core.errors import RankerOutputError

    class Emb:
        name, version, config = "emb", "0", {}

        def __init__(self, bad_pool=False, bad_query=False):
            self.bad_pool, self.bad_query = bad_pool, bad_query

        def fit(self, task):
            return None

        def encode_pool(self, pool):
            e = np.ones((len(pool), 4), dtype=np.float32)
            if self.bad_pool:
                e[7, 2] = np.inf
            return e

        def encode_queries(self, queries):
            q = np.ones((len(queries), 4), dtype=np.float32)
            if self.bad_query:
                q[1, 0] = np.nan
            return q

    q = make_queries([[1], [2], [3]])
    with pytest.raises(RankerOutputError, match="candidate vector 7"):
        scan(Emb(bad_pool=True), q, make_pool(20))
    with pytest.raises(RankerOutputError, match="query 'q1'"):
        scan(Emb(bad_query=True), q, make_pool(20))
    res = scan(Emb(), q, make_pool(20))
    assert res.ranks.values.tolist() == [20, 20, 20]  # all tied: pessimistic
