"""All-pairs comparison of runs on one test set, rendered ranx-style.

Why: a leaderboard tests each row only against its column's best; to say which of several
systems beats which, every pair must be tested on the same queries, with the p-values of the
whole family corrected (``rbench.results.paired``), and the size of each difference shown beside
its p-value (a tiny difference is "significant" on enough queries). Each system gets a letter;
a value carries, as superscripts, the letters of the systems it beats significantly after
correction (as ranx's reports do). Pure numpy/pandas/scipy: the runs come in as per-query
frames (``rbench.readback.compare_runs`` reads them from RunRecords).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from rbench.core.errors import RBenchError, unknown
from rbench.core.markdown import row as md_row
from rbench.core.measures import parse_measure
from rbench.core.settings import DEFAULT_SEED
from rbench.results.paired import CORRECTIONS, TESTS, Effect, adjust, effect, p_value

if TYPE_CHECKING:
    import pandas as pd

SHOWN_AS = {"RR": "MRR"}
NOT_MEASURES = ("query_id", "rank")  # per-query columns that are not measures
DEFAULT_MEASURES = ("nDCG@10", "RR")  # the leaderboard's


def letter(i: int) -> str:
    """The i-th system's letter: a..z, then aa, ab, ..."""
    text = ""
    i += 1
    while i:
        i, r = divmod(i - 1, 26)
        text = chr(ord("a") + r) + text
    return text


def measure_column(name: str, available: Sequence[str]) -> str:
    """The per-query column a measure name means, through rbench's one measure parser
    (``MRR`` is ``RR``, ``RR(rel=1)`` is ``RR``); unknown names are refused."""
    try:
        col = str(parse_measure(name))
    except RBenchError:
        col = name
    if col not in available:
        raise unknown("measure", name, list(available))
    return col


@dataclass(frozen=True)
class PairResult:
    """One test of systems ``a`` and ``b`` (indices into ``Comparison.systems``) on one measure;
    differences are ``a - b``."""

    measure: str
    a: int
    b: int
    mean_a: float
    mean_b: float
    effect: Effect
    p_value: float
    p_adjusted: float
    significant: bool

    @property
    def winner(self) -> int | None:
        """The significantly better system's index (None: no significant difference)."""
        if not self.significant or self.mean_a == self.mean_b:
            return None
        return self.a if self.mean_a > self.mean_b else self.b


