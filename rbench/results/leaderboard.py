"""Leaderboards built only from RunRecords: ranker rows x task columns, nDCG@10 and MRR in %
(and any measure the records hold, by name: ``rbench table --measure``; ``n/r`` where one lacks it).

Like the paper's tables, the best value of each column is bold and the second underlined. Each
task column states its number of test queries so readers can judge noise.

Rows and columns are keyed on what the records hold, never on rendered text: a row is a ranker
configuration (``RowKey``: name + non-default options), a column a test set (``ColumnKey``: task,
variant, non-default task options, sample, seed). Names are rendered at the end, from the records
(a row takes its newest record's label; two configurations that render alike get their option
hashes appended, so neither hides the other).

Runs of one test set whose ``task_fingerprint`` differs (data prepared from other inputs) get a
column each, labelled ``[data <fingerprint[:8]>]``: they never share a column or a significance
test. A NaN metric shows as ``n/a`` and takes no part in marks or tests.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rbench.core.errors import RBenchError, unknown
from rbench.core.markdown import code_span
from rbench.core.markdown import row as md_row
from rbench.core.protocol import PROTOCOL_VERSION
from rbench.results.proof import DISAGREES, file_problems
from rbench.results.proof import NOTE as DISAGREE_NOTE
from rbench.results.ranking_checks import LEGEND as NOT_RANKED_LEGEND
from rbench.results.ranking_checks import MARK as NOT_RANKED
from rbench.results.ranking_checks import flag as ranking_flag
from rbench.results.record import ColumnKey, RowKey, RunRecord, finite, load_records, require_results_dir
from rbench.results.training_budget import BUDGET_FIELDS, budget_cells, budget_raw, training_budget
from rbench.tasks.pools import Variant, parse_variant
from rbench.tasks.registry import paper_tasks

SHOWN = (("nDCG@10", "nDCG@10"), ("RR", "MRR"))
DELTA = "delta_RR"  # the paper's Δ: relative MRR change of a variant pool against the original pool
RANKER_ORDER = ("random", "pop", "prior", "bm25", "contriever", "dense", "fm", "bpr", "gru4rec", "bert4rec", "sasrec",
                "lranker")
POP, RANDOM, PRIOR = RowKey("pop"), RowKey("random"), RowKey("prior")
# the floors: their default configurations set a column's floor (the best of those present); no
# floor row, of any configuration, is marked against it. ``prior`` runs where the pool is built
# from the queries' positives (``TaskSpec.pool_from_positives``, rbench_rankers.floors.PriorRanker)
FLOORS = (RANDOM, POP, PRIOR)
FLOOR_NAMES = frozenset(f.ranker for f in FLOORS)
VARIANT_KINDS = ("mixed", "shift", "scaled")  # ``--variant`` of a table may name a kind: every N of scaled

Cell = tuple[RowKey, ColumnKey]


@dataclass
class Leaderboard:
    scenario: str
    variant: str
    tasks: list[ColumnKey]
    rows: list[RowKey]
    cells: dict[Cell, dict[str, float]]  # (row, column) -> metric -> fraction
    n_queries: dict[ColumnKey, set[int]] = field(default_factory=dict)
    sources: dict[Cell, str] = field(default_factory=dict)
    record_files: dict[Cell, Path] = field(default_factory=dict)
    records: dict[Cell, RunRecord] = field(default_factory=dict)
    alpha: float = 0.05
    deltas: dict[Cell, float] = field(default_factory=dict)  # variant vs original, relative MRR
    labels: dict[RowKey | ColumnKey, str] = field(default_factory=dict)  # rendered names
    foreign: dict[ColumnKey, str] = field(default_factory=dict)  # columns not on the task's own data
    measures: tuple[str, ...] = ()  # more measures shown beside SHOWN (``rbench table --measure``), canonical names
    # cells whose record disagrees with its own files (rbench.results.proof): why; marked, never compared
    disproved: dict[Cell, str] = field(default_factory=dict)

    def label(self, key: RowKey | ColumnKey) -> str:
        """The rendered name of a row or a column."""
        return self.labels.get(key) or (key.label if isinstance(key, ColumnKey) else key.ranker)

    def shown(self) -> tuple[tuple[str, str], ...]:
        """(metric, label) of each measure shown: the paper's two, then each ``measures`` entry."""
        return SHOWN + tuple((m, m) for m in self.measures if m not in dict(SHOWN))

    def columns(self) -> list[tuple[ColumnKey, str, str]]:
        shown = self.shown() + ((DELTA, "Δ MRR"),) if self.variant != "original" else self.shown()
        return [(t, m, label) for t in self.tasks for m, label in shown]

    def unrecorded(self) -> dict[str, list[Cell]]:
        """measure -> the cells whose record lacks it (a ``--measure`` its run was not asked for)."""
        out: dict[str, list[Cell]] = {}
        for m, _ in self.shown():
            for cell, metrics in self.cells.items():
                if m not in metrics:
                    out.setdefault(m, []).append(cell)
        return out

    def metric_columns(self) -> list[tuple[ColumnKey, str, str]]:
        return [c for c in self.columns() if c[1] != DELTA]

    def value(self, row: RowKey, column: ColumnKey, metric: str) -> float | None:
        """A cell's metric (None when the cell is empty)."""
        cell = self.cells.get((row, column))
        return None if cell is None else cell.get(metric)

    def frame(self):
        """The table as a pandas DataFrame: one row per ranker (its rendered label), one column
        per (task, measure) with values in % (NaN where a ranker has no run), as the Markdown
        table shows them, without marks."""
        import pandas as pd

        cols = pd.MultiIndex.from_tuples([(self.label(t), label) for t, _, label in self.metric_columns()],
                                         names=["task", "measure"])
        data = [[100 * v if (v := self.value(r, t, m)) is not None else float("nan")
                 for t, m, _ in self.metric_columns()] for r in self.rows]
        return pd.DataFrame(data, index=pd.Index([self.label(r) for r in self.rows], name="ranker"), columns=cols)

    def other_protocol(self) -> set[Cell]:
        """Cells whose record was computed under another evaluation protocol (``rbench.core.protocol``;
        0: before records carried one): shown with ``†``, left out of best/second, the ``▽`` floor
        and the significance tests, since their numbers may not be comparable."""
        return {cell for cell, rec in self.records.items() if cell in self.cells and rec.protocol != PROTOCOL_VERSION}

    def compared(self, task: ColumnKey, metric: str) -> list[RowKey]:
        """The rows of a column that take part in its comparisons: a finite value, this protocol."""
        old = self.other_protocol() | set(self.disproved)
        return [r for r in self.rows if finite(self.value(r, task, metric)) and (r, task) not in old]

    def rank_marks(self) -> dict[tuple[RowKey, ColumnKey, str], str]:
        """(row, column, metric) -> 'best' | 'second'."""
        marks: dict[tuple[RowKey, ColumnKey, str], str] = {}
        for task, metric, _ in self.metric_columns():
            shown = self.compared(task, metric)
            vals = sorted({round(self.cells[(r, task)][metric], 6) for r in shown}, reverse=True)
            for r in shown:
                v = round(self.cells[(r, task)][metric], 6)
                if vals and v == vals[0]:
                    marks[(r, task, metric)] = "best"
                elif len(vals) > 1 and v == vals[1]:
                    marks[(r, task, metric)] = "second"
        return marks

    def below_floors(self) -> set[Cell]:
        """(row, column) cells whose MRR does not beat that column's floors: at or below the best
        MRR of the ``FLOORS`` recorded (and compared) in it, or above it by no more than chance
        (``beats_floor``). So a ranker that only reproduces what popularity or the pool prior give
        for free is marked ``▽`` even when its own tie-breaking drew a luckier order than the
        floor's (ESCI-format, 60 test queries: "push the known positives down" 8.05 against
        ``prior``'s 7.57, benchmarks/results/pool_prior.md)."""
        out = set()
        for task in self.tasks:
            rows = self.compared(task, "RR")
            floors = [f for f in FLOORS if f in rows]
            if not floors:
                continue
            best = max(floors, key=lambda f: self.cells[(f, task)]["RR"])
            for r in rows:
                if r.ranker in FLOOR_NAMES:
                    continue
                if self.cells[(r, task)]["RR"] <= self.cells[(best, task)]["RR"] or not self.beats_floor(r, best, task):
                    out.add((r, task))
        return out

    def beats_floor(self, row: RowKey, floor: RowKey, task: ColumnKey) -> bool:
        """Whether ``row``'s MRR is above ``floor``'s by more than chance: a one-sided paired
        randomization test over the queries both share (p = half the two-sided p-value, 2,000 sign
        flips, < ``alpha``; no correction across rows: a row is only ever said not to beat the
        floor when its own test fails). Without both per-query files the point comparison stands."""
        from rbench.results.record import read_per_query
        from rbench.results.significance import paired_randomization

        frames = []
        for cell in ((row, task), (floor, task)):
            path, rec = self.record_files.get(cell), self.records.get(cell)
            frame = read_per_query(path, rec) if path is not None and rec is not None else None
            if frame is None or "RR" not in frame.columns:
                return True
            frames.append(frame)
        both = frames[0].merge(frames[1], on="query_id", suffixes=("_a", "_b"))
        a, b = both["RR_a"].to_numpy(), both["RR_b"].to_numpy()
        if len(both) < 2:
            return True
        if a.mean() <= b.mean():
            return False
        return paired_randomization(a, b, n_resamples=2000) / 2 < self.alpha

    def significance(self) -> dict[tuple[RowKey, ColumnKey, str], float]:
        """(row, column, metric) -> Holm-adjusted p-value of the difference to the column's best
        row (paired randomization test over the queries both runs share). Holm runs over the rows
        tested against that best in that column (and metric): testing every row at alpha alone
        would mark some row by chance in a long column."""
        from rbench.results.paired import holm
        from rbench.results.record import read_per_query
        from rbench.results.significance import paired_randomization

        cache: dict[Cell, object] = {}

        def pq(key):
            if key not in cache:
                path, rec = self.record_files.get(key), self.records.get(key)
                cache[key] = read_per_query(path, rec) if path is not None and rec is not None else None
            return cache[key]

        out: dict[tuple[RowKey, ColumnKey, str], float] = {}
        for task, metric, _ in self.metric_columns():
            rows = self.compared(task, metric)
            if len(rows) < 2:
                continue
            best = max(rows, key=lambda r: self.cells[(r, task)][metric])
            ref = pq((best, task))
            if ref is None or metric not in ref.columns:
                continue
            raw: dict[tuple[RowKey, ColumnKey, str], float] = {}
            for r in rows:
                other = pq((r, task))
                if r == best or other is None or metric not in other.columns:
                    continue
                both = ref.merge(other, on="query_id", suffixes=("_a", "_b"))
                if len(both) < 2:
                    continue
                raw[(r, task, metric)] = paired_randomization(both[f"{metric}_a"].to_numpy(),
                                                              both[f"{metric}_b"].to_numpy(), n_resamples=2000)
            out.update(zip(raw, map(float, holm(list(raw.values())))))
        return out

    def budgets(self) -> list[tuple[RowKey, ColumnKey, dict]]:
        """(row, column, training budget) of every shown cell whose RunRecord has one, in table order."""
        out = []
        for r in self.rows:
            for t in self.tasks:
                rec = self.records.get((r, t))
                b = training_budget(rec) if rec is not None and (r, t) in self.cells else None
                if b is not None:
                    out.append((r, t, b))
        return out


