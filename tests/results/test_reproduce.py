"""`rbench reproduce`: every experiment of the paper as a recipe, the plan, the paper's numbers
only under their own task, and the graded check of the cheap recipe (run on every change)."""

from __future__ import annotations

import json
from types import SimpleNamespace

from rbench.audit import reproduce
from rbench.rankers import available_rankers
from rbench.tasks.registry import list_tasks
from tests.helpers import cli, one_line

PAPER_EXPERIMENTS = {"main", "small-ultra", "ablations", "mixed", "shift", "zeroshot", "centroids-k", "centroid-dim",
                     "aggregation", "backbone", "compute-memory", "latency", "width-depth", "scalability"}


def test_every_experiment_is_a_recipe_naming_known_rankers(capsys):
    found = reproduce.recipes()
    assert PAPER_EXPERIMENTS <= set(found)
    rankers, tasks = set(available_rankers()), {s.name for s in list_tasks()}
    for recipe in found.values():
        for run in recipe.runs:
            assert run.ranker in rankers, (recipe.name, run.ranker)
            assert set(run.tasks) <= tasks, (recipe.name, run.tasks)
    code, out, _ = cli(capsys, "reproduce", "--list")
    assert code == 0 and all(name in out for name in PAPER_EXPERIMENTS)


def test_dry_run_shows_data_and_estimates(capsys, tmp_path):
    code, out, _ = cli(capsys, "reproduce", "main", "--dry-run", "--results-dir", str(tmp_path))
    assert code == 0 and "rec-movie" in out and "missing" in out and "unknown (no measured run)" in out
    code, _, err = cli(capsys, "reproduce", "mian")
    assert code == 2 and "did you mean 'main'" in one_line(err)
    code, _, err = cli(capsys, "reproduce", "main", "--dry-run", "--profile", "gpu")
    assert code == 2 and "profile" in one_line(err)


def test_paper_numbers_only_under_their_own_task():
    recipe = reproduce.get("main")
    bm25 = next(r for r in recipe.runs if r.ranker == "bm25")
    fake = SimpleNamespace(metrics={"nDCG@10": 0.01, "RR": 0.02})
    cells = [reproduce.Cell(bm25, "rec-movie", "cpu", fake, "written"),
             reproduce.Cell(bm25, "ml-100k", "cpu", fake, "written")]
    rows = {(r["task"], r["measure"]): r for r in reproduce.rows(recipe, cells)}
    assert rows[("rec-movie", "nDCG@10")]["paper"] == 0.18 and rows[("rec-movie", "MRR")]["paper"] == 0.54
    assert rows[("rec-movie", "MRR")]["delta"] == 2.0 - 0.54
    assert rows[("ml-100k", "MRR")]["paper"] is None and rows[("ml-100k", "MRR")]["delta"] is None


def test_grades_ok_okish_fail():
    recipe = reproduce.get("smoke")
    table = [{"ranker": "pop", "task": "ml-100k", "measure": "MRR", "rbench": 4.26}]
    expected = {"cells": [{"ranker": "pop", "task": "ml-100k", "measure": "MRR", "value": v}
                          for v in (4.26, 4.5)] + [{"ranker": "bm25", "task": "ml-100k", "measure": "MRR", "value": 1}]}
    graded = reproduce.grade(recipe, "cpu", table, json.dumps({"cells": expected["cells"][:1]}))
    assert graded == {("pop", "ml-100k", "original", "MRR"): "OK"}
    assert reproduce.grade(recipe, "cpu", table, json.dumps({"cells": expected["cells"][1:2]})) == {
        ("pop", "ml-100k", "original", "MRR"): "OKish"}
    near = [{**expected["cells"][0], "value": 4.3}]
    assert set(reproduce.grade(recipe, "cpu", table, json.dumps({"cells": near})).values()) == {"OK"}
    far = [{**expected["cells"][0], "value": 5.0}, expected["cells"][2]]  # off, and never produced
    assert set(reproduce.grade(recipe, "cpu", table, json.dumps({"cells": far})).values()) == {"FAIL"}


def test_smoke_check_passes_against_the_committed_scores(capsys, tmp_path):
    args = ("reproduce", "smoke", "--check", "--results-dir", str(tmp_path / "res"), "--output", str(tmp_path), "-q")
    code, out, err = cli(capsys, *args)
    assert code == 0, err
    assert "OK 8 · OKish 0 · FAIL 0" in out
    md = (tmp_path / "smoke-cpu.md").read_text()
    assert "| pop | ml-100k | MRR | 4.26 | – | – | written | OK |" in md
    code, out, _ = cli(capsys, *args)  # again: every run is kept, not redone
    assert code == 0 and out.count("│ kept") == 8 and "│ written" not in out


