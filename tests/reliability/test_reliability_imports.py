"""A task that imports also loads: what would only fail at the first run (a lone surrogate in a
text or id, too few evaluated queries for the 8:1:1 split, an explicit split without test or
train queries) is refused by ``rbench data import`` itself, one line naming the file, line and
field, and nothing is written."""

from __future__ import annotations

import json

import pytest

from rbench.core.errors import DataError
from rbench.tasks.building import MIN_SPLIT_QUERIES
from rbench.tasks.families.imported import imported_root
from rbench.tasks.registry import import_task, load_task
from tests.tasks.test_tasks_imported import beir, write_jsonl


def _import(d, name="t"):
    return import_task(name, d / "corpus.jsonl", d / "queries.jsonl", d / "qrels.tsv")


@pytest.mark.parametrize("where, field", [("corpus.jsonl", "text"), ("queries.jsonl", "text"),
                                          ("corpus.jsonl", "_id")])
def test_a_lone_surrogate_is_refused_at_import_naming_line_and_field(tmp_path, where, field):
    d, _ = beir(tmp_path)
    lines = (d / where).read_text(encoding="utf-8").splitlines()
    obj = json.loads(lines[3])
    obj[field] = obj[field] + "\ud800"  # json.dumps writes it as the escape \ud800
    lines[3] = json.dumps(obj)
    (d / where).write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(DataError) as err:
        _import(d)
    assert f"{where}, line 4, field '{field}'" in str(err.value) and "lone surrogate" in str(err.value)
    assert not (imported_root() / "t").exists()


def test_a_surrogate_pair_is_one_character_and_imports(tmp_path):
    d, _ = beir(tmp_path)
    docs = [json.loads(line) for line in (d / "corpus.jsonl").read_text().splitlines()]
    docs[0]["text"] = "smile \U0001F600"  # json.dumps escapes it as \ud83d\ude00
    write_jsonl(d / "corpus.jsonl", docs)
    assert "\\ud83d\\ude00" in (d / "corpus.jsonl").read_text()
    _import(d)
    pool = load_task("t").pool
    assert any("\U0001F600" in t for t in pool.texts)


def test_too_few_evaluated_queries_are_refused_at_import(tmp_path):
    d, _ = beir(tmp_path, n_queries=MIN_SPLIT_QUERIES - 1)  # 4 queries, all with a positive
    with pytest.raises(DataError, match=f"needs at least {MIN_SPLIT_QUERIES}.*'split' field"):
        _import(d)
    assert not (imported_root() / "t").exists()


# every query "test" is a test-only collection, evaluated zero-shot (issue 33): it imports, and
# tests/tasks/test_beir_import.py checks untrained rankers run on it and trained ones are refused
@pytest.mark.parametrize("only", ["train"])
def test_an_explicit_split_without_test_or_train_queries_is_refused_at_import(tmp_path, only):
    d, _ = beir(tmp_path)
    queries = [json.loads(line) for line in (d / "queries.jsonl").read_text().splitlines()]
    write_jsonl(d / "queries.jsonl", [{**q, "split": only} for q in queries])
    with pytest.raises(DataError, match="explicit split has no") as err:
        _import(d)
    assert "queries.jsonl" in str(err.value) and "field 'split'" in str(err.value)
    assert not (imported_root() / "t").exists()
