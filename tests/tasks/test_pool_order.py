"""Pool order carries no information (issue 28): a ranker that sees only query ids and candidate
positions scores at chance on every task family, and no per-query candidate list puts the positive
at a fixed column.

The position-only ranker below is the attack: it places each query at its position among all
query ids (sorted, as every family sorts them) and prefers the candidates whose pool position (or
column, in per-query lists) is nearest. A pool laid out in query order (ESCI's one positive per
query, MS MARCO v1.1's passages of each query, a corpus file written query by query) hands it the
answer; a pool in an order independent of the queries leaves it at a random ranking's MRR.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from rbench.api import Pool, Queries, TaskData
from rbench.core import paths
from rbench.engine.metrics import aggregate, per_query
from rbench.engine.scan import scan
from rbench.tasks.building import hashed_order
from rbench.tasks.registry import import_task, load_task
from tests.tasks.test_tasks_imported import write_jsonl
from tests.tasks.test_tasks_passages import qna_records, write_esci, write_qna_parquet
from tests.tasks.test_tasks_recsys import random_interactions, review_2014, write_atomic_music, write_gz
from tests.tasks.test_tasks_routing import make_rows, write_csv

# ------------------------------------------------------------------------------------------
# the rankers: position-only (the attack) and the random expectation it is held to
# ------------------------------------------------------------------------------------------


class PositionOnlyRanker:
    """Public contract only (``rbench.api.Ranker``): scores a candidate by how close its pool
    position (or its column, in per-query lists) is to the query's position among all query ids.
    It reads no text, no label: only ``queries.ids`` and the candidates' indices."""

    name = "position-only"
    version = "test"
    set_dependent = True  # a list column's score depends on the column: each list in one call

    def __init__(self) -> None:
        self.where: dict[str, float] = {}
        self.n_pool = 0

    @property
    def config(self) -> dict[str, Any]:
        return {}

    def fit(self, task: TaskData) -> None:
        ids = sorted({str(x) for q in (task.train, task.valid, task.test) for x in q.ids})
        self.where = {q: (k + 0.5) / len(ids) for k, q in enumerate(ids)}

    def index(self, pool: Pool) -> None:
        self.n_pool = len(pool)

    def score(self, queries: Queries, candidates: np.ndarray) -> np.ndarray:
        at = np.asarray([self.where[str(q)] for q in queries.ids])[:, None]
        if candidates.ndim == 1:
            spot = (candidates[None, :] + 0.5) / self.n_pool
        else:
            m = candidates.shape[1]
            spot = np.broadcast_to((np.arange(m) + 0.5) / m, candidates.shape)
        return -np.abs(spot - at) - 1e-9 * spot  # the tiny term breaks the rare exact tie