def paper_reference(scenario: str, variant: str,
                    tasks: list[ColumnKey]) -> list[tuple[str, ColumnKey, str, float]]:
    """The paper's own numbers (Qwen3-0.6B, one A6000) for the shown tasks:
    (model, column, metric, value in %). Shown apart from rbench's measurements."""
    from importlib.resources import files

    want = {"original": "main"}.get(variant, variant)
    # only the task a number belongs to (ml-100k is MovieLens 100K, not the paper's MovieLens 1M
    # Rec-Movie); columns with non-default task options, a query sample or another seed get none
    plain = [t for t in tasks if not (t.options or t.max_queries or t.seed)]
    base = {t.task: t for t in plain}
    rows = []
    text = files("rbench").joinpath("data/paper_reference.csv").read_text()
    for line in text.splitlines()[1:]:
        table, scen, task, var, model, metric, value = line.split(",")
        # a pool variant's numbers are in its own table; a transfer's (from-rec-toy) in zeroshot
        if (table == want or (variant != "original" and var == variant)) and scen == scenario and task in base:
            rows.append((model, base[task], "RR" if metric == "MRR" else metric, float(value)))
    return rows


def _task_order(tasks: set[ColumnKey]) -> list[ColumnKey]:
    """The embedded default first, then the paper's Table 2 order, then the rest; by name within."""
    order = ("ml-100k", *paper_tasks())
    return sorted(tasks, key=lambda t: (order.index(t.task) if t.task in order else len(order), t.label, t.fingerprint))


