"""What the command modules share: the consoles, the progress bars, the output-file guard."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from rbench.core.console import console, description_column
from rbench.core.errors import RBenchError

out, err = console(), console(stderr=True)  # user text printed as it is (rbench.core.console)


def progress_factory(enabled: bool):
    """A Progress-reporting callback factory for ``rbench.run.runner.run``."""
    progress = Progress(description_column(), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), TimeRemainingColumn(), console=err, transient=False,
                        disable=not enabled)

    def factory(desc: str, total: int | None):
        task_id = progress.add_task(desc, total=total)
        return lambda n: progress.advance(task_id, n)

    return progress, factory


def refuse_emptying(target: Path, empty: bytes, why: str) -> None:
    """An empty table never replaces a table that has rows (a mistyped option would wipe it)."""
    try:
        before = target.read_bytes() if target.is_file() else None
    except OSError:
        before = None
    if before is not None and before != empty:
        raise RBenchError(f"{why}: {target} is left as it is (delete it first to write an empty table)")
    warnings.warn(f"{why}: the table is empty", stacklevel=2)


def count_text(n: Any) -> str:
    """A count with thousands separators, "–" for none."""
    return f"{n:,}" if isinstance(n, int) and not isinstance(n, bool) else "–"


def bytes_text(n: int) -> str:
    """A size in B/KB/MB/GB/TB (powers of 1024), one decimal."""
    size = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1024 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


# options whose value is a folder or file: an empty value is no path (click makes it ".", so
# `--results-dir ''` wrote RunRecords into the working folder: issue 42)
PATH_FLAGS = ("--results-dir", "--out", "--output", "-o")


def refuse_empty_paths(argv: list[str]) -> None:
    """Refuse ``--results-dir ''`` (and ``--results-dir=``) for every option of ``PATH_FLAGS``
    before click turns the empty text into the current folder."""
    for i, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        if flag not in PATH_FLAGS or not arg.startswith("-"):
            continue
        if eq and not value.strip():
            raise RBenchError(f"{flag} is empty: give a folder or file name (. for the current folder)")
        if not eq and arg in PATH_FLAGS and i + 1 < len(argv) and not argv[i + 1].strip():
            raise RBenchError(f"{flag} is empty: give a folder or file name (. for the current folder)")



def escape_help(command: Any) -> Any:
    """``command`` (click's, as typer builds it) with every help text escaped for rich markup, in
    place: typer renders help through rich, which reads ``[...]`` as a style and drops it
    (``pip install 'rbench[ir-datasets]'`` showed as ``pip install 'rbench'``). Done once on the
    built command tree, so no help string anywhere needs escaping by hand; the generated docs
    read the texts unescaped (``typer.main.get_command`` builds a fresh tree)."""
    from rich.markup import escape

    for attr in ("help", "short_help", "epilog"):
        text = getattr(command, attr, None)
        if isinstance(text, str):
            setattr(command, attr, escape(text))
    for param in getattr(command, "params", ()):
        if isinstance(getattr(param, "help", None), str):
            param.help = escape(param.help)
    for sub in (getattr(command, "commands", None) or {}).values():
        escape_help(sub)
    return command
