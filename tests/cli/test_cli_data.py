"""``rbench data`` end to end through ``rbench.cli.app.main`` with RBENCH_HOME in tmp_path: download
from a loopback server, prepare (--from, --set, --seed), import, list, and ``rbench tasks``."""

from __future__ import annotations

import hashlib
import json
import os

import pandas as pd
import pytest

from rbench.api import RemoteFile
from rbench.cli.app import main
from rbench.core import paths


def write_esci_files(d, n_queries: int = 12) -> None:
    """Shopping Queries Dataset parquet files (examples + products), US and ES rows."""
    d.mkdir(parents=True, exist_ok=True)
    rows, products, eid = [], {}, 0
    for q in range(n_queries):
        locale = "es" if q == n_queries - 1 else "us"
        for j, label in enumerate("ESI"):
            pid = f"B{(q * 3 + j) % 20:09d}"
            rows.append({"example_id": eid, "query": f"search words {q}", "query_id": q, "product_id": pid,
                         "product_locale": locale, "esci_label": label, "small_version": 1, "large_version": 1,
                         "split": "train" if q % 3 else "test"})
            products[(pid, locale)] = (q * 3 + j) % 20
            eid += 1
    pd.DataFrame(rows).to_parquet(d / "shopping_queries_dataset_examples.parquet", index=False)
    pd.DataFrame([{"product_id": pid, "product_title": f"Product {k}", "product_description": None,
                   "product_bullet_point": f"bullet {k}", "product_brand": f"Brand{k}", "product_color": None,
                   "product_locale": loc} for (pid, loc), k in products.items()]) \
        .to_parquet(d / "shopping_queries_dataset_products.parquet", index=False)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_prepare_from_a_folder_links_prepares_once_and_shows_sizes(tmp_path, capsys):
    src = tmp_path / "esci-files"
    write_esci_files(src)
    code, out, err = run(capsys, "data", "prepare", "esci", "--from", str(src))
    assert code == 0, err
    raw = paths.raw_dir("esci")
    assert sorted(os.listdir(raw)) == [".source.json",  # what the files are (rbench.tasks.sources.provenance.DataSource)
                                       "shopping_queries_dataset_examples.parquet",
                                       "shopping_queries_dataset_products.parquet"]
    assert (raw / "shopping_queries_dataset_examples.parquet").is_symlink()
    assert "symlinked" in out and "prepared:" in out and "4,000" in out and "3,999" in out  # paper sizes
    assert "pool (candidates)" in out and "11" in out  # 11 US queries, one positive product each
    code, out, _ = run(capsys, "data", "prepare", "esci", "--json")
    report = json.loads(out)
    assert code == 0 and report["cache_hit"] is True
    assert report["sizes"]["pool (candidates)"] == {"prepared": 11, "paper": 4000}
    assert report["sizes"]["queries (train+valid+test)"]["prepared"] == 11
    code, out, _ = run(capsys, "data", "prepare", "esci", "--set", "task.n_queries=6", "--seed", "3", "--json")
    report = json.loads(out)
    assert report["cache_hit"] is False and report["sizes"]["queries (train+valid+test)"]["prepared"] == 6
    assert len(os.listdir(paths.prepared_dir("esci"))) == 2  # one entry per (options, seed)


def test_prepare_from_replaces_the_raw_folder_and_never_deletes_sources(tmp_path, capsys):
    first, second = tmp_path / "a", tmp_path / "b"
    write_esci_files(first)
    write_esci_files(second, n_queries=8)
    assert run(capsys, "data", "prepare", "esci", "--from", str(first))[0] == 0
    code, out, _ = run(capsys, "data", "prepare", "esci", "--from", str(second), "--json")
    assert code == 0 and json.loads(out)["sizes"]["queries (train+valid+test)"]["prepared"] == 7
    assert sorted(os.listdir(first)) == sorted(os.listdir(second))  # the old links went, the files stayed
    assert len(os.listdir(paths.prepared_dir("esci"))) == 1  # the entry of the old files was superseded
    single = tmp_path / "single" / "shopping_queries_dataset_examples.parquet"
    single.parent.mkdir()
    single.write_bytes((second / single.name).read_bytes())
    code, _, err = run(capsys, "data", "prepare", "esci", "--from", str(single))
    assert code == 2 and "shopping_queries_dataset_products.parquet" in err  # the loader says what is missing


@pytest.mark.parametrize("argv,needle", [
    (["data", "prepare", "esci", "--from", "/no/such/folder"], "no such file or folder"),
    (["data", "prepare", "esci", "--set", "n_queries=3"], "task.key=value"),
    (["data", "prepare", "esci", "--set", "task.n_querys=3"], "did you mean 'n_queries'"),
    (["data", "prepare", "rec-moive"], "did you mean 'rec-movie'"),
    (["data", "prepare", "esci"], "not present"),
    (["data", "download", "ml-100k"], "no direct public download"),
    (["data", "prepare", "ml-100k", "--from", "."], "installed package"),
])
def test_user_errors_exit_2_with_one_clear_line(capsys, argv, needle):
    code, out, err = run(capsys, *argv)
    assert code == 2 and needle in err and "Traceback" not in err