def _row_order(rows: set[RowKey], labels: dict[RowKey | ColumnKey, str]) -> list[RowKey]:
    """Floors and baselines in the paper's order, then the rest; by name within."""
    def key(r: RowKey) -> tuple[int, str, str]:
        return (RANKER_ORDER.index(r.ranker) if r.ranker in RANKER_ORDER else len(RANKER_ORDER), labels[r], r.options)

    return sorted(rows, key=key)


def _shows(want: str, variant: Variant) -> bool:
    """Whether a table of ``want`` (original, a kind such as scaled, or one variant) shows a record
    of ``variant``."""
    return variant.kind == want if want in VARIANT_KINDS else variant.label == want


def _row_labels(newest: dict[RowKey, RunRecord]) -> dict[RowKey | ColumnKey, str]:
    """Each row's name from its newest record; configurations that render alike (a plugin's own
    label that leaves an option out, say) get their option hashes appended."""
    labels: dict[RowKey | ColumnKey, str] = {row: rec.label for row, rec in newest.items()}
    seen: dict[str, list[RowKey]] = {}
    for row in newest:
        seen.setdefault(labels[row], []).append(row)
    for same in seen.values():
        if len(same) > 1:
            for row in same:
                labels[row] = f"{labels[row]} [{row.options_hash or 'defaults'}]"
    return labels


