"""Installing downloaded files into a task's raw folder (``rbench.core.paths.raw_dir``):
archives extracted (``archives.safe_extract``), every other file hard-linked, and the folder's
provenance note written."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from rbench.api import RemoteFile, TaskSpec
from rbench.core import paths
from rbench.core.atomic import atomic_path, atomic_replace, scratch_dir
from rbench.tasks.sources.archives import archive_kind, safe_extract
from rbench.tasks.sources.downloads import fetch, remote_files
from rbench.tasks.sources.provenance import DataSource, write_provenance
from rbench.tasks.sources.transfer import DownloadLimits, Progress


def link_or_copy(src: Path, dest: Path) -> str:
    """Hard-link ``src`` to ``dest`` (replacing it), copying when a link is impossible.

    An existing ``dest`` that already is ``src`` is left alone: renaming a second hard link onto
    it would do nothing (POSIX rename between links of one file) and leave the temporary behind."""
    if dest.exists() and not dest.is_dir() and os.path.samefile(src, dest):
        return "linked"
    if dest.is_dir() and not dest.is_symlink():
        shutil.rmtree(dest)
    with atomic_path(dest) as tmp:
        tmp.unlink()
        try:
            os.link(src, tmp)
            how = "linked"
        except OSError:
            shutil.copy2(src, tmp)
            how = "copied"
    return how


def install(task: str, files: list[tuple[RemoteFile, Path]]) -> Path:
    """Put downloaded files into ``raw_dir(task)``: archives extracted, other files linked."""
    raw = paths.raw_dir(task)
    raw.mkdir(parents=True, exist_ok=True)
    for rf, path in files:
        if not (rf.extract and archive_kind(path)):
            link_or_copy(path, raw / rf.filename)
            continue
        with scratch_dir(raw, "extract.") as tmp:
            safe_extract(path, tmp)
            for entry in sorted(tmp.iterdir()):
                atomic_replace(entry, raw / entry.name)
    return raw


def download_task(spec: TaskSpec, *, force: bool = False,
                  progress: Callable[[RemoteFile], Progress | None] | None = None,
                  limits: DownloadLimits | None = None) -> Path:
    """Fetch every file of the task (cached, checksummed, resumable, each transfer within
    ``limits``) and install it into raw_dir."""
    got = []
    for rf in remote_files(spec):
        got.append((rf, fetch(spec.name, rf, force=force, progress=progress(rf) if progress else None,
                              limits=limits)))
    raw = install(spec.name, got)
    fetched = {rf.filename for rf, _ in got}
    names = ", ".join(s.name for s in spec.sources if any(f.filename in fetched for f in s.files))
    write_provenance(raw, DataSource(names or spec.sources[0].name, own=True, how="rbench data download"))
    return raw