def test_download_then_prepare_from_the_loopback_server(capsys, monkeypatch, tmp_path, server):
    files = tmp_path / "served"
    write_esci_files(files)
    table = []
    for name in ("shopping_queries_dataset_examples.parquet", "shopping_queries_dataset_products.parquet"):
        body = (files / name).read_bytes()
        server.files[f"/{name}"] = body
        table.append(RemoteFile(name, (server.url(f"/{name}"),), sha256=hashlib.sha256(body).hexdigest()))
    from tests.helpers import with_downloads

    with_downloads(monkeypatch, "esci", table)
    code, out, err = run(capsys, "data", "download", "esci", "--quiet")
    assert code == 0, err
    assert "installed into" in out and f"sha256 {table[0].sha256} (checked)" in out
    assert sorted(os.listdir(paths.raw_dir("esci"))) == [".source.json", *(t.filename for t in table)]
    assert json.loads((paths.raw_dir("esci") / ".source.json").read_text())["own"] is True  # the task's own data
    code, out, err = run(capsys, "data", "prepare", "esci", "--json")
    assert code == 0 and json.loads(out)["sizes"]["pool (candidates)"]["prepared"] == 11
    code, out, _ = run(capsys, "data", "list", "--json")
    row = next(r for r in json.loads(out) if r["name"] == "esci")
    assert row["data_present"] and row["downloads"] == "2/2 files" and row["prepared"]["pool"] == 11
    server.files["/shopping_queries_dataset_examples.parquet"] = b"tampered"
    code, _, err = run(capsys, "data", "download", "esci", "--force", "--quiet")
    assert code == 2 and "checksum mismatch" in err


def test_import_then_list_and_tasks_show_prepared_sizes(tmp_path, capsys):
    d = tmp_path / "beir"
    d.mkdir()
    (d / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "text": f"body {i}"}) + "\n" for i in range(30)))
    (d / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": f"question {i}"}) + "\n"
                                             for i in range(20)))
    (d / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(20)))
    code, out, err = run(capsys, "data", "import", "my-byo", "--corpus", str(d / "corpus.jsonl"),
                         "--queries", str(d / "queries.jsonl"), "--qrels", str(d / "qrels.tsv"))
    assert code == 0 and "imported 'my-byo'" in out and "documents 30" in out, err
    code, out, _ = run(capsys, "data", "list")
    assert code == 0 and "my-byo" in out
    assert run(capsys, "data", "prepare", "my-byo")[0] == 0
    code, out, _ = run(capsys, "tasks", "--json")
    row = next(r for r in json.loads(out) if r["name"] == "my-byo")
    assert (row["prepared_pool"], row["prepared_queries"]) == (30, 20)
    assert next(r for r in json.loads(out) if r["name"] == "esci")["prepared_pool"] is None
    code, out, _ = run(capsys, "tasks")
    assert "30 / 20" in out
    code, _, err = run(capsys, "data", "import", "my-byo", "--corpus", str(d / "corpus.jsonl"),
                       "--queries", str(d / "queries.jsonl"), "--qrels", str(d / "qrels.tsv"))
    assert code == 2 and "already imported" in err
    code, _, err = run(capsys, "data", "prepare", "my-byo", "--from", str(d))
    assert code == 2 and "re-import" in err


def test_data_help_lists_the_commands(capsys):
    code, out, _ = run(capsys, "data", "--help")
    assert code == 0
    for cmd in ("download", "prepare", "import", "list"):
        assert cmd in out


def test_a_failed_prepare_from_keeps_the_working_raw_data(tmp_path, capsys):
    good, bad = tmp_path / "good", tmp_path / "bad"
    write_esci_files(good)
    bad.mkdir()
    (bad / "shopping_queries_dataset_examples.parquet").write_bytes(b"not parquet")
    (bad / "shopping_queries_dataset_products.parquet").write_bytes(b"not parquet")
    code, _, err = run(capsys, "data", "prepare", "esci", "--from", str(good), "--json")
    assert code == 0, err
    raw = paths.raw_dir("esci")
    before = sorted((p.name, os.readlink(p) if p.is_symlink() else p.read_text()) for p in raw.iterdir())
    code, _, err = run(capsys, "data", "prepare", "esci", "--from", str(bad))
    assert code == 2 and "Traceback" not in err
    assert sorted((p.name, os.readlink(p) if p.is_symlink() else p.read_text())
                  for p in raw.iterdir()) == before  # the old links (and their provenance note) are back
    assert [p.name for p in raw.parent.iterdir() if p.name.startswith(".")] == []  # no temporaries
    code, _, err = run(capsys, "data", "prepare", "esci", "--json")
    assert code == 0, err
