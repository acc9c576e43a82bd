"""Content hashes shared by downloads, the prepared cache and task imports."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any


def canonical_json(value: Any) -> str:
    """The one canonical text of a JSON-like value: keys sorted, anything else as ``str``. Every
    cache key, config hash and record comparison of rbench goes through it, so two places can
    never disagree on what "the same config" means."""
    return json.dumps(value, sort_keys=True, default=str)


def short_hash(value: Any, length: int = 64) -> str:
    """sha256 of ``canonical_json(value)``, hex, cut to ``length`` characters."""
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()[:length]


def file_sha256(path: Path) -> str:
    """sha256 of a file, read in 1 MiB blocks (never the whole file in memory)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


FULL_DIGEST_BYTES = 256 << 20
_BLOCK = 1 << 20


def file_digest(path: Path) -> str:
    """A cache's integrity digest: the whole file's sha256 up to ``FULL_DIGEST_BYTES``, beyond
    that the size plus 64 evenly spaced 1 MiB blocks (cheap on multi-GB files; any truncation
    changes the size)."""
    size = Path(path).stat().st_size
    h = hashlib.sha256(str(size).encode())
    with open(path, "rb") as fh:
        if size <= FULL_DIGEST_BYTES:
            for block in iter(lambda: fh.read(_BLOCK), b""):
                h.update(block)
        else:
            for k in range(64):
                fh.seek((size - _BLOCK) * k // 63)
                h.update(fh.read(_BLOCK))
    return h.hexdigest()


def folder_digests(folder: Path) -> dict[str, dict[str, int | str]]:
    """{relative path: {bytes, digest}} of every file under ``folder``."""
    folder = Path(folder)
    return {p.relative_to(folder).as_posix(): {"bytes": p.stat().st_size, "digest": file_digest(p)}
            for p in sorted(folder.rglob("*")) if p.is_file()}


def source_digest(cls: type) -> str:
    """sha256 of the Python source behind a ranker class, so a reviewer can tell which code gave a
    surprising row: the class's module file, or, when the module sits in a subpackage of its
    top-level package (``rbench_rankers.lranker.ranker``), every ``.py`` file of that subpackage (its
    helpers change its numbers too). "" when the source is not on disk (a class built in a REPL)."""
    import inspect
    import sys

    module = sys.modules.get(cls.__module__)
    try:
        path = Path(inspect.getsourcefile(cls) or "")
    except (TypeError, OSError):
        return ""
    if not path.is_file():
        return ""
    package = (getattr(module, "__package__", None) or "").split(".")
    files = sorted(path.parent.glob("*.py")) if len(package) > 1 else [path]
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()
