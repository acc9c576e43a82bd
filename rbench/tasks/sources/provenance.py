"""Provenance: what data a task was built from (a table names it when it is not the task's own)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rbench.api import TaskSpec
from rbench.core.atomic import atomic_write_text
from rbench.core.errors import DataError, RBenchError
from rbench.core.hashing import file_sha256 as sha256_of
from rbench.core.inputs import read_json

PROVENANCE_FILE = ".source.json"  # in raw_dir(task); a dot name: listings and the cache key skip it
MAX_SOURCE_NAME = 80


@dataclass(frozen=True)
class DataSource:
    """What a task's raw files are: ``own`` when they are the task's declared source (downloaded
    and checked by ``rbench data download``, or the data a package ships / an import holds);
    otherwise ``name`` says what they are (``--source-name`` of ``data prepare --from``, else the
    file names), and every table column built from them shows it."""

    name: str
    own: bool
    how: str = ""

    def as_info(self) -> dict[str, Any]:
        return {"name": self.name, "own": self.own, "how": self.how}


def source_name(text: str) -> str:
    """A ``--source-name`` as one short printable line (it goes into tables and file headers)."""
    name = " ".join(str(text).split())
    if not name or len(name) > MAX_SOURCE_NAME or not name.isprintable():
        raise RBenchError(f"--source-name {text!r}: expected a short name for the data (1 to {MAX_SOURCE_NAME} "
                          "printable characters), e.g. 'Last.fm (hetrec2011)'")
    return name


def from_source(spec: TaskSpec, entries: list[Path], name: str | None = None) -> DataSource:
    """The source of files given to ``data prepare --from``: the task's own when every one is a
    file the task pins by name and sha256 (hashed only where the name, and a pinned size, match);
    else ``name``, or the file names."""
    pinned = {rf.filename: rf for rf in spec.downloads if rf.sha256}
    own = bool(entries) and all(
        e.is_file() and e.name in pinned and (pinned[e.name].size in (None, e.stat().st_size))
        and sha256_of(e) == pinned[e.name].sha256 for e in entries)
    if own:
        return DataSource(spec.sources[0].name, own=True, how="rbench data prepare --from (pinned files)")
    shown = ", ".join(e.name for e in entries[:4]) + (f" (+{len(entries) - 4})" if len(entries) > 4 else "")
    return DataSource(name or f"local files {shown}", own=False, how="rbench data prepare --from")


def write_provenance(folder: Path, source: DataSource) -> None:
    atomic_write_text(Path(folder) / PROVENANCE_FILE, json.dumps(source.as_info(), sort_keys=True) + "\n")


def read_provenance(folder: Path) -> DataSource:
    """The data source of a task's raw folder: what ``write_provenance`` recorded there; files
    put there by hand (no record, or an unreadable one) are named by their file names."""
    try:
        data = read_json(Path(folder) / PROVENANCE_FILE, "a data-source note")
        if isinstance(data, dict) and isinstance(data.get("name"), str) and isinstance(data.get("own"), bool):
            return DataSource(data["name"], data["own"], str(data.get("how", "")))
    except (DataError, OSError):
        pass
    try:
        names = sorted(p.name for p in Path(folder).iterdir() if not p.name.startswith("."))
    except OSError:
        names = []
    shown = ", ".join(names[:4]) + (f" (+{len(names) - 4})" if len(names) > 4 else "")
    return DataSource(f"local files {shown}" if shown else "local files", own=False, how="placed in the raw folder")
