"""``rbench verify``: recompute a RunRecord's metrics from its run file and the task's qrels.

Why: a table shows what a record says; a record proves itself only if its numbers follow from
what it ranked. ``rbench.results.proof`` checks a record against its own files (cheap, on every
table); this module goes one step further and reads the test set's qrels: the task is loaded as
the run loaded it (task name, non-default options, variant, test-query sample, seed; its data
fingerprint must be the record's), each query's run-file lines are read by the one reader of run
files (``rbench.engine.runfile.read_run``) and ordered as the tools read them (score descending;
a tie, which rbench's own files never hold, broken pessimistically as the engine does), each
positive's rank is its line, and every metric is recomputed by the one arithmetic of measures
(``rbench.engine.metrics.per_query``), per query, against the per-query file and, as a mean,
against the record (``proof.TOLERANCE``, 1e-9: float sums; why there).

What a run file of depth k can prove: a measure with cutoff c <= k exactly, for every query (a
query whose list is shorter than k lists all its candidates, so every measure is exact there).
``RR`` has no cutoff: exact for a query whose file lists a positive; for one that lists none,
the run file proves only that RR < 1/(k+1), which is checked, and the per-query value is used
in the mean. ``<metric>-dropped`` (a two-stage run's BEIR-style values) is the measure with
ranks past the rerank depth D dropped: checked where min(c, D) <= k. Where a measure cannot be
checked for some queries (a cutoff past the file's depth, a no-cutoff measure other than RR),
the line says how many queries were left to the per-query file.

``--rerun``: the ranker is run again (``rbench.public.run_outcome``, nothing written) with the
record's ranker, options, task, variant, sample and seed, and its metrics compared with the
record's within the same tolerance. Skipped where a rerun cannot give the same bits: a ranker
that declares ``score_tolerance > 0`` (fp32 kernels), a record made on a GPU, a ranker object
or class handed in from Python (nothing to rebuild it from), a stage 1 read from a run file. A
ranker whose source has changed since the record (``source_sha256``) is rerun, and a difference
is then said, not counted as a mismatch.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rbench.api import Ragged, TaskData
from rbench.core.errors import DataError, RBenchError
from rbench.readback.run_ranks import BEYOND, FileRanks, file_ranks, load_test_set
from rbench.results.proof import TOLERANCE, file_problems, per_query_frame
from rbench.results.record import RECORD_SUFFIX, RunRecord, read_record

OK, MISMATCH, SKIP = "OK", "MISMATCH", "SKIP"


@dataclass
class Verdict:
    """One record's outcome: OK, MISMATCH (``problems`` say which metric, stored vs recomputed)
    or SKIP (``note`` says why it could not be checked); ``note`` also says what was left to the
    per-query file."""

    path: Path
    status: str
    problems: list[str] = field(default_factory=list)
    note: str = ""

    def line(self) -> str:
        tail = "; ".join(self.problems) if self.problems else self.note
        return f"{self.status} {self.path}" + (f": {tail}" if tail else "")


def record_files(paths: list[Path]) -> list[Path]:
    """Every RunRecord under ``paths`` (a record file, or a folder searched recursively, hidden
    files left out); a path that does not exist or a file that is not ``*.json`` is bad input."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(f for f in p.rglob(f"*{RECORD_SUFFIX}") if not f.name.startswith("."))
        elif p.is_file() and p.name.endswith(RECORD_SUFFIX):
            out.append(p)
        elif p.exists():
            raise RBenchError(f"{p}: expected a RunRecord ({RECORD_SUFFIX}) or a folder of them")
        else:
            raise RBenchError(f"{p} does not exist: expected a RunRecord or a folder of them")
    return out


