"""The consoles the CLI prints with: user text is printed as it is (one place).

rich reads ``[...]`` in a string as markup and ``:name:`` as an emoji code by default, so a ranker
labelled ``x [red]y[/red]``, a task id holding ``:100:`` or a file path in an error message would
print as something else (or raise a MarkupError). Task and ranker names, labels, ids, paths and
messages all reach the console, so markup and emoji are off on every console rbench prints with,
and rbench's own colours are styles (``styled``), never markup inside a string: nothing needs
escaping, and nothing can be forgotten.
"""

from __future__ import annotations

import sys

from rich.console import Console
from rich.progress import TextColumn
from rich.text import Text


class PipeClosed(Exception):
    """The reader of stdout went away (``rbench rankers | head -1``): it read what it wanted, so the
    CLI ends quietly with 0 (rich's own handling exits 1)."""


def quiet_stdout() -> None:
    """Point stdout at /dev/null once its reader is gone, so that the interpreter's last flush
    finds no closed pipe (it would print "Exception ignored ... BrokenPipeError" and exit 120)."""
    import os

    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a real file (a test's capture)
        pass


class _Console(Console):
    def on_broken_pipe(self) -> None:
        if self.quiet:
            return
        quiet_stdout()
        raise PipeClosed


def console(stderr: bool = False, *, markup: bool = False) -> Console:
    """A console with markup and emoji off; pipes and CI logs get a wide fixed width instead of
    rich's 80-column default (at 80 a wide table collapses its columns to "…"). ``markup``: for
    the benchmark scripts, whose tables hold no user text."""
    stream = sys.stderr if stderr else sys.stdout
    return _Console(stderr=stderr, width=None if stream.isatty() else 220, markup=markup, emoji=False)


def styled(*parts: str | tuple[str, str]) -> Text:
    """Text from plain strings and (text, style) pairs: ``styled(("error:", "bold red"), " " + message)``."""
    return Text.assemble(*parts)


def description_column() -> TextColumn:
    """A progress bar's description (ranker labels, task and pool names) as plain text: rich's
    TextColumn reads its text as markup by itself, whatever the console says."""
    return TextColumn("{task.description}", markup=False)
