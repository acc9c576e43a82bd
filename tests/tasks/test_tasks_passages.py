"""MS MARCO (v1.1 QnA and official TSV) and ESCI loaders, on tiny files in the real formats,
checked against independent plain-Python derivations of the documented protocol."""

from __future__ import annotations

import json
import random

import numpy as np
import pandas as pd
import pytest

from rbench.core import paths
from rbench.core.errors import DataError, RBenchError
from rbench.engine.scan import validate_queries
from rbench.tasks.families.passages import passage_id, product_text
from rbench.tasks.registry import data_status, get_task, load_task

# the family's own protocol (every split as built), before the registry leaves the train/valid
# positives out of the test rankings (rbench.tasks.fit_positives; tests/tasks/test_fit_positives.py)
FAMILY = {"exclude_fit_positives": "false"}

# ------------------------------------------------------------------------------------------
# builders
# ------------------------------------------------------------------------------------------


def qna_records(n: int = 40, seed: int = 1) -> list[dict]:
    """v1.1-like records: some queries without a selected passage, some with two, and passages
    shared between queries (identical texts)."""
    rng = random.Random(seed)
    shared = [f"shared passage {k} about topic {k}" for k in range(5)]
    out = []
    for q in range(n):
        k = rng.randint(3, 8)
        texts = [f"passage {q}-{j} words {rng.randint(0, 999)}" for j in range(k)]
        if q % 4 == 0:
            texts[rng.randrange(k)] = rng.choice(shared)
        sel = [0] * k
        if q % 7 != 3:  # queries 3, 10, 17, ... have no selected passage
            sel[rng.randrange(k)] = 1
            if q % 5 == 0:
                sel[rng.randrange(k)] = 1  # maybe a second selected passage
        out.append({"query_id": 1000 + q, "query": f"question number {q}", "query_type": "DESCRIPTION",
                    "answers": ["a"], "passages": {"is_selected": sel, "passage_text": texts,
                                                   "url": [f"http://x/{q}/{j}" for j in range(k)]}})
    return out


def write_qna_parquet(path, records) -> None:
    pd.DataFrame(records).to_parquet(path, index=False)


def write_qna_jsonl(path, records) -> None:
    """The original Microsoft layout: passages as a list of objects."""
    with open(path, "w", encoding="utf-8") as fh:
        for r in records:
            p = r["passages"]
            obj = {**r, "passages": [{"is_selected": s, "passage_text": t, "url": u} for s, t, u in
                                     zip(p["is_selected"], p["passage_text"], p["url"])]}
            fh.write(json.dumps(obj) + "\n")


def raw(task: str):
    d = paths.raw_dir(task)
    d.mkdir(parents=True, exist_ok=True)
    return d


def expected_qna(records: list[dict]) -> dict[str, dict]:
    """Per eligible query: positive text, other selected texts, all texts (stripped)."""
    out = {}
    for r in records:
        p = r["passages"]
        texts = [t.strip() for t in p["passage_text"]]
        sel = [t for t, s in zip(texts, p["is_selected"]) if s]
        if sel:
            out[str(r["query_id"])] = {"positive": sel[0], "others": set(sel) - {sel[0]}, "texts": texts,
                                       "query": r["query"]}
    return out


def all_splits(task):
    return [task.train, task.valid, task.test]


def check_contract(task) -> None:
    for q in all_splits(task):
        validate_queries(q, task.pool)
        assert len(q.prompts) == len(q)
        for text, prompt in zip(q.texts[:3], q.prompts[:3]):
            assert prompt == task.spec.render_prompt(text)
        if q.exclude is not None:
            for i in range(len(q)):
                assert not set(q.positives[i]) & set(q.exclude[i])


# ------------------------------------------------------------------------------------------
# MS MARCO v1.1 QnA
# ------------------------------------------------------------------------------------------


