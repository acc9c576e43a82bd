"""Which runs ``rbench compare`` compares: the rows of one leaderboard column, read per query.

Why through the leaderboard: ``rbench compare --task T`` must compare exactly the runs that
``rbench table`` shows in T's column (the newest record of each ranker configuration, on one
test set and one version of the data, under this evaluation protocol), named as the table names
them. Every way the input can be wrong (an unknown task or ranker, a task that names several
columns, a run without a usable per-query file) is one line naming what was expected.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rbench.core.errors import RBenchError, unknown
from rbench.core.protocol import PROTOCOL_VERSION
from rbench.results.leaderboard import Leaderboard, build
from rbench.results.proof import DISAGREES
from rbench.results.record import ColumnKey, RowKey, read_per_query, require_results_dir

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class Selection:
    """The chosen runs of one column: row label -> per-query frame (in table order)."""

    scenario: str
    task: str  # the column's label, as the table names it
    runs: dict[str, pd.DataFrame]
    notes: list[str] = field(default_factory=list)


def _columns(lb: Leaderboard, task: str) -> list[ColumnKey]:
    """The columns ``task`` names: by the table's label first, then by task (and variant) name."""
    exact = [t for t in lb.tasks if task in (lb.label(t), t.label)]
    return exact or [t for t in lb.tasks if task in (t.task_key, t.task)]


def find_column(results_dir: Path, task: str, scenario: str | None = None,
                variant: str | None = None) -> tuple[Leaderboard, ColumnKey]:
    """The leaderboard and column of ``task`` (a task name, ``task~variant`` or a column label);
    the scenario is found when not given, and must then be the only one holding the task."""
    from rbench.api import SCENARIOS

    require_results_dir(results_dir)
    if scenario is not None and scenario not in SCENARIOS:
        raise unknown("scenario", scenario, SCENARIOS)
    if variant is None and "~" in task:  # ml-100k~mixed: the variant's table
        variant = task.split("~", 1)[1].split(" ", 1)[0]
    found: list[tuple[Leaderboard, ColumnKey]] = []
    known: set[str] = set()
    for scn in [scenario] if scenario else SCENARIOS:
        lb = build(results_dir, scn, variant)
        known.update(lb.label(t) for t in lb.tasks)
        found += [(lb, t) for t in _columns(lb, task)]
    if not found:
        if not known:
            where = f"scenario {scenario!r} of {results_dir}" if scenario else str(results_dir)
            raise RBenchError(f"no RunRecords in {where}" + (f" for variant {variant!r}" if variant else "")
                              + f": expected runs of {task!r}")
        raise unknown("task", task, known)
    if len(found) > 1:
        names = "; ".join(f"{lb.scenario}: {lb.label(t)}" for lb, t in found)
        raise RBenchError(f"task {task!r} names {len(found)} columns ({names}): expected one; give its label "
                          "as --task" + ("" if scenario else " or --scenario"))
    return found[0]


def _rows(lb: Leaderboard, column: ColumnKey, rankers: Sequence[str] | None) -> tuple[list[RowKey], list[str]]:
    """The rows to compare (table order) and notes on the rows left out."""
    present = [r for r in lb.rows if (r, column) in lb.cells]
    old = {r for r in present if (r, column) in lb.other_protocol()}
    if not rankers:
        notes = [f"left out (computed under another evaluation protocol than {PROTOCOL_VERSION}): "
                 + ", ".join(lb.label(r) for r in present if r in old)] if old else []
        return [r for r in present if r not in old], notes
    chosen: list[RowKey] = []
    for name in rankers:
        by_label = [r for r in present if lb.label(r) == name]
        matches = by_label or [r for r in present if r.ranker == name]
        if not matches:
            raise unknown(f"ranker on {lb.label(column)}", name, [lb.label(r) for r in present])
        if len(matches) > 1:
            raise RBenchError(f"ranker {name!r} has {len(matches)} configurations on {lb.label(column)} ("
                              + "; ".join(lb.label(r) for r in matches) + "): expected one; give its label")
        row = matches[0]
        if row in old:
            raise RBenchError(f"{lb.label(row)} on {lb.label(column)} was computed under evaluation protocol "
                              f"{lb.records[(row, column)].protocol}, not {PROTOCOL_VERSION}: expected runs of "
                              "one protocol (re-run it)")
        if row not in chosen:
            chosen.append(row)
    return chosen, []


def per_query(lb: Leaderboard, row: RowKey, column: ColumnKey) -> pd.DataFrame:
    """A cell's per-query frame (sha256-checked by ``read_per_query``); a missing or unusable
    file is an error here (a comparison without it would be no comparison)."""
    name = f"{lb.label(row)} on {lb.label(column)}"
    record, path = lb.records[(row, column)], lb.record_files[(row, column)]
    if not record.per_query_file:
        raise RBenchError(f"{name}: its RunRecord {path} names no per-query file; expected one (re-run it)")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        frame = read_per_query(path, record)
    if frame is None:
        why = str(caught[0].message).split(": its run gets", 1)[0] if caught else "cannot be read"
        raise RBenchError(f"{name}: per-query file {why}; expected the file its RunRecord names (re-run it)")
    return frame


