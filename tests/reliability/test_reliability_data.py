"""Corrupt inputs: every one is one DataError naming the file (and line, field or column), never a
bare zlib/gzip error, a silently replaced character, an overflowing grade or a misread file."""

from __future__ import annotations

import gzip
import json
import os
import shutil

import numpy as np
import pytest

from rbench.core import paths
from rbench.core.errors import DataError, RBenchError
from rbench.tasks.families.imported import read_beir
from rbench.tasks.registry import import_task, load_task
from tests.tasks.test_tasks_imported import beir
from tests.tasks.test_tasks_recsys import movie_ratings, toy_reviews, write_ml1m_dat, write_toy


def gz_corpus(d):
    body = (d / "corpus.jsonl").read_bytes()
    (d / "corpus.jsonl.gz").write_bytes(gzip.compress(body * 50))
    (d / "corpus.jsonl").unlink()
    return d / "corpus.jsonl.gz"


CORRUPT = {
    "truncated": lambda b: b[: len(b) // 2],
    "bit-flipped": lambda b: b[:40] + bytes([b[40] ^ 0xFF]) + b[41:],
    "not gzip": lambda b: b"plain text pretending to be gzip\n",
}


@pytest.mark.parametrize("case", sorted(CORRUPT))
def test_a_corrupt_gzip_corpus_names_the_file(tmp_path, case):
    d, _ = beir(tmp_path)
    gz = gz_corpus(d)
    gz.write_bytes(CORRUPT[case](gz.read_bytes()))
    with pytest.raises(DataError) as err:
        read_beir(gz, d / "queries.jsonl", d / "qrels.tsv")
    assert str(gz) in str(err.value)


@pytest.mark.parametrize("case", sorted(CORRUPT))
def test_a_corrupt_amazon_review_file_names_the_file(case):
    raw = paths.raw_dir("rec-toy")
    raw.mkdir(parents=True)
    write_toy(raw, toy_reviews() * 40)
    reviews = raw / "reviews_Toys_and_Games_5.json.gz"
    reviews.write_bytes(CORRUPT[case](reviews.read_bytes()))
    with pytest.raises(RBenchError) as err:
        load_task("rec-toy")
    assert "reviews_Toys_and_Games_5.json.gz" in str(err.value) and "Traceback" not in str(err.value)


def test_latin1_bytes_in_a_corpus_are_refused_with_line_and_column(tmp_path):
    d, _ = beir(tmp_path)
    lines = (d / "corpus.jsonl").read_bytes().split(b"\n")
    lines[2] = lines[2].replace(b"body", b"caf\xe9")
    (d / "corpus.jsonl").write_bytes(b"\n".join(lines))
    with pytest.raises(DataError, match=r"line 3.*not valid UTF-8 at column \d+ \(byte 0xe9\)"):
        read_beir(d / "corpus.jsonl", d / "queries.jsonl", d / "qrels.tsv")


def test_grades_nDCG_cannot_hold_are_refused(tmp_path):
    d, _ = beir(tmp_path)
    with open(d / "qrels.tsv", "a") as fh:
        fh.write("q1\td30\t1e308\n")
    with pytest.raises(DataError, match=r"qrels.tsv, line \d+, field 'score': grade 1e308 is outside"):
        read_beir(d / "corpus.jsonl", d / "queries.jsonl", d / "qrels.tsv")


def test_the_engine_refuses_an_overflowing_grade_from_any_task():
    from rbench.api import Pool, Queries, Ragged
    from rbench.engine.scan import validate_queries

    pool = Pool(ids=np.array(["a", "b"], dtype=object), texts=np.array(["x", "y"], dtype=object), name="p")
    q = Queries(ids=np.array(["q0", "q1"], dtype=object), texts=["", ""], positives=Ragged.from_rows([[0], [1]]),
                grades=Ragged.from_rows([[1.0], [1e308]], dtype=np.float64))
    with pytest.raises(DataError, match="query 'q1': positive grade 1e\\+308 is not in"):
        validate_queries(q, pool)


def test_an_item_header_missing_a_url_column_is_refused():
    raw = paths.raw_dir("rec-music")
    raw.mkdir(parents=True)
    inter = ["user_id:token\titem_id:token\ttimestamp:float"]
    inter += [f"u{u}\ti{(u + k) % 9}\t{k}" for u in range(8) for k in range(5)]
    (raw / "music.inter").write_text("\n".join(inter) + "\n")
    item = ["item_id:token\tname:token"] + [f"i{k}\tSong {k}\thttps://img.example/{k}.jpg" for k in range(9)]
    (raw / "music.item").write_text("\n".join(item) + "\n")
    with pytest.raises(DataError, match=r"music.item, line 2: the header names 2 columns.*extra field is a URL"):
        load_task("rec-music")


def test_a_ratings_file_cut_mid_line_is_refused():
    raw = paths.raw_dir("rec-movie")
    raw.mkdir(parents=True)
    write_ml1m_dat(raw, movie_ratings())
    data = (raw / "ratings.dat").read_bytes()
    (raw / "ratings.dat").write_bytes(data[:-4])  # "...::97830" - still four numeric fields
    with pytest.raises(DataError, match="ratings.dat, line \\d+: the file ends in the middle of a line"):
        load_task("rec-movie")


def test_a_truncated_task_json_is_named_not_an_unknown_task(tmp_path):
    d, _ = beir(tmp_path)
    target = import_task("mine", d / "corpus.jsonl", d / "queries.jsonl", d / "qrels.tsv")
    text = (target / "task.json").read_text()
    (target / "task.json").write_text(text[: len(text) // 2])
    with pytest.raises(DataError, match=r"mine/task.json.*unreadable task.json"):
        load_task("mine")
    json.loads(text)  # the original was fine


def test_a_directory_given_as_the_corpus_says_so(tmp_path):
    d, _ = beir(tmp_path)
    (tmp_path / "corpus-dir").mkdir()
    with pytest.raises(DataError, match="corpus-dir: expected a file, got a directory"):
        read_beir(tmp_path / "corpus-dir", d / "queries.jsonl", d / "qrels.tsv")
    shutil.rmtree(tmp_path / "corpus-dir")


def _refuse(kind):
    import errno

    def fail(path, *a, **k):
        code = {"denied": errno.EACCES, "full": errno.ENOSPC}[kind]
        raise OSError(code, os.strerror(code), str(path))

    return fail


def test_an_unwritable_home_is_one_line_and_reading_a_prepared_task_still_works(tmp_path, capsys, monkeypatch):
    from rbench.tasks import store
    from tests.cli.test_cli_data import write_esci_files
    from tests.helpers import cli, one_line

    write_esci_files(paths.raw_dir("esci"))
    assert cli(capsys, "data", "prepare", "esci")[0] == 0  # prepared while the home was writable
    monkeypatch.setattr(store, "atomic_dir", _refuse("denied"))  # as a read-only RBENCH_HOME answers
    monkeypatch.setattr(store, "remove_stale", _refuse("denied"))
    code, _, err = cli(capsys, "run", "--ranker", "bm25", "--task", "esci", "--results-dir", str(tmp_path / "r"))
    assert code == 0, err  # a cache hit only reads
    code, _, err = cli(capsys, "data", "prepare", "esci", "--set", "task.n_queries=5")  # needs a new entry
    line = one_line(err)
    assert code == 2 and "cannot write" in line and "RBENCH_HOME" in line


def test_a_full_disk_is_one_line_and_the_old_record_stays(tmp_path, capsys, monkeypatch):
    from rbench.results import record as results
    from tests.helpers import cli

    out = tmp_path / "r"
    assert cli(capsys, "run", "--ranker", "pop", "--task", "ml-100k", "--results-dir", str(out))[0] == 0
    (record,) = out.rglob("pop.json")
    before = record.read_bytes()
    monkeypatch.setattr(results, "atomic_write_bytes", _refuse("full"))
    code, _, err = cli(capsys, "run", "--ranker", "pop", "--task", "ml-100k", "--results-dir", str(out), "--seed", "0",
                         "--overwrite", "always")  # the same run again, written again
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "no space left" in errors[0] and "Traceback" not in err
    assert record.read_bytes() == before
