"""The ``rbench`` command line (Typer + rich).

Exit codes: 0 ok, 2 user error (bad name, option, missing or malformed data, unwritable results
directory, a ranker returning bad scores), 1 internal error, 130 interrupted.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import Any, Optional

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from rbench.core.console import PipeClosed, console, description_column, quiet_stdout, styled
from rbench.core.errors import RBenchError, write_failure
from rbench.core.settings import DEFAULTS, OVERWRITE, help_of

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="rbench: benchmark LLM rankers against classic and task-specific baselines.")
out, err = console(), console(stderr=True)  # user text printed as it is (rbench.core.console)


def _version(value: bool) -> None:
    if value:
        from rbench import __version__
        from rbench.core.protocol import PROTOCOL_VERSION

        print(f"rbench {__version__} (evaluation protocol {PROTOCOL_VERSION})")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print rbench's version and evaluation protocol, then exit.")) -> None:
    """rbench: benchmark LLM rankers against classic and task-specific baselines."""


def _progress_factory(enabled: bool):
    """A Progress-reporting callback factory for ``rbench.run.runner.run``."""
    progress = Progress(description_column(), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), TimeRemainingColumn(), console=err, transient=False,
                        disable=not enabled)

    def factory(desc: str, total: int | None):
        task_id = progress.add_task(desc, total=total)
        return lambda n: progress.advance(task_id, n)

    return progress, factory


@app.command("tasks")
def tasks_cmd(as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON.")) -> None:
    """List the tasks, the paper's sizes and whether their data is present."""
    from rbench.tasks.registry import data_status, list_tasks
    from rbench.tasks.store import prepared_sizes

    rows = []
    for spec in list_tasks():
        present, detail = data_status(spec)
        prepared = prepared_sizes(spec)
        rows.append({"name": spec.name, "title": spec.title, "scenario": spec.scenario, "domain": spec.domain,
                     "paper_candidates": spec.paper_candidates, "paper_queries": spec.paper_queries,
                     "prepared_pool": prepared["pool"] if prepared else None,
                     "prepared_queries": prepared["queries"] if prepared else None,
                     "data_present": present, "data": detail, "license": spec.license,
                     "sources": [{"name": s.name, "url": s.url, "license": s.license} for s in spec.sources],
                     "description": spec.description,
                     "protocol": (spec.protocol or _protocol_doc(spec)) if as_json else "",
                     "prompt": spec.prompt, "how_to_get": spec.how_to_get})
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table(title="rbench tasks")
    for col in ("task", "scenario", "domain", "paper cand.", "paper queries", "prepared pool / queries", "data"):
        table.add_column(col, justify="right" if col.startswith(("paper", "prepared")) else "left", no_wrap=True)
    missing = []
    for r in rows:
        cand = f"{r['paper_candidates']:,}" if r["paper_candidates"] else "–"
        nq = f"{r['paper_queries']:,}" if r["paper_queries"] else "–"
        data = Text("present", style="green") if r["data_present"] else Text("missing", style="yellow")
        if not r["data_present"]:
            missing.append(r)
        prep = f"{r['prepared_pool']:,} / {r['prepared_queries']:,}" if r["prepared_pool"] is not None else "–"
        table.add_row(r["name"], r["scenario"], r["domain"], cand, nq, prep, data)
    out.print(table)
    for r in missing:
        out.print(styled((str(r["name"]), "yellow"), f": {r['data']}"), soft_wrap=True)


def _protocol_doc(spec) -> str:
    from rbench.tasks.registry import resolve

    return resolve(spec).family.doc.strip()