@dataclass
class Comparison:
    """Every pair of ``systems`` tested on each measure over the same ``n_queries`` queries."""

    task: str
    systems: list[str]
    measures: list[str]
    n_queries: int
    means: dict[tuple[int, str], float]
    pairs: list[PairResult]
    test: str = "randomization"
    correction: str = "holm"
    alpha: float = 0.05
    n_resamples: int = 10000
    seed: int = DEFAULT_SEED
    notes: list[str] = field(default_factory=list)

    @property
    def letters(self) -> list[str]:
        return [letter(i) for i in range(len(self.systems))]

    def beats(self, system: int, measure: str) -> str:
        """The letters of the systems ``system`` beats significantly on ``measure``."""
        lost = sorted(p.b if p.a == system else p.a for p in self.pairs
                      if p.measure == measure and p.winner == system)
        return "".join(letter(i) for i in lost)

    def best(self, measure: str) -> float:
        return max(self.means[(i, measure)] for i in range(len(self.systems)))

    def caption(self) -> str:
        """Which test, which correction, which alpha: what a superscript means."""
        how = TESTS[self.test]
        if self.test == "randomization":
            how += f" ({self.n_resamples:,} sign flips, seed {self.seed})"
        k = len(self.systems) * (len(self.systems) - 1) // 2
        fixed = ("p-values not corrected for multiple comparisons" if self.correction == "none" else
                 f"p-values corrected with {CORRECTIONS[self.correction]} over the {k} pair{'s' * (k != 1)} "
                 "of each measure")
        return (f"{self.task}: values in % over the same {self.n_queries:,} queries; best in bold. Superscripts: "
                f"the letters of the systems a value is significantly better than, by a {how}, {fixed}, "
                f"alpha = {self.alpha:g}. Δ: mean per-query difference A − B in percentage points, with its "
                "paired-t 95% CI; d_z: that mean over the standard deviation of the differences (Cohen's d_z).")

    def summary_frame(self) -> pd.DataFrame:
        """One row per system: letter, ranker, then each measure's mean (a fraction) and the
        letters it beats (``<measure> beats``)."""
        import pandas as pd

        rows = []
        for i, name in enumerate(self.systems):
            row: dict[str, Any] = {"letter": letter(i), "ranker": name}
            for m in self.measures:
                row[m] = self.means[(i, m)]
                row[f"{m} beats"] = self.beats(i, m)
            rows.append(row)
        return pd.DataFrame(rows)

    def pairs_frame(self) -> pd.DataFrame:
        """One row per (measure, pair): the means, the difference with its CI, d_z, p and the
        corrected p, and the winner's letter ("" where none)."""
        import pandas as pd

        return pd.DataFrame([{
            "task": self.task, "measure": p.measure, "a": self.systems[p.a], "a_letter": letter(p.a),
            "b": self.systems[p.b], "b_letter": letter(p.b), "n_queries": self.n_queries,
            "mean_a": p.mean_a, "mean_b": p.mean_b, "diff": p.effect.mean_diff, "ci_low": p.effect.ci_low,
            "ci_high": p.effect.ci_high, "d_z": p.effect.d_z, "test": self.test, "p_value": p.p_value,
            "correction": self.correction, "p_adjusted": p.p_adjusted, "alpha": self.alpha,
            "winner": "" if p.winner is None else letter(p.winner)} for p in self.pairs])

    # ---------------------------------------------------------------- renderings

    def _value(self, i: int, m: str) -> str:
        return f"{100 * self.means[(i, m)]:.2f}"

    def _is_best(self, i: int, m: str) -> bool:
        return round(self.means[(i, m)], 10) == round(self.best(m), 10)

    def _pair_cells(self, p: PairResult) -> list[str]:
        e = p.effect
        return [SHOWN_AS.get(p.measure, p.measure), f"{letter(p.a)} {self.systems[p.a]}",
                f"{letter(p.b)} {self.systems[p.b]}", f"{100 * e.mean_diff:+.2f}",
                f"[{100 * e.ci_low:+.2f}, {100 * e.ci_high:+.2f}]", _num(e.d_z), _p(p.p_value),
                *([_p(p.p_adjusted)] if self._corrected else []), "" if p.winner is None else letter(p.winner)]

    @property
    def _corrected(self) -> bool:
        """Whether p-values are corrected: without a correction the adjusted p is the p, shown once."""
        return self.correction != "none"

    def _pair_head(self) -> list[str]:
        """One header per column: the corrected p has its own only when there is a correction."""
        adj = [f"p ({CORRECTIONS[self.correction]})"] if self._corrected else []
        return ["Measure", "A", "B", "Δ (A − B)", "95% CI", "d_z", "p", *adj, "better"]

    def _cells(self, i: int, bold: str, won_as: str) -> list[str]:
        """System ``i``'s value per measure: the best bold (``bold``), the letters of the systems
        it beats as superscripts (``won_as``); the formats are Markdown's or LaTeX's."""
        cells = []
        for m in self.measures:
            s = self._value(i, m)
            s = bold.format(s) if self._is_best(i, m) else s
            won = self.beats(i, m)
            cells.append(won_as.format(s, won) if won else s)
        return cells

    def to_markdown(self) -> str:
        head = ["", "Ranker", *(SHOWN_AS.get(m, m) for m in self.measures)]
        lines = [md_row(head), "|" + "---|" * len(head)]
        for i, name in enumerate(self.systems):
            cells = self._cells(i, "**{}**", "{}<sup>{}</sup>")
            lines.append(md_row([letter(i), name, *cells]))
        lines += ["", self.caption(), "", md_row(self._pair_head()), "|" + "---|" * len(self._pair_head())]
        lines += [md_row(self._pair_cells(p)) for p in self.pairs]
        lines += [f"\n{note}" for note in self.notes]
        return "\n".join(lines) + "\n"

    def to_csv(self) -> str:
        """The pairs (``pairs_frame``) as CSV, full precision, fractions (not %)."""
        frame = self.pairs_frame()
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(frame.columns)
        for values in frame.itertuples(index=False):
            writer.writerow([repr(float(v)) if isinstance(v, (float, np.floating)) else v for v in values])
        return buf.getvalue()

    def to_latex(self) -> str:
        """A booktabs table (``\\usepackage{booktabs}``): superscripts as ``$^{ab}$``."""
        cols = "ll" + "r" * len(self.measures)
        lines = [r"\begin{table}[t]", r"\centering",
                 r"\caption{" + _latex(self.caption()) + "}", r"\begin{tabular}{" + cols + "}", r"\toprule",
                 " & ".join(["", "Ranker", *(_latex(SHOWN_AS.get(m, m)) for m in self.measures)]) + r" \\",
                 r"\midrule"]
        for i, name in enumerate(self.systems):
            cells = self._cells(i, r"\textbf{{{}}}", "{}$^{{{}}}$")
            lines.append(" & ".join([letter(i), _latex(name), *cells]) + r" \\")
        lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
        return "\n".join(lines) + "\n"

    def rich_tables(self) -> list[Any]:
        """The summary table, its caption, the pairs table and the notes, for the console."""
        from rich.table import Table
        from rich.text import Text

        summary = Table(title=f"rbench compare — {self.task}")
        summary.add_column("", style="bold")
        summary.add_column("Ranker", style="cyan")
        for m in self.measures:
            summary.add_column(SHOWN_AS.get(m, m), justify="right")
        for i, name in enumerate(self.systems):
            cells = []
            for m in self.measures:
                text = Text(self._value(i, m), style="bold" if self._is_best(i, m) else "")
                won = self.beats(i, m)
                if won:
                    text.append(f" {won}", style="magenta")
                cells.append(text)
            summary.add_row(letter(i), Text(name), *cells)
        pairs = Table(title="Pairs")
        for j, h in enumerate(self._pair_head()):
            pairs.add_column(h, justify="left" if j < 3 else "right")
        for p in self.pairs:
            pairs.add_row(*(Text(c) for c in self._pair_cells(p)))
        return [summary, Text(self.caption()), pairs, *(Text(note) for note in self.notes)]

    def to_text(self) -> str:
        """The console rendering without colour (what ``--format rich --out`` writes)."""
        from rich.console import Console

        console = Console(record=True, width=160, file=io.StringIO(), color_system=None, markup=False, emoji=False)
        for part in self.rich_tables():
            console.print(part)
        return console.export_text()

    def render(self, fmt: str) -> str:
        """``fmt``: rich (plain text), md, csv or latex."""
        renders = {"rich": self.to_text, "md": self.to_markdown, "csv": self.to_csv, "latex": self.to_latex}
        if fmt not in renders:
            raise unknown("format", fmt, renders)
        return renders[fmt]()