def test_qna_protocol_matches_independent_derivation():
    records = qna_records()
    write_qna_parquet(raw("msmarco") / "train-00000-of-00001.parquet", records)
    task = load_task("msmarco", FAMILY, seed=3)
    check_contract(task)
    exp = expected_qna(records)
    ids = np.concatenate([q.ids for q in all_splits(task)])
    assert sorted(ids) == sorted(exp)  # default n_queries (3038) > eligible: every eligible query
    assert len(set(ids)) == len(ids)
    # pool = unique texts of all sampled queries; ids are content hashes
    texts = {t for e in exp.values() for t in e["texts"]}
    assert set(task.pool.texts) == texts and len(task.pool) == len(texts)
    assert list(task.pool.ids) == [passage_id(t) for t in task.pool.texts]
    text_of = dict(zip(range(len(task.pool)), task.pool.texts))
    for q in all_splits(task):
        for i, qid in enumerate(q.ids):
            assert q.texts[i] == exp[qid]["query"]
            assert [text_of[p] for p in q.positives[i]] == [exp[qid]["positive"]]
            assert {text_of[p] for p in q.exclude[i]} == exp[qid]["others"]
    assert task.info["n_eligible"] == len(exp) and task.info["n_identical_passages_merged"] > 0


def test_qna_parquet_and_jsonl_layouts_give_the_same_task(tmp_path):
    records = qna_records()
    write_qna_parquet(raw("msmarco") / "v11.parquet", records)
    a = load_task("msmarco", seed=5)
    (raw("msmarco") / "v11.parquet").unlink()
    sub = raw("msmarco") / "msmarco-v1.1"  # files may sit in one subfolder
    sub.mkdir()
    write_qna_jsonl(sub / "train_v1.1.json", records)
    b = load_task("msmarco", seed=5)
    assert a.fingerprint == b.fingerprint
    assert list(a.test.ids) == list(b.test.ids) and list(a.pool.ids) == list(b.pool.ids)


def test_qna_sampling_and_split_are_seeded_and_disjoint():
    write_qna_parquet(raw("msmarco") / "v11.parquet", qna_records(n=120))
    opts = {"n_queries": "40"}
    a, b, c = load_task("msmarco", opts, seed=1), load_task("msmarco", opts, seed=1), load_task("msmarco", opts, seed=2)
    assert a.fingerprint == b.fingerprint
    assert [list(q.ids) for q in all_splits(a)] == [list(q.ids) for q in all_splits(b)]
    assert a.fingerprint != c.fingerprint
    splits = [set(q.ids) for q in all_splits(a)]
    assert sum(map(len, splits)) == 40 and len(set.union(*splits)) == 40
    assert (len(a.train), len(a.valid), len(a.test)) == (32, 4, 4)
    assert set(a.test.ids) != set(c.test.ids)
    # the pool holds exactly the passages of the sampled queries
    exp = expected_qna(qna_records(n=120))
    sampled = set.union(*splits)
    assert set(a.pool.texts) == {t for q in sampled for t in exp[q]["texts"]}


def test_qna_pool_and_other_relevant_options():
    records = qna_records()
    write_qna_parquet(raw("msmarco") / "v11.parquet", records)
    exp = expected_qna(records)
    pos = load_task("msmarco", {"pool": "positives", **FAMILY})
    assert set(pos.pool.texts) == {e["positive"] for e in exp.values()}
    multi = load_task("msmarco", {"other_relevant": "positive", **FAMILY})
    assert multi.test.exclude is None
    text_of = list(multi.pool.texts)
    n_multi = 0
    for q in all_splits(multi):
        for i, qid in enumerate(q.ids):
            got = [text_of[p] for p in q.positives[i]]
            assert got[0] == exp[qid]["positive"] and set(got[1:]) == exp[qid]["others"]
            n_multi += len(got) > 1
    assert n_multi > 0
    neg = load_task("msmarco", {"other_relevant": "negative", **FAMILY})
    assert neg.test.exclude is None and neg.test.positives.lengths().max() == 1