def select(results_dir: str | Path, task: str, rankers: Sequence[str] | None = None, *, scenario: str | None = None,
           variant: str | None = None, measures: Sequence[str] = ()) -> Selection:
    """The runs of ``task``'s column to compare: ``rankers`` (row labels, or ranker names with one
    configuration there) or every row of this protocol; at least two. A measure of ``measures``
    that a run did not record is computed from its run file and the test set's qrels
    (``from_run_file``), as ranx computes any measure from a run and qrels."""
    lb, column = find_column(Path(results_dir), task, scenario, variant)
    rows, notes = _rows(lb, column, rankers)
    notes += [f"{DISAGREES} {lb.label(r)}: its RunRecord disagrees with its own files ({lb.disproved[(r, column)]}); "
              "compared here by its per-query values" for r in rows if (r, column) in lb.disproved]
    if len(rows) < 2:
        raise RBenchError(f"{lb.label(column)}: {len(rows)} run{'s' * (len(rows) != 1)} to compare; expected at "
                          "least two")
    runs = {lb.label(r): per_query(lb, r, column) for r in rows}
    for name in measures:
        col = _measure_name(name)
        if col is None:
            continue  # not a measure rbench computes: the measure check names it
        missing = [r for r in rows if col not in runs[lb.label(r)].columns]
        for r in missing:
            runs[lb.label(r)] = from_run_file(lb, r, column, col, runs[lb.label(r)])
        if missing:
            notes.append(f"{col}: not recorded by {', '.join(lb.label(r) for r in missing)}; computed from "
                         f"{'its' if len(missing) == 1 else 'their'} run file{'s' * (len(missing) > 1)} and the test "
                         "set's qrels")
    return Selection(lb.scenario, lb.label(column), runs, notes)


def _measure_name(name: str) -> str | None:
    """A measure's per-query column name (its canonical spelling), None for a name rbench does not parse."""
    from rbench.core.measures import parse_measure

    try:
        return str(parse_measure(name))
    except RBenchError:
        return None


def from_run_file(lb: Leaderboard, row: RowKey, column: ColumnKey, measure: str,
                  frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with a column of ``measure`` per query, computed from the cell's run file and the
    test set's qrels (loaded as the run loaded them; ``rbench.readback.run_ranks``), by the one
    arithmetic of measures. Exact only: every query's value must follow from the file (its list
    complete, or at least as deep as the measure's cutoff; RR: a positive listed), else the
    line says which cutoff the file can settle."""
    import numpy as np

    from rbench.api import Ragged
    from rbench.core.errors import DataError
    from rbench.core.measures import parse_measure
    from rbench.engine.metrics import per_query as measure_per_query
    from rbench.readback.run_ranks import BEYOND, file_ranks, load_test_set

    name = f"{lb.label(row)} on {lb.label(column)}"
    record, path = lb.records[(row, column)], lb.record_files[(row, column)]
    if not record.run_file:
        raise RBenchError(f"{name}: its RunRecord holds no {measure} and no run file to compute it from (--topk 0); "
                          f"expected a run with --measure {measure}")
    try:
        data = load_test_set(record)
    except RBenchError as exc:
        raise RBenchError(f"{name}: {measure} was not recorded and the test set's qrels to compute it from are not "
                          f"here ({' '.join(str(exc).split())}); expected the task's data, or a run with --measure "
                          f"{measure}") from exc
    if record.task_fingerprint and data.fingerprint != record.task_fingerprint:
        raise RBenchError(f"{name}: the task's data here (fingerprint {data.fingerprint[:12]}) is not the record's "
                          f"({record.task_fingerprint[:12]}): {measure} cannot be computed from its run file")
    try:
        fr = file_ranks(path.with_name(record.run_file), data)
    except DataError as exc:
        raise RBenchError(f"{name}: run file {exc.reason}") from exc
    m = parse_measure(measure)
    test = data.test
    listed = fr.ranks > 0
    values = measure_per_query(Ragged(test.positives.offsets, np.where(listed, fr.ranks, BEYOND)), test.grades,
                               [m])[measure]
    settled = fr.complete | ((fr.lines >= m.cutoff) if m.cutoff is not None else False)
    if m.name == "RR" and m.cutoff is None:  # the first positive listed: its rank is exact
        settled = settled | np.bincount(test.positives.row_ids()[listed], minlength=len(test)).astype(bool)
    if not settled.all():
        depth = int(fr.lines[~settled].min())
        raise RBenchError(f"{name}: {measure} needs ranks past its run file's {depth} lines for "
                          f"{int((~settled).sum()):,} queries; expected a cutoff of at most {depth} "
                          f"(e.g. {m.name}@{depth}) or a run with --measure {measure}")
    by_id = dict(zip(np.asarray(test.ids).astype(str).tolist(), values.tolist()))
    ids = frame["query_id"].astype(str)
    if set(ids) != set(by_id):
        raise RBenchError(f"{name}: its per-query file's queries are not its test set's ({len(ids):,} rows, "
                          f"{len(by_id):,} test queries)")
    return frame.assign(**{measure: ids.map(by_id).to_numpy(dtype=float)})