def build(results_dir: Path, scenario: str, variant: str | None = None, measures: tuple[str, ...] = ()) -> Leaderboard:
    """Collect the records of one scenario (and variant: None/'original' = original pools; a kind
    such as 'scaled' shows every scaled:N; one variant is named by its label, however spelled).
    A results directory that does not exist and a variant that is neither known nor recorded are
    errors (never an empty table). ``measures``: more measures to show (ir_measures' syntax; a
    record without one shows ``n/r`` in that cell, with a note under the table)."""
    from rbench.core.measures import parse_measures

    shown_extra = tuple(str(m) for m in parse_measures(measures))  # the one parser: a bad name fails first
    loaded = load_records(require_results_dir(results_dir), scenario)
    want = _wanted_variant(variant or "original", loaded)
    cells: dict[Cell, dict[str, float]] = {}
    nq: dict[ColumnKey, set[int]] = {}
    sources: dict[Cell, str] = {}
    files: dict[Cell, Path] = {}
    records: dict[Cell, RunRecord] = {}
    originals: dict[Cell, dict[str, RunRecord]] = {}  # (row, column on any data) -> fingerprint -> newest
    split = _split_by_data(loaded)
    for path, rec in loaded:
        key = (rec.row_key, _column_of(rec, split))
        if want != "original" and key[1].variant.kind == "original":
            same = originals.setdefault((key[0], key[1].original()), {})
            fp = rec.task_fingerprint
            if fp not in same or not _newer(same[fp].created, rec, results_dir):
                same[fp] = rec
        if not _shows(want, key[1].variant):
            continue
        prev = sources.get(key)
        if prev is not None and _newer(prev, rec, results_dir):
            continue
        cells[key] = dict(rec.metrics)
        sources[key] = rec.created
        files[key], records[key] = path, rec
    for (_, col), rec in records.items():
        nq.setdefault(col, set()).add(rec.n_queries)
    newest: dict[RowKey, RunRecord] = {}
    for (row, _), rec in records.items():
        if row not in newest or rec.created > newest[row].created:
            newest[row] = rec
    labels = _row_labels(newest)
    tasks = _task_order({t for _, t in cells})
    foreign = _foreign_data(records)
    labels.update({t: _with_source(t.label, foreign.get(t)) for t in tasks})
    rows = _row_order({r for r, _ in cells}, labels)
    deltas = {}
    for (row, col), metrics in cells.items():
        base = _original_of(records[(row, col)], originals.get((row, col.original()), {}))
        if base is not None and finite(base.metrics["RR"]) and base.metrics["RR"] and finite(metrics["RR"]):
            deltas[(row, col)] = (metrics["RR"] - base.metrics["RR"]) / base.metrics["RR"]
    disproved = {cell: "; ".join(why) for cell, path in files.items() if (why := file_problems(path, records[cell]))}
    return Leaderboard(scenario, want, tasks, rows, cells, nq, sources, files, records, deltas=deltas, labels=labels,
                       foreign=foreign, measures=shown_extra, disproved=disproved)