FORMATS = {"rich": ".txt", "md": ".md", "csv": ".csv", "latex": ".tex"}  # format -> the suffix of its file


def _num(v: float) -> str:
    return f"{v:+.2f}" if math.isfinite(v) else ("+inf" if v > 0 else "-inf" if v < 0 else "n/a")


def _p(v: float) -> str:
    return f"{v:.2g}" if v < 0.001 else f"{v:.3f}"


_LATEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
          "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "Δ": r"$\Delta$", "−": "-"}


def _latex(text: str) -> str:
    return "".join(_LATEX.get(c, c) for c in text)


def _aligned(runs: Mapping[str, pd.DataFrame], measures: Sequence[str], task: str) -> dict[tuple[str, str], Any]:
    """The runs' values of each measure, row-aligned on query id (sorted), after checking that
    every run holds the same queries, once each, and finite values of every measure."""
    names = list(runs)
    ids: dict[str, list[str]] = {}
    frames = {}
    for name in names:
        frame = runs[name]
        if "query_id" not in frame.columns:
            raise RBenchError(f"{name} on {task}: expected a per-query table with a query_id column")
        q = frame["query_id"].astype(str)
        if q.duplicated().any():
            raise RBenchError(f"{name} on {task}: query {q[q.duplicated()].iloc[0]!r} appears twice; "
                              "expected one row per query")
        for m in measures:
            if m not in frame.columns:
                raise RBenchError(f"{name} on {task}: no per-query {SHOWN_AS.get(m, m)!r} values; expected "
                                  f"one of {', '.join(c for c in frame.columns if c not in NOT_MEASURES)}")
        frames[name] = frame.assign(query_id=q).sort_values("query_id", kind="stable")
        ids[name] = frames[name]["query_id"].tolist()
    first = names[0]
    for name in names[1:]:
        if ids[name] != ids[first]:
            shared = len(set(ids[name]) & set(ids[first]))
            raise RBenchError(f"{first} and {name} on {task} hold different queries ({len(ids[first]):,} and "
                              f"{len(ids[name]):,}, {shared:,} shared): expected the same query set (same task "
                              "options, max_queries and seed)")
    values = {}
    for name in names:
        for m in measures:
            v = frames[name][m].to_numpy(dtype=np.float64)
            if not np.isfinite(v).all():
                raise RBenchError(f"{name} on {task}: {SHOWN_AS.get(m, m)} is not a number on some queries; "
                                  "expected finite per-query values")
            values[(name, m)] = v
    return values


