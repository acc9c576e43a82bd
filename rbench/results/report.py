"""A reproduced experiment as one self-contained HTML page: its table and its figure inline
(the PNG as a data URI), no network needed to view it. The page checks its own images once
loaded and records the outcome on ``<body data-images="...">`` (tests read it in Chromium)."""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any

CHECK_IMAGES = """<script>
window.addEventListener("load", function () {
  var bad = Array.prototype.filter.call(document.images, function (i) { return !i.complete || i.naturalWidth === 0; });
  document.body.setAttribute("data-images", bad.length ? "missing:" + bad.length : "ok");
});
</script>"""


GradeKey = tuple[str, str, str, str]  # (ranker label, task, variant, measure)


def grade_key(row: dict[str, Any]) -> GradeKey:
    """The one key of a reproduced cell, for grading and for showing its grade."""
    return (row["ranker"], row["task"], row.get("variant", "original"), row["measure"])


def header(graded: bool) -> list[str]:
    return ["ranker", "task", "measure", "rbench", "paper", "Δ", "run"] + (["check"] if graded else [])


def cells(table: list[dict[str, Any]], grades: dict[GradeKey, str] | None = None) -> list[list[str]]:
    """A reproduced table's rows as text cells (values in %, Δ signed, – where there is none), the
    same for the Markdown file, the console and the HTML page."""
    out = []
    for r in table:
        row = [r["ranker"], r["task"] + ("" if r["variant"] == "original" else f"~{r['variant']}"), r["measure"],
               "–" if r["rbench"] is None else f"{r['rbench']:.2f}", "–" if r["paper"] is None else f"{r['paper']:.2f}",
               "–" if r["delta"] is None else f"{r['delta']:+.2f}", r["status"]]
        if grades:
            row.append(grades.get(grade_key(r), "–"))
        out.append(row)
    return out


def render(title: str, subtitle: str, note: str, table: list[dict[str, Any]], figures: list[Path],
           grades: dict[GradeKey, str] | None = None) -> str:
    """The page's HTML (``figures``: PNG files embedded as data URIs)."""
    head = header(bool(grades))
    rows = ["<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in row) + "</tr>" for row in cells(table, grades)]
    images = "".join(f'<figure><img alt="{html.escape(p.name)}" src="data:image/png;base64,'
                     f'{base64.b64encode(p.read_bytes()).decode()}"></figure>' for p in figures)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:2px 8px;text-align:right}}td:first-child,th:first-child{{text-align:left}}
img{{max-width:100%}}</style></head>
<body data-images="pending"><h1>{html.escape(title)}</h1><p>{html.escape(subtitle)}</p><p>{html.escape(note)}</p>
<table><thead><tr>{"".join(f"<th>{h}</th>" for h in head)}</tr></thead><tbody>{"".join(rows)}</tbody></table>
{images}
{CHECK_IMAGES}
</body></html>
"""