def test_a_malformed_recipe_is_one_line_naming_the_file():
    import pytest

    from rbench.core.errors import DataError

    for text, why in (("title = ", "not valid TOML"), ('title = "t"\npaper = "p"\nkind = "table"', "missing 'runs'"),
                      ('title = "t"\npaper = "p"\nkind = "plot"\nruns = []', "kind must be table or figure"),
                      ('title = "t"\npaper = "p"\nkind = "table"\n[[runs]]\nranker = "bm25"', "needs 'ranker' and 'tasks'"),
                      ('title = "t"\npaper = "p"\nkind = "table"\n[[runs]]\nranker = "bm25"\ntasks = ["x"]\n'
                       'profiles = ["gpu"]', "unknown profile 'gpu'")):
        with pytest.raises(DataError, match=why) as err:
            reproduce._parse("bad", text, "rbench/data/recipes/bad.toml")
        assert "bad.toml" in str(err.value)


def fake_record(task: str, ranker: str, fit_s: float, score_s: float, n_train: int, n_test: int, pool: int):
    return SimpleNamespace(task=task, ranker={"name": ranker}, timings={"fit_s": fit_s, "score_s": score_s},
                           task_info={"n_train": n_train, "n_valid": 0, "pool_size": pool}, n_queries=n_test)


def test_estimates_come_from_measured_throughput(monkeypatch, tmp_path):
    import rbench.results.record

    recs = [fake_record("ml-100k", "bm25", 10.0, 2.0, 100, 50, 1000),
            fake_record("ml-100k", "bm25", 30.0, 9.0, 100, 50, 1000),  # a slower run: the fastest is used
            fake_record("rec-music", "pop", 1.0, 1.0, 10, 10, 20)]
    monkeypatch.setattr(rbench.results.record, "load_records", lambda root: [(None, r) for r in recs])
    monkeypatch.setattr(reproduce, "_target_size", lambda task: reproduce.Size(400, 100, 5000, "the paper's counts"))
    bm25 = reproduce.RecipeRun("bm25", ("ml-100k", "esci"))
    assert reproduce.estimate(reproduce.Cell(bm25, "ml-100k", "cpu"), tmp_path) == "~12 s"  # measured here
    # scaled: fit 10 s x 400/100 = 40 s; score 2 s x (100 x 5000) / (50 x 1000) = 20 s
    assert reproduce.estimate(reproduce.Cell(bm25, "esci", "cpu"), tmp_path) == \
        "~1.0 min (scaled from ml-100k run; the paper's counts)"
    never = reproduce.RecipeRun("dense", ("esci",))
    assert reproduce.estimate(reproduce.Cell(never, "esci", "cpu"), tmp_path) == "unknown (no measured run)"


def test_target_size_reads_the_embedded_task_and_the_papers_counts():
    ml = reproduce._target_size("ml-100k")
    assert ml is not None and ml.source == "prepared here" and ml.test_queries == 943 and ml.pool > 1000
    toy = reproduce._target_size("rec-toy")  # not prepared in this test's RBENCH_HOME
    assert toy == reproduce.Size(19413 - 1941, 1941, 11925, "the paper's counts")
    assert reproduce._target_size("no-such-task") is None


def test_a_cell_whose_data_is_not_here_is_no_data_not_a_pass_or_a_fail():
    recipe = reproduce.get("smoke")
    expected = json.dumps({"cells": [
        {"ranker": "pop", "task": "ml-100k", "variant": "original", "measure": "MRR", "value": 4.26},
        {"ranker": "pop", "task": "rec-music", "variant": "original", "measure": "MRR", "value": 39.49},
        {"ranker": "bm25", "task": "rec-music", "variant": "original", "measure": "MRR", "value": 41.13}]})
    table = [{"ranker": "pop", "task": "ml-100k", "variant": "original", "measure": "MRR", "rbench": 4.26,
              "status": "kept"},
             {"ranker": "pop", "task": "rec-music", "variant": "original", "measure": "MRR", "rbench": None,
              "status": "missing data"},
             {"ranker": "bm25", "task": "rec-music", "variant": "original", "measure": "MRR", "rbench": None,
              "status": "failed: boom"}]
    assert reproduce.grade(recipe, "cpu", table, expected) == {
        ("pop", "ml-100k", "original", "MRR"): "OK", ("pop", "rec-music", "original", "MRR"): reproduce.NO_DATA,
        ("bm25", "rec-music", "original", "MRR"): "FAIL"}


