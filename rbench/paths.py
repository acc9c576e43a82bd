"""Where rbench keeps downloads, prepared data and caches: ``RBENCH_HOME`` (default: the user
cache dir), so that nothing large lands in the working directory or the repository."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    env = os.environ.get("RBENCH_HOME")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("rbench", appauthor=False))


def raw_dir(task: str) -> Path:
    """Raw input files of a task (downloaded, or copied/linked by ``--from``)."""
    return home() / "raw" / task


def prepared_dir(task: str) -> Path:
    return home() / "prepared" / task


def cache_dir(*parts: str) -> Path:
    """Ranker caches (embeddings, indexes, RecBole checkpoints)."""
    return home() / "cache" / Path(*parts) if parts else home() / "cache"