def _recompute(record: RunRecord, fr: FileRanks, data: TaskData, frame: Any) -> tuple[list[str], list[str]]:
    """(problems, notes) of each metric recomputed from the run file (module doc)."""
    from rbench.core.measures import parse_measure
    from rbench.engine.metrics import per_query

    test = data.test
    problems, notes = [], []
    ids = np.asarray(test.ids).astype(str)
    stored_pq = None
    if frame is not None:
        frame = frame.assign(query_id=frame["query_id"].astype(str)).set_index("query_id")
        if set(frame.index) != set(ids) or len(frame) != len(ids):
            return [f"the per-query file's queries are not the test set's ({len(frame):,} rows, "
                    f"{len(ids):,} test queries)"], []
        stored_pq = frame.loc[ids]
    rows = test.positives.row_ids()
    listed = fr.ranks > 0
    has_listed = np.zeros(len(test), dtype=bool)
    has_listed[rows[listed]] = True
    depth = record.rerank.get("depth") if isinstance(record.rerank, dict) else None
    for name, stored in record.metrics.items():
        base, dropped = (name[: -len("-dropped")], True) if name.endswith("-dropped") else (name, False)
        try:
            m = parse_measure(base)
        except RBenchError:
            notes.append(f"{name}: not a measure rbench computes, left unchecked")
            continue
        cut = m.cutoff
        drop_at = depth if dropped and isinstance(depth, int) else None
        eff = min(c for c in (cut, drop_at) if c is not None) if (cut is not None or drop_at is not None) else None
        r = np.where(listed, fr.ranks, BEYOND)
        if drop_at is not None:
            r = np.where(r > drop_at, BEYOND, r)
        values = per_query(Ragged(test.positives.offsets, r), test.grades, [base])[str(m)]
        checkable = fr.complete | ((fr.lines >= eff) if eff is not None else False)
        bounded = np.zeros(len(test), dtype=bool)
        if m.name == "RR" and eff is None:  # the first positive listed: its rank is exact
            checkable = checkable | has_listed
            bounded = ~checkable
        pq = None if stored_pq is None or name not in stored_pq.columns else stored_pq[name].to_numpy(dtype=float)
        if pq is not None:
            bad = checkable & ~(np.abs(values - pq) <= TOLERANCE)
            over = bounded & ~(pq <= 1.0 / (fr.lines + 1.0) + TOLERANCE)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                problems.append(f"{name}: {int(bad.sum()):,} queries' per-query values differ from the run file's "
                                f"(query {ids[i]}: stored {pq[i]:.6f}, recomputed {values[i]:.6f})")
            if over.any():
                i = int(np.flatnonzero(over)[0])
                problems.append(f"{name}: {int(over.sum()):,} queries' per-query values exceed what their run file "
                                f"allows (query {ids[i]}: stored {pq[i]:.6f}, but no positive in its "
                                f"{int(fr.lines[i])} lines: at most {1.0 / (fr.lines[i] + 1):.6f})")
            mean = float(np.where(checkable, values, pq).mean()) if len(values) else 0.0
        elif checkable.all():
            mean = float(values.mean()) if len(values) else 0.0
        else:
            notes.append(f"{name}: unchecked (no per-query file for the queries the run file cannot settle)")
            continue
        left = int((~checkable).sum())
        if left:
            notes.append(f"{name}: {left:,} of {len(values):,} queries from the per-query file"
                         + (" (bounded by the run file)" if bounded.any() else ""))
        s = float(stored)
        if not (abs(mean - s) <= TOLERANCE or (math.isnan(mean) and math.isnan(s))):
            problems.append(f"{name}: stored {s:.6f}, recomputed {mean:.6f}")
    return problems, notes