def check_options(test: str, correction: str, alpha: float) -> None:
    """Refuse an unknown test or correction, or an alpha outside (0, 1), before any file is read."""
    if test not in TESTS:
        raise unknown("test", test, TESTS)
    if correction not in CORRECTIONS:
        raise unknown("correction", correction, CORRECTIONS)
    if not 0.0 < alpha < 1.0:
        raise RBenchError(f"alpha: expected a number between 0 and 1, not {alpha!r}")


def compare_frames(runs: Mapping[str, pd.DataFrame], measures: Sequence[str] = DEFAULT_MEASURES, *, task: str = "",
                   test: str = "randomization", correction: str = "holm", alpha: float = 0.05,
                   n_resamples: int = 10000, seed: int = DEFAULT_SEED) -> Comparison:
    """Test every pair of ``runs`` (name -> per-query frame: query_id and one column per measure)
    on each measure; corrections run over the pairs of one measure."""
    check_options(test, correction, alpha)
    if len(runs) < 2:
        raise RBenchError(f"{task or 'compare'}: expected at least two runs to compare, got {len(runs)}")
    if not measures:
        raise RBenchError("expected at least one measure")
    measures = list(dict.fromkeys(measures))
    values = _aligned(runs, measures, task)
    names = list(runs)
    n = len(next(iter(values.values())))
    if n < 2:
        raise RBenchError(f"{task}: the runs share {n} quer{'y' if n == 1 else 'ies'}; expected at least 2 to test")
    means = {(i, m): float(values[(name, m)].mean()) for i, name in enumerate(names) for m in measures}
    pairs: list[PairResult] = []
    for m in measures:
        index = [(i, j) for i in range(len(names)) for j in range(i + 1, len(names))]
        raw = [p_value(values[(names[i], m)], values[(names[j], m)], test, n_resamples, seed) for i, j in index]
        fixed = adjust(raw, correction)
        for (i, j), p, q in zip(index, raw, fixed):
            pairs.append(PairResult(m, i, j, means[(i, m)], means[(j, m)],
                                    effect(values[(names[i], m)], values[(names[j], m)]), float(p), float(q),
                                    bool(q < alpha)))
    return Comparison(task, names, measures, n, means, pairs, test, correction, alpha, n_resamples, seed)
