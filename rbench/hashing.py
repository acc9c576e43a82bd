"""Content hashes shared by downloads, the prepared cache and task imports."""

from __future__ import annotations

import hashlib
from pathlib import Path


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