@app.command("rankers")
def rankers_cmd(as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON.")) -> None:
    """List the installed ranker plugins (entry-point group ``rbench.rankers``) and their options."""
    from rbench.engine.plugins import available_rankers, load_ranker_class, ranker_options

    rows = []
    for name in available_rankers():
        try:
            cls = load_ranker_class(name)
        except RBenchError as exc:
            rows.append({"name": name, "available": False, "error": str(exc)})
            continue
        rows.append({"name": name, "available": True, "version": getattr(cls, "version", ""),
                     "description": getattr(cls, "description", "") or (cls.__doc__ or "").strip().split("\n")[0],
                     "domains": list(getattr(cls, "domains", ())), "options": ranker_options(cls),
                     **({"presets": cls.presets} if getattr(cls, "presets", None) else {}),
                     **({"pairwise": True} if getattr(cls, "pairwise", False) else {})})
    if as_json:
        print(json.dumps(rows, indent=2, default=str))
        return
    table = Table(title="rbench rankers")
    for col in ("ranker", "version", "applies to", "options (defaults)", "description"):
        table.add_column(col)
    for r in rows:
        if not r["available"]:
            table.add_row(r["name"], "", "", "", Text(str(r["error"]), style="yellow"))
            continue
        opts = ", ".join(f"{o['name']}={o['default']}" for o in r["options"])
        table.add_row(r["name"], str(r["version"]), ", ".join(r["domains"]), opts, r["description"])
    out.print(table)
    for r in rows:  # presets (--set model=NAME) with the prompts they use
        for preset, spec in (r.get("presets") or {}).items():
            out.print(styled((str(r["name"]), "bold"), " preset ", (preset, "cyan"),
                             ": " + ", ".join(f"{k}={v!r}" for k, v in spec.items())))


@app.command("run")
def run_cmd(
    rankers: list[str] = typer.Option(..., "--ranker", "-r", help="Ranker name (see `rbench rankers`), or "
                                      "path/file.py:Class / module:Class; repeat for several."),
    tasks: list[str] = typer.Option(..., "--task", "-t", help="Task name (see `rbench tasks`); repeat for several."),
    variants: list[str] = typer.Option(["original"], "--variant", help="original | mixed | shift | scaled:N | from-TASK "
                                       "(fit on TASK, score this task); repeat for several (like -r/-t: one run each)."),
    sets: Optional[list[str]] = typer.Option(None, "--set", help="key=value option; task options as task.key=value."),
    seed: int = typer.Option(DEFAULTS.seed, "--seed", help=help_of("seed")),
    max_queries: Optional[int] = typer.Option(DEFAULTS.max_queries, "--max-queries", help=help_of("max_queries")),
    results_dir: Path = typer.Option(DEFAULTS.results_dir, "--results-dir", help=help_of("results_dir")),
    batch_size: int = typer.Option(DEFAULTS.batch_size, "--batch-size", help=help_of("batch_size")),
    chunk_size: int = typer.Option(DEFAULTS.chunk_size, "--chunk-size", help=help_of("chunk_size")),
    no_write: bool = typer.Option(False, "--no-write", help="Do not write a RunRecord."),
    overwrite: str = typer.Option(DEFAULTS.overwrite, "--overwrite", help=help_of("overwrite")),
    ann: Optional[str] = typer.Option(DEFAULTS.ann, "--ann", help=help_of("ann")),
    ray_shards: Optional[int] = typer.Option(DEFAULTS.ray_shards, "--ray-shards", help=help_of("ray_shards")),
    rerank_from: Optional[str] = typer.Option(None, "--rerank-from", help="Two-stage run: rerank the top of this "
                                              "first-stage ranker (or run:PATH.run.gz, a TREC run file) with "
                                              "--ranker; metrics stay exact over the whole pool."),
    rerank_depth: Optional[str] = typer.Option(None, "--rerank-depth", help="How many first-stage candidates per "
                                               "query --ranker rescores (default 100), or 'all' (exhaustive)."),
    force: bool = typer.Option(False, "--force", help="Run an exhaustive rerank (--rerank-depth all) above the "
                               "pair budget."),
    topk: int = typer.Option(DEFAULTS.topk, "--topk", help=help_of("topk")),
    as_json: bool = typer.Option(False, "--json", help="Print the RunRecord(s) as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """Run rankers on tasks (every ranker on every task, in every --variant) and write their RunRecords.

    On several GPUs, launch this same command: ``torchrun --nproc_per_node 4 -m rbench.cli run ...``
    or ``accelerate launch --multi_gpu --num_processes 4 -m rbench.cli run ...``. Every process
    fits (a ranker's data-parallel training, e.g. LRanker's; ``batch_size`` is per process), then
    process 0 scores and writes the RunRecord."""
    from rbench.core.config import parse_assignments
    from rbench.public import plan_run
    from rbench.run.runner import World, execute

    # every plan is made (names, options, files checked) before the first run starts; the same
    # functions as rbench.evaluate (one road)
    options = parse_assignments(sets)
    plans = [plan_run(r, t, variant=variant, options=options, seed=seed, max_queries=max_queries,
                      results_dir=None if no_write else results_dir, batch_size=batch_size, chunk_size=chunk_size,
                      ann=ann, ray_shards=ray_shards, topk=topk, rerank_from=rerank_from, rerank_depth=rerank_depth,
                      force=force, overwrite=overwrite)
             for r in rankers for t in tasks for variant in variants]
    main_process = World.from_env().main
    done = []
    for plan in plans:
        progress, factory = _progress_factory(enabled=not quiet and not as_json and main_process)
        with progress:
            outcome = execute(plan, progress=factory)
        if outcome is None:  # a launched run's other processes only fit; process 0 reports
            continue
        done.append(outcome)
        if as_json:
            print(outcome.record.to_json(), end="")
        else:
            _report(outcome)
    if len(done) > 1 and not as_json:
        summary = Table(title=f"{len(done)} runs")
        for col in ("ranker", "task", "nDCG@10", "MRR", "n queries", "status"):
            summary.add_column(col, justify="left" if col in ("ranker", "task", "status") else "right")
        for o in done:
            r = o.record
            summary.add_row(r.label, r.column, f"{100 * r.metrics['nDCG@10']:.2f}",
                            f"{100 * r.metrics['RR']:.2f}", f"{r.n_queries:,}",
                            "kept" if o.skipped else ("written" if o.path is not None else "not written"))
        out.print(summary)


def _report(outcome: Any) -> None:
    """One run's metrics, timings and where its record went (or why an existing one was kept)."""
    rec = outcome.record
    if outcome.skipped:
        out.print(f"skipped {rec.label} on {rec.column}: {outcome.path} kept, {outcome.skipped} "
                  f"(nDCG@10 {100 * rec.metrics['nDCG@10']:.2f}, MRR {100 * rec.metrics['RR']:.2f}; "
                  "--overwrite always to run it again)")
        return
    table = Table(title=f"{rec.label} on {rec.column} ({rec.scenario}, {rec.n_queries:,} test queries, "
                        f"pool {rec.task_info.get('pool_size', 0):,})")
    for name in rec.metrics:
        table.add_column(name if name != "RR" else "MRR (RR)", justify="right")
    table.add_row(*[f"{100 * v:.2f}" for v in rec.metrics.values()])
    out.print(table)
    t = rec.timings
    out.print(f"fit {t['fit_s']:.1f}s · index {t['index_s']:.1f}s · score {t['score_s']:.1f}s "
              f"({t['per_query_ms']:.2f} ms/query) · peak RSS {rec.peak_rss_bytes / 2**20:,.0f} MiB")
    if "ann" in rec.ranker_info:
        a = rec.ranker_info["ann"]
        recall = a[f"recall@{a['k']}_vs_exact"]
        out.print(f"ANN {a['backend']}: recall@{a['k']} vs exact {recall:.3f} "
                  f"({a['search_ms_per_query']:.2f} ms/query, build {a['build_s']:.1f}s) — not used for the metrics")
    if rec.rerank:
        rr = rec.rerank
        out.print(f"rerank {rr['label']}: {rr['pairs_scored']:,} pairs scored · first-stage recall@{rr['depth']} "
                  f"{rr['first_stage_recall@depth']:.3f}" + (" · stage 1 from cache" if rr.get("cached") else "")
                  + ("" if rr["depth"] == "all" else " · '-dropped' metrics: positives below the depth count as "
                     "not retrieved (BEIR/MTEB style)"))
    if outcome.path is not None:
        out.print(f"RunRecord: {outcome.path}")


@app.command("table")
def table_cmd(
    scenario: str = typer.Option(..., "--scenario", "-s", help="small | large | ultra"),
    variant: Optional[str] = typer.Option(None, "--variant", help="original (default), mixed, shift, scaled"),
    results_dir: Path = typer.Option(DEFAULTS.results_dir, "--results-dir", help="Folder of the RunRecords to read "
                                     "(the Markdown footer names it)."),
    fmt: str = typer.Option("md", "--format", "-f", help="md | csv | json (written to --output)"),
    output: Optional[str] = typer.Option(None, "--output", "-o",
                                         help="File to write; default leaderboards/<scenario>[~variant].<fmt> in the "
                                         "current folder, not beside --results-dir. "
                                         "A folder (existing, or ending in /): that name inside it; no suffix: "
                                         ".<fmt> is added. The path written is printed."),
    paper: bool = typer.Option(False, "--paper", help="Append the paper's own numbers as a separate, labelled "
                               "reference table (md only)."),
) -> None:
    """Build a leaderboard (ranker rows x task columns) from RunRecords.

    A results directory that does not exist, an unknown variant and a malformed RunRecord are
    errors; an empty table never replaces one that has rows."""
    from rbench.api import SCENARIOS
    from rbench.core.atomic import atomic_write_bytes
    from rbench.results import leaderboard

    if scenario not in SCENARIOS:
        from rbench.core.errors import unknown

        raise unknown("scenario", scenario, SCENARIOS)
    render = {"md": lambda lb: leaderboard.to_markdown(lb, paper=paper, results_dir=results_dir),
              "csv": leaderboard.to_csv,
              "json": leaderboard.to_json}
    if fmt not in render:
        from rbench.core.errors import unknown

        raise unknown("format", fmt, render)
    from rbench.public import table
    from rbench.results.outputs import output_file

    lb = table(scenario, results_dir, variant)
    suffix = "" if lb.variant == "original" else f"~{lb.variant}"
    target = output_file(output, f"{scenario}{suffix}.{fmt}", f".{fmt}")
    text = render[fmt](lb).encode()
    if not lb.rows:
        _refuse_emptying(target, text, f"no RunRecords of scenario {scenario!r}"
                         + ("" if lb.variant == "original" else f", variant {lb.variant!r},") + f" under {results_dir}")
    out.print(leaderboard.rich_table(lb))
    out.print(leaderboard.FOOTER, soft_wrap=True)
    budgets = leaderboard.rich_budget_table(lb)
    if budgets is not None:
        out.print(budgets)
    try:
        atomic_write_bytes(target, text)
    except OSError as exc:
        raise RBenchError(f"cannot write {target} ({write_failure(target, exc)})") from exc
    out.print(f"written: {target}")


def _refuse_emptying(target: Path, empty: bytes, why: str) -> None:
    """An empty table never replaces a table that has rows (a mistyped option would wipe it)."""
    try:
        before = target.read_bytes() if target.is_file() else None
    except OSError:
        before = None
    if before is not None and before != empty:
        raise RBenchError(f"{why}: {target} is left as it is (delete it first to write an empty table)")
    warnings.warn(f"{why}: the table is empty", stacklevel=2)


plot_app = typer.Typer(no_args_is_help=True, help="Figures from RunRecords (PNG).")
app.add_typer(plot_app, name="plot")


@plot_app.command("scaling")
def plot_scaling_cmd(
    task: str = typer.Option(..., "--task", "-t"),
    rankers: list[str] = typer.Option(..., "--ranker", "-r", help="One or more rankers."),
    results_dir: Path = typer.Option(DEFAULTS.results_dir, "--results-dir"),
    output: Optional[str] = typer.Option(None, "--output", "-o", help="PNG file (default leaderboards/scaling-<task>.png; "
                                         "a folder: that name inside it; no suffix: .png is added)."),
) -> None:
    """MRR vs candidate-pool size (the paper's scaling figure) from original + scaled:N runs."""
    from rbench.results.outputs import output_file
    from rbench.results.plots import plot_scaling, scaling_points

    target = output_file(output, f"scaling-{task}.png", ".png", suffix_required=True)
    plot_scaling(results_dir, task, rankers, target)
    table = Table(title=f"{task}: MRR vs pool size")
    for col in ("ranker", "pool", "MRR %", "nDCG@10 %"):
        table.add_column(col, justify="right")
    for ranker, rows in scaling_points(results_dir, task, rankers).items():
        for n, rr, nd in rows:
            table.add_row(ranker, f"{n:,}", f"{100 * rr:.2f}", f"{100 * nd:.2f}")
    out.print(table)
    out.print(f"written: {target}")


@plot_app.command("training")
def plot_training_cmd(
    task: str = typer.Option(..., "--task", "-t"),
    rankers: list[str] = typer.Option(..., "--ranker", "-r", help="One or more (trained) rankers."),
    results_dir: Path = typer.Option(DEFAULTS.results_dir, "--results-dir"),
    output: Optional[str] = typer.Option(None, "--output", "-o",
                                         help="PNG file (default leaderboards/training-<task>.png; a folder: that "
                                         "name inside it; no suffix: .png is added)."),
) -> None:
    """Per-epoch training loss and validation MRR (two panels) from the RunRecords' training curves."""
    from rbench.results.outputs import output_file
    from rbench.results.plots import plot_training, training_curves

    target = output_file(output, f"training-{task}.png", ".png", suffix_required=True)
    plot_training(results_dir, task, rankers, target)
    table = Table(title=f"{task}: training curves")
    for col in ("ranker", "epochs", "steps", "last train loss", "best valid MRR %", "at epoch"):
        table.add_column(col, justify="left" if col == "ranker" else "right")
    for label, pts in training_curves(results_dir, task, rankers).items():
        last = pts[-1]
        loss = next((p["train_loss"] for p in reversed(pts) if p["train_loss"] is not None), None)
        scored = [p for p in pts if p["valid_MRR"] is not None]
        best = max(scored, key=lambda p: p["valid_MRR"]) if scored else None
        table.add_row(label, f"{last['epoch']:g}", "–" if last["step"] is None else f"{int(last['step']):,}",
                      "–" if loss is None else f"{loss:.4g}",
                      "–" if best is None else f"{100 * best['valid_MRR']:.2f}",
                      "–" if best is None else f"{best['epoch']:g}")
    out.print(table)
    out.print(f"written: {target}")


@app.command("reproduce")
def reproduce_cmd(
    experiment: Optional[str] = typer.Argument(None, help="Experiment name (see --list)."),
    list_all: bool = typer.Option(False, "--list", help="List the paper's experiments."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan, the data it needs and a cost estimate."),
    profile: str = typer.Option("cpu", "--profile", help="cpu (budgets for two cores) | paper (the paper's settings)"),
    check: bool = typer.Option(False, "--check", help="Grade each cell against the committed expected scores "
                               "(OK / OKish / FAIL; exit 1 on a FAIL)."),
    save_expected: bool = typer.Option(False, "--save-expected", help="Write this run's scores as the expected ones."),
    overwrite: str = typer.Option(DEFAULTS.overwrite, "--overwrite", help="|".join(OVERWRITE) + " (as rbench run)"),
    tasks: list[str] = typer.Option([], "--task", "-t", help="Only this task's cells (repeatable)."),
    rankers: list[str] = typer.Option([], "--ranker", "-r", help="Only this ranker's cells (repeatable)."),
    results_dir: Path = typer.Option(DEFAULTS.results_dir, "--results-dir"),
    output: Path = typer.Option(Path("reproductions"), "--output", "-o", help="Folder for the rendered tables."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """Re-run one of the paper's experiments (what is missing), and show rbench's numbers beside
    the paper's, each cell with its Δ."""
    from rbench.core.atomic import atomic_write_bytes
    from rbench.results import reproduce

    if list_all or experiment is None:
        table = Table(title="The paper's experiments (rbench reproduce NAME)")
        for col in ("name", "paper", "kind", "title", "runs cpu", "runs paper"):
            table.add_column(col)
        for name, r in reproduce.recipes().items():
            table.add_row(name, r.paper, r.kind, r.title, str(len(reproduce.plan(r, "cpu"))),
                          str(len(reproduce.plan(r, "paper"))))
        out.print(table)
        return
    recipe = reproduce.get(experiment)
    from rbench.results.record import require_target

    # a file given as --results-dir would fail every cell, one by one: refused before them
    require_target(results_dir, "--results-dir", folder=True)
    if not dry_run:  # the tables go there after the runs: refused before them
        require_target(output, "--output", folder=True)
    only = reproduce.Selection(tuple(tasks), tuple(rankers))
    planned = reproduce.plan(recipe, profile, only)
    if dry_run:
        rows = reproduce.dry_run(recipe, profile, results_dir, only)
        table = Table(title=f"{recipe.name} ({recipe.paper}), profile {profile}: {len(rows)} runs")
        for col in ("ranker", "task", "variant", "max_queries", "data", "estimate"):
            table.add_column(col, overflow="fold")
        for row in rows:
            table.add_row(*[str(row[c] if row[c] is not None else "all") for c in
                            ("ranker", "task", "variant", "max_queries", "data", "estimate")])
        out.print(table)
        return
    progress, factory = _progress_factory(enabled=not quiet)
    with progress:
        cells = reproduce.run(recipe, profile, results_dir, overwrite=overwrite, progress=factory, only=only)
    rows = reproduce.rows(recipe, cells)
    partial = planned if only.tasks or only.rankers else None
    grades = reproduce.grade(recipe, profile, rows, planned=partial) if check else None
    md = reproduce.to_markdown(recipe, profile, rows, grades)
    target = output / f"{recipe.name}-{profile}.md"
    atomic_write_bytes(target, md.encode())
    figures = []
    if recipe.kind == "figure" and any(r["rbench"] is not None for r in rows):
        from rbench.results.plots import plot_recipe

        figures.append(plot_recipe(f"{recipe.title} ({recipe.paper})", rows, output / f"{recipe.name}-{profile}.png"))
    from rbench.results import report

    page = output / f"{recipe.name}-{profile}.html"
    atomic_write_bytes(page, report.render(recipe.title, f"{recipe.paper} of the LRanker paper; profile {profile}",
                                           recipe.note, rows, figures, grades).encode())
    table = Table(title=f"{recipe.title} ({recipe.paper}, profile {profile})")
    for col in report.header(bool(grades)):
        table.add_column(col, overflow="fold")
    for row in report.cells(rows, grades):
        table.add_row(*row)
    out.print(table)
    out.print(f"written: {target}, {page}" + "".join(f", {f}" for f in figures))
    if save_expected:
        path = Path(str(reproduce.expected_path(recipe, profile)))
        previous = path.read_text(encoding="utf-8") if path.is_file() else None
        atomic_write_bytes(path, reproduce.expected_payload(recipe, profile, rows, previous, partial).encode())
        out.print(f"expected scores written: {path}")
    if grades:
        counts = {g: sum(1 for v in grades.values() if v == g) for g in reproduce.GRADES}
        out.print(" · ".join(f"{g} {n}" for g, n in counts.items()))
        if counts["FAIL"]:
            raise typer.Exit(1)


def _mount_data_app() -> None:
    try:
        from rbench.cli.data import data_app
    except ImportError:
        return
    app.add_typer(data_app, name="data", help="Download, prepare and import task data.")


_mount_data_app()


def _note(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
    """Warnings (e.g. a variant leaving out an unprepared donor task) as one short line."""
    err.print(styled(("note:", "yellow"), f" {message}"), soft_wrap=True, highlight=False)


def _click_kinds() -> dict[str, tuple[type, ...]]:
    """The exception classes of every click the CLI may meet: typer >= 0.2x bundles its own copy
    (``typer._click``), older typer uses the ``click`` package; either may be installed."""
    import importlib

    kinds: dict[str, list[type]] = {"ClickException": [], "NoArgsIsHelpError": [], "Abort": [typer.Abort]}
    for module in ("typer._click.exceptions", "click.exceptions"):
        try:
            mod = importlib.import_module(module)
        except ImportError:
            continue
        for name, found in kinds.items():
            cls = getattr(mod, name, None)
            if isinstance(cls, type) and cls not in found:
                found.append(cls)
    return {name: tuple(found) for name, found in kinds.items()}


def _error_line(message: str) -> None:
    err.print(styled(("error:", "bold red"), f" {message}"), highlight=False, soft_wrap=True)


def _commands(ctx) -> str:  # noqa: ANN001
    names = getattr(ctx.command, "list_commands", lambda _ctx: [])(ctx)
    return f": {', '.join(names)}" if names else ""


def _usage_message(exc: Exception) -> str:
    """A click usage error as one line, with where to find the command's options."""
    message = " ".join(str(exc.format_message()).split())  # type: ignore[attr-defined]
    ctx = getattr(exc, "ctx", None)
    return f"{message} (see {ctx.command_path} --help)" if ctx is not None else message


def main(argv: list[str] | None = None) -> int:
    """Console-script entry: maps errors to exit codes and one clear line."""
    warnings.showwarning = _note
    try:
        code = app(args=argv, prog_name="rbench", standalone_mode=False)
        sys.stdout.flush()  # a closed pipe shows here, not at the interpreter's exit
        if code == 130:  # click turned a KeyboardInterrupt into an abort
            err.print(styled(("interrupted", "yellow"), " (no partial RunRecord was written)"))
        return code if isinstance(code, int) else 0
    except RBenchError as exc:
        _error_line(str(exc))
        return 2
    except KeyboardInterrupt:
        err.print(styled(("interrupted", "yellow"), " (no partial RunRecord was written)"))
        return 130
    except (BrokenPipeError, PipeClosed):  # the reader closed the pipe (`rbench rankers | head`)
        quiet_stdout()
        return 0
    except SystemExit as exc:  # typer/click exits (--help)
        if exc.code == 1 and _stdout_gone():  # click or typer's rich met a closed pipe and exit 1
            quiet_stdout()
            return 0
        return int(exc.code or 0)
    except OSError as exc:
        line = _environment_error(exc)
        if line is None:
            return _internal_error(exc)
        _error_line(line)
        return 2
    except Exception as exc:
        kinds = _click_kinds()
        if isinstance(exc, kinds["NoArgsIsHelpError"]):  # typer printed the help (to stdout) already
            _error_line(f"{exc.ctx.command_path} needs a command{_commands(exc.ctx)} "
                        f"(see {exc.ctx.command_path} --help)")
            return 2
        if isinstance(exc, kinds["ClickException"]):  # a usage error: bad or missing option, unknown command
            _error_line(_usage_message(exc))
            return 2
        if isinstance(exc, kinds["Abort"]):
            if isinstance(exc.__cause__, EOFError):  # click turns any EOFError (a truncated gzip) into Abort
                _error_line(f"input ended early, a file is truncated? ({exc.__cause__ or 'EOFError'})")
                return 2
            err.print(styled(("interrupted", "yellow"), " (no partial RunRecord was written)"))
            return 130
        return _internal_error(exc)


def _internal_error(exc: BaseException) -> int:
    err.print_exception(max_frames=8)
    err.print(styled(("internal error:", "bold red"), f" {type(exc).__name__}: {exc}"), soft_wrap=True)
    return 1


def _environment_error(exc: OSError) -> str | None:
    """One line for what the machine refused (permissions, a read-only or full disk), naming the
    path; None for other OS errors (those are bugs to report, with their traceback)."""
    import errno

    where = exc.filename or "a file"
    if exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", -1)):
        return f"no space left writing {where}: free some space and run again (files written before are intact)"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        from rbench.core import paths

        try:
            home = paths.home()
        except RBenchError as bad_home:  # RBENCH_HOME itself is unusable: that is the line to print
            return str(bad_home)
        hint = (f"; rbench keeps its data in {home}: make it writable or set RBENCH_HOME to a folder that is"
                if str(where).startswith(str(home)) else "")
        return f"cannot write {where} ({exc.strerror}){hint}"
    return None


def _stdout_gone() -> bool:
    """Whether stdout met a closed pipe: click wraps it (``_PacifyFlushWrapper``), rich points its
    descriptor at /dev/null (``Console.on_broken_pipe``)."""
    import os

    if type(sys.stdout).__name__.endswith("PacifyFlushWrapper"):
        return True
    try:
        now, null = os.fstat(sys.stdout.fileno()), os.stat(os.devnull)
    except (OSError, ValueError):
        return False
    return (now.st_dev, now.st_ino) == (null.st_dev, null.st_ino)


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    entry()
