"""Pools built from positives (issue 40): ``task.distractors=N`` adds N candidates that are no
query's positive (seeded, counted in the record), and each load says how much of its pool the
train/valid positives are."""

from __future__ import annotations

import dataclasses
import json
import random

import pandas as pd
import pytest

from rbench.core import paths
from rbench.core.errors import RBenchError
from rbench.tasks import fit_positives
from rbench.tasks.families.passages import PassageOptions, load_esci, passage_id
from rbench.tasks.registry import get_task, load_task


def _raw(task: str):
    d = paths.raw_dir(task)
    d.mkdir(parents=True, exist_ok=True)
    return d


def write_esci(n_queries: int = 40, n_products: int = 300, seed: int = 5) -> pd.DataFrame:
    """ESCI's two files: queries judge 3-8 of ``n_products`` (some E), the products file lists every
    product in two locales (only US ones may be drawn)."""
    d = _raw("esci")
    rng = random.Random(seed)
    rows = []
    for q in range(n_queries):
        judged = rng.sample(range(n_products), rng.randint(3, 8))
        labels = [rng.choice("ESCI") for _ in judged]
        labels[0] = "E"
        rows += [{"example_id": len(rows) + j, "query": f"search {q}", "query_id": q, "product_id": f"B{p:05d}",
                  "product_locale": "us", "esci_label": lab, "small_version": 1, "large_version": 1}
                 for j, (p, lab) in enumerate(zip(judged, labels))]
    ex = pd.DataFrame(rows)
    ex.to_parquet(d / "shopping_queries_dataset_examples.parquet", index=False)
    products = [{"product_id": f"B{p:05d}", "product_title": f"Title {p}", "product_bullet_point": "",
                 "product_brand": None, "product_locale": loc}
                for p in range(n_products) for loc in ("us", "es") if loc == "us" or p % 3 == 0]
    products += [{"product_id": f"ES{p}", "product_title": "es only", "product_bullet_point": "",
                  "product_brand": None, "product_locale": "es"} for p in range(50)]
    pd.DataFrame(products).to_parquet(d / "shopping_queries_dataset_products.parquet", index=False)
    return ex


def _distractors(task) -> set[str]:
    """Pool ids that are no evaluated query's positive nor any query's judged product."""
    return set(task.pool.ids) - _positive_ids(task)


def _positive_ids(task) -> set[str]:
    return {task.pool.ids[p] for q in (task.train, task.valid, task.test) for p in q.positives.values}


def test_esci_distractors_are_nobodys_positive_seeded_and_counted():
    ex = write_esci()
    base = load_task("esci", seed=0)
    task = load_task("esci", {"distractors": "60"}, seed=0)
    e_anywhere = set(ex.loc[ex["esci_label"] == "E", "product_id"])
    added = set(task.pool.ids) - set(base.pool.ids)
    assert len(added) == 60 == task.info["n_distractors"] and len(task.pool) == len(base.pool) + 60
    assert not added & e_anywhere  # no query's E product, sampled or not
    assert all(a.startswith("B") for a in added)  # US products only
    # the queries, positives and exclusions are those of the pool without distractors
    for a, b in ((base.test, task.test), (base.train, task.train)):
        assert list(a.ids) == list(b.ids)
        assert [base.pool.ids[p] for p in a.positives.values] == [task.pool.ids[p] for p in b.positives.values]
    # seeded: the same seed draws the same ones (built again, not read from the prepared cache),
    # another seed others; the fingerprint says so
    again = fit_positives.exclude(load_esci(get_task("esci"), PassageOptions(distractors=60), seed=0))
    assert set(again.pool.ids) == set(task.pool.ids) and again.fingerprint == task.fingerprint
    other = load_task("esci", {"distractors": "60"}, seed=1)
    assert set(other.pool.ids) - set(load_task("esci", seed=1).pool.ids) != added
    assert task.fingerprint != base.fingerprint


def test_distractors_are_not_already_in_the_pool():
    """With ``pool=all`` the pool holds judged S/C/I products that are in the collection too: a
    distractor is never one of them (the pool grows by exactly N distinct candidates)."""
    write_esci(n_queries=30, n_products=200)
    base = load_task("esci", {"pool": "all"}, seed=0)
    task = load_task("esci", {"pool": "all", "distractors": "40"}, seed=0)
    assert len(task.pool) == len(set(task.pool.ids)) == len(base.pool) + 40
    assert set(base.pool.ids) < set(task.pool.ids)


def test_distractor_draw_is_uniform_over_the_free_collection():
    """Over many seeds every candidate outside the pool and the E products is drawn, at about the
    same rate (a draw from the head of the sorted list would fail this)."""
    ex = write_esci(n_queries=20, n_products=120)
    e_anywhere = set(ex.loc[ex["esci_label"] == "E", "product_id"])
    counts: dict[str, int] = {}
    for seed in range(12):
        base = set(load_task("esci", seed=seed).pool.ids)
        for pid in set(load_task("esci", {"distractors": "20"}, seed=seed).pool.ids) - base:
            counts[pid] = counts.get(pid, 0) + 1
    free = {f"B{p:05d}" for p in range(120)} - e_anywhere
    assert set(counts) <= free and len(counts) > 0.7 * len(free)