def random_rr(n: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Expected reciprocal rank of the first of ``k`` positives among ``n`` ranked candidates
    under a uniformly random order: sum over r of P(first positive at r) / r."""
    out = np.zeros(len(n))
    for i, (ni, ki) in enumerate(zip(n.tolist(), k.tolist())):
        r = np.arange(ni + 1, dtype=np.float64)  # P(no positive in the first r) for r = 0..n
        above = np.ones(ni + 1)
        for j in range(ki):
            above *= np.clip(ni - r - j, 0, None) / (ni - j)
        first = above[:-1] - above[1:]
        out[i] = float((first / np.arange(1, ni + 1)).sum())
    return out


def mrr_against_chance(data: TaskData) -> tuple[float, float]:
    """(MRR of the position-only ranker on the test split, a random ranking's expected MRR)."""
    ranker = PositionOnlyRanker()
    ranker.fit(data)
    ranker.index(data.pool)
    res = scan(ranker, data.test, data.pool, topk=0)
    got = aggregate(per_query(res.ranks, data.test.grades))["RR"]
    return got, float(random_rr(res.n_ranked, data.test.positives.lengths()).mean())


# ------------------------------------------------------------------------------------------
# one small task per family, built from local files in the published formats
# ------------------------------------------------------------------------------------------


def raw(task: str):
    d = paths.raw_dir(task)
    d.mkdir(parents=True, exist_ok=True)
    return d


def msmarco_qna() -> TaskData:
    write_qna_parquet(raw("msmarco") / "v11.parquet", qna_records(n=200))
    return load_task("msmarco", {"split": "test"})


def msmarco_tsv() -> TaskData:
    """An official-layout collection cut down to the judged passages and written query by query
    (each query's five passages together): pids are arbitrary numbers, not derived from qids."""
    rng = random.Random(11)
    pids = rng.sample(range(10**6, 10**7), 5 * 150)
    coll, qrels = [], []
    for q in range(150):
        mine = pids[5 * q : 5 * q + 5]
        coll += [f"{p}\tpassage {p}" for p in mine]
        qrels.append(f"{1000 + q} 0 {mine[rng.randrange(5)]} {rng.randint(1, 3)}")
    d = raw("msmarco")
    (d / "collection.tsv").write_text("\n".join(coll) + "\n")
    (d / "queries.tsv").write_text("".join(f"{1000 + q}\tquery {q}\n" for q in range(150)))
    (d / "qrels.dev.txt").write_text("\n".join(qrels) + "\n")
    return load_task("msmarco", {"split": "test"})


def esci(pool: str) -> Callable[[], TaskData]:
    def build() -> TaskData:
        write_esci(raw("esci"), n_queries=60)
        return load_task("esci", {"split": "test", "pool": pool})

    return build


def beir_in_query_order(tmp_path, n: int = 200) -> tuple[Any, list[str]]:
    """A BEIR folder whose corpus is written query by query (query k's positive first, then two
    other documents), ids padded so that sorted query ids follow the file; most queries test."""
    d = tmp_path / "beir"
    d.mkdir(exist_ok=True)
    rng = random.Random(5)
    docs = rng.sample(range(10**5, 10**6), 3 * n)  # document ids say nothing about the query
    write_jsonl(d / "corpus.jsonl", [{"_id": f"doc{x}", "text": f"body {x}"} for x in docs])
    write_jsonl(d / "queries.jsonl", [{"_id": f"q{k:04d}", "text": f"question {k}",
                                       "split": "train" if k % 10 == 0 else "test"} for k in range(n)])
    (d / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\n"
                                 + "".join(f"q{k:04d}\tdoc{docs[3 * k]}\t1\n" for k in range(n)))
    return d, [f"doc{x}" for x in docs]


def imported_large(tmp_path) -> TaskData:
    d, _ = beir_in_query_order(tmp_path)
    import_task("byo-order", d / "corpus.jsonl", d / "queries.jsonl", d / "qrels.tsv")
    return load_task("byo-order")


def imported_small(tmp_path) -> TaskData:
    """Candidate lists with the positive always first (as a hand-written file might have them)."""
    d, docs = beir_in_query_order(tmp_path)
    write_jsonl(d / "candidates.jsonl", [{"query_id": f"q{k:04d}",
                                          "candidates": [docs[3 * k], docs[3 * k + 1], docs[3 * k + 2],
                                                         docs[(3 * k + 5) % len(docs)]]}
                                         for k in range(len(docs) // 3)])
    import_task("byo-lists", d / "corpus.jsonl", d / "queries.jsonl", d / "qrels.tsv", scenario="small",
                candidates=d / "candidates.jsonl")
    return load_task("byo-lists")


def rec_toy() -> TaskData:
    rows = random_interactions(200, 150, seed=4, lo=3, hi=12)
    items = sorted({i for _, i, _ in rows})
    write_gz(raw("rec-toy") / "reviews_Toys_and_Games_5.json.gz",
             [review_2014(f"A{u[1:].zfill(4)}", f"B{i[1:].zfill(5)}", ts) for u, i, ts in rows])
    write_gz(raw("rec-toy") / "meta_Toys_and_Games.json.gz",
             [repr({"asin": f"B{i[1:].zfill(5)}", "title": f"toy {i}"}) for i in items])
    return load_task("rec-toy")


def ml_100k() -> TaskData:
    pytest.importorskip("recbole", reason="ml-100k ships inside the recbole package")
    return load_task("ml-100k")


def rec_music() -> TaskData:
    write_atomic_music(raw("rec-music") / "radio", random_interactions(80, 120, seed=8, lo=3, hi=15), 120)
    return load_task("rec-music", seed=1)


def routing() -> TaskData:
    write_csv(raw("routing-balance") / "router_data.csv", make_rows(n_tasks=3, per_task=40))
    return load_task("routing-balance")


LARGE = {"msmarco-qna": msmarco_qna, "msmarco-tsv": msmarco_tsv, "esci-positives": esci("positives"),
         "esci-all": esci("all"), "imported": imported_large, "rec-toy": rec_toy, "ml-100k": ml_100k}
SMALL = {"imported-small": imported_small, "rec-music": rec_music, "routing": routing}


def build(name: str, tmp_path) -> TaskData:
    make = {**LARGE, **SMALL}[name]
    return make(tmp_path) if name.startswith("imported") else make()


# ------------------------------------------------------------------------------------------
# the checks
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(LARGE))
def test_position_only_ranker_is_at_chance_on_shared_pools(name, tmp_path):
    data = build(name, tmp_path)
    got, chance = mrr_against_chance(data)
    assert got < 3 * chance, f"{name}: position-only MRR {got:.3f}, a random ranking's {chance:.3f}"


@pytest.mark.parametrize("name", list(SMALL))
def test_position_only_ranker_is_at_chance_on_candidate_lists(name, tmp_path):
    data = build(name, tmp_path)
    assert data.test.candidates is not None
    got, chance = mrr_against_chance(data)
    assert got < 1.5 * chance, f"{name}: position-only MRR {got:.3f}, a random ranking's {chance:.3f}"


@pytest.mark.parametrize("name", list(SMALL))
def test_candidate_lists_do_not_put_the_positive_at_a_fixed_column(name, tmp_path):
    """Routing lists every LLM in pool order for every query, so a column names an LLM exactly as
    its id does and no more; elsewhere the positive's column must spread over the columns."""
    data = build(name, tmp_path)
    for q in (data.train, data.valid, data.test):
        if not len(q):
            continue
        c = q.candidates
        if name == "routing":
            assert (c == c[:1]).all()
            continue
        col = np.argmax(c == q.positives.values[q.positives.offsets[:-1]][:, None], axis=1)
        share = np.bincount(col, minlength=c.shape[1]) / len(col)
        assert share.max() < 2.0 / c.shape[1] + 0.15, f"{name}: positive columns {share.round(2)}"


def test_hashed_order_ignores_file_order_and_id_structure():
    ids = np.asarray([f"doc{k}" for k in range(1000)], dtype=object)
    order = hashed_order(ids)
    assert sorted(order.tolist()) == list(range(1000))
    shuffled = ids[np.random.default_rng(0).permutation(1000)]
    assert list(ids[order]) == list(shuffled[hashed_order(shuffled)])  # file order does not matter
    assert abs(np.corrcoef(order, np.arange(1000))[0, 1]) < 0.1  # nor does the ids' own sequence