def _with_source(label: str, source: str | None) -> str:
    """A column's label with the data it was measured on: ``task [data: NAME]``. A label that
    already ends in its fingerprint (``task [data 1117736d]``: two versions of the data in one
    table) takes the name inside the same brackets, ``task [data 1117736d: NAME]``: two bracketed
    groups side by side read as a Markdown reference link (``[text] [label]``), and the docs
    site's strict build refused the table."""
    if not source:
        return label
    if label.endswith("]") and " [data " in label:
        return f"{label[:-1]}: {source}]"
    return f"{label} [data: {source}]"


def _foreign_data(records: dict[Cell, RunRecord]) -> dict[ColumnKey, str]:
    """Columns built from data that is not the task's own source (``rbench.tasks.sources.DataSource``,
    recorded in ``task_info.data_source``): column -> what the data is, so a reader never takes
    Last.fm for the paper's Amazon CDs. Records that say nothing (written before) add nothing."""
    names: dict[ColumnKey, set[str]] = {}
    for (_, col), rec in records.items():
        src = rec.task_info.get("data_source")
        if isinstance(src, dict) and src.get("own") is False and isinstance(src.get("name"), str):
            names.setdefault(col, set()).add(" ".join(src["name"].split())[:80])
    return {col: " / ".join(sorted(n)) for col, n in names.items()}


def _wanted_variant(want: str, loaded: list[tuple[Path, RunRecord]]) -> str:
    """The variant a table shows: original, a kind, or one variant by its label; a name that is
    none of these and that no record holds is an error with a did-you-mean."""
    if want in VARIANT_KINDS:
        return want
    try:
        return parse_variant(want).label
    except RBenchError as exc:
        recorded = {rec.column_key.variant.label for _, rec in loaded}
        if want in recorded:  # an older record's variant text that no longer parses
            return want
        if want.startswith("scaled"):
            raise
        raise unknown("--variant", want, {"original", *VARIANT_KINDS, *recorded}) from exc


def _split_by_data(loaded: list[tuple[Path, RunRecord]]) -> set[ColumnKey]:
    """The test sets whose records were run on more than one version of the data."""
    seen: dict[ColumnKey, set[str]] = {}
    for _, rec in loaded:
        seen.setdefault(rec.column_key, set()).add(rec.task_fingerprint)
    return {key for key, fps in seen.items() if len(fps) > 1}


def _column_of(rec: RunRecord, split: set[ColumnKey]) -> ColumnKey:
    """A record's column: its test set, and its data where that test set's records differ in it."""
    key = rec.column_key
    return replace(key, fingerprint=rec.task_fingerprint or "none") if key in split else key


def _original_of(rec: RunRecord, found: dict[str, RunRecord]) -> RunRecord | None:
    """The original-pool record a variant record's Δ is measured against: the one on the data the
    variant was built from (``original_fingerprint``); for records that do not say, the only one."""
    fp = rec.task_info.get("original_fingerprint")
    if fp:
        return found.get(fp)
    return next(iter(found.values())) if len(found) == 1 else None