def test_esci_pool_prior_info():
    write_esci()
    task = load_task("esci", seed=0)
    assert task.spec.pool_from_positives and task.info["pool_from_positives"] is True
    fit = {p for q in (task.train, task.valid) for p in q.positives.values}
    assert task.info["pool_fit_positive_share"] == round(len(fit) / len(task.pool), 6)
    assert task.info["pool_positive_share"] == round(len(_positive_ids(task)) / len(task.pool), 6) == 1.0
    more = load_task("esci", {"distractors": "100"}, seed=0)
    assert more.info["pool_positive_share"] == round(len(task.pool) / (len(task.pool) + 100), 6)


def test_too_many_or_negative_distractors_are_one_line_errors():
    write_esci(n_queries=10, n_products=40)
    with pytest.raises(RBenchError) as err:
        load_task("esci", {"distractors": "100000"})
    assert "task.distractors=100,000" in str(err.value) and "use at most" in str(err.value)
    assert "\n" not in str(err.value)
    with pytest.raises(RBenchError, match="task.distractors must be >= 0"):
        load_task("esci", {"distractors": "-1"})


def test_msmarco_qna_distractors_are_passages_nobody_selected():
    d = _raw("msmarco")
    rng = random.Random(2)
    selected_anywhere = set()
    with open(d / "ms_marco_v1.1_train.jsonl", "w", encoding="utf-8") as fh:
        for q in range(60):
            texts = [f"passage {q}-{j}" for j in range(5)] + ["a passage shared by every query"]
            sel = [0] * 6
            sel[rng.randrange(6) if q % 10 else 5] = 1  # every tenth query selects the shared passage
            selected_anywhere |= {t for t, s in zip(texts, sel) if s}
            fh.write(json.dumps({"query_id": q, "query": f"question {q}", "passages": [
                {"is_selected": s, "passage_text": t} for s, t in zip(sel, texts)]}) + "\n")
    base = load_task("msmarco", {"n_queries": "20"}, seed=0)
    task = load_task("msmarco", {"n_queries": "20", "distractors": "30"}, seed=0)
    added = set(task.pool.ids) - set(base.pool.ids)
    assert len(added) == 30 == task.info["n_distractors"]
    assert not added & {passage_id(t) for t in selected_anywhere}
    assert task.info["pool_from_positives"] is True
    assert 0 < task.info["pool_fit_positive_share"] < task.info["pool_positive_share"] < 1


def test_distractors_zero_keeps_the_fingerprint_of_pools_written_before_the_option():
    """Records written before ``distractors`` existed keep their column: the fingerprint text of
    the default equals the repr of the options without the field."""
    opts = PassageOptions(split="test")
    later = ("distractors", "exclude_fit_positives")  # options added after records were written
    old = dataclasses.make_dataclass("PassageOptions", [(f.name, f.type, dataclasses.field(default=f.default))
                                                        for f in dataclasses.fields(opts) if f.name not in later])
    assert opts.fingerprint_text() == repr(old(**{k: v for k, v in dataclasses.asdict(opts).items()
                                                  if k not in later}))
    assert PassageOptions(exclude_fit_positives=False).fingerprint_text() == PassageOptions().fingerprint_text()
    assert "distractors=5" in PassageOptions(distractors=5).fingerprint_text()


def test_the_tsv_layout_takes_no_distractors():
    d = _raw("msmarco")
    (d / "collection.tsv").write_text("p1\tone\np2\ttwo\n", encoding="utf-8")
    (d / "queries.tsv").write_text("q1\tfirst\n", encoding="utf-8")
    (d / "qrels.txt").write_text("q1 0 p1 1\n", encoding="utf-8")
    with pytest.raises(RBenchError, match="task.distractors apply to the v1.1 QnA layout and ESCI"):
        load_task("msmarco", {"distractors": "1", "split": "test"})
    task = load_task("msmarco", {"split": "test"})
    assert task.info["pool_positive_share"] == 0.5 and task.info["pool_from_positives"] is True


def test_the_record_counts_the_distractors(tmp_path):
    import rbench

    write_esci()
    rec = rbench.evaluate("random", "esci", task_options={"distractors": 25}, results_dir=tmp_path)
    assert rec.task_info["n_distractors"] == 25 and rec.task_options["distractors"] == 25
    assert rec.run_options["non_default"]["task"] == {"distractors": 25}
    assert get_task("esci").pool_from_positives


def _import(tmp_path, name: str, n_docs: int, n_queries: int = 30) -> None:
    from rbench.tasks.registry import import_task

    d = tmp_path / name
    d.mkdir()
    (d / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "text": f"doc {i}"}) + "\n"
                                            for i in range(n_docs)), encoding="utf-8")
    (d / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": f"question {i}"}) + "\n"
                                             for i in range(n_queries)), encoding="utf-8")
    (d / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(n_queries)),
                                 encoding="utf-8")
    import_task(name, d / "corpus.jsonl", d / "queries.jsonl", d / "qrels.tsv")


def test_an_imported_corpus_of_positives_is_flagged_and_a_large_one_is_not(tmp_path):
    """30 queries, one positive each: a 40-document corpus is 75% positives (built from them), a
    400-document one 7.5% (below POSITIVE_SHARE_FLAG)."""
    _import(tmp_path, "judged-only", 40)
    _import(tmp_path, "big-corpus", 400)
    assert get_task("judged-only").pool_from_positives and not get_task("big-corpus").pool_from_positives
    small, big = load_task("judged-only"), load_task("big-corpus")
    assert small.info["pool_from_positives"] is True and small.info["pool_positive_share"] == 0.75
    assert big.info["pool_from_positives"] is False and big.info["pool_positive_share"] == 0.075
    fit = {p for q in (small.train, small.valid) for p in q.positives.values}
    assert small.info["pool_fit_positive_share"] == round(len(fit) / 40, 6)