def test_qna_malformed_inputs_name_file_line_and_field():
    d = raw("msmarco")
    good = json.dumps({"query_id": 1, "query": "q", "passages": [{"is_selected": 1, "passage_text": "t"}]})
    cases = [
        ("{not json", "line 2", None),
        (json.dumps({"query_id": 2, "query": "q2", "passages": [{"passage_text": "t"}]}), "line 2", "passages"),
        (json.dumps({"query_id": 3, "query": "q3", "passages": {"is_selected": [2], "passage_text": ["t"]}}),
         "line 2", "passages.is_selected"),
        (json.dumps({"query_id": 4, "passages": []}), "line 2", "query"),
    ]
    for bad, where, field in cases:
        (d / "train_v1.1.jsonl").write_text(good + "\n" + bad + "\n")
        with pytest.raises(DataError) as err:
            load_task("msmarco")
        assert "train_v1.1.jsonl" in str(err.value) and where in str(err.value)
        if field:
            assert err.value.field == field
    (d / "train_v1.1.jsonl").unlink()
    rec = qna_records(n=3)
    rec[1]["passages"]["is_selected"] = rec[1]["passages"]["is_selected"][:-1]  # lengths differ
    write_qna_parquet(d / "bad.parquet", rec)
    with pytest.raises(DataError, match=r"bad.parquet.*row 2") as err:
        load_task("msmarco")
    assert err.value.field == "passages.is_selected"


# ------------------------------------------------------------------------------------------
# MS MARCO official TSV layout
# ------------------------------------------------------------------------------------------


def write_tsv_task(d, n_queries: int = 12) -> dict[str, dict[str, int]]:
    """collection/queries/qrels with grades 0-3; returns the graded positives per query."""
    rng = random.Random(7)
    pids = [str(100 + i) for i in range(60)]
    (d / "collection.tsv").write_text("".join(f"{p}\tpassage text {p} with words\n" for p in pids))
    (d / "queries.tsv").write_text("".join(f"{q}\tquery {q}\n" for q in range(1, n_queries + 3)))
    lines, truth = [], {}
    for q in range(1, n_queries + 1):
        for p in rng.sample(pids, 5):
            g = rng.randint(0, 3)
            lines.append(f"{q} 0 {p} {g}")
            if g > 0:
                truth.setdefault(str(q), {})[p] = g
    lines.append("1 0 99999 0")  # a judged non-relevant passage absent from the collection
    (d / "qrels.dev.txt").write_text("\n".join(lines) + "\n")
    return truth


def test_tsv_layout_keeps_graded_positives():
    truth = write_tsv_task(raw("msmarco"))
    task = load_task("msmarco", seed=0)
    check_contract(task)
    assert len(task.pool) == 60 and task.info["layout"] == "official TSV"
    assert task.info["n_judgements_skipped_unknown_pid"] == 1
    got = {}
    for q in all_splits(task):
        for i, qid in enumerate(q.ids):
            got[qid] = {task.pool.ids[p]: g for p, g in zip(q.positives[i], q.grades[i])}
    assert got == truth  # every grade > 0 is a positive with its grade; queries without none dropped
    assert {g for v in truth.values() for g in v.values()} == {1, 2, 3}
    k = int(np.floor(len(truth) / 10 + 0.5))
    assert (len(task.valid), len(task.test)) == (k, k) and len(task.train) == len(truth) - 2 * k


@pytest.mark.parametrize("fname,content,where,field", [
    ("collection.tsv", "100\tok\n101 no tab here\n", "line 2", "text"),
    ("collection.tsv", "100\tok\n101\tb\n100\tagain\n", "line 3", "pid"),
    ("qrels.dev.txt", "1 0 100 1\n1 0 101 x\n", "line 2", "grade"),
    ("qrels.dev.txt", "1 0 100 1\n1 0 555 2\n", "line 2", "pid"),
    ("qrels.dev.txt", "1 0 100 1\n77 0 100 1\n", "line 2", "qid"),
    ("qrels.dev.txt", "1 0 100\n", "line 1", "grade"),
])
def test_tsv_malformed_lines(fname, content, where, field):
    d = raw("msmarco")
    write_tsv_task(d)
    if fname == "collection.tsv":
        (d / "collection.tsv").write_text(content)
        (d / "qrels.dev.txt").write_text("1 0 100 1\n")
    else:
        (d / fname).write_text(content)
    with pytest.raises(DataError) as err:
        load_task("msmarco")
    assert fname in str(err.value) and where in str(err.value) and err.value.field == field


def test_tsv_rejects_qna_only_options():
    write_tsv_task(raw("msmarco"))
    with pytest.raises(RBenchError, match="TSV"):
        load_task("msmarco", {"pool": "positives"})


