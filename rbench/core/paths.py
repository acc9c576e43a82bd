"""Where rbench keeps downloads, prepared data and caches: ``RBENCH_HOME`` (default: the user
cache dir), so that nothing large lands in the working directory or the repository."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    """``RBENCH_HOME`` (checked: a regular file on its path would fail only deep inside a run, as
    an OS error naming some file below it), else the user cache dir."""
    env = os.environ.get("RBENCH_HOME")
    if env:
        path = Path(env).expanduser()
        blocker = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
        if blocker is not None:
            from rbench.core.errors import RBenchError

            raise RBenchError(f"RBENCH_HOME={env}: {blocker} is a file, not a folder "
                              "(set RBENCH_HOME to a folder rbench may create or write)")
        return path
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("rbench", appauthor=False))


def raw_dir(task: str) -> Path:
    """Raw input files of a task (downloaded, or copied/linked by ``--from``)."""
    return home() / "raw" / task


def prepared_dir(task: str) -> Path:
    return home() / "prepared" / task


def cache_dir(*parts: str) -> Path:
    """Ranker caches (embeddings, indexes, RecBole checkpoints): ``cache_dir()`` is the folder a
    ranker is told to keep its files in (``RunContext.cache_dir``), so nothing derived from labels
    is ever written in it or under it (docs/reference/contract.md, "Folders")."""
    return home() / "cache" / Path(*parts) if parts else home() / "cache"


def harness_dir(*parts: str) -> Path:
    """The harness's own state (the two-stage protocol's stage-1 cache, which holds every
    positive's stage-1 rank; scratch copies of a run's matrices): beside ``cache_dir()``, never
    in it or under it, so that a ranker told to keep its files in ``cache_dir()`` is not handed
    it."""
    return home() / "harness" / Path(*parts) if parts else home() / "harness"