def test_variants_of_one_ranker_are_graded_apart():
    recipe = reproduce.get("scalability")
    rows = [{"ranker": "pop", "task": "ml-100k", "variant": v, "measure": "MRR", "rbench": x, "status": "kept"}
            for v, x in (("original", 4.26), ("scaled:3000", 4.0))]
    expected = json.loads(reproduce.expected_payload(recipe, "cpu", rows))
    assert {c["variant"] for c in expected["cells"]} == {"original", "scaled:3000"}
    rows[1]["rbench"] = 9.0
    assert reproduce.grade(recipe, "cpu", rows, json.dumps(expected)) == {
        ("pop", "ml-100k", "original", "MRR"): "OK", ("pop", "ml-100k", "scaled:3000", "MRR"): "FAIL"}


def test_a_transfer_cell_needs_the_sources_data_and_fits_at_its_size(monkeypatch, tmp_path):
    import rbench.results.record

    run = next(r for r in reproduce.get("zeroshot").runs if r.ranker == "lranker")
    cell = reproduce.Cell(run, "video-games", "cpu")
    assert cell.fit_task == "rec-toy" and cell.data_tasks == ("video-games", "rec-toy")
    rows = reproduce.dry_run(reproduce.get("zeroshot"), "cpu", tmp_path)
    lr = next(r for r in rows if r["ranker"].startswith("lranker") and r["task"] == "video-games")
    assert "rbench data download video-games" in lr["data"] and "rec-toy (the source)" in lr["data"]
    recs = [fake_record("ml-100k", "lranker", 100.0, 10.0, 100, 100, 1000)]
    monkeypatch.setattr(rbench.results.record, "load_records", lambda root: [(None, r) for r in recs])
    sizes = {"rec-toy": reproduce.Size(200, 0, 1, "the paper's counts"),
             "video-games": reproduce.Size(9999, 100, 1000, "the paper's counts")}
    monkeypatch.setattr(reproduce, "_target_size", sizes.get)
    # fit on rec-toy's 200 queries (2 x 100 s), scoring the target's 100 x 1000 (1 x 10 s)
    assert reproduce.estimate(cell, tmp_path).startswith("~3.5 min (scaled from ml-100k run")


def test_a_selection_runs_checks_and_saves_part_of_a_recipe(capsys):
    recipe = reproduce.get("small-ultra")
    only = reproduce.Selection(tasks=("routing-balance",))
    cells = reproduce.plan(recipe, "cpu", only)
    assert {c.task for c in cells} == {"routing-balance"} and len(cells) == 5
    assert {c.run.ranker for c in reproduce.plan(recipe, "cpu", reproduce.Selection(rankers=("pop",)))} == {"pop"}
    code, _, err = cli(capsys, "reproduce", "small-ultra", "--task", "rec-musci", "--dry-run")
    assert code == 2 and "did you mean 'rec-music'" in one_line(err)
    code, _, err = cli(capsys, "reproduce", "small-ultra", "--ranker", "popp", "--dry-run")
    assert code == 2 and "did you mean 'pop'" in one_line(err)
    pop_music = {"ranker": "pop", "task": "rec-music", "variant": "original", "measure": "MRR", "value": 39.49}
    pop_routing = {**pop_music, "task": "routing-balance", "value": 79.0}
    previous = json.dumps({"cells": [pop_music, pop_routing]})
    table = [{"ranker": "pop", "task": "routing-balance", "variant": "original", "measure": "MRR", "rbench": 80.0,
              "status": "written"}]
    # graded: only the selected task's expected cells (rec-music's is not a FAIL for not being run)
    assert reproduce.grade(recipe, "cpu", table, previous, planned=cells) == {
        ("pop", "routing-balance", "original", "MRR"): "FAIL"}
    saved = json.loads(reproduce.expected_payload(recipe, "cpu", table, previous, cells))["cells"]
    assert sorted((c["task"], c["value"]) for c in saved) == [("rec-music", 39.49), ("routing-balance", 80.0)]
