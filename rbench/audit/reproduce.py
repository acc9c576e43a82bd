"""Paper experiments as declarative recipes: ``rbench reproduce EXPERIMENT``.

Why recipes: a reader of the paper wants its tables re-run and shown beside the paper's numbers,
and a maintainer wants to know whether a committed result still holds (pyserini's two-click
reproductions). A recipe (``rbench/data/recipes/NAME.toml``, package data) says which rankers,
tasks, variants and options one table or figure needs, per profile: ``paper`` (the paper's
settings; a GPU) and ``cpu`` (budgets that run on two cores). Running it skips the runs whose
RunRecords already exist (``--overwrite only-missing``, through ``rbench.public.run_outcome``), then
renders rbench's numbers and the paper's side by side, each cell with its Δ. The paper's numbers
(``rbench/data/paper_reference.csv``) appear only under the task they belong to (``rec-movie``,
never ``ml-100k``, which is MovieLens 100K, not the paper's MovieLens 1M).

Graded regressions: ``--check`` compares each cell with the expected scores committed in
``rbench/data/recipes/expected/NAME-PROFILE.json`` (written by ``--save-expected`` from a real
run): OK within ``ok`` (absolute, in metric units), OKish within ``okish``, else FAIL (exit 1).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any

import tomllib

from rbench.core.errors import DataError, RBenchError, unknown
from rbench.core.inputs import parse_json
from rbench.core.settings import DEFAULTS
from rbench.results.report import GradeKey, grade_key

PROFILES = ("cpu", "paper")
MEASURES = {"nDCG@10": "nDCG@10", "MRR": "RR"}  # shown name -> RunRecord metric
NO_DATA = "NO DATA"  # an expected cell whose task's data is not on this machine
GRADES = ("OK", "OKish", "FAIL", NO_DATA)


@dataclass(frozen=True)
class RecipeRun:
    """One ranker on some tasks, with options per profile (``profiles``: where it runs)."""

    ranker: str
    tasks: tuple[str, ...]
    variant: str = "original"
    paper_model: str = ""  # its name in the paper's tables ("" : no reference row)
    options: dict[str, dict[str, Any]] = field(default_factory=dict)  # profile -> options
    max_queries: dict[str, int] = field(default_factory=dict)  # profile -> sample size
    profiles: tuple[str, ...] = PROFILES
    rerank_from: str | None = None  # a two-stage run (docs/guides/reranking.md)
    rerank_depth: int | None = None
    name: str = ""  # the row's name ("" : the ranker and its options)

    def label(self, profile: str) -> str:
        if self.name:
            return self.name
        opts = self.options.get(profile) or {}
        tag = ([f"{self.rerank_from}@{self.rerank_depth or 'default'}"] if self.rerank_from else []) + \
            [f"{k}={v}" for k, v in sorted(opts.items())]
        return self.ranker + (f" ({', '.join(tag)})" if tag else "")


@dataclass(frozen=True)
class Recipe:
    name: str
    title: str
    paper: str  # where in the paper: "Table 2", "Figure 4", ...
    kind: str  # table | figure (figures render as their table of numbers)
    reference: str  # the paper_reference.csv table it compares with ("" : none)
    runs: tuple[RecipeRun, ...]
    note: str = ""
    tolerance: dict[str, float] = field(default_factory=lambda: {"ok": 5e-4, "okish": 5e-3})

    def runs_for(self, profile: str) -> list[RecipeRun]:
        return [r for r in self.runs if profile in r.profiles]


def _recipe_dir() -> Any:
    return files("rbench").joinpath("data/recipes")


def _parse(name: str, text: str, where: str) -> Recipe:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise DataError(f"not valid TOML ({exc})", where) from exc
    for key in ("title", "paper", "kind", "runs"):
        if key not in raw:
            raise DataError(f"missing {key!r}", where)
    runs = []
    for i, r in enumerate(raw["runs"]):
        if "ranker" not in r or "tasks" not in r:
            raise DataError(f"runs[{i}] needs 'ranker' and 'tasks'", where)
        profiles = tuple(r.get("profiles", PROFILES))
        bad = [p for p in profiles if p not in PROFILES]
        if bad:
            raise DataError(f"runs[{i}]: unknown profile {bad[0]!r} (profiles: {', '.join(PROFILES)})", where)
        runs.append(RecipeRun(ranker=r["ranker"], tasks=tuple(r["tasks"]), variant=r.get("variant", "original"),
                              paper_model=r.get("paper_model", ""), options=dict(r.get("options", {})),
                              max_queries=dict(r.get("max_queries", {})), profiles=profiles,
                              rerank_from=r.get("rerank_from"), rerank_depth=r.get("rerank_depth"),
                              name=r.get("name", "")))
    if raw["kind"] not in ("table", "figure"):
        raise DataError(f"kind must be table or figure, not {raw['kind']!r}", where)
    return Recipe(name=name, title=raw["title"], paper=raw["paper"], kind=raw["kind"],
                  reference=raw.get("reference", ""), runs=tuple(runs), note=raw.get("note", ""),
                  tolerance={"ok": 5e-4, "okish": 5e-3, **raw.get("tolerance", {})})


def recipes() -> dict[str, Recipe]:
    """Every recipe shipped with rbench, by name (the file's stem), in the paper's order."""
    out = {}
    for entry in sorted(_recipe_dir().iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".toml"):
            name = entry.name[: -len(".toml")]
            out[name] = _parse(name, entry.read_text(encoding="utf-8"), f"rbench/data/recipes/{entry.name}")
    order = {r: i for i, r in enumerate(ORDER)}
    return dict(sorted(out.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0])))


ORDER = ("smoke", "main", "small-ultra", "ablations", "mixed", "shift", "zeroshot", "centroids-k",
         "centroid-dim", "aggregation", "backbone", "compute-memory", "latency", "width-depth", "scalability")


def get(name: str) -> Recipe:
    found = recipes()
    if name not in found:
        raise unknown("experiment", name, found)
    return found[name]


# --------------------------------------------------------------------------------------------
# planning and running
# --------------------------------------------------------------------------------------------


@dataclass
class Cell:
    """One run of a recipe on one task: what the plan says and, once run, its record."""

    run: RecipeRun
    task: str
    profile: str
    record: Any = None
    status: str = ""  # planned | kept | written | missing data | failed: ...

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.run.options.get(self.profile) or {})

    @property
    def max_queries(self) -> int | None:
        return self.run.max_queries.get(self.profile)

    @property
    def fit_task(self) -> str:
        """The task the ranker learns from: the source of a ``from-TASK`` transfer, else the task."""
        from rbench.tasks.pools import parse_variant

        try:
            variant = parse_variant(self.run.variant)
        except RBenchError:
            return self.task
        return variant.source if variant.kind == "transfer" else self.task

    @property
    def data_tasks(self) -> tuple[str, ...]:
        """Every task whose data the run reads."""
        return (self.task,) if self.fit_task == self.task else (self.task, self.fit_task)


@dataclass(frozen=True)
class Selection:
    """Part of a recipe (``--task`` / ``--ranker``, each repeatable; empty: all): rerun or check
    one task's cells without paying for the rest."""

    tasks: tuple[str, ...] = ()
    rankers: tuple[str, ...] = ()

    def keeps(self, run: RecipeRun, task: str) -> bool:
        return (not self.tasks or task in self.tasks) and (not self.rankers or run.ranker in self.rankers)


def plan(recipe: Recipe, profile: str, only: Selection = Selection()) -> list[Cell]:
    if profile not in PROFILES:
        raise unknown("profile", profile, PROFILES)
    runs = recipe.runs_for(profile)
    for name in only.tasks:
        if not any(name in r.tasks for r in runs):
            raise unknown(f"task of {recipe.name} ({profile})", name, sorted({t for r in runs for t in r.tasks}))
    for name in only.rankers:
        if not any(name == r.ranker for r in runs):
            raise unknown(f"ranker of {recipe.name} ({profile})", name, sorted({r.ranker for r in runs}))
    return [Cell(r, t, profile) for r in runs for t in r.tasks if only.keeps(r, t)]


def _planned(cells: list[Cell]) -> set[tuple[str, str, str]]:
    return {(c.run.label(c.profile), c.task, c.run.variant) for c in cells}


@dataclass(frozen=True)
class Size:
    """What a run's cost scales with: queries fitted on, test queries and candidates per query."""

    fit_queries: int
    test_queries: int
    pool: int
    source: str  # where the numbers come from (a RunRecord, the prepared cache, the paper)


def _target_size(task: str) -> Size | None:
    """The task's size here: its prepared cache when present, else the paper's Table 2 counts
    (the paper's query count split 8:1:1; a small-scenario pool is its list length, 20)."""
    from rbench.tasks import store
    from rbench.tasks.registry import load_task, resolve

    try:
        found = resolve(task)
    except RBenchError:
        return None
    spec = found.spec
    if not found.family.cached and found.status()[0]:  # ships with a package, loads in ~0.5 s
        data = load_task(found)
        sizes: dict[str, Any] | None = {"pool": len(data.pool), "train": len(data.train),
                                        "valid": len(data.valid), "test": len(data.test)}
    else:
        sizes = store.prepared_sizes(spec)
    if sizes:
        pool = 20 if spec.scenario == "small" else int(sizes["pool"])
        return Size(int(sizes["train"]) + int(sizes["valid"]), int(sizes["test"]), pool, "prepared here")
    if spec.paper_queries and spec.paper_candidates:
        q = int(spec.paper_queries)
        return Size(q - q // 10, q // 10, int(spec.paper_candidates), "the paper's counts")
    return None


def _measured(rec: Any) -> tuple[float, float, Size]:
    """A record's (fit seconds, scoring seconds, size). A record's ``score_s`` leaves out the
    JIT: the numba kernels' first compilation (``rbench.engine.fused.warmup``: ~100 s with numba's cache
    empty) runs before the timer and is stored apart as ``timings.compile_s``, so an estimate is
    about the ranker. Records written before ``compile_s`` was recorded lack it, and their
    ``score_s`` may include that compilation (overstating a cheap ranker's cost by up to a
    minute or so); they are used as they are."""
    info = rec.task_info
    pool = int(info.get("mean_ranked") or info.get("pool_size") or 1)
    size = Size(int(info.get("n_train", 0)) + int(info.get("n_valid", 0)), int(rec.n_queries), max(pool, 1),
                f"{rec.task} run")
    return float(rec.timings.get("fit_s", 0)), float(rec.timings.get("score_s", 0)), size


def measured_records(results_dir: Path) -> list[Any]:
    """Every RunRecord under ``results_dir`` (none when it does not exist), read once per plan."""
    from rbench.results.record import load_records

    root = Path(results_dir)
    return [rec for _, rec in load_records(root)] if root.is_dir() else []


def estimate(cell: Cell, results_dir: Path, records: list[Any] | None = None,
             sizes: dict[str, Size | None] | None = None) -> str:
    """A cost estimate from measured throughput: a RunRecord of the same ranker on the same task
    gives its fit + score time as is; else the ranker's fastest measured run on another task is
    scaled to this task's size (fit time by the queries it learns from, scoring time by test
    queries x candidates per query), and says what it was scaled from. Options and machines may
    differ, so it is an order of magnitude, labelled as such; 'unknown' when the ranker never ran
    here. ``records`` / ``sizes``: what a whole plan's estimates share (read once, sizes memoised)."""
    same, other = [], []
    for rec in measured_records(results_dir) if records is None else records:
        if rec.ranker.get("name") != cell.run.ranker:
            continue
        (same if rec.task == cell.task else other).append(rec)
    if same:
        return _minutes(min(sum(_measured(r)[:2]) for r in same))
    known: dict[str, Size | None] = {} if sizes is None else sizes
    for task in {cell.task, cell.fit_task} - set(known):
        known[task] = _target_size(task)
    target, learns_from = known[cell.task], known[cell.fit_task]
    if not other or target is None or learns_from is None:
        return "unknown (no measured run)"
    fit_s, score_s, was = min((_measured(r) for r in other), key=lambda m: m[0] + m[1])
    fit = fit_s * learns_from.fit_queries / max(was.fit_queries, 1)  # a transfer fits on its source
    score = score_s * (target.test_queries * target.pool) / max(was.test_queries * was.pool, 1)
    return f"{_minutes(fit + score)} (scaled from {was.source}; {target.source})"


def _minutes(seconds: float) -> str:
    if seconds >= 3600:
        return f"~{seconds / 3600:.1f} h"
    return f"~{seconds / 60:.1f} min" if seconds >= 60 else f"~{seconds:.0f} s"


def dry_run(recipe: Recipe, profile: str, results_dir: Path, only: Selection = Selection()) -> list[dict[str, Any]]:
    """The plan as rows: ranker, task, options, whether the data is here, the estimated cost."""
    from rbench.tasks.registry import data_status

    rows = []
    records = measured_records(results_dir)  # shared by every cell's estimate
    sizes: dict[str, Size | None] = {}
    for cell in plan(recipe, profile, only):
        missing = []
        for task in cell.data_tasks:
            try:
                present, how = data_status(task)
            except RBenchError as exc:
                present, how = False, " ".join(str(exc).split())
            if not present:
                how = how.split(" [looked in")[0].removeprefix("not present: ").split(", or ")[0]  # its first way
                missing.append(how if task == cell.task else f"{how} (the source)")
        rows.append({"ranker": cell.run.label(profile), "task": cell.task, "variant": cell.run.variant,
                     "max_queries": cell.max_queries, "data": "missing: " + "; ".join(missing) if missing else
                     "present", "estimate": estimate(cell, results_dir, records, sizes)})
    return rows


def run(recipe: Recipe, profile: str, results_dir: Path, overwrite: str = DEFAULTS.overwrite,
        progress: Any = None, only: Selection = Selection()) -> list[Cell]:
    """Run what is missing (cells whose data is absent are reported, not run)."""
    from rbench.public import run_outcome
    from rbench.tasks.registry import data_status

    cells = plan(recipe, profile, only)
    for cell in cells:
        try:
            if not all(data_status(task)[0] for task in cell.data_tasks):
                cell.status = "missing data"
                continue
            out = run_outcome(cell.run.ranker, cell.task, variant=cell.run.variant, options=cell.options,
                              max_queries=cell.max_queries, results_dir=results_dir, overwrite=overwrite,
                              rerank_from=cell.run.rerank_from, rerank_depth=cell.run.rerank_depth,
                              progress=progress)
        except RBenchError as exc:  # one cell that cannot run (weights not here, an unknown task): the rest go on
            cell.status = f"failed: {' '.join(str(exc).split())[:160]}"
            continue
        cell.record, cell.status = out.record, ("kept" if out.skipped else "written")
    return cells


# --------------------------------------------------------------------------------------------
# the paper's numbers, rendering, grading
# --------------------------------------------------------------------------------------------


def paper_numbers(recipe: Recipe) -> dict[tuple[str, str, str, str], float]:
    """(paper model, task, variant, shown measure) -> value in %, from the recipe's reference
    table; keyed by the paper's own task names, so they meet only the matching task."""
    if not recipe.reference:
        return {}
    text = files("rbench").joinpath("data/paper_reference.csv").read_text(encoding="utf-8")
    out = {}
    for line in text.splitlines()[1:]:
        table, _, task, variant, model, metric, value = line.split(",")
        if table == recipe.reference:
            out[(model, task, variant, metric)] = float(value)
    return out


def rows(recipe: Recipe, cells: list[Cell]) -> list[dict[str, Any]]:
    """One row per (ranker, task, measure): rbench's value, the paper's and Δ (both in %)."""
    paper = paper_numbers(recipe)
    out = []
    for cell in cells:
        for shown, metric in MEASURES.items():
            mine = None if cell.record is None else 100 * float(cell.record.metrics[metric])
            ref = paper.get((cell.run.paper_model, cell.task, cell.run.variant, shown))
            out.append({"ranker": cell.run.label(cell.profile), "task": cell.task, "variant": cell.run.variant,
                        "measure": shown, "rbench": mine, "paper": ref,
                        "delta": None if mine is None or ref is None else mine - ref, "status": cell.status})
    return out


def to_markdown(recipe: Recipe, profile: str, table: list[dict[str, Any]],
                grades: dict[GradeKey, str] | None = None) -> str:
    lines = [f"# {recipe.title}", "", f"{recipe.paper} of the LRanker paper; profile `{profile}`. Values in %; "
             "'paper' is the paper's own number for the same task (Qwen3-0.6B backbone, one A6000), "
             "Δ = rbench − paper.", ""]
    if recipe.note:
        lines += [recipe.note, ""]
    from rbench.core.markdown import row as md_row
    from rbench.results.report import cells, header

    head = header(bool(grades))
    lines += [md_row(head), "|" + "---|" * len(head)]
    lines += [md_row(row) for row in cells(table, grades)]
    lines += ["", f"Generated by `rbench reproduce {recipe.name} --profile {profile}` from the RunRecords it ran "
              "or found."]
    return "\n".join(lines) + "\n"


def expected_path(recipe: Recipe, profile: str) -> Any:
    return _recipe_dir().joinpath("expected", f"{recipe.name}-{profile}.json")


def expected_payload(recipe: Recipe, profile: str, table: list[dict[str, Any]], previous_text: str | None = None,
                     planned: list[Cell] | None = None) -> str:
    """The expected scores of this run's cells; with a partial plan (``planned``), the previous
    file's cells outside it are kept as they were."""
    cells = [{"ranker": r["ranker"], "task": r["task"], "variant": r["variant"], "measure": r["measure"],
              "value": round(r["rbench"], 6)} for r in table if r["rbench"] is not None]
    if previous_text and planned is not None:
        inside = _planned(planned)
        previous = parse_json(previous_text, expected_path(recipe, profile))
        kept = [c for c in previous["cells"] if grade_key(c)[:3] not in inside]
        cells = kept + cells
    return json.dumps({"recipe": recipe.name, "profile": profile, "tolerance_percent_points": {
        k: 100 * v for k, v in recipe.tolerance.items()}, "cells": cells}, indent=2) + "\n"


def grade(recipe: Recipe, profile: str, table: list[dict[str, Any]],
          expected_text: str | None = None, planned: list[Cell] | None = None) -> dict[GradeKey, str]:
    """Each expected cell graded OK / OKish / FAIL against this run. A cell expected but not
    produced is a FAIL, except when its task's data is not on this machine: that cell is
    ``NO DATA`` (said, counted, never a pass in disguise, and not a regression either). With a
    partial plan (``planned``) only the expected cells inside it are graded."""
    if expected_text is None:
        path = expected_path(recipe, profile)
        if not path.is_file():
            raise RBenchError(f"no expected scores for {recipe.name} ({profile}); write them from a real run with "
                              f"rbench reproduce {recipe.name} --profile {profile} --save-expected")
        expected_text = path.read_text(encoding="utf-8")
    where = expected_path(recipe, profile)
    expected = parse_json(expected_text, where)
    if not isinstance(expected, dict) or not isinstance(expected.get("cells"), list):
        raise DataError("expected an object with a 'cells' list (rbench reproduce --save-expected writes it)", where)
    got = {grade_key(r): r for r in table}
    ok, okish = 100 * recipe.tolerance["ok"], 100 * recipe.tolerance["okish"]
    out = {}
    inside = None if planned is None else _planned(planned)
    for c in expected["cells"]:
        key = grade_key(c)
        if inside is not None and key[:3] not in inside:
            continue
        row = got.get(key)
        value = None if row is None else row["rbench"]
        diff = None if value is None else abs(value - float(c["value"]))
        if diff is None:
            out[key] = NO_DATA if row is not None and row["status"] == "missing data" else "FAIL"
        else:
            out[key] = "OK" if diff <= ok else "OKish" if diff <= okish else "FAIL"
    return out
