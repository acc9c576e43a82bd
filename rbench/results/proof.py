"""Records that prove themselves: the cheap check of a RunRecord against its own files.

Why: a record's ``metrics`` are what tables show, and anyone can edit a JSON file. Its
per-query file (named by content hash, ``per_query_sha256`` in the record) holds every query's
values, and its run file (``run_sha256``) the ranking they came from. Where the record's numbers
disagree with its files, a table shows the row marked (``DISAGREES``) with the reason in a note,
never as a silent number: ``rbench table``, ``rbench compare``, ``rbench.load_results`` and the
leaderboards all read this check.

What is checked here, without loading the task (so it runs on every table): the per-query file
is there, is the one the record names (sha256), and the mean of each of its measure columns is
the record's metric within ``TOLERANCE``; the run file, where the record names one, is there and
is the one it names (sha256). That the run file ranks what the per-query file says, against the
task's qrels, is ``rbench verify``'s part (``rbench.audit.verify``): it needs the task loaded.

``TOLERANCE`` (absolute, 1e-9): a record's metric is the float64 mean of its per-query values,
and the per-query file holds each value rounded to 1e-10 (``record.per_query_table``); the mean
of the rounded values differs by at most 5e-11, and summing in another order adds about
n * 1e-16 (1e-11 for 100,000 queries). Anything past 1e-9 was not made by the arithmetic; a
table shows two decimals of a percentage (1e-4).
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from rbench.core.errors import DataError
from rbench.core.hashing import file_sha256
from rbench.core.inputs import require_regular
from rbench.results.record import RunRecord, read_per_query

if TYPE_CHECKING:
    import pandas as pd

TOLERANCE = 1e-9
DISAGREES = "‼"  # the mark of a row whose record disagrees with its own files
NOTE = f"`{DISAGREES}`: the record's metrics disagree with its own files (per-query values, sha256)"


def number(v: float) -> str:
    """A metric in a note: six decimals, ``n/a`` for NaN (as tables show it)."""
    return "n/a" if math.isnan(v) else f"{v:.6f}"


def _sha256(path: Path) -> str:
    """A file's sha256, streamed (a regular file only: ``DataError`` otherwise, never a FIFO's hang)."""
    return file_sha256(require_regular(path))


def per_query_frame(record_file: Path, record: RunRecord) -> tuple[pd.DataFrame | None, str]:
    """The record's per-query frame through the one reader (``record.read_per_query``, sha256
    checked), and why there is none ("" when there is one, or when the record names no file)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        frame = read_per_query(record_file, record)
    if frame is None and record.per_query_file:  # the reader's note, said by the caller (a table's ‼ note)
        pq = Path(record_file).with_name(record.per_query_file)
        why = str(caught[0].message).split(": its run gets", 1)[0] if caught else f"{pq} cannot be read"
        return None, f"per-query file {why.replace(str(pq), pq.name, 1)}"
    return frame, ""


def metric_problems(record: RunRecord, frame: pd.DataFrame) -> list[str]:
    """Each metric of the record whose per-query column's mean is not its value (NaN only
    matches NaN); metrics without a column (none today) are left to ``rbench verify``."""
    out = []
    for name, stored in record.metrics.items():
        if name not in frame.columns:
            continue
        mean = float(frame[name].to_numpy(dtype=float).mean()) if len(frame) else 0.0  # a NaN value stays NaN
        if math.isnan(mean) and math.isnan(float(stored)):
            continue
        if not abs(mean - float(stored)) <= TOLERANCE:  # NaN on one side only: a disagreement
            out.append(f"{name}: record {number(float(stored))}, per-query file {number(mean)}")
    if len(frame) != record.n_queries:
        out.append(f"n_queries: record {record.n_queries:,}, per-query file {len(frame):,} rows")
    return out


def file_problems(record_file: Path, record: RunRecord) -> list[str]:
    """Where record ``record_file`` disagrees with its own files ([] when it does not): no
    per-query file, one that is missing or not the one it names, means that are not its metrics,
    a run file missing or not the one it names."""
    record_file = Path(record_file)
    if not record.per_query_file:
        problems = ["names no per-query file: its metrics cannot be checked"]
    else:
        frame, why = per_query_frame(record_file, record)
        problems = [why] if frame is None else metric_problems(record, frame)
    if record.run_file:
        run = record_file.with_name(record.run_file)
        try:
            digest = _sha256(run)
        except DataError as exc:
            problems.append(f"run file {run.name} cannot be read ({exc.reason})")
        else:
            if record.run_sha256 and digest != record.run_sha256:
                problems.append(f"run file {run.name} is not the file the record was written with (its sha256 differs)")
    return problems
