"""``rbench data``: download, prepare, import and list task data.

- ``download TASK`` fetches the task's public files (``rbench.tasks.sources.downloads``: sha256-checked where a
  checksum is published, resumable) into ``RBENCH_HOME/downloads/<task>/`` and installs them into
  ``raw_dir(task)`` (archives extracted, other files hard-linked).
- ``prepare TASK [--from PATH]`` loads the task once through the registry, which writes the
  prepared cache (``rbench.tasks.store``), and prints its sizes beside the paper's. With ``--from``, the
  raw folder is first replaced by links to PATH (a file, or every non-hidden entry of a folder):
  symbolic links when the system allows them (no copy of large files; PATH must stay where it
  is, and a change to its files re-prepares), a copy otherwise (e.g. Windows without the symlink
  privilege). Files in the raw folder that came from ``download`` are replaced too; the download
  cache keeps them.
- ``import NAME`` registers a bring-your-own BEIR-layout task (``rbench.tasks.families.imported``):
  a BEIR folder (``--beir``), an ``ir_datasets`` id (``--ir-datasets``), an MTEB-style Hugging Face
  dataset (``--hf``; ``rbench.tasks.sources.from_ir_datasets`` / ``.from_hf``), or three files.
- ``list`` shows every task's raw, download and prepared state.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import typer
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    SpinnerColumn,
    TimeElapsedColumn,
    TransferSpeedColumn,
)
from rich.table import Table

from rbench.api import TaskSpec
from rbench.cli.common import bytes_text, count_text
from rbench.cli.listing import tasks_cmd
from rbench.core import paths
from rbench.core.atomic import remove_path, remove_stale, scratch_dir, swap_in
from rbench.core.console import console, description_column, styled
from rbench.core.errors import DataError, RBenchError
from rbench.core.inputs import read_json
from rbench.tasks.sources.provenance import from_source, write_provenance
from rbench.tasks.sources.provenance import source_name as check_source_name
from rbench.tasks.sources.transfer import DownloadLimits

data_app = typer.Typer(no_args_is_help=True, help="Download, prepare and import task data.")
out, err = console(), console(stderr=True)  # user text printed as it is (rbench.core.console)

TASK_PREFIX = "task."


# --------------------------------------------------------------------------------------------
# download
# --------------------------------------------------------------------------------------------


@data_app.command("download")
def download_cmd(
    task: Optional[str] = typer.Argument(None, help="Task name (see `rbench tasks`); or --all."),
    all_tasks: bool = typer.Option(False, "--all", help="Every task with a public download, one progress display; "
                                   "the total size is shown before it starts."),
    force: bool = typer.Option(False, "--force", help="Discard cached downloads and fetch again."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
    deadline_s: float = typer.Option(DownloadLimits.deadline_s, "--deadline-s",
                                     help="The most seconds one file's transfer may take (it resumes next time)."),
    stall_s: float = typer.Option(DownloadLimits.stall_s, "--stall-s",
                                  help="Cut a transfer after this many seconds without a byte."),
    max_gb: float = typer.Option(DownloadLimits.max_bytes / (1 << 30), "--max-gb",
                                 help="The most GiB one file may hold (a file of declared size: that size)."),
) -> None:
    """Fetch a task's public files (checksummed, resumable) and install them into its raw folder."""
    from rbench.api import RemoteFile
    from rbench.tasks.registry import get_task, list_tasks
    from rbench.tasks.sources import downloads, install, transfer

    if (task is None) == (not all_tasks):
        raise RBenchError("rbench data download: name one TASK or pass --all (not both)")
    if not (math.isfinite(max_gb) and 0 < max_gb <= 1 << 20):
        raise RBenchError(f"--max-gb {max_gb!r}: expected a finite number of GiB above 0 (at most {1 << 20:,})")
    limits = DownloadLimits(deadline_s, stall_s, max(int(max_gb * (1 << 30)), 1))
    specs = [spec for spec in list_tasks() if spec.downloads] if all_tasks else [get_task(task or "")]
    if not all_tasks:
        downloads.remote_files(specs[0])  # a task without a public URL: say how to get it, before anything
    progress = Progress(description_column(), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                        TimeElapsedColumn(), console=err, disable=quiet)
    overall = None
    if all_tasks:  # sizes (HEAD requests) only for --all: one task's bars show their own sizes
        planned = downloads.plan_downloads(specs)
        to_fetch = [p for p in planned if force or not p.cached]
        _print_download_plan(planned, to_fetch)
        known = sum(p.size or 0 for p in to_fetch)
        overall = progress.add_task(f"all: {len(to_fetch)} files", total=known or None)

    def bar(rf: RemoteFile) -> transfer.Progress:
        tid = progress.add_task(rf.filename, total=rf.size)
        seen = [0]  # bytes of this file already added to the overall bar

        def update(done: int, total: int | None) -> None:
            progress.update(tid, completed=done, total=total)
            if overall is not None:
                progress.advance(overall, done - seen[0])
                seen[0] = done

        return update

    failed: list[str] = []
    with progress:
        for spec in specs:
            try:
                raw = install.download_task(spec, force=force, progress=bar, limits=limits)
            except RBenchError as exc:
                if not all_tasks:
                    raise
                failed.append(f"{spec.name}: {exc}")
                continue
            _print_downloaded(spec, raw)
    for line in failed:
        err.print(styled(("failed", "red"), f" {line}"), soft_wrap=True, highlight=False)
    if failed:
        raise typer.Exit(2)


