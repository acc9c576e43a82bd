"""rbench from Python: evaluate a ranker in a notebook, results as DataFrames.

Why a face of its own: the CLI is one caller of these functions, a notebook another, and both
must give the same RunRecord for the same run, so ``rbench run`` and ``rbench table`` are thin
layers over ``evaluate`` and ``table`` here (one road). Everything below is typed and stable;
``rbench/__init__.py`` re-exports exactly the names in ``__all__``.

Imports of the machinery happen inside the functions, so that ``import rbench`` stays light.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rbench.core.settings import (  # light: the run settings' defaults, declared once
    DEFAULT_SEED,
    DEFAULTS,
    CompareSettings,
)

if TYPE_CHECKING:
    import pandas as pd

    from rbench.api import TaskData
    from rbench.results.compare import Comparison
    from rbench.results.leaderboard import Leaderboard
    from rbench.results.record import RunRecord
    from rbench.run.plan import RunPlan
    from rbench.run.runner import RunOutcome

__all__ = ["evaluate", "evaluate_many", "plan_run", "run_outcome", "list_rankers", "list_tasks", "load_results", "load_task", "table",
           "compare"]

Progress = Callable[[str, "int | None"], Callable[[int], None]]


def _sets(options: Mapping[str, Any] | None, task_options: Mapping[str, Any] | None) -> dict[str, str]:
    """Ranker options and task options as the ``--set`` strings the runner parses (one parser)."""
    out = {str(k): _text(v) for k, v in (options or {}).items()}
    out.update({f"task.{k}": _text(v) for k, v in (task_options or {}).items()})
    return out


def _text(value: Any) -> str:
    """A typed option value as the ``--set`` text that parses back to it: booleans as true/false,
    None as none, a list or tuple comma-joined (as a record's config holds them: ``rbench verify
    --rerun`` hands a record's options back here)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, (list, tuple)):
        return ",".join(_text(v) for v in value)
    return str(value)


def plan_run(ranker: Any, task: Any, *, variant: str = "original", options: Mapping[str, Any] | None = None,
             task_options: Mapping[str, Any] | None = None, max_queries: int | None = None, seed: int = DEFAULTS.seed,
             results_dir: str | Path | None = None, rerank_from: str | None = None,
             rerank_depth: int | str | None = None, force: bool = False, topk: int = DEFAULTS.topk,
             overwrite: str = DEFAULTS.overwrite, batch_size: int = DEFAULTS.batch_size,
             chunk_size: int = DEFAULTS.chunk_size,
             ann: str | None = None, ray_shards: int | None = None, scan: str = DEFAULTS.scan,
             scan_precision: str = DEFAULTS.scan_precision, measures: Iterable[str] = DEFAULTS.measures) -> RunPlan:
    """Resolve one run (ranker, task, options, variant) into the runner's plan: every name,
    option and file is checked here, before any data is loaded. ``options`` may hold
    ``task.KEY`` and ``first.KEY`` keys, as ``--set`` does; ``results_dir=None`` writes nothing.
    ``measures``: more measures by name (``--measure``), computed beside the defaults.
    ``ranker="run:PATH"``: an existing TREC run file scored as a row (``rbench.engine.runfile_ranker``)."""
    from rbench.engine.runfile_ranker import RUN_RANKER_PREFIX, run_file_ranker
    from rbench.run.plan import RunOptions
    from rbench.run.runner import make_plan

    if isinstance(ranker, str) and ranker.startswith(RUN_RANKER_PREFIX):  # an existing TREC run file as a row
        ranker = run_file_ranker(ranker)
    return make_plan(RunOptions(
        ranker=ranker, task=task, variant=variant, sets=_sets(options, task_options), seed=seed,
        max_queries=max_queries, results_dir=Path(results_dir) if results_dir is not None else DEFAULTS.results_dir,
        write=results_dir is not None, batch_size=batch_size, chunk_size=chunk_size, topk=topk, ann=ann,
        ray_shards=ray_shards, scan=scan, scan_precision=scan_precision, rerank_from=rerank_from, rerank_depth=rerank_depth, force=force,
        overwrite=overwrite, measures=tuple(measures) if not isinstance(measures, str) else (measures,)))


def run_outcome(ranker: Any, task: Any, *, progress: Progress | None = None, **kwargs: Any) -> RunOutcome:
    """``evaluate`` with the runner's whole outcome (record, path, engine result, skip note)."""
    from rbench.run.runner import execute

    plan = plan_run(ranker, task, **kwargs)
    outcome = execute(plan, progress) if progress is not None else execute(plan)
    if outcome is None:  # only under torchrun/accelerate, on processes other than 0
        raise RuntimeError("this process of a launched run only fits; process 0 holds the result")
    return outcome


def evaluate(ranker: Any, task: Any, *, variant: str = "original", options: Mapping[str, Any] | None = None,
             task_options: Mapping[str, Any] | None = None, max_queries: int | None = None, seed: int = DEFAULTS.seed,
             results_dir: str | Path | None = None, rerank_from: str | None = None,
             rerank_depth: int | str | None = None, force: bool = False, topk: int = DEFAULTS.topk,
             overwrite: str = DEFAULTS.overwrite, scan: str = DEFAULTS.scan,
             scan_precision: str = DEFAULTS.scan_precision, measures: Iterable[str] = DEFAULTS.measures) -> RunRecord:
    """Evaluate one ranker on one task; the RunRecord (metrics, timings, effective config), with
    its per-query metrics as a DataFrame in ``record.per_query``.

    ``ranker``: a registered name (``"bm25"``), ``"path/to/file.py:Class"`` / ``"module:Class"``,
    a ranker class, or an object that follows the contract (``score(queries, candidates)`` or
    ``encode_pool``/``encode_queries``; see docs/guides/write-a-ranker.md) — no packaging
    needed. ``options``: the ranker's options (``--set``), ``task_options`` the task's. ``task``: a
    task name or a ``load_task(...)`` result's ``spec`` (anything else is refused in one line). A RunRecord is written only when
    ``results_dir`` is given; then ``overwrite`` (only-missing | always | never) decides whether an
    existing record of the same run is kept (``record.per_query`` is then read from its file).
    ``scan="cuda"`` scans an embedding ranker's scores with torch on a GPU (``"torch"``: on the
    CPU, the GPU path's twin; ``scan_precision`` fp32 | tf32 | bf16; docs/guides/gpu.md).
    ``measures``: more measures in ir_measures' syntax (``["P@5", "AP(rel=2)@100"]``), stored in
    ``record.metrics`` beside the paper's defaults (docs/reference/measures.md); a kept record that
    lacks one is run again (``overwrite="only-missing"``)."""
    from rbench.results.record import read_per_query

    out = run_outcome(ranker, task, variant=variant, options=options, task_options=task_options,
                      max_queries=max_queries, seed=seed, results_dir=results_dir, rerank_from=rerank_from,
                      rerank_depth=rerank_depth, force=force, topk=topk, overwrite=overwrite, scan=scan,
                      scan_precision=scan_precision, measures=measures)
    rec = out.record
    if out.skipped:  # say so, as the CLI does: the numbers come from an earlier run
        import warnings

        warnings.warn(f"rbench: kept the existing RunRecord {out.path} ({out.skipped}); "
                      "overwrite='always' runs it again", stacklevel=2)
    if rec.per_query is None and out.path is not None:  # a record kept as it was: read its file
        rec.per_query = read_per_query(out.path, rec)
    return rec


def evaluate_many(rankers: Iterable[Any], tasks: Iterable[Any], *, results_dir: str | Path | None = "results",
                  overwrite: str = DEFAULTS.overwrite, **kwargs: Any) -> list[RunRecord]:
    """Every ranker on every task (rankers outer): one ``evaluate`` each, so the same kind of
    object comes back (a ``RunRecord`` per run, in that order, with ``per_query``), the same
    ``overwrite`` rule applies (a kept record is said in a warning) and RunRecords are written to
    ``results_dir`` (``None``: none). ``kwargs`` are ``evaluate``'s options, applied to every run.
    ``run_outcome`` gives the runner's whole outcome of one run (path, engine result, skip note)."""
    return [evaluate(r, t, results_dir=results_dir, overwrite=overwrite, **kwargs)
            for r in list(rankers) for t in list(tasks)]


def load_task(name: str, seed: int = DEFAULT_SEED, **options: Any) -> TaskData:
    """A task's data (pool, train/valid/test queries) with task options as keyword arguments:
    ``load_task("ml-100k", history_len=10)``."""
    from rbench.tasks.registry import load, resolve

    task = resolve(name)
    return load(task, task.options({k: _text(v) for k, v in options.items()}), seed=seed)


def list_tasks() -> list[str]:
    """Task names in the paper's order (``rbench tasks`` shows sizes and whether data is present)."""
    from rbench.tasks.registry import list_tasks as specs

    return [spec.name for spec in specs()]


def list_rankers() -> list[str]:
    """Installed ranker plugins (entry points of the ``rbench.rankers`` group)."""
    from rbench.rankers import available_rankers

    return available_rankers()


RESULT_COLUMNS = ("scenario", "task", "variant", "column", "ranker", "label", "config_hash", "measure", "value",
                  "n_queries", "seed", "task_fingerprint", "rbench_version", "protocol", "created", "path", "disagrees")


def load_results(results_dir: str | Path = "results", scenario: str | None = None, task: str | None = None,
                 ranker: str | None = None, variant: str | None = None, per_query: bool = False) -> pd.DataFrame:
    """Every RunRecord under ``results_dir`` as a long DataFrame: one row per (record, measure),
    with the fields tables key on (``RESULT_COLUMNS``). Filters match exactly; ``variant`` by the
    recorded label (``original``, ``mixed``, ``scaled:1000``, ...).

    ``per_query=True``: the per-query values instead, wide: one row per (record, query) with
    ``PER_QUERY_KEYS`` (the record's keys, ``query_id`` as text) then one column per measure, read
    from each record's per-query file (its sha256 checked); a record without a usable file is
    left out with a warning naming the file.

    ``disagrees``: "" for a record whose metrics match its own files (``rbench.results.proof``:
    per-query file sha256 and means, run file sha256), else why not; such a record is also
    named in a warning, so its numbers are never taken silently."""
    import warnings

    import pandas as pd

    from rbench.api import SCENARIOS
    from rbench.core.errors import RBenchError, unknown
    from rbench.results.proof import DISAGREES, file_problems
    from rbench.results.record import load_records, require_results_dir

    if scenario is not None and scenario not in SCENARIOS:  # it names a folder under results_dir
        raise unknown("scenario", scenario, SCENARIOS)
    if task is not None and ("/" in task or "\\" in task):
        raise RBenchError(f"task {task!r}: expected a task name such as 'ml-100k' (no '/' or '\\')")
    rows = []
    frames = []
    for path, rec in load_records(require_results_dir(Path(results_dir)), scenario):
        if (task and rec.task != task) or (ranker and rec.ranker.get("name") != ranker) \
                or (variant and (rec.variant or "original") != variant):
            continue
        if per_query:
            frames.append(_per_query_rows(path, rec))
            continue
        disagrees = "; ".join(file_problems(path, rec))
        if disagrees:
            warnings.warn(f"{DISAGREES} {path}: the record disagrees with its own files ({disagrees})", stacklevel=2)
        for measure, value in rec.metrics.items():
            rows.append({"scenario": rec.scenario, "task": rec.task, "variant": rec.variant or "original",
                         "column": rec.column, "ranker": rec.ranker.get("name"), "label": rec.label,
                         "config_hash": rec.config_hash, "measure": measure, "value": value,
                         "n_queries": rec.n_queries, "seed": rec.seed, "task_fingerprint": rec.task_fingerprint,
                         "rbench_version": rec.rbench_version, "protocol": rec.protocol, "created": rec.created,
                         "path": str(path), "disagrees": disagrees})
    if per_query:
        found = [f for f in frames if f is not None]
        return pd.concat(found, ignore_index=True) if found else pd.DataFrame(columns=list(PER_QUERY_KEYS))
    return pd.DataFrame(rows, columns=list(RESULT_COLUMNS))


PER_QUERY_KEYS = ("scenario", "task", "variant", "column", "ranker", "label", "config_hash", "path", "query_id")


def _per_query_rows(path: Path, rec: RunRecord) -> pd.DataFrame | None:
    """One record's per-query frame with its keys in front (``PER_QUERY_KEYS``); None (and the
    reader's warning) when its file is missing, corrupt or not the one it was written with."""
    from rbench.results.record import read_per_query

    frame = read_per_query(path, rec)
    if frame is None:
        return None
    keys = {"scenario": rec.scenario, "task": rec.task, "variant": rec.variant or "original", "column": rec.column,
            "ranker": rec.ranker.get("name"), "label": rec.label, "config_hash": rec.config_hash, "path": str(path)}
    measures = frame.drop(columns=["query_id"])
    return measures.assign(**keys, query_id=frame["query_id"].astype(str))[
        [*PER_QUERY_KEYS, *measures.columns]]


def table(scenario: str, results_dir: str | Path = "results", variant: str | None = None,
          measures: Iterable[str] = ()) -> Leaderboard:
    """The leaderboard of one scenario (rows: rankers with their options; columns: tasks), with
    significance marks, floors and budgets; ``.frame()`` gives it as a DataFrame,
    ``rbench.results.leaderboard.to_markdown`` / ``to_csv`` render it (what ``rbench table`` writes).
    ``measures``: more measures shown beside nDCG@10 and MRR (``rbench table --measure``); a
    record that lacks one shows ``n/r`` there, with a note."""
    from rbench.api import SCENARIOS
    from rbench.core.errors import unknown
    from rbench.results import leaderboard

    if scenario not in SCENARIOS:
        raise unknown("scenario", scenario, SCENARIOS)
    return leaderboard.build(Path(results_dir), scenario, variant,
                             (measures,) if isinstance(measures, str) else tuple(measures))


def compare(task: str, rankers: Iterable[str] | None = None, *, results_dir: str | Path = "results",
            scenario: str | None = None, variant: str | None = None, measures: Iterable[str] | None = None,
            test: str = "randomization", correction: str = "holm", alpha: float = 0.05, n_resamples: int = 10000,
            seed: int = DEFAULT_SEED) -> Comparison:
    """Every pair of runs on ``task``'s column of the leaderboard (the rows ``rbench table``
    shows there; ``rankers``: some of them, by label or by ranker name), tested per measure
    (``test``: "randomization" or "t", two-sided, paired on the same queries) with p-values
    corrected over each measure's pairs (``correction``: "holm", "bonferroni" or "none"), with
    mean differences, paired-t 95% CIs and Cohen's d_z. ``measures``: per-query column names
    (``MRR`` means ``RR``; default nDCG@10 and MRR). The result renders as ``.to_markdown()``,
    ``.to_csv()``, ``.to_latex()`` and ``.rich_tables()``; ``.pairs_frame()`` is a DataFrame."""
    from rbench.readback.compare_runs import select
    from rbench.results.compare import (
        DEFAULT_MEASURES,
        NOT_MEASURES,
        check_options,
        compare_frames,
        measure_column,
    )

    CompareSettings(seed=seed, resamples=n_resamples, alpha=alpha)  # ranges declared once (--seed -1, 10**12 flips)
    check_options(test, correction, alpha)
    if isinstance(rankers, str):  # one name, not its letters
        rankers = [rankers]
    if isinstance(measures, str):
        measures = [measures]
    chosen = select(results_dir, task, list(rankers) if rankers is not None else None, scenario=scenario,
                    variant=variant, measures=list(measures or DEFAULT_MEASURES))
    available = list(dict.fromkeys(c for f in chosen.runs.values() for c in f.columns if c not in NOT_MEASURES))
    wanted = [measure_column(m, available) for m in (measures or DEFAULT_MEASURES)]
    result = compare_frames(chosen.runs, wanted, task=chosen.task, test=test, correction=correction, alpha=alpha,
                            n_resamples=n_resamples, seed=seed)
    result.notes += chosen.notes
    return result
