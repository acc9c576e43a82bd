"""Markdown table rows with every cell escaped (one place).

A label is the user's text (a ranker's own label, task options, a recipe's ranker name): a ``|``
in it would split its cell in two and a line break would end the row, so the table under it
falls apart. ``cell`` escapes backslashes and pipes (``\\`` and ``\\|``: GitHub's table parser
splits rows before it reads escapes, so a backslash before a pipe must itself be escaped) and
turns every line break into a space. Markdown's inline syntax (``*``, ``_``, backquotes) is left
alone: rbench's own cells use it (``**best**``), and labels rarely do.
"""

from __future__ import annotations

import re
from collections.abc import Iterable


def cell(text: object) -> str:
    """``text`` as one Markdown table cell."""
    return " ".join(str(text).replace("\\", "\\\\").replace("|", "\\|").splitlines())


def row(cells: Iterable[object]) -> str:
    """One Markdown table row of escaped cells: ``| a | b |``."""
    return "| " + " | ".join(cell(c) for c in cells) + " |"


def code_span(text: object) -> str:
    """``text`` (a path, a command) as one inline code span on one line: line breaks become
    spaces and the fence is one backquote longer than any run of backquotes inside, so no text
    can end the span early or start a new paragraph."""
    flat = " ".join(str(text).splitlines())
    longest = max((len(run) for run in re.findall(r"`+", flat)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") else ""
    return f"{fence}{pad}{flat}{pad}{fence}"
