"""The evaluation protocol (``rbench.core.protocol``) and the data source a record names: a record is
reused, compared and labelled only as what it is."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

import rbench
from rbench.api import RemoteFile, Source
from rbench.core import hashing, paths, protocol
from rbench.results.leaderboard import build, to_csv, to_markdown
from rbench.results.record import ColumnKey, RowKey, read_record
from rbench.tasks.sources.provenance import DataSource, from_source, read_provenance, write_provenance
from tests.cli.test_cli_data import run, write_esci_files
from tests.results.test_leaderboard import _write

ML = ColumnKey("ml-100k")


@pytest.mark.skipif(f"{sys.version_info[0]}.{sys.version_info[1]}" != protocol.DIGEST_PYTHON,
                    reason="AST digests are kept for one Python minor version")
def test_the_protocol_code_is_the_one_its_version_was_declared_for():
    digest = protocol.code_digest()
    assert digest in protocol.KNOWN_DIGESTS[protocol.PROTOCOL_VERSION], (
        f"the code a record's numbers depend on (rbench.core.protocol.PROTOCOL_CODE) changed: digest {digest}. "
        "If numbers can move, bump PROTOCOL_VERSION and regenerate the committed records; if they cannot, "
        "add the digest to KNOWN_DIGESTS[PROTOCOL_VERSION]")


def test_the_digest_sees_code_and_ignores_docstrings_and_comments(tmp_path, monkeypatch):
    metrics = Path(hashing._module_files("rbench.engine.metrics")[0]).read_text(encoding="utf-8")
    real = hashing._module_files

    def with_copy(text):
        copy = tmp_path / "metrics.py"
        copy.write_text(text, encoding="utf-8")
        monkeypatch.setattr(hashing, "_module_files", lambda m: [copy] if m == "rbench.engine.metrics" else real(m))
        return protocol.code_digest()

    base = with_copy(metrics)
    assert with_copy(metrics.replace('"""', '"""Reworded. ', 1) + "\n# a comment\n") == base
    assert "np.log2" in metrics
    assert with_copy(metrics.replace("np.log2", "np.log10", 1)) != base  # a planted change of a measure
    monkeypatch.setattr(hashing, "_module_files", real)
    assert protocol.code_digest() != base or metrics == Path(real("rbench.engine.metrics")[0]).read_text()


def test_a_runner_function_in_the_protocol_is_hashed_alone(tmp_path, monkeypatch):
    runner = Path(hashing._module_files("rbench.run.runner")[0]).read_text(encoding="utf-8")
    real = hashing._module_files
    copy = tmp_path / "runner.py"

    def digest(text):
        copy.write_text(text, encoding="utf-8")
        monkeypatch.setattr(hashing, "_module_files", lambda m: [copy] if m == "rbench.run.runner" else real(m))
        return protocol.code_digest()

    base = digest(runner)
    assert digest(runner + "\n\ndef unrelated():\n    return 1\n") == base  # CLI plumbing does not count
    assert digest(runner.replace("replace=False", "replace=True", 1)) != base  # the test-query sample does


def test_the_version_follows_releases():
    assert rbench.__version__ == "0.2.0"
    text = (Path(rbench.__file__).parents[1] / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in text and 'attr = "rbench.core.version.__version__"' in text  # one place


def test_a_record_of_another_protocol_is_run_again(tmp_path):
    from rbench_rankers.floors import PopularityRanker as Popularity

    first = rbench.evaluate(Popularity, "ml-100k", max_queries=30, results_dir=tmp_path)
    path = next(p for p in tmp_path.rglob("*.json"))
    assert read_record(path).protocol == protocol.PROTOCOL_VERSION
    with pytest.warns(UserWarning, match="evaluation protocol"):
        rbench.evaluate(Popularity, "ml-100k", max_queries=30, results_dir=tmp_path)  # reused, and said
    data = json.loads(path.read_text())
    del data["protocol"]  # as written before records carried one
    data["created"] = "2020-01-01T00:00:00+00:00"
    path.write_text(json.dumps(data))
    assert read_record(path).protocol == 0
    again = rbench.evaluate(Popularity, "ml-100k", max_queries=30, results_dir=tmp_path)
    rec = read_record(path)
    assert rec.protocol == protocol.PROTOCOL_VERSION and rec.created != "2020-01-01T00:00:00+00:00"
    assert again.metrics["RR"] == first.metrics["RR"]


def _set_protocol(results: Path, ranker: str, value: int) -> None:
    path = next(p for p in results.rglob(f"{ranker}.json"))
    data = json.loads(path.read_text())
    data["protocol"] = value
    path.write_text(json.dumps(data))


def test_the_table_marks_rows_of_another_protocol_and_leaves_them_out_of_comparisons(tmp_path):
    rng = np.random.default_rng(0)
    base = rng.random(300) * 0.5
    _write(tmp_path, "pop", "ml-100k", base)
    _write(tmp_path, "old", "ml-100k", np.clip(base + 0.3, 0, 1))  # would be best
    _write(tmp_path, "new", "ml-100k", np.clip(base + 0.1, 0, 1))
    _set_protocol(tmp_path, "old", 0)
    lb = build(tmp_path, "large")
    assert lb.other_protocol() == {(RowKey("old"), ML)}
    marks = lb.rank_marks()
    assert (RowKey("old"), ML, "RR") not in marks and marks[(RowKey("new"), ML, "RR")] == "best"
    assert (RowKey("old"), ML, "RR") not in lb.significance()
    md = to_markdown(lb)
    old_row = next(line for line in md.splitlines() if line.startswith("| old |"))
    assert "†" in old_row and "**" not in old_row and "*" not in old_row.replace("†", "")
    assert "`†`: computed under evaluation protocol 0" in md
    assert to_csv(lb).splitlines()[0].endswith(",protocol")
    assert any(line.startswith("old,") and line.endswith(",0") for line in to_csv(lb).splitlines())
    _set_protocol(tmp_path, "pop", 0)  # the floor of another protocol is no floor for this one
    lb = build(tmp_path, "large")
    assert lb.below_floors() == set()


def test_prepare_from_records_what_the_data_is_and_the_table_names_it(tmp_path, capsys):
    src = tmp_path / "esci-files"
    write_esci_files(src)
    code, _, err = run(capsys, "data", "prepare", "esci", "--from", str(src), "--source-name", "my | ESCI\nsample")
    assert code == 0, err
    assert read_provenance(paths.raw_dir("esci")) == DataSource(
        "my | ESCI sample", own=False, how="rbench data prepare --from")
    rbench.evaluate("bm25", "esci", results_dir=tmp_path / "res")
    rec = read_record(next((tmp_path / "res").rglob("bm25*.json")))
    assert rec.task_info["data_source"] == {"name": "my | ESCI sample", "own": False, "how": "rbench data prepare --from"}
    lb = build(tmp_path / "res", "large")
    md = to_markdown(lb, paper=True)
    assert "esci [data: my \\| ESCI sample] nDCG@10" in md  # named, and escaped in the Markdown cell
    assert "Reference: the paper's numbers" not in md  # the paper's numbers are not for this data


@pytest.mark.parametrize("argv, expected", [
    (["--source-name", "x"], "give --from DIR too"),
    (["--from", "SRC", "--source-name", ""], "expected a short name"),
    (["--from", "SRC", "--source-name", "y" * 81], "expected a short name"),
])
def test_a_bad_source_name_is_one_line_before_anything_is_linked(tmp_path, capsys, argv, expected):
    src = tmp_path / "esci-files"
    write_esci_files(src)
    argv = [str(src) if a == "SRC" else a for a in argv]
    code, _, err = run(capsys, "data", "prepare", "esci", *argv)
    assert code == 2 and expected in err and len(err.strip().splitlines()) == 1
    assert not paths.raw_dir("esci").exists()


def test_files_a_task_pins_are_its_own_source_and_others_are_named(tmp_path):
    good = tmp_path / "data.csv"
    good.write_text("a,b\n1,2\n")
    import hashlib

    digest = hashlib.sha256(good.read_bytes()).hexdigest()
    spec = rbench.load_task("ml-100k").spec
    import dataclasses

    pinned = dataclasses.replace(spec, sources=(Source("The Data", "https://example.org", "CC0",
                                                       files=(RemoteFile("data.csv", ("https://example.org/d",),
                                                                         sha256=digest),)),))
    assert from_source(pinned, [good]) == DataSource("The Data", own=True, how="rbench data prepare --from (pinned files)")
    good.write_text("a,b\n1,3\n")  # same name, other bytes
    assert from_source(pinned, [good]).own is False
    assert from_source(pinned, [good], "Mine").name == "Mine"
    write_provenance(tmp_path, DataSource("Mine", own=False))
    assert read_provenance(tmp_path).name == "Mine"
    (tmp_path / ".source.json").write_text("[" * 100_000)  # hostile: named by its files instead
    assert read_provenance(tmp_path) == DataSource("local files data.csv", own=False,
                                                           how="placed in the raw folder")


def test_the_embedded_task_is_its_own_source():
    data = rbench.load_task("ml-100k")
    assert data.info["data_source"]["own"] is True


def test_records_carry_their_schema_and_a_newer_one_is_refused(tmp_path):
    from rbench.core.errors import DataError
    from rbench.results.record import SCHEMA_VERSION
    from rbench_rankers.floors import PopularityRanker as Popularity

    rbench.evaluate(Popularity, "ml-100k", max_queries=30, results_dir=tmp_path)
    path = next(p for p in tmp_path.rglob("*.json"))
    data = json.loads(path.read_text())
    assert data["schema"] == SCHEMA_VERSION == read_record(path).schema
    del data["schema"]  # written before records carried one
    path.write_text(json.dumps(data))
    assert read_record(path).schema == 0
    data["schema"] = SCHEMA_VERSION + 1
    path.write_text(json.dumps(data))
    with pytest.raises(DataError, match=f"schema {SCHEMA_VERSION + 1}.*upgrade rbench"):
        read_record(path)
