"""``rbench table`` and ``rbench plot``: leaderboards and figures from RunRecords."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from rbench.cli.common import out, refuse_emptying
from rbench.core.errors import RBenchError, write_failure
from rbench.core.settings import DEFAULTS


def table_cmd(
    scenario: str = typer.Option(..., "--scenario", "-s", help="small | large | ultra"),
    variant: Optional[str] = typer.Option(None, "--variant", help="original (default), mixed, shift, scaled"),
    results_dir: Path = typer.Option(DEFAULTS.results_dir, "--results-dir", help="Folder of the RunRecords to read "
                                     "(the Markdown footer names it)."),
    fmt: str = typer.Option("md", "--format", "-f", help="md | csv | json (written to --output)"),
    output: Optional[str] = typer.Option(None, "--output", "-o",
                                         help="File to write; default leaderboards/<scenario>[~variant].<fmt> in the "
                                         "current folder (where a checkout of rbench keeps its committed tables), "
                                         "not beside --results-dir. A folder (existing, or ending in /): that name "
                                         "inside it; no suffix: .<fmt> is added. The path written is printed. "
                                         "'-': the table in --format to stdout, no file (as ranx prints a report)."),
    paper: bool = typer.Option(False, "--paper", help="Append the paper's own numbers as a separate, labelled "
                               "reference table (md only)."),
    measures: Optional[list[str]] = typer.Option(None, "--measure", "-m", help="Also show this measure's column "
                                                 "(ir_measures' syntax, e.g. R@100, AP@100; repeat for several); "
                                                 "a run whose RunRecord lacks it shows n/r, with a note."),
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
    import warnings

    from rbench.public import table
    from rbench.results.outputs import output_file
    from rbench.results.proof import DISAGREES

    lb = table(scenario, results_dir, variant, measures or ())
    if output == "-":  # the table itself, for a pipe or a notebook cell: nothing else on stdout, no file
        sys.stdout.write(render[fmt](lb))
        return
    suffix = "" if lb.variant == "original" else f"~{lb.variant}"
    target = output_file(output, f"{scenario}{suffix}.{fmt}", f".{fmt}")
    text = render[fmt](lb).encode()
    if not lb.rows:
        refuse_emptying(target, text, f"no RunRecords of scenario {scenario!r}"
                         + ("" if lb.variant == "original" else f", variant {lb.variant!r},") + f" under {results_dir}")
    out.print(leaderboard.rich_table(lb))
    out.print(leaderboard.FOOTER, soft_wrap=True)
    if leaderboard.unrecorded_note(lb):
        out.print(leaderboard.unrecorded_note(lb), soft_wrap=True)
    for (r, t), why in lb.disproved.items():  # the rows whose record disagrees with its files: a note each
        warnings.warn(f"{DISAGREES} {lb.label(r)} on {lb.label(t)}: {why}: not compared (no bold, * or ▽, "
                      "no significance test; rbench verify recomputes it)", stacklevel=1)
    budgets = leaderboard.rich_budget_table(lb)
    if budgets is not None:
        out.print(budgets)
    try:
        atomic_write_bytes(target, text)
    except OSError as exc:
        raise RBenchError(f"cannot write {target} ({write_failure(target, exc)})") from exc
    out.print(f"written: {target}" + (f" (the default --output: leaderboards/ in {Path.cwd()}; -o FILE or -o - "
                                      "for stdout)" if output is None else ""), soft_wrap=True, highlight=False)


plot_app = typer.Typer(no_args_is_help=True, help="Figures from RunRecords (PNG).")


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