def _print_download_plan(planned: list[Any], fetch: list[Any]) -> None:
    """What ``--all`` will fetch, with sizes, and the total, before the first byte."""
    table = Table(title="rbench data download --all")
    for col in ("task", "file", "size", "state"):
        table.add_column(col, justify="right" if col == "size" else "left")
    for p in planned:
        state = "to fetch" if p in fetch else "cached (checked, not fetched)"
        table.add_row(p.task, p.file.filename, bytes_text(p.size) if p.size is not None else "unknown", state)
    out.print(table)
    unknown = sum(p.size is None for p in fetch)
    total = bytes_text(sum(p.size or 0 for p in fetch))
    out.print(f"to fetch: {len(fetch)} of {len(planned)} files, {total}"
              + (f" + {unknown} of unknown size" if unknown else ""), highlight=False)


def _print_downloaded(spec: TaskSpec, raw: Path) -> None:
    from rbench.tasks.sources.downloads import downloads_dir

    manifest_path = downloads_dir(spec.name) / "manifest.json"
    try:
        manifest = read_json(manifest_path) if manifest_path.exists() else {}
    except DataError:  # the download itself has said so (rbench.tasks.sources.downloads); the sizes are not shown
        manifest = {}
    manifest = manifest if isinstance(manifest, dict) else {}
    for rf in spec.downloads:
        m = manifest.get(rf.filename, {})
        pin = "checked" if rf.sha256 else "none published; the first one seen is recorded and must hold"
        out.print(f"{rf.filename}: {bytes_text(m.get('size', 0))}, sha256 {m.get('sha256', '?')} ({pin})",
                  soft_wrap=True, highlight=False)
    out.print(f"installed into {raw}", soft_wrap=True, highlight=False)
    out.print(f"next: rbench data prepare {spec.name}", highlight=False)


# --------------------------------------------------------------------------------------------
# prepare
# --------------------------------------------------------------------------------------------


def _within(path: Path, root: Path) -> bool:
    p, r = os.path.realpath(path), os.path.realpath(root)
    return p == r or p.startswith(r + os.sep)