def _newer(prev_created: str, rec: RunRecord, _results_dir: Path) -> bool:
    return prev_created >= rec.created


def _fmt(v: float) -> str:
    return f"{100.0 * v:.2f}" if finite(v) else ""


def _nq(lb: Leaderboard, task: ColumnKey) -> str:
    return "/".join(str(n) for n in sorted(lb.n_queries.get(task, ())))


def _cell(lb: Leaderboard, r: RowKey, t: ColumnKey, m: str, marks, below, sig, style: str) -> str:
    if m == DELTA:
        return f"{100 * lb.deltas[(r, t)]:+.1f}%" if (r, t) in lb.deltas else "–"
    if (r, t) not in lb.cells:
        return "–"
    if m not in lb.cells[(r, t)]:
        return NOT_RECORDED
    if not finite(lb.cells[(r, t)][m]):
        return "n/a"
    s = _fmt(lb.cells[(r, t)][m])
    if sig.get((r, t, m), 1.0) < lb.alpha:
        s += "*"
    if (r, t) in below and m == "RR":
        s += " ▽"
    if (r, t) in lb.other_protocol():
        s += " †"
    if (r, t) in lb.disproved:
        s += f" {DISAGREES}"
    if (r, t) in lb.records and ranking_flag(lb.records[(r, t)].ranker_info):
        s += f" {NOT_RANKED}"
    mark = marks.get((r, t, m))
    if style == "md":
        return f"**{s}**" if mark == "best" else f"<u>{s}</u>" if mark == "second" else s
    return s


def _rich_cell(lb: Leaderboard, r: RowKey, t: ColumnKey, m: str, marks: dict[tuple[RowKey, ColumnKey, str], str],
               below: set[Cell], sig: dict[tuple[RowKey, ColumnKey, str], float]) -> Any:
    """A console cell: its mark as a style, never as markup (``rbench.core.console``)."""
    from rich.text import Text

    mark = marks.get((r, t, m))
    return Text(_cell(lb, r, t, m, marks, below, sig, "plain"),
                style="bold" if mark == "best" else "underline" if mark == "second" else "")


FOOTER = ("MRR is the full reciprocal rank (no cutoff); nDCG@10 uses linear gain; ties are broken "
          "pessimistically. `*`: significantly different from the column's best (two-sided paired "
          "randomization test over per-query values, 2,000 sign flips, p < 0.05 after Holm's correction over the rows "
          "tested against that best). `▽`: does not beat the "
          "column's floors on MRR: at or below the best of `random`, `pop` and, where the pool is built from the "
          "queries' positives, `prior` (train/valid positives last), or above it by no more than chance (one-sided "
          "paired randomization test, p >= 0.05).")


NOT_RECORDED = "n/r"  # a cell whose record lacks a measure the table was asked to show


def prior_note(lb: Leaderboard) -> str:
    """The line under a table where a column's pool is built from the queries' positives (its
    records' ``task_info.pool_from_positives``) but no ``prior`` floor was run on it ('' when none):
    there ``▽`` is measured against the other floors only, which a no-skill filter can beat."""
    cols = [t for t in lb.tasks if PRIOR not in lb.compared(t, "RR")
            and any(rec.task_info.get("pool_from_positives") is True
                    for (_, col), rec in lb.records.items() if col == t)]
    if not cols:
        return ""
    first = cols[0]
    return (f"No `prior` floor in {', '.join(code_span(lb.label(t)) for t in cols)}: its pool is built from the "
            "queries' positives, where pushing the train/valid positives last beats chance with no skill, so `▽` "
            f"there is measured against the other floors only (`rbench run -r prior -t {first.task}` with the "
            "column's options adds it).")


def unrecorded_note(lb: Leaderboard) -> str:
    """The line under a table where some records lack a shown measure ('' when none does): which
    measure, how many cells, and the command that records it."""
    missing = lb.unrecorded()
    if not missing:
        return ""
    what = "; ".join(f"{m} in {len(cells)} of {len(lb.cells)} runs" for m, cells in missing.items())
    first = next(iter(missing))
    return (f"`{NOT_RECORDED}`: not recorded ({what}): those runs were not asked for it; "
            f"`rbench run ... --measure '{first}'` re-runs them with it (`--overwrite only-missing` runs a "
            "record again when it lacks a requested measure).")


