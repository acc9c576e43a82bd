"""Training budgets and curves as trained rankers record them in ``RunRecord.ranker_info``.

The contract (every trained ranker; untrained ones — bm25, pop, random, zero-shot dense — have
neither key):

- ``ranker_info["training_budget"]``: ``examples_seen`` (int), ``epochs`` (float),
  ``optimizer_steps`` (int), ``train_wall_s`` (float), ``negatives_per_example`` (int, or a text
  such as ``"all 1682 items (full softmax)"``), ``trainable_params`` (int), ``selection`` (str:
  how the reported model was chosen).
- ``ranker_info["training_curve"]``: a list of ``{"epoch", "step", "examples", "train_loss",
  "valid_MRR", "seconds"}`` (``valid_MRR`` a fraction like rbench's metrics; ``train_loss`` and
  ``valid_MRR`` may be None).

Tables show budgets so that rankers trained with very different budgets (e.g. LRanker and
SASRec) are never compared without them; missing or malformed entries (older RunRecords) are
simply not shown.
"""

from __future__ import annotations

import math
from typing import Any

from rbench.results.record import RunRecord

# (key, column header, kind) in display order
BUDGET_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("examples_seen", "examples seen", "int"),
    ("epochs", "epochs", "float"),
    ("optimizer_steps", "optimizer steps", "int"),
    ("train_wall_s", "train wall time", "seconds"),
    ("negatives_per_example", "negatives/example", "neg"),
    ("trainable_params", "trainable params", "params"),
    ("selection", "model selection", "text"),
)
CURVE_KEYS = ("epoch", "step", "examples", "train_loss", "valid_MRR", "seconds")


def training_budget(rec: RunRecord) -> dict[str, Any] | None:
    """The record's training budget, or None (untrained ranker, older record, malformed entry)."""
    b = (rec.ranker_info or {}).get("training_budget")
    return b if isinstance(b, dict) and b else None


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def training_curve(rec: RunRecord) -> list[dict[str, float | None]]:
    """The record's training curve as clean points (sorted by epoch); [] when absent or unusable."""
    raw = (rec.ranker_info or {}).get("training_curve")
    if not isinstance(raw, list):
        return []
    out = []
    for p in raw:
        if not isinstance(p, dict) or _num(p.get("epoch")) is None:
            continue
        out.append({k: _num(p.get(k)) for k in CURVE_KEYS})
    return sorted(out, key=lambda p: p["epoch"])


def fmt_duration(s: float) -> str:
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        m, sec = divmod(int(round(s)), 60)
        return f"{m}m {sec:02d}s"
    h, rem = divmod(int(round(s)), 3600)
    return f"{h}h {rem // 60:02d}m"


def fmt_count(n: float) -> str:
    if n >= 1e6:
        return f"{n / 1e6:.2f}M"
    if n >= 1e4:
        return f"{n / 1e3:.1f}k"
    return f"{int(n):,}"


def fmt_field(budget: dict[str, Any], key: str, kind: str) -> str:
    v = budget.get(key)
    if v is None or v == "":
        return "–"
    if kind == "text" or (kind == "neg" and isinstance(v, str)):
        return str(v)
    n = _num(v)
    if n is None:
        return str(v)
    if kind == "int":
        return f"{int(n):,}"
    if kind == "float":
        return f"{n:,.2f}".rstrip("0").rstrip(".")
    if kind == "seconds":
        return fmt_duration(n)
    if kind == "params":
        return fmt_count(n)
    if kind == "neg":
        return f"{int(n):,} sampled" if n else "none"
    return str(v)


def budget_cells(budget: dict[str, Any]) -> list[str]:
    """Formatted cells of one budget, in ``BUDGET_FIELDS`` order."""
    return [fmt_field(budget, k, kind) for k, _, kind in BUDGET_FIELDS]


def budget_raw(budget: dict[str, Any] | None) -> list[Any]:
    """Raw values (for CSV), '' where missing."""
    return ["" if budget is None or budget.get(k) is None else budget.get(k) for k, _, _ in BUDGET_FIELDS]