@contextlib.contextmanager
def linked_from(source: Path, raw: Path, spec: TaskSpec | None = None,
                name: str | None = None) -> Iterator[tuple[str, list[str]]]:
    """Replace ``raw``'s contents by links to ``source`` (see module doc) for the block; yields
    (how, names). The previous raw folder is kept aside until the block succeeds (the task was
    prepared from the new files) and put back when it fails, so a bad ``--from`` never breaks a
    task that worked."""
    source = Path(source).expanduser()
    if not source.exists():
        raise RBenchError(f"--from {source}: no such file or folder")
    source = source.resolve()
    if _within(source, raw) or _within(raw, source):
        raise RBenchError(f"--from {source}: overlaps the task's raw folder {raw}")
    entries = [source] if source.is_file() else sorted(p for p in source.iterdir() if not p.name.startswith("."))
    if not entries:
        raise RBenchError(f"--from {source}: the folder is empty")
    raw.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(raw.parent)
    how = "symlinked"
    with scratch_dir(raw, "from.") as tmp:
        staged = tmp / raw.name  # made by mkdir (umask mode), not the scratch folder's 0700
        staged.mkdir()
        for entry in entries:
            try:
                os.symlink(entry, staged / entry.name, target_is_directory=entry.is_dir())
            except OSError:
                how = "copied"
                if entry.is_dir():
                    shutil.copytree(entry, staged / entry.name)
                else:
                    shutil.copy2(entry, staged / entry.name)
        if spec is not None:
            write_provenance(staged, from_source(spec, entries, name))
        old = swap_in(staged, raw)
    try:
        yield how, [e.name for e in entries]
    except BaseException:
        # the previous folder back, the new one dropped (a folder of links: remove_path unlinks
        # a raw folder that is itself a link and removes links inside, never their targets)
        new = swap_in(old, raw) if old is not None else raw
        if new is not None:
            remove_path(new)
        raise
    if old is not None:
        remove_path(old)


def _task_sets(items: Optional[list[str]]) -> dict[str, str]:
    from rbench.core.config import parse_assignments

    sets = parse_assignments(items)
    bad = [k for k in sets if not k.startswith(TASK_PREFIX)]
    if bad:
        raise RBenchError(f"--set {bad[0]}: prepare takes task options only, as task.key=value "
                          f"(e.g. --set task.n_queries=1000)")
    return {k[len(TASK_PREFIX):]: v for k, v in sets.items()}


def size_rows(data: Any) -> list[tuple[str, Any, Any]]:
    """(what, prepared, paper) rows for the sizes table."""
    spec = data.spec
    n_queries = len(data.train) + len(data.valid) + len(data.test)
    rows: list[tuple[str, Any, Any]] = []
    if data.test.candidates is not None:
        rows.append(("candidates per query", int(data.test.candidates.shape[1]), spec.paper_candidates))
        rows.append(("pool (distinct candidates)", len(data.pool), None))
    else:
        rows.append(("pool (candidates)", len(data.pool), spec.paper_candidates))
    rows.append(("queries (train+valid+test)", n_queries, spec.paper_queries))
    for split in ("train", "valid", "test"):
        rows.append((f"  {split}", len(getattr(data, split)), None))
    return rows


