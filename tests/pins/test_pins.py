"""Pins on what users rely on and that no other test executes: the engine's many-positives
branch, which split a run evaluates, one end-to-end value, the below-popularity mark at equal MRR,
the elimination tie at the test-time-scaling cut and LRanker's K-means slots."""

from __future__ import annotations

import numpy as np
import pytest

from rbench.api import Pool, Queries, Ragged
from rbench.engine.scan import scan


def reference_ranks(scores: np.ndarray, positives: list[list[int]], grades: list[list[float]]) -> list[list[int]]:
    """Slow reference of the tie rule: 1 + non-positives scoring higher or equal + positives
    placed before (higher score; on a tie the lower grade, then the higher pool index, first)."""
    out = []
    for q, (pos, grd) in enumerate(zip(positives, grades, strict=True)):
        s = scores[q]
        others = np.setdiff1d(np.arange(len(s)), pos)
        row = []
        for p, g in zip(pos, grd, strict=True):
            rank = 1 + int((s[others] >= s[p]).sum())
            for p2, g2 in zip(pos, grd, strict=True):
                if p2 != p and (s[p2] > s[p] or (s[p2] == s[p] and (g2 < g or (g2 == g and p2 > p)))):
                    rank += 1
            row.append(rank)
        out.append(row)
    return out


class TableRanker:
    name, version, config = "table", "1", {}

    def __init__(self, scores: np.ndarray) -> None:
        self.scores = scores

    def fit(self, task):
        pass

    def index(self, pool):
        pass

    def score(self, queries, candidates):
        rows = np.asarray([int(i[1:]) for i in queries.ids])
        table = self.scores[rows]
        return table[:, candidates] if candidates.ndim == 1 else np.take_along_axis(table, candidates, axis=1)


@pytest.mark.parametrize("chunk", [7, 64])
def test_many_positives_branch_matches_the_reference_with_ties(chunk):
    rng = np.random.default_rng(3)
    n_q, n_c = 6, 50
    scores = rng.integers(0, 5, size=(n_q, n_c)).astype(np.float64)  # heavy ties
    positives = [sorted(rng.choice(n_c, size=12, replace=False).tolist()) for _ in range(n_q)]  # > 8
    grades = [rng.integers(1, 4, size=12).astype(float).tolist() for _ in range(n_q)]
    pool = Pool(ids=np.array([f"d{i}" for i in range(n_c)], dtype=object),
                texts=np.array(["x"] * n_c, dtype=object), name="pins")
    queries = Queries(ids=np.array([f"q{i}" for i in range(n_q)], dtype=object), texts=["q"] * n_q,
                      positives=Ragged.from_rows(positives), grades=Ragged.from_rows(grades, dtype=np.float64))
    got = scan(TableRanker(scores), queries, pool, chunk_size=chunk, topk=0).ranks
    assert [got[i].tolist() for i in range(n_q)] == reference_ranks(scores, positives, grades)


def test_a_run_evaluates_the_test_split_and_pop_on_ml100k_is_pinned(tmp_path):
    pytest.importorskip("recbole")
    from rbench.results.record import read_per_query
    from rbench.run.runner import RunOptions, run
    from rbench.tasks.registry import load_task

    data = load_task("ml-100k")
    out = run(RunOptions(ranker="pop", task="ml-100k", results_dir=tmp_path))
    rec = out.record
    assert rec.n_queries == len(data.test) == 943
    record_file = next(tmp_path.rglob("pop*.json"))
    per_query = read_per_query(record_file, rec)
    ids = set(per_query[per_query.columns[0]].astype(str))
    assert ids == {str(i) for i in data.test.ids} and not ids & {str(i) for i in data.valid.ids}
    # the committed README/leaderboard value: pop on ml-100k = nDCG@10 4.47, MRR 4.26
    assert round(100 * rec.metrics["nDCG@10"], 2) == 4.47
    assert round(100 * rec.metrics["RR"], 2) == 4.26


def test_equal_mrr_is_marked_below_popularity():
    from rbench.results.leaderboard import POP, Leaderboard
    from rbench.results.record import RowKey

    col = object()
    model = RowKey("model")
    lb = Leaderboard(scenario="large", variant="original", tasks=[col], rows=[POP, model],
                     cells={(POP, col): {"RR": 0.0426}, (model, col): {"RR": 0.0426}})
    assert lb.below_floors() == {(model, col)}
    lb.cells[(model, col)] = {"RR": 0.04261}
    assert lb.below_floors() == set()


def test_elimination_tie_at_the_cut_goes_to_the_lower_pool_index():
    pytest.importorskip("torch")
    from rbench_rankers.lranker.scaling import eliminate

    survivors = np.array([40, 10, 30, 20])
    scores = np.array([1.0, 2.0, 1.0, 1.0])  # 10 is best; 20, 30, 40 tie for the second place
    kept = eliminate(survivors, scores, width=1, keep=0.5, seed=0)
    assert [k.tolist() for k in kept] == [[10, 20]]
    from rbench_rankers.lranker.elimination import eliminate_many  # the batched kernel: the same pin

    vectors = np.zeros((41, 1), np.float32)
    vectors[survivors, 0] = scores
    got, sizes = eliminate_many(vectors, np.ones((1, 1), np.float32), survivors, np.array([0, 4]), [0], 1, 0.5, 0)
    assert sizes.tolist() == [[2]] and got[:2].tolist() == [10, 20]


def test_kmeans_slots_are_pinned():
    """LRanker's aggregation (k-means++ and Lloyd on the first ``assign_dims`` coordinates, the
    full vectors' centroids in canonical order), pinned: a trained checkpoint's soft prompts
    depend on these exact slots, so a change to the reference or to the batched kernels (equal
    to it, set for set) that moves them shows here, not as a silent drift of every LRanker number."""
    import hashlib

    from rbench_rankers.lranker.aggregation import kmeans_slots, kmeans_slots_many

    rng = np.random.default_rng(2026)
    sets = [rng.standard_normal((n, 24)).astype(np.float32) for n in (25, 60, 300, 450, 900)]
    ref = np.stack([kmeans_slots(x, 20, 16, 7 + i) for i, x in enumerate(sets)])
    np.testing.assert_array_equal(kmeans_slots_many(sets, 20, 16, [7 + i for i in range(5)]), ref)
    assert hashlib.sha256(ref.tobytes()).hexdigest() == "29cb93a6b5374d910704b89e6241b7e9bd7745528a0f07fadebdc5e922f2bfec"
