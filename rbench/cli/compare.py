"""``rbench compare``: every pair of runs on one task, tested and corrected (ranx-style table)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from rbench.cli.common import out
from rbench.core.errors import RBenchError, write_failure
from rbench.core.settings import COMPARE_DEFAULTS, DEFAULTS, CompareSettings, help_of


def compare_cmd(
    task: str = typer.Option(..., "--task", "-t", help="The task (its column in `rbench table`: a task name, "
                             "task~variant, or the column's label where the name is ambiguous)."),
    rankers: Optional[list[str]] = typer.Option(None, "--ranker", "-r", help="A row to compare (its label in the "
                                                "table, or a ranker name with one configuration there); repeat. "
                                                "Default: every row of that column."),
    measures: Optional[list[str]] = typer.Option(None, "--measure", "-m", help="A per-query measure (nDCG@10, "
                                                 "MRR, R@10, ...); repeat. Default: nDCG@10 and MRR."),
    test: str = typer.Option("randomization", "--test", help="randomization (paired sign flips) | t (paired "
                             "t-test); both two-sided."),
    correction: str = typer.Option("holm", "--correction", help="holm | bonferroni | none: over the pairs of "
                                   "each measure."),
    alpha: float = typer.Option(COMPARE_DEFAULTS.alpha, "--alpha", help=help_of("alpha", CompareSettings)),
    fmt: str = typer.Option("rich", "--format", "-f", help="rich | md | csv | latex"),
    out_file: Optional[str] = typer.Option(None, "--out", "-o", help="File to write instead of printing the tables "
                                           "(only its path is printed); no suffix: the format's is added (.txt, .md, "
                                           ".csv, .tex)."),
    results_dir: Path = typer.Option(DEFAULTS.results_dir, "--results-dir", help="Folder of the RunRecords."),
    scenario: Optional[str] = typer.Option(None, "--scenario", "-s", help="small | large | ultra (default: the "
                                           "one whose records hold the task)."),
    variant: Optional[str] = typer.Option(None, "--variant", help="The pool variant's table (as `rbench table "
                                          "--variant`); default original."),
    n_resamples: int = typer.Option(COMPARE_DEFAULTS.resamples, "--resamples",
                                    help=help_of("resamples", CompareSettings)),
    seed: int = typer.Option(COMPARE_DEFAULTS.seed, "--seed", help=help_of("seed", CompareSettings)),
) -> None:
    """Test every pair of runs on one task: per measure, a paired test over the same queries,
    p-values corrected for the number of pairs, mean differences with 95% CIs and Cohen's d_z.
    Each ranker gets a letter; a value carries the letters of the rankers it beats significantly.
    A measure a run did not record is computed from its run file and the task's qrels (exact
    cutoffs only)."""
    from rbench.core.atomic import atomic_write_bytes
    from rbench.core.errors import unknown
    from rbench.public import compare
    from rbench.results.compare import FORMATS
    from rbench.results.outputs import output_file

    if fmt not in FORMATS:
        raise unknown("format", fmt, FORMATS)
    CompareSettings(seed=seed, resamples=n_resamples, alpha=alpha)  # each range declared once, checked here
    target = output_file(out_file, f"compare.{FORMATS[fmt][1:]}", FORMATS[fmt], "--out") if out_file else None
    result = compare(task, rankers or None, results_dir=results_dir, scenario=scenario, variant=variant,
                     measures=measures or None, test=test, correction=correction, alpha=alpha,
                     n_resamples=n_resamples, seed=seed)
    if target is None:
        if fmt == "rich":
            for part in result.rich_tables():
                out.print(part)
        else:
            print(result.render(fmt), end="")
        return
    try:
        atomic_write_bytes(target, result.render(fmt).encode())
    except OSError as exc:
        raise RBenchError(f"cannot write {target} ({write_failure(target, exc)})") from exc
    out.print(f"written: {target}", soft_wrap=True, highlight=False)  # the tables are in the file, not repeated here