@data_app.command("prepare")
def prepare_cmd(
    task: str = typer.Argument(..., help="Task name (see `rbench tasks`)."),
    from_path: Optional[Path] = typer.Option(None, "--from", help="File or folder holding the task's raw files."),
    name: Optional[str] = typer.Option(None, "--source-name", help="What the --from files are (e.g. 'Last.fm "
                                       "(hetrec2011)'): tables name it beside the task, as for any data that is "
                                       "not the task's own source."),
    sets: Optional[list[str]] = typer.Option(None, "--set", help="Task option as task.key=value (repeatable)."),
    seed: int = typer.Option(0, "--seed", help="Seed for sampling and splits."),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON."),
) -> None:
    """Load a task once (filling the prepared cache) and show its sizes beside the paper's."""
    from rbench.tasks import store
    from rbench.tasks.registry import load, resolve

    resolved = resolve(task)
    spec = resolved.spec
    source_name = check_source_name(name) if name is not None else None
    if source_name is not None and from_path is None:
        raise RBenchError("--source-name names the files of --from: give --from DIR too")
    overrides = _task_sets(sets)
    options = resolved.options(overrides)  # a bad option fails before anything is linked or loaded
    if from_path is not None:
        if not resolved.family.links_from:
            how = f"re-import it with rbench data import {task} ..." if resolved.family.name == "imported" else \
                "it reads data shipped inside an installed package"
            raise RBenchError(f"task {task!r}: --from does not apply ({how})")
    before = {m.get("key") for m in store.entries(task)}
    with contextlib.ExitStack() as stack:
        if from_path is not None:
            how, names = stack.enter_context(linked_from(from_path, paths.raw_dir(task), spec, source_name))
            if not as_json:
                out.print(f"{how} {', '.join(names)} into {paths.raw_dir(task)}", soft_wrap=True, highlight=False)
        with Progress(SpinnerColumn(), description_column(), TimeElapsedColumn(), console=err,
                      transient=True, disable=as_json) as progress:
            progress.add_task(f"preparing {task}", total=None)
            data = load(resolved, options, seed=seed)
    newest = store.prepared_sizes(spec)
    cached = newest is not None and newest.get("key") in before
    rows = size_rows(data)
    if as_json:
        print(json.dumps({"task": task, "seed": seed, "options": overrides, "cache_hit": cached,
                          "prepared": newest.get("folder") if newest else None,
                          "sizes": {w.strip(): {"prepared": p, "paper": q} for w, p, q in rows}}, indent=2))
        return
    table = Table(title=f"{task}: prepared vs paper (seed {seed})")
    for col in ("", "prepared", "paper"):
        table.add_column(col, justify="left" if not col else "right")
    for what, prepared, paper in rows:
        table.add_row(what, count_text(prepared), count_text(paper))
    out.print(table)
    if spec.embedded or newest is None:
        out.print("not cached (loads directly)" if spec.embedded else "not cached", highlight=False)
    else:
        state = "already prepared (nothing to do)" if cached else "prepared"
        out.print(f"{state}: {newest['folder']}", soft_wrap=True, highlight=False)


# --------------------------------------------------------------------------------------------
# import
# --------------------------------------------------------------------------------------------