def disproved_markdown(lb: Leaderboard) -> list[str]:
    """The note on the rows whose record disagrees with its own files: the mark, then one line
    per cell with why ([] when none does); ``rbench verify`` recomputes them from the run file."""
    if not lb.disproved:
        return []
    return ["", f"{DISAGREE_NOTE}; not compared (no bold, `*` or `▽`); `rbench verify` recomputes them:", ""] + [
        f"- {lb.label(r)} on {lb.label(t)}: {why}" for (r, t), why in lb.disproved.items()]


BUDGET_NOTE = ("as recorded in their RunRecords (untrained rankers have none). Compare trained rankers only "
               "with their budgets in view.")


def budget_markdown(lb: Leaderboard) -> list[str]:
    """The training-budget footnote: one line per trained (row, task) cell; [] when none."""
    rows = lb.budgets()
    if not rows:
        return []
    head = ["Ranker", "Task"] + [label for _, label, _ in BUDGET_FIELDS]
    lines = ["", "**Training budgets** of the trained rows, " + BUDGET_NOTE, "", md_row(head),
             "|" + "---|" * len(head)]
    for r, t, b in rows:
        lines.append(md_row([lb.label(r), lb.label(t), *budget_cells(b)]))
    return lines


def paper_markdown(lb: Leaderboard) -> list[str]:
    ref = paper_reference(lb.scenario, lb.variant, [t for t in lb.tasks if t not in lb.foreign])
    if not ref:
        if any(t.task == "ml-100k" for t in lb.tasks):
            return ["", "No reference numbers: the paper's Rec-Movie is MovieLens 1M (`rec-movie`), not ml-100k; "
                    "`rbench reproduce main` puts them beside rec-movie runs."]
        return []
    models = list(dict.fromkeys(m for m, _, _, _ in ref))
    val = {(m, t, k): v for m, t, k, v in ref}
    lines = ["", "## Reference: the paper's numbers (Qwen3-0.6B backbone, one NVIDIA A6000; not measured by rbench)",
             "", md_row(["Model (paper)", *(f"{lb.label(t)} {label}" for t, _, label in lb.columns())]),
             "|" + "---|" * (1 + len(lb.columns()))]
    for m in models:
        cells = [f"{val[(m, t, k)]:.2f}" if (m, t, k) in val else "–" for t, k, _ in lb.columns()]
        lines.append(md_row([m, *cells]))
    lines.append("")
    lines.append("Each number sits under the task it was measured on; the paper's setups differ from rbench's "
                 "CPU runs (backbone, budgets, baselines on shared text embeddings): compare with care.")
    return lines


def to_markdown(lb: Leaderboard, paper: bool = False, results_dir: Path | str = "results") -> str:
    marks, below, sig = lb.rank_marks(), lb.below_floors(), lb.significance()
    title = f"# rbench leaderboard: {lb.scenario}" + ("" if lb.variant == "original" else f" ({lb.variant})")
    if not lb.rows:
        return title + "\n\nNo results yet.\n"
    head = ["Ranker"] + [f"{lb.label(t)} {label}" for t, _, label in lb.columns()]
    lines = [title, "", "Values in % (test split). Best in **bold**, second <u>underlined</u>.", "",
             md_row(head), "|" + "---|" * len(head)]
    lines.append(md_row(["*test queries*", *(_nq(lb, t) for t, _, _ in lb.columns())]))
    for r in lb.rows:
        lines.append(md_row([lb.label(r)] + [_cell(lb, r, t, m, marks, below, sig, "md") for t, m, _ in lb.columns()]))
    lines += ["", FOOTER] + (["", note] if (note := unrecorded_note(lb)) else [])
    lines += ["", note] if (note := prior_note(lb)) else []
    old = sorted({lb.records[c].protocol for c in lb.other_protocol()})
    if old:
        lines += ["", f"`†`: computed under evaluation protocol {', '.join(map(str, old))} (this rbench: "
                  f"{PROTOCOL_VERSION}; 0 = before records carried one); not compared (no bold, `*` or `▽`). "
                  "Re-run it to compare (`rbench run` re-runs it: only-missing keeps only records of this protocol)."]
    lines += disproved_markdown(lb)
    if any(ranking_flag(rec.ranker_info) for rec in lb.records.values()):
        lines += ["", NOT_RANKED_LEGEND]
    lines += budget_markdown(lb)
    lines += ["", f"Generated by `rbench table` from the RunRecords in {code_span(str(results_dir).rstrip('/') + '/')}."]
    if paper:
        lines += paper_markdown(lb)
    lines.append("")
    return "\n".join(lines)


