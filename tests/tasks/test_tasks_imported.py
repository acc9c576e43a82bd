"""Bring-your-own BEIR tasks: validation names file/line/field, the import is atomic and visible
to the registry, loading keeps graded qrels; plus the shared 8:1:1 split rule."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rbench.core.errors import DataError, RBenchError
from rbench.engine.scan import validate_queries
from rbench.tasks.building import MIN_SPLIT_QUERIES, split_labels
from rbench.tasks.families.imported import imported_root, imported_specs
from rbench.tasks.registry import data_status, get_task, import_task, list_tasks, load_task, resolve

# the import as built (every split's qrels), before the registry leaves train/valid positives out
# of the test rankings: these small corpora are mostly judged documents (pool_from_positives) and
# neighbouring queries share answers (rbench.tasks.fit_positives; tests/tasks/test_fit_positives.py)
FAMILY = {"exclude_fit_positives": "false"}


def write_jsonl(path, objs) -> None:
    path.write_text("".join(json.dumps(o) + "\n" for o in objs), encoding="utf-8")


def beir(tmp_path, n_docs: int = 40, n_queries: int = 25, split: bool = False):
    """A BEIR folder: graded qrels (0-2), a few queries without any positive."""
    d = tmp_path / "beir"
    d.mkdir(exist_ok=True)
    write_jsonl(d / "corpus.jsonl", [{"_id": f"d{i}", "title": f"Title {i}" if i % 3 else "", "text": f"body {i}"}
                                     for i in range(n_docs)])
    queries = [{"_id": f"q{i}", "text": f"question {i}"} for i in range(n_queries)]
    if split:
        for i, q in enumerate(queries):
            q["split"] = ("test", "dev", "train", "train")[i % 4]
    write_jsonl(d / "queries.jsonl", queries)
    lines, truth = ["query-id\tcorpus-id\tscore"], {}
    for i in range(n_queries):
        if i % 6 == 5:
            lines.append(f"q{i}\td{i}\t0")  # judged, not relevant: no positive
            continue
        for k, score in ((i, 2), (i + 1, 1), (i + 2, 0)):
            lines.append(f"q{i}\td{k % n_docs}\t{score}")
            if score > 0:
                truth.setdefault(f"q{i}", {})[f"d{k % n_docs}"] = float(score)
    (d / "qrels.tsv").write_text("\n".join(lines) + "\n")
    return d, truth


def all_splits(task):
    return [task.train, task.valid, task.test]


def test_import_then_load_keeps_graded_qrels(tmp_path):
    d, truth = beir(tmp_path)
    target = import_task("my-task", d / "corpus.jsonl", d / "queries.jsonl", d / "qrels.tsv")
    assert target == imported_root() / "my-task"
    meta = json.loads((target / "task.json").read_text())
    assert meta["counts"] == {"documents": 40, "queries": 25, "queries_with_positives": len(truth),
                              "judgements": 3 * len(truth) + (25 - len(truth))}
    spec = get_task("my-task")
    assert spec.domain == "generic" and resolve(spec.name).family.name == "imported"
    stored = json.loads((imported_root() / spec.name / "task.json").read_text())
    assert "loader" not in stored and "options" not in stored  # data, never code paths
    assert "my-task" in {s.name for s in list_tasks()}
    present, detail = data_status(spec)
    assert present and "corpus.jsonl" in detail
    task = load_task("my-task", FAMILY, seed=3)
    assert len(task.pool) == 40
    text_of = dict(zip(task.pool.ids, task.pool.texts))
    assert text_of["d1"] == "Title 1 body 1" and text_of["d0"] == "body 0"
    got = {}
    for q in all_splits(task):
        validate_queries(q, task.pool)
        for i, qid in enumerate(q.ids):
            got[qid] = {task.pool.ids[p]: g for p, g in zip(q.positives[i], q.grades[i])}
            assert q.prompts[i] == spec.render_prompt(q.texts[i])
    assert got == truth  # graded: 2 and 1 kept; score-0 judgements and their queries dropped
    n = len(truth)
    k = int(np.floor(n / 10 + 0.5))
    assert (len(task.train), len(task.valid), len(task.test)) == (n - 2 * k, k, k)
    assert task.info["n_queries_without_positive"] == 25 - n


def test_split_reproducible_and_explicit_split_honoured(tmp_path):
    d, truth = beir(tmp_path)
    import_task("byo", d / "corpus.jsonl", d / "queries.jsonl", d / "qrels.tsv")
    a, b, c = load_task("byo", FAMILY, seed=1), load_task("byo", FAMILY, seed=1), load_task("byo", FAMILY, seed=2)
    assert [list(q.ids) for q in all_splits(a)] == [list(q.ids) for q in all_splits(b)]
    assert [list(q.ids) for q in all_splits(a)] != [list(q.ids) for q in all_splits(c)]
    ids = [set(q.ids) for q in all_splits(a)]
    assert len(set.union(*ids)) == sum(map(len, ids)) == len(truth)

    (tmp_path / "x").mkdir()
    d2, _ = beir(tmp_path / "x", split=True)
    import_task("byo-split", d2 / "corpus.jsonl", d2 / "queries.jsonl", d2 / "qrels.tsv")
    t = load_task("byo-split", FAMILY, seed=9)
    for q, name in zip(all_splits(t), ("train", "dev", "test")):
        assert all(("test", "dev", "train", "train")[int(x[1:]) % 4] == name for x in q.ids)
    assert t.info["split"] == "explicit"


def test_small_scenario_with_candidate_lists(tmp_path):
    d, truth = beir(tmp_path)
    rows = []
    for i in range(25):
        pos = sorted(truth.get(f"q{i}", {}))
        others = [f"d{(i + 10 + j) % 40}" for j in range(6 - len(pos))]
        rows.append({"query_id": f"q{i}", "candidates": others[: 6 - len(pos)] + pos})
    write_jsonl(d / "candidates.jsonl", rows)
    import_task("byo-small", d / "corpus.jsonl", d / "queries.jsonl", d / "qrels.tsv", scenario="small",
                candidates=d / "candidates.jsonl")
    task = load_task("byo-small", FAMILY)
    assert task.spec.scenario == "small"
    by_q = {r["query_id"]: r["candidates"] for r in rows}
    for q in all_splits(task):
        validate_queries(q, task.pool)
        assert q.candidates.shape == (len(q), 6)
        for i, qid in enumerate(q.ids):  # the file's list, its columns in pool order
            assert sorted(task.pool.ids[c] for c in q.candidates[i]) == sorted(by_q[qid])
            assert (np.diff(q.candidates[i]) > 0).all()
    rows[3]["candidates"] = rows[3]["candidates"][:-1]
    write_jsonl(d / "candidates.jsonl", rows)
    with pytest.raises(DataError, match="same number") as err:
        import_task("byo-small2", d / "corpus.jsonl", d / "queries.jsonl", d / "qrels.tsv", scenario="small",
                    candidates=d / "candidates.jsonl")
    assert err.value.line == 4 and err.value.field == "candidates"
    rows[3]["candidates"] = [f"d{30 + j}" for j in range(6)]  # q3's positives d3, d4 left out
    write_jsonl(d / "candidates.jsonl", rows)
    with pytest.raises(DataError, match="positive .* is not among its candidates"):
        import_task("byo-small2", d / "corpus.jsonl", d / "queries.jsonl", d / "qrels.tsv", scenario="small",
                    candidates=d / "candidates.jsonl")
    with pytest.raises(RBenchError, match="needs candidates"):
        import_task("byo-small3", d / "corpus.jsonl", d / "queries.jsonl", d / "qrels.tsv", scenario="small")


def test_names_are_checked(tmp_path):
    d, _ = beir(tmp_path)
    args = (d / "corpus.jsonl", d / "queries.jsonl", d / "qrels.tsv")
    with pytest.raises(RBenchError, match="built-in"):
        import_task("msmarco", *args)
    with pytest.raises(RBenchError, match="lowercase"):
        import_task("Bad Name", *args)
    import_task("twice", *args)
    with pytest.raises(RBenchError, match="already imported"):
        import_task("twice", *args)
    write_jsonl(d / "queries.jsonl", [{"_id": f"q{i}", "text": f"new question {i}"} for i in range(25)])
    import_task("twice", *args, overwrite=True)
    assert load_task("twice", FAMILY).test.texts[0].startswith("new question")
    assert sorted(p.name for p in imported_root().iterdir()) == ["twice"]  # no temp folders left


@pytest.mark.parametrize("fname,mutate,where,field", [
    ("qrels.tsv", lambda s: s.replace("q2\td3\t1", "q2\td999\t1"), "line", "corpus-id"),
    ("qrels.tsv", lambda s: s.replace("q2\td3\t1", "qx\td3\t1"), "line", "query-id"),
    ("qrels.tsv", lambda s: s.replace("q2\td3\t1", "q2\td3\tmany"), "line", "score"),
    ("qrels.tsv", lambda s: s.replace("q2\td3\t1", "q2 d3 1"), "line", "corpus-id"),
    ("qrels.tsv", lambda s: s.replace("query-id\tcorpus-id\tscore", "qid\tdid\tscore"), "line 1", None),
    ("corpus.jsonl", lambda s: s.replace('"_id": "d5"', '"_id": "d4"'), "line 6", "_id"),
    ("corpus.jsonl", lambda s: s.replace('"text": "body 7"', '"text": 7'), "line 8", "text"),
    ("queries.jsonl", lambda s: s.replace('{"_id": "q3"', '{"_id": "q3" oops'), "line 4", None),
])
def test_malformed_inputs_name_file_line_field_and_leave_nothing(tmp_path, fname, mutate, where, field):
    d, _ = beir(tmp_path)
    path = d / fname
    path.write_text(mutate(path.read_text()))
    with pytest.raises(DataError) as err:
        import_task("broken", d / "corpus.jsonl", d / "queries.jsonl", d / "qrels.tsv")
    msg = str(err.value)
    assert fname in msg and where in msg
    if fname == "qrels.tsv" and where == "line":
        with open(path) as fh:
            bad_line = next(i for i, line in enumerate(fh, 1) if line.startswith(("q2\td999", "qx", "q2\td3\tmany", "q2 d3")))
        assert err.value.line == bad_line
    if field:
        assert err.value.field == field
    assert not (imported_root() / "broken").exists()
    assert "broken" not in imported_specs()


def test_broken_import_folder_does_not_break_the_registry(tmp_path):
    d, _ = beir(tmp_path)
    import_task("good", d / "corpus.jsonl", d / "queries.jsonl", d / "qrels.tsv")
    (imported_root() / "junk").mkdir()
    (imported_root() / "junk" / "task.json").write_text("{not json")
    assert set(imported_specs()) == {"good"}
    with pytest.raises(DataError, match="task.json"):
        imported_specs(strict=True)
    (imported_root() / "good" / "corpus.jsonl").unlink()
    present, detail = data_status(get_task("good"))
    assert not present and detail.startswith("not present: ") and "corpus" in detail


def test_split_labels_rule():
    for n in (5, 9, 10, 43, 600, 3038):
        lab = split_labels(n, seed=0)
        k = int(np.floor(n / 10 + 0.5))
        assert ((lab == 2).sum(), (lab == 1).sum(), (lab == 0).sum()) == (k, k, n - 2 * k)
    assert (split_labels(50, 1) == split_labels(50, 1)).all() and (split_labels(50, 1) != split_labels(50, 2)).any()
    strata = np.repeat(np.array(["a", "b", "c"], dtype=object), 20)
    lab = split_labels(60, 0, strata=strata)
    for s in ("a", "b", "c"):
        assert (lab[strata == s] == 2).sum() == 2 and (lab[strata == s] == 1).sum() == 2
    with pytest.raises(DataError, match="at least"):
        split_labels(MIN_SPLIT_QUERIES - 1, 0)