@data_app.command("import")
def import_cmd(
    name: str = typer.Argument(..., help="Name of the new task (lowercase, digits, . _ -)."),
    beir: Optional[Path] = typer.Option(None, "--beir", help="A BEIR folder: corpus.jsonl, queries.jsonl, "
                                        "qrels/{train,dev,test}.tsv (splits from the qrels files; test only: zero-shot)."),
    ir_datasets_id: Optional[str] = typer.Option(None, "--ir-datasets", help="An ir_datasets id (docs, queries, "
                                                 "qrels; its own download and cache): pip install 'rbench[ir-datasets]'."),
    hf: Optional[str] = typer.Option(None, "--hf", help="REPO[:CONFIG]: an MTEB-style retrieval dataset (corpus, "
                                     "queries and qrels/default configs) through Hugging Face datasets: "
                                     "pip install 'rbench[hf]'."),
    corpus: Optional[Path] = typer.Option(None, "--corpus", help="corpus.jsonl[.gz] ({_id, title?, text})."),
    queries: Optional[Path] = typer.Option(None, "--queries", help="queries.jsonl[.gz] ({_id, text, split?})."),
    qrels: Optional[Path] = typer.Option(None, "--qrels", help="qrels.tsv[.gz] (query-id, corpus-id, score)."),
    candidates: Optional[Path] = typer.Option(None, "--candidates", help="candidates.jsonl (small scenario)."),
    scenario: str = typer.Option("large", "--scenario", help="small | large | ultra"),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing import of the same name."),
) -> None:
    """Import a bring-your-own task in the BEIR layout (validated completely before copying): a
    BEIR folder, an ir_datasets id, a Hugging Face dataset, or three files."""
    from rbench.tasks.families import imported
    from rbench.tasks.registry import BUILTIN
    from rbench.tasks.sources import from_hf, from_ir_datasets

    files = {"--corpus": corpus, "--queries": queries, "--qrels": qrels}
    given = [flag for flag, v in (("--beir", beir), ("--ir-datasets", ir_datasets_id), ("--hf", hf)) if v is not None]
    if any(v is not None for v in files.values()):
        given.append("--corpus/--queries/--qrels")
    if len(given) != 1:
        raise RBenchError("rbench data import: give one source: --beir DIR, --ir-datasets ID, --hf REPO[:CONFIG], "
                          "or --corpus, --queries and --qrels" + (f" (got {', '.join(given)})" if given else ""))
    lacking = [flag for flag, v in files.items() if v is None]
    if given[0].startswith("--corpus") and lacking:
        raise RBenchError(f"rbench data import: {', '.join(lacking)} missing (the three files go together; "
                          "or --beir DIR for a BEIR folder)")
    reserved = set(BUILTIN)
    with Progress(SpinnerColumn(), description_column(), TimeElapsedColumn(), console=err,
                  transient=True) as progress:
        progress.add_task(f"validating and importing {name}", total=None)
        if beir is not None:
            target = imported.import_beir_folder(name, beir, scenario, candidates, overwrite=overwrite,
                                                 reserved=reserved)
        elif ir_datasets_id is not None or hf is not None:
            imported.check_import(name, scenario, candidates, overwrite, reserved)  # before any download
            root = imported.imported_root()
            remove_stale(root)
            with scratch_dir(root / name, "fetch.") as tmp:
                if ir_datasets_id is not None:
                    flag = from_ir_datasets.ir_datasets_folder(ir_datasets_id, tmp)
                    origin = f"ir_datasets:{ir_datasets_id}"
                else:
                    flag = from_hf.hf_folder(hf or "", tmp)
                    origin = f"hf:{hf}"
                target = imported.import_beir_folder(name, tmp, scenario, candidates, origin=origin, how_flag=flag,
                                                     overwrite=overwrite, reserved=reserved, move=True)
        else:
            assert corpus is not None and queries is not None and qrels is not None
            target = imported.import_task(name, corpus, queries, qrels, scenario, candidates, overwrite=overwrite,
                                          reserved=reserved)
    meta = read_json(target / "task.json", "a task.json")
    meta = meta if isinstance(meta, dict) else {}
    counts = meta.get("counts", {})
    out.print(f"imported {name!r} into {target}: " + ", ".join(f"{k} {v:,}" for k, v in counts.items()),
              soft_wrap=True, highlight=False)
    splits = meta.get("splits")
    if isinstance(splits, dict) and not splits.get("train"):
        out.print(f"splits: test {splits.get('test', 0):,} only: evaluated zero-shot (rankers that train are "
                  f"refused; --variant from-TASK fits them on another task)", highlight=False)
    elif isinstance(splits, dict):
        out.print("splits: " + ", ".join(f"{k} {splits.get(k, 0):,}" for k in ("train", "valid", "test")),
                  highlight=False)
    else:
        out.print("split: 8:1:1 seeded by query (no split field); --set task.split=test evaluates every query",
                  highlight=False)
    out.print(f"next: rbench data prepare {name}   or   rbench run --task {name} --ranker bm25", highlight=False)


# --------------------------------------------------------------------------------------------
# list
# --------------------------------------------------------------------------------------------


# ``rbench data list`` is ``rbench tasks`` (one listing of the tasks and the state of their data)
data_app.command("list", help="Every task with its raw data, downloads and prepared cache (as `rbench tasks`).")(tasks_cmd)