@pytest.mark.shared
def test_msmarco_dl19_shared(shared_data):
    src = shared_data / "msmarco-dl19"
    if not src.exists():
        pytest.skip("msmarco-dl19 not in ../shared/data")
    paths.raw_dir("msmarco").parent.mkdir(parents=True, exist_ok=True)
    paths.raw_dir("msmarco").symlink_to(src, target_is_directory=True)
    present, detail = data_status(get_task("msmarco"))
    assert present and "collection.tsv" in detail
    task = load_task("msmarco", seed=0)
    check_contract(task)
    qrels = pd.read_csv(src / "qrels.txt", sep=r"\s+", header=None, names=["qid", "it", "pid", "grade"],
                        dtype=str)
    qrels = qrels[qrels["grade"].astype(int) > 0]
    assert len(task.pool) == 4103
    assert (len(task.train), len(task.valid), len(task.test)) == (35, 4, 4)
    got = {(qid, task.pool.ids[p], float(g)) for q in all_splits(task) for i, qid in enumerate(q.ids)
           for p, g in zip(q.positives[i], q.grades[i])}
    want = {(r.qid, r.pid, float(r.grade)) for r in qrels.itertuples()}
    assert got == want and len(got) == 4102


# ------------------------------------------------------------------------------------------
# ESCI
# ------------------------------------------------------------------------------------------


def write_esci(d, n_queries: int = 30, seed: int = 3) -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = random.Random(seed)
    rows, eid = [], 0
    products = {}
    for q in range(n_queries):
        locale = "es" if q % 10 == 9 else "us"
        k = rng.randint(3, 6)
        chosen = rng.sample(range(80), k)
        for j, p in enumerate(chosen):
            label = rng.choice("ESCI")
            if q % 6 == 5:
                label = rng.choice("SCI")  # no E at all
            rows.append({"example_id": eid, "query": f"search {q}", "query_id": q, "product_id": f"B{p:05d}",
                         "product_locale": locale, "esci_label": label, "small_version": int(j % 2 == 0),
                         "large_version": 1, "split": "train"})
            products[(f"B{p:05d}", locale)] = p
            eid += 1
        if not any(r["esci_label"] == "E" for r in rows[-k:]) and q % 6 != 5:
            rows[-1]["esci_label"] = "E"
    ex = pd.DataFrame(rows).sample(frac=1.0, random_state=0)  # file order must not matter
    ex["example_id"] = ex["example_id"].astype("int64")
    pr = pd.DataFrame([{"product_id": pid, "product_title": f"Title {p}", "product_description": "<b>long</b>",
                        "product_bullet_point": "first bullet point\nsecond bullet " + "word " * 60,
                        "product_brand": None if p % 4 == 0 else f"Brand{p}", "product_color": "red",
                        "product_locale": loc} for (pid, loc), p in products.items()])
    ex.to_parquet(d / "shopping_queries_dataset_examples.parquet", index=False)
    pr.to_parquet(d / "shopping_queries_dataset_products.parquet", index=False)
    return ex, pr


def esci_truth(ex: pd.DataFrame, version: str = "all") -> dict[str, dict]:
    us = ex[ex["product_locale"] == "us"]
    if version != "all":
        us = us[us[f"{version}_version"] == 1]
    out = {}
    for qid, g in us.groupby("query_id"):
        e = g[g["esci_label"] == "E"].sort_values("example_id")
        if len(e):
            out[str(qid)] = {"positive": e["product_id"].iloc[0], "E": set(e["product_id"]),
                             "all": set(g["product_id"]), "query": g["query"].iloc[0]}
    return out


def test_esci_default_pool_is_one_positive_per_query():
    ex, _ = write_esci(raw("esci"))
    task = load_task("esci", FAMILY, seed=0)
    check_contract(task)
    truth = esci_truth(ex)
    ids = np.concatenate([q.ids for q in all_splits(task)])
    assert sorted(ids) == sorted(truth)
    assert set(task.pool.ids) == {t["positive"] for t in truth.values()}
    for q in all_splits(task):
        for i, qid in enumerate(q.ids):
            assert q.texts[i] == truth[qid]["query"]
            assert [task.pool.ids[p] for p in q.positives[i]] == [truth[qid]["positive"]]
            excluded = {task.pool.ids[p] for p in q.exclude[i]} if q.exclude is not None else set()
            assert excluded == (truth[qid]["E"] - {truth[qid]["positive"]}) & set(task.pool.ids)


