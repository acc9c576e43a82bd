"""``rbench run``: plan and execute runs, print each RunRecord's summary."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from rbench.cli.common import out, progress_factory
from rbench.core.settings import DEFAULTS, help_of


def run_cmd(
    rankers: list[str] = typer.Option(..., "--ranker", "-r", help="Ranker name (see `rbench rankers`), or "
                                      "path/file.py:Class / module:Class, or run:PATH (an existing TREC run "
                                      "file scored as a row; candidates it does not list rank last, "
                                      "pessimistically); repeat for several."),
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
    scan: str = typer.Option(DEFAULTS.scan, "--scan", help=help_of("scan")),
    scan_precision: str = typer.Option(DEFAULTS.scan_precision, "--scan-precision", help=help_of("scan_precision")),
    rerank_from: Optional[str] = typer.Option(None, "--rerank-from", help="Two-stage run: rerank the top of this "
                                              "first-stage ranker (or run:PATH.run.gz, a TREC run file) with "
                                              "--ranker; metrics stay exact over the whole pool."),
    rerank_depth: Optional[str] = typer.Option(None, "--rerank-depth", help="How many first-stage candidates per "
                                               "query --ranker rescores (default 100), or 'all' (exhaustive)."),
    force: bool = typer.Option(False, "--force", help="Run an exhaustive rerank (--rerank-depth all) above the "
                               "pair budget."),
    topk: int = typer.Option(DEFAULTS.topk, "--topk", help=help_of("topk")),
    measures: Optional[list[str]] = typer.Option(None, "--measure", "-m", help=help_of("measures")),
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
    from rbench.run.plan import World
    from rbench.run.runner import execute

    # every plan is made (names, options, files checked) before the first run starts; the same
    # functions as rbench.evaluate (one road)
    options = parse_assignments(sets)
    plans = [plan_run(r, t, variant=variant, options=options, seed=seed, max_queries=max_queries,
                      results_dir=None if no_write else results_dir, batch_size=batch_size, chunk_size=chunk_size,
                      ann=ann, ray_shards=ray_shards, scan=scan, scan_precision=scan_precision, topk=topk, rerank_from=rerank_from, rerank_depth=rerank_depth,
                      force=force, overwrite=overwrite, measures=measures or ())
             for r in rankers for t in tasks for variant in variants]
    main_process = World.from_env().main
    done = []
    for plan in plans:
        progress, factory = progress_factory(enabled=not quiet and not as_json and main_process)
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
        if "first_stage_metrics" in rr:  # stage 1 alone on the same queries, and the paired test
            vs = rr["vs_first_stage"]
            out.print("stage 1 alone on these queries: " + " · ".join(
                f"{'MRR' if m == 'RR' else m} {100 * rr['first_stage_metrics'][m]:.2f} "
                f"(rerank {100 * vs[m]['delta']:+.2f}, p={vs[m]['p']:.3g})" for m in ("nDCG@10", "RR") if m in vs))
    from rbench.results.ranking_checks import flag

    if why := flag(rec.ranker_info):  # a ranker that did not rank (docs: generative rankers)
        warnings.warn(f"{rec.label} on {rec.column}: {'; and '.join(why)}; `rbench table` marks this row", stacklevel=2)
    if outcome.path is not None:
        out.print(f"RunRecord: {outcome.path}")

