"""``rbench reproduce``: re-run one of the paper's experiments and grade it."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from rbench.cli.common import out, progress_factory
from rbench.core.settings import DEFAULTS, OVERWRITE


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
    from rbench.audit import reproduce
    from rbench.core.atomic import atomic_write_bytes

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
    progress, factory = progress_factory(enabled=not quiet)
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