def test_esci_all_pool_version_and_texts():
    ex, pr = write_esci(raw("esci"))
    task = load_task("esci", {"pool": "all", "esci_version": "small", "bullet_chars": "30", **FAMILY})
    check_contract(task)
    truth = esci_truth(ex, "small")
    sampled = np.concatenate([q.ids for q in all_splits(task)])
    assert sorted(sampled) == sorted(truth)
    assert set(task.pool.ids) == set().union(*(truth[q]["all"] for q in sampled))
    for pid, text in zip(task.pool.ids, task.pool.texts):
        p = int(pid[1:])
        brand = "" if p % 4 == 0 else f". Brand: Brand{p}"
        assert text == f"Title {p}{brand}. first bullet point second"
    for q in all_splits(task):
        for k, qid in enumerate(q.ids):
            excluded = {task.pool.ids[x] for x in q.exclude[k]} if q.exclude is not None else set()
            assert excluded == truth[qid]["E"] - {truth[qid]["positive"]}


def test_esci_n_queries_and_errors():
    ex, pr = write_esci(raw("esci"))
    t = load_task("esci", {"n_queries": "8"}, seed=4)
    assert len(t.train) + len(t.valid) + len(t.test) == 8 and len(t.pool) <= 8
    d = raw("esci")
    bad = ex.copy()
    bad.iloc[2, bad.columns.get_loc("esci_label")] = "X"
    bad.to_parquet(d / "shopping_queries_dataset_examples.parquet", index=False)
    with pytest.raises(DataError, match="row 3") as err:
        load_task("esci")
    assert err.value.field == "esci_label" and "examples.parquet" in str(err.value)
    ex.to_parquet(d / "shopping_queries_dataset_examples.parquet", index=False)
    pr[pr["product_locale"] == "es"].to_parquet(d / "shopping_queries_dataset_products.parquet", index=False)
    with pytest.raises(DataError, match="no US product row") as err:
        load_task("esci")
    assert err.value.field == "product_id"
    pr.drop(columns=["product_title"]).to_parquet(d / "shopping_queries_dataset_products.parquet", index=False)
    with pytest.raises(DataError) as err:
        load_task("esci")
    assert err.value.field == "product_title"


def test_product_text_truncates_at_a_word_boundary():
    assert product_text("T", "B", "aaa bbb ccc", 9, "x") == "T. Brand: B. aaa bbb"
    assert product_text("T", None, "aaa bbb", 0, "x") == "T"
    assert product_text(None, None, None, 10, "x") == "product x"


# ------------------------------------------------------------------------------------------
# data_status
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["msmarco", "esci"])
def test_data_status_absent_and_present(name):
    spec = get_task(name)
    present, detail = data_status(spec)
    assert not present and detail.startswith("not present: " + spec.how_to_get)
    if name == "esci":
        write_esci(raw("esci"))
        present, detail = data_status(spec)
        assert present and "shopping_queries_dataset_examples.parquet" in detail
    else:
        write_qna_parquet(raw("msmarco") / "v11.parquet", qna_records(n=5))
        present, detail = data_status(spec)
        assert present and "v11.parquet" in detail


def test_two_candidate_subfolders_are_reported_not_guessed():
    for sub in ("a", "b"):
        (raw("msmarco") / sub).mkdir()
        write_qna_parquet(raw("msmarco") / sub / "v11.parquet", qna_records(n=5))
    spec = get_task("msmarco")
    present, detail = data_status(spec)
    assert not present and detail.startswith("not present: " + spec.how_to_get) and "several subfolders" in detail
    with pytest.raises(RBenchError, match="several subfolders"):
        load_task("msmarco")


def test_split_test_puts_every_query_in_test():
    import numpy as np

    from rbench.tasks.building import split_labels

    assert (split_labels(43, 0, mode="test") == 2).all()
    labels = split_labels(100, 0)
    assert sorted(np.bincount(labels).tolist()) == [10, 10, 80]
