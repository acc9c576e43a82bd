"""Error kinds the CLI maps to exit codes: a user's mistake (2) versus a bug or crash (1)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from pathlib import Path


class RBenchError(Exception):
    """A problem the user can fix (bad name, missing data, malformed file). CLI exit code 2."""


class DataError(RBenchError):
    """A data file is missing or malformed; the message names the file, line and field."""

    def __init__(self, message: str, path: object | None = None, line: int | None = None,
                 field: str | None = None) -> None:
        where = []
        if path is not None:
            where.append(str(path))
        if line is not None:
            where.append(f"line {line}")
        if field is not None:
            where.append(f"field {field!r}")
        prefix = ", ".join(where)
        super().__init__(f"{prefix}: {message}" if prefix else message)
        self.path, self.line, self.field = path, line, field
        self.reason = message  # what is wrong, without where (for notes that name the file themselves)


class RankerOutputError(RBenchError):
    """A ranker returned scores of the wrong shape or non-finite values."""


def write_failure(path: Path, exc: OSError) -> str:
    """Why ``path`` could not be written, in a few words: a file standing where a folder of its
    path should be is named (``FileExistsError``/``NotADirectoryError`` alone do not say which)."""
    blocker = next((d for d in path.parents if d.exists() and not d.is_dir()), None)
    if blocker is None and isinstance(exc, FileExistsError) and path.exists() and not path.is_dir():
        blocker = path  # mkdir of a folder that is a file
    return f"{blocker} is a file, not a folder" if blocker is not None else str(exc.strerror or exc)


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """A ' (did you mean X?)' suffix when a close match exists, else ''."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.5)
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown(kind: str, name: str, choices: Iterable[str]) -> RBenchError:
    choices = sorted(choices)
    return RBenchError(
        f"unknown {kind} {name!r}{did_you_mean(name, choices)}; known: {', '.join(choices)}"
    )