def to_csv(lb: Leaderboard) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    extra = [m for m, _ in lb.shown()[len(SHOWN):]]  # rbench table --measure: after MRR ('' where not recorded)
    w.writerow(["ranker", "task", "n_queries", "nDCG@10", "MRR", *extra, "delta_MRR_percent",
                *(k for k, _, _ in BUDGET_FIELDS), "protocol"])
    for r in lb.rows:
        for t in lb.tasks:
            if (r, t) in lb.cells:
                c = lb.cells[(r, t)]
                delta = f"{100 * lb.deltas[(r, t)]:.2f}" if (r, t) in lb.deltas else ""
                rec = lb.records.get((r, t))
                budget = budget_raw(training_budget(rec) if rec is not None else None)
                w.writerow([lb.label(r), lb.label(t), _nq(lb, t), _fmt(c["nDCG@10"]), _fmt(c["RR"]),
                            *(_fmt(c[m]) if m in c else "" for m in extra), delta, *budget,
                            rec.protocol if rec is not None else ""])
    return buf.getvalue()


def to_json(lb: Leaderboard) -> str:
    budgets = {(r, t): b for r, t, b in lb.budgets()}
    rows = [{"ranker": lb.label(r), "task": lb.label(t), "n_queries": sorted(lb.n_queries.get(t, ())),
             **{label: round(100 * lb.cells[(r, t)][m], 4) if finite(lb.cells[(r, t)].get(m)) else None
                for m, label in lb.shown()},
             **({"delta_MRR_percent": round(100 * lb.deltas[(r, t)], 4)} if (r, t) in lb.deltas else {}),
             **({"training_budget": budgets[(r, t)]} if (r, t) in budgets else {}),
             **({"protocol": lb.records[(r, t)].protocol} if (r, t) in lb.records else {}),
             **({"disagrees": lb.disproved[(r, t)]} if (r, t) in lb.disproved else {})}
            for r in lb.rows for t in lb.tasks if (r, t) in lb.cells]
    return json.dumps({"scenario": lb.scenario, "variant": lb.variant, "rows": rows}, indent=2) + "\n"


def rich_table(lb: Leaderboard):
    from rich.table import Table

    marks, below, sig = lb.rank_marks(), lb.below_floors(), lb.significance()
    title = f"rbench — {lb.scenario}" + ("" if lb.variant == "original" else f" ({lb.variant})")
    table = Table(title=title, caption="% on the test split; bold = best, underline = second; * and ▽: see below")
    table.add_column("Ranker", style="cyan")
    for t, _, label in lb.columns():
        table.add_column(f"{lb.label(t)}\n{label}\n(n={_nq(lb, t)})", justify="right")
    for r in lb.rows:
        table.add_row(lb.label(r), *[_rich_cell(lb, r, t, m, marks, below, sig) for t, m, _ in lb.columns()])
    return table


def rich_budget_table(lb: Leaderboard):
    """The training-budget footnote for the console (None when no shown row was trained)."""
    from rich.table import Table

    rows = lb.budgets()
    if not rows:
        return None
    table = Table(title="Training budgets (trained rows)", caption="Training budgets " + BUDGET_NOTE,
                  title_justify="left")
    table.add_column("Ranker", style="cyan")
    table.add_column("Task")
    for key, label, _ in BUDGET_FIELDS:
        table.add_column(label, justify="left" if key in ("negatives_per_example", "selection") else "right")
    for r, t, b in rows:
        table.add_row(lb.label(r), lb.label(t), *budget_cells(b))
    return table