# --------------------------------------------------------------------------------------------
# qrels
# --------------------------------------------------------------------------------------------


def qrels_text(queries: Any, pool_ids: Any) -> str:
    """A split's relevance judgements in TREC format, ``qid 0 docid grade`` per positive (grades
    written as integers where they are whole, as trec_eval and ir_measures read them). An id such
    a line cannot hold (whitespace: a task imported before ids were checked) is a DataError."""
    import numpy as np

    from rbench.engine.runfile import check_trec_ids

    qids = np.asarray(queries.ids).astype(str)
    docs = np.asarray(pool_ids)[np.asarray(queries.positives.values, dtype=np.int64)].astype(str)
    check_trec_ids(qids.tolist(), "query")
    check_trec_ids(docs.tolist(), "document")
    rows = queries.positives.row_ids()
    grades = np.asarray(queries.grades.values, dtype=np.float64)
    fractional = np.flatnonzero(grades != np.round(grades))
    if len(fractional):  # trec_eval and ir_measures read integer grades: such a file would crash them
        from rbench.tasks.building import GRADE_RULE

        i = int(fractional[0])
        raise DataError(f"query {qids[rows[i]]!r} holds the fractional grade {grades[i]!r} (an import older than "
                        f"this rule: {GRADE_RULE}); re-import the task")
    return "".join(f"{qids[i]} 0 {d} {int(g)}\n" for i, d, g in zip(rows.tolist(), docs.tolist(), grades.tolist()))


@data_app.command("qrels")
def qrels_cmd(
    task: str = typer.Argument(..., help="Task name (see `rbench tasks`)."),
    split: str = typer.Option("test", "--split", help="train | valid | test"),
    variant: str = typer.Option("original", "--variant", help="original | mixed | shift | scaled:N | from-TASK (its pool's ids)"),
    output: Optional[str] = typer.Option(None, "--output", "-o", help="Write here (.gz: gzipped); default stdout. "
                                         "A folder (existing, or ending in /): <task>[~variant].<split>.qrels.txt "
                                         "inside it; no suffix: .txt is added. The path written is printed."),
    sets: Optional[list[str]] = typer.Option(None, "--set", help="Task option as task.key=value (repeatable)."),
    seed: int = typer.Option(0, "--seed", help="Seed for sampling, splits and variants (as `rbench run`)."),
) -> None:
    """Write a task's qrels in TREC format (``qid 0 docid grade``), to score run files with
    ir_measures, ranx or trec_eval: ``ir_measures qrels.txt RUN.run.gz nDCG@10``."""
    import gzip
    import io

    from rbench.core.atomic import atomic_write_bytes
    from rbench.run.runner import apply_variant
    from rbench.tasks.pools import parse_variant
    from rbench.tasks.registry import load, resolve

    if split not in ("train", "valid", "test"):
        raise RBenchError(f"--split must be train, valid or test, not {split!r}")
    target = None
    if output is not None:  # before the task is loaded
        from rbench.results.outputs import output_file

        shown = "" if variant == "original" else f"~{variant.replace(':', '-')}"
        target = output_file(output, f"{task}{shown}.{split}.qrels.txt", ".txt")
    resolved = resolve(task)
    options = resolved.options(_task_sets(sets))
    v = parse_variant(variant)
    data = apply_variant(load(resolved, options, seed=seed), v, seed)
    pool = data.pool if split == "test" else data.fit_pool  # a variant replaces the test pool only
    text = qrels_text(getattr(data, split), pool.ids)
    if target is None:
        sys.stdout.write(text)
        return
    raw = text.encode()
    if target.name.endswith(".gz"):
        buf = io.BytesIO()
        with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, filename="") as gz:
            gz.write(raw)
        raw = buf.getvalue()
    atomic_write_bytes(target, raw)
    err.print(f"{len(getattr(data, split)):,} queries' qrels written to {target}", soft_wrap=True, highlight=False)
