"""Pools built from positives (issue 40): the train/valid positives ``fit`` is handed are left out
of every test ranking (``rbench.tasks.fit_positives``), so "push them last" gains nothing.

Each test names the bug it catches (planted by hand while writing it, then reverted).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from rbench.api import Pool, Queries, TaskData, TaskSpec
from rbench.core import paths
from rbench.core.errors import RBenchError
from rbench.tasks import fit_positives
from rbench_rankers.bm25 import BM25Ranker
from tests.helpers import make_pool, make_queries

WORDS = [f"w{i}" for i in range(60)]


def write_esci_words(n_queries: int = 240, n_products: int = 900, seed: int = 3) -> pd.DataFrame:
    """An ESCI-format file whose products share words with the queries that judge them, so bm25
    has signal: each query judges 4 products, the first an E (the task's positive)."""
    d = paths.raw_dir("esci")
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    title = {p: " ".join(rng.choice(WORDS, 4)) for p in range(n_products)}
    rows = []
    for q in range(n_queries):
        judged = rng.choice(n_products, 4, replace=False)
        words = title[int(judged[0])].split()[:1] + list(rng.choice(WORDS, 2))
        for j, p in enumerate(judged):
            rows.append({"example_id": len(rows), "query": " ".join(words), "query_id": q,
                         "product_id": f"B{int(p):05d}", "product_locale": "us",
                         "esci_label": "E" if j == 0 else str(rng.choice(list("SCI"))),
                         "small_version": 1, "large_version": 1})
    ex = pd.DataFrame(rows)
    ex.to_parquet(d / "shopping_queries_dataset_examples.parquet", index=False)
    pd.DataFrame([{"product_id": f"B{p:05d}", "product_title": title[p], "product_bullet_point": "",
                   "product_brand": None, "product_locale": "us"} for p in range(n_products)]).to_parquet(
        d / "shopping_queries_dataset_products.parquet", index=False)
    return ex


class FitLastBM25(BM25Ranker):
    """The cheat of the issue: bm25, with every train/valid positive (input ``fit`` is handed,
    rightly) pushed below every other candidate. It never reads a test label."""

    name = "bm25-fitlast"

    def fit(self, task: TaskData) -> None:
        ids = np.asarray(task.fit_pool.ids, dtype=object)
        seen = np.concatenate([task.train.positives.values, task.valid.positives.values])
        self._seen = {str(ids[i]) for i in seen}

    def index(self, pool: Pool) -> None:
        super().index(pool)
        self._fit = np.array([str(i) in getattr(self, "_seen", set()) for i in pool.ids], dtype=bool)

    def score(self, queries: Queries, candidates: np.ndarray) -> np.ndarray:
        s = np.array(super().score(queries, candidates), dtype=np.float64)
        return s - 1e6 * self._fit[np.asarray(candidates)]


def _run(ranker, **task_options):
    import rbench

    return rbench.evaluate(ranker, "esci", task_options=task_options or None)


def test_the_fit_positive_filter_scores_exactly_what_bm25_scores():
    """Bug caught: the rule not applied (registry.load returning the family's task as it is): the
    filter then beats bm25 on the default protocol, as it still does with the option off."""
    ex = write_esci_words()
    bm25, cheat = _run("bm25"), _run(FitLastBM25)
    assert cheat.metrics == bm25.metrics
    pd.testing.assert_frame_equal(cheat.per_query, bm25.per_query)
    # the old protocol, kept by name: the same filter gains with no skill
    old_bm25, old_cheat = _run("bm25", exclude_fit_positives=False), _run(FitLastBM25, exclude_fit_positives=False)
    assert old_cheat.metrics["RR"] > 1.5 * old_bm25.metrics["RR"]
    assert old_cheat.task_info["exclude_fit_positives"] is False
    assert "fit_positive_targets_dropped" not in old_cheat.task_info
    # the record counts the queries left out: a test query whose chosen product is another
    # (train/valid) query's chosen product, counted here from the file itself
    info = bm25.task_info
    assert info["exclude_fit_positives"] is True
    assert info["fit_positive_targets_dropped"] > 0
    assert bm25.n_queries == old_bm25.n_queries - info["fit_positive_targets_dropped"]
    from rbench.tasks.registry import load_task

    task = load_task("esci", {"exclude_fit_positives": "false"})
    chosen = ex[ex.esci_label == "E"].sort_values("example_id").groupby("query_id").product_id.first()
    fit_ids = {chosen[int(q)] for q in [*task.train.ids, *task.valid.ids]}
    assert info["fit_positive_targets_dropped"] == sum(chosen[int(q)] in fit_ids for q in task.test.ids)
    assert info["fit_positives_excluded"] == len(fit_ids)


def _toy(train, valid, test, test_exclude=None, flag=True, n=20) -> TaskData:
    spec = TaskSpec(name="toy", title="toy", scenario="large", domain="product", description="",
                    paper_candidates=None, paper_queries=None, sources=(), license="", how_to_get="",
                    pool_from_positives=flag)
    return TaskData(spec=spec, pool=make_pool(n), train=make_queries([[p] for p in train]),
                    valid=make_queries([[p] for p in valid]),
                    test=make_queries(test, exclude=test_exclude))


def test_the_exclusion_is_the_fit_positives_only_and_never_reads_the_test_labels():
    """Bugs caught: test positives taken into the excluded set (another test split would change
    it); a query's own exclusions dropped when the fit positives are added; a test query whose
    answer is a fit positive kept (its answer excluded) or dropped uncounted; a fit positive kept
    as an answer of a query with several (excluded and the answer at once), or that query dropped
    though another answer stays."""
    data = _toy(train=[1, 2, 3, 3], valid=[4], test=[[7], [2], [9, 10], [11], [3, 12, 4]],
                test_exclude=[[8], [], [5], [], []])
    out = fit_positives.exclude(data)
    assert list(out.test.ids) == ["q0", "q2", "q3", "q4"]  # q1's answer (2) is a train positive: left out
    assert out.info["fit_positive_targets_dropped"] == 1 and out.info["fit_positives_excluded"] == 4
    assert out.info["n_test"] == 4 and out.info["fit_positive_answers_excluded"] == 2
    assert [list(map(int, out.test.positives[i])) for i in range(4)] == [[7], [9, 10], [11], [12]]
    assert len(out.test.grades.values) == 5
    rows = [sorted(map(int, out.test.exclude[i])) for i in range(4)]
    assert rows == [[1, 2, 3, 4, 8], [1, 2, 3, 4, 5], [1, 2, 3, 4], [1, 2, 3, 4]]
    other = fit_positives.exclude(_toy(train=[1, 2, 3, 3], valid=[4], test=[[12], [13], [14], [15], [16]]))
    assert all(sorted(map(int, other.test.exclude[i])) == [1, 2, 3, 4] for i in range(5))
    assert out.fingerprint != data.fingerprint  # the test set changed: so does the fingerprint
    # the input is left as it was (the cache's copy)
    assert len(data.test) == 5 and data.test.exclude[1].size == 0 and len(data.test.positives[4]) == 3


def test_nothing_moves_where_there_is_nothing_to_exclude():
    """Bug caught: the rule applied to a pool not built from positives (a recommendation catalogue's
    train targets are honest candidates), or a test-only task's fingerprint moved (every committed
    DL19 record would stop verifying)."""
    plain = _toy(train=[1, 2], valid=[3], test=[[1], [5]], flag=False)
    assert fit_positives.exclude(plain) is plain
    zero_shot = _toy(train=[], valid=[], test=[[1], [5]])
    assert fit_positives.exclude(zero_shot) is zero_shot
    off = fit_positives.exclude(_toy(train=[1], valid=[], test=[[1], [5]]), on=False)
    assert len(off.test) == 2 and off.test.exclude is None and off.info["exclude_fit_positives"] is False


def test_every_test_answer_a_fit_positive_or_too_many_exclusions_is_one_line():
    with pytest.raises(RBenchError, match="every test query's answers are train/valid positives") as err:
        fit_positives.exclude(_toy(train=[1, 2], valid=[], test=[[1], [2, 1]]))
    assert "\n" not in str(err.value) and "task.exclude_fit_positives=false" in str(err.value)
    big = _toy(train=list(range(1, 400)), valid=[], test=[[0]] * 30, n=400)
    with pytest.raises(RBenchError, match="exclusions") as err:
        old, fit_positives.MAX_EXCLUSIONS = fit_positives.MAX_EXCLUSIONS, 1000
        try:
            fit_positives.exclude(big)
        finally:
            fit_positives.MAX_EXCLUSIONS = old
    assert "\n" not in str(err.value) and "11,970 exclusions" in str(err.value)


def test_records_of_both_protocols_verify_against_their_own_test_sets(capsys, tmp_path):
    """Bug caught: ``rbench verify`` loading the task without the rule (or with it, for a record
    made with the option off): the run file then ranks candidates the test set does not hold, or
    the fingerprint differs and the record is skipped instead of checked."""
    import rbench
    from tests.helpers import cli

    write_esci_words(n_queries=120, n_products=400)
    new = rbench.evaluate("bm25", "esci", results_dir=tmp_path)
    old = rbench.evaluate("bm25", "esci", task_options={"exclude_fit_positives": False}, results_dir=tmp_path)
    assert new.task_fingerprint != old.task_fingerprint
    assert old.run_options["non_default"]["task"] == {"exclude_fit_positives": False}
    code, text, err = cli(capsys, "verify", str(tmp_path))
    assert code == 0, text + err
    assert "2 records: 2 OK, 0 MISMATCH, 0 SKIP" in text, text
