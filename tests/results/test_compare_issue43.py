"""Issue 43 item 5: ``rbench compare`` as a ranx user expects it.

- one header per column: without a correction the corrected p is the p, shown once (it was
  two columns both headed ``p``);
- ``-o FILE`` writes the tables to the file and prints only where (it printed every table too);
- a measure a run did not record is computed from its run file and the test set's qrels (as ranx
  computes any measure from a run and qrels), exactly: the same values a run that recorded it
  holds; a cutoff past the run file's depth is refused in one line naming the depth.

Planted bugs caught (each checked by planting it): ``_pair_head`` back to ``p``/``p``
(``test_one_header_per_column``); the CLI printing the tables after writing ``-o``
(``test_out_writes_the_file_and_prints_only_its_path``); ``from_run_file`` counting a positive
the file does not list at rank 0 instead of past every cutoff, or ranking from 0
(``test_an_unrecorded_measure_is_computed_from_the_run_file``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import rbench
from rbench.cli.app import main
from rbench.results.compare import compare_frames
from rbench.results.proof import TOLERANCE


def _frames(n: int = 80) -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(3)
    ids = [f"q{i}" for i in range(n)]
    base = rng.random(n) * 0.5
    return {name: pd.DataFrame({"query_id": ids, "RR": np.clip(base + shift + rng.normal(0, 0.05, n), 0, 1)})
            for name, shift in (("x", 0.0), ("y", 0.2), ("z", 0.1))}


@pytest.mark.parametrize("correction", ["none", "holm", "bonferroni"])
def test_one_header_per_column(correction):
    c = compare_frames(_frames(), ["RR"], task="t", correction=correction, n_resamples=200)
    head = c._pair_head()
    assert len(head) == len(set(head)), head
    assert all(len(c._pair_cells(p)) == len(head) for p in c.pairs)
    md = c.to_markdown().splitlines()
    pair_header = next(line for line in md if line.startswith("| Measure"))
    cells = [x.strip() for x in pair_header.strip("|").split("|")]
    assert len(cells) == len(set(cells)) and cells.count("p") == 1
    assert ("p (Holm)" in cells or "p (Bonferroni)" in cells) == (correction != "none")
    pairs = c.rich_tables()[2]
    assert [col.header for col in pairs.columns] == head


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """pop and random on ml-100k (40 queries), recorded with the default measures only, and the
    same runs recorded with P@5 and AP@100 asked for (the reference values)."""
    import os

    home = tmp_path_factory.mktemp("home")
    old = os.environ.get("RBENCH_HOME")
    os.environ["RBENCH_HOME"] = str(home)
    plain, asked = tmp_path_factory.mktemp("plain"), tmp_path_factory.mktemp("asked")
    try:
        for ranker in ("pop", "random"):
            rbench.evaluate(ranker, "ml-100k", max_queries=40, results_dir=plain)
            rbench.evaluate(ranker, "ml-100k", max_queries=40, results_dir=asked, measures=["P@5", "AP@100"])
        yield home, plain, asked
    finally:
        if old is None:
            os.environ.pop("RBENCH_HOME", None)
        else:
            os.environ["RBENCH_HOME"] = old


def test_an_unrecorded_measure_is_computed_from_the_run_file(two_runs, monkeypatch):
    home, plain, asked = two_runs
    monkeypatch.setenv("RBENCH_HOME", str(home))
    got = rbench.compare("ml-100k", results_dir=plain, measures=["P@5", "AP@100", "MRR"], n_resamples=200)
    ref = rbench.compare("ml-100k", results_dir=asked, measures=["P@5", "AP@100", "MRR"], n_resamples=200)
    assert got.systems == ref.systems and got.measures == ["P@5", "AP@100", "RR"]
    for key, value in ref.means.items():
        assert got.means[key] == pytest.approx(value, abs=TOLERANCE), key  # per-query files keep 10 decimals
    assert any("P@5: not recorded by" in n and "computed from" in n for n in got.notes)
    assert not any("RR: not recorded" in n for n in got.notes)  # recorded: read, not recomputed
    assert not any("not recorded" in n for n in ref.notes)
    assert (ref.means[(0, "P@5")], ref.means[(1, "P@5")]) != (0.0, 0.0)  # (a test that can fail)


def test_a_cutoff_past_the_run_file_is_refused_in_one_line(two_runs, monkeypatch, capsys):
    home, plain, _ = two_runs
    monkeypatch.setenv("RBENCH_HOME", str(home))
    code = main(["compare", "-t", "ml-100k", "--results-dir", str(plain), "-m", "P@1000", "--resamples", "100"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2 and "P@1000 needs ranks past its run file's 100 lines" in err and "P@100" in err


def test_out_writes_the_file_and_prints_only_its_path(two_runs, monkeypatch, capsys, tmp_path):
    home, plain, _ = two_runs
    monkeypatch.setenv("RBENCH_HOME", str(home))
    target = tmp_path / "cmp.md"
    code = main(["compare", "-t", "ml-100k", "--results-dir", str(plain), "-f", "md", "-o", str(target),
                 "--resamples", "100"])
    out = capsys.readouterr().out
    assert code == 0 and "| Measure" in target.read_text()
    assert out.strip().startswith("written:") and len(out.strip().splitlines()) == 1, out