def verify_record(path: Path, rerun: bool = False) -> Verdict:
    """One record: its files (``proof``), its metrics from the run file and qrels, and (``rerun``)
    from a new run. A record that cannot be read is a ``DataError`` (bad input)."""
    path = Path(path)
    record = read_record(path)
    problems = file_problems(path, record)
    notes: list[str] = []
    try:
        data = load_test_set(record)
    except RBenchError as exc:
        return Verdict(path, MISMATCH if problems else SKIP, problems,
                       f"task not loaded here ({' '.join(str(exc).split())[:160]})")
    if record.task_fingerprint and data.fingerprint != record.task_fingerprint:
        return Verdict(path, MISMATCH if problems else SKIP, problems,
                       f"the task's data here (fingerprint {data.fingerprint[:12]}) is not the record's "
                       f"({record.task_fingerprint[:12]}): nothing to recompute against")
    frame, _ = per_query_frame(path, record)
    if not record.run_file:
        notes.append("no run file (--topk 0): checked against its per-query file only")
    else:
        try:
            fr = file_ranks(path.with_name(record.run_file), data)
        except DataError as exc:
            problems.append(f"run file: {exc.reason}")
        else:
            found, left = _recompute(record, fr, data, frame)
            problems += found
            notes += left
    if rerun and not problems:
        status, why = rerun_check(record, data)
        if status == MISMATCH:
            problems.append(why)
        else:
            notes.append(why)
    return Verdict(path, MISMATCH if problems else OK, problems, "; ".join(notes))


def _rerun_spec(record: RunRecord) -> tuple[str | None, str]:
    """The ranker spec a rerun builds (None and why not, where it cannot be rebuilt)."""
    from rbench.core.hashing import file_sha256

    name, source = str(record.ranker["name"]), str(record.ranker.get("source") or "")
    if name == "run":
        cfg = record.ranker.get("config") or {}
        f = Path(str(cfg.get("file", "")))
        if not f.is_file() or file_sha256(f) != cfg.get("sha256"):
            return None, f"rerun skipped: the run file {f} is not here as recorded"
        return f"run:{f}", ""
    if not source:
        return name, ""
    kind, _, rest = source.partition(":")
    if kind in ("file", "module"):
        return rest, ""
    return None, f"rerun skipped: the ranker was handed in from Python ({source}); nothing to rebuild it from"


def rerun_check(record: RunRecord, data: TaskData) -> tuple[str, str]:
    """(status, why) of running the record's ranker again (module doc)."""
    from rbench.core.hashing import source_digest
    from rbench.public import run_outcome
    from rbench.rankers import resolve_ranker

    spec, why = _rerun_spec(record)
    if spec is None:
        return SKIP, why
    if (record.machine or {}).get("device") == "cuda":
        return SKIP, "rerun skipped: made on a GPU (its kernels are not bit-reproducible here)"
    diff = record.run_options.get("non_default") or {}
    rr = diff.get("rerank") or {}
    if "run_sha256" in rr:
        return SKIP, "rerun skipped: stage 1 was a run file"
    changed = False  # the ranker's source differs from the record's: a difference is then no proof of forgery
    if not spec.startswith("run:"):
        cls = resolve_ranker(spec).cls
        if float(getattr(cls, "score_tolerance", 0.0) or 0.0) > 0:
            return SKIP, "rerun skipped: the ranker's scores are not bit-reproducible (score_tolerance > 0)"
        changed = bool(record.ranker.get("source_sha256")) and source_digest(cls) != record.ranker["source_sha256"]
    options = dict(diff.get("ranker") or {}) if not spec.startswith("run:") else {}
    options.update({f"first.{k}": v for k, v in (rr.get("first_config") or {}).items()})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = run_outcome(spec, record.task, variant=record.variant or "original", options=options,
                          task_options=diff.get("task") or None, max_queries=record.run_options.get("max_queries"),
                          seed=record.seed, results_dir=None, rerank_from=rr.get("from"),
                          rerank_depth=rr.get("depth"),
                          measures=tuple(m for m in record.metrics if not m.endswith("-dropped")))
    if out.record.task_fingerprint != data.fingerprint:
        return SKIP, "rerun skipped: the rerun loaded other data"
    bad = [f"{m}: stored {float(v):.6f}, rerun {out.record.metrics.get(m, float('nan')):.6f}"
           for m, v in record.metrics.items()
           if not abs(float(out.record.metrics.get(m, float("nan"))) - float(v)) <= TOLERANCE]
    if bad and changed:
        return SKIP, "rerun differs, but the ranker's source has changed since the record: " + "; ".join(bad)
    if bad:
        return MISMATCH, "rerun: " + "; ".join(bad)
    return OK, "rerun agrees" + (" (the ranker's source has changed since the record)" if changed else "")
