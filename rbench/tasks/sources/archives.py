"""Archive extraction that cannot escape its folder.

Every member is checked before anything is written: absolute paths (``/x``, ``C:\\x``), ``..``
components, special files (devices, fifos), two members with one name, and a name that is both a
file and a folder are refused with one line naming the archive and the member, and nothing is
extracted. Symbolic and hard links are refused altogether, whatever their target: checking a
target as text is not enough (with ``a -> .``, ``a/a/../../etc/passwd`` reads as inside but
resolves outside), resolving each link against what is already extracted is easy to get wrong,
and the archives this tool ships (MovieLens 1M) contain none. Extraction then goes member by
member (never ``extractall``) into a fresh temporary folder, re-checking that each member's
parent folder resolves inside it, and the result is moved into the raw folder.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tarfile
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from rbench.core.errors import RBenchError


def archive_kind(path: Path) -> str | None:
    name = path.name.lower()
    if name.endswith(".zip"):
        return "zip"
    if name.endswith((".tar.gz", ".tgz", ".tar", ".tar.bz2", ".tar.xz")):
        return "tar"
    return None


def _member_parts(name: str, archive: Path) -> tuple[str, ...]:
    """The member's path components, refusing absolute paths and ``..``."""
    clean = name.replace("\\", "/")
    if clean.startswith("/") or re.match(r"^[A-Za-z]:", clean):
        raise RBenchError(f"{archive}: refusing member {name!r}: absolute path")
    parts = tuple(p for p in PurePosixPath(clean).parts if p not in ("", "."))
    if ".." in parts:
        raise RBenchError(f"{archive}: refusing member {name!r}: '..' leaves the destination")
    return parts


def _refuse_link(archive: Path, name: str, target: str) -> RBenchError:
    return RBenchError(f"{archive}: refusing link {name!r} -> {target!r}: archives with symbolic or hard "
                       "links are not extracted (a chain of links can point outside the data folder)")


@dataclass
class _Member:
    parts: tuple[str, ...]
    kind: str  # file | dir
    handle: Any = None  # ZipInfo or TarInfo


def _zip_members(zf: zipfile.ZipFile, archive: Path) -> list[_Member]:
    out = []
    for info in zf.infolist():
        parts = _member_parts(info.filename, archive)
        if not parts:
            continue
        if stat.S_ISLNK(info.external_attr >> 16):
            raise _refuse_link(archive, info.filename, zf.read(info)[:200].decode("utf-8", "replace"))
        out.append(_Member(parts, "dir" if info.is_dir() else "file", info))
    return _no_clashes(out, archive)


def _tar_members(tf: tarfile.TarFile, archive: Path) -> list[_Member]:
    out = []
    for info in tf.getmembers():
        parts = _member_parts(info.name, archive)
        if not parts:
            continue
        if info.issym() or info.islnk():
            raise _refuse_link(archive, info.name, info.linkname)
        if info.isdir():
            out.append(_Member(parts, "dir", info))
        elif info.isreg():
            out.append(_Member(parts, "file", info))
        else:
            raise RBenchError(f"{archive}: refusing member {info.name!r}: special file (device, fifo)")
    return _no_clashes(out, archive)


def _no_clashes(members: list[_Member], archive: Path) -> list[_Member]:
    """Refuse two members with one name (a repeated folder entry is fine), and a file that is also
    a folder: written out they would overwrite each other or fail half-way."""
    kinds: dict[tuple[str, ...], str] = {}
    for m in members:
        name = "/".join(m.parts)
        for i in range(1, len(m.parts)):
            if kinds.setdefault(m.parts[:i], "dir") != "dir":
                raise RBenchError(f"{archive}: refusing member {name!r}: it lies under the file "
                                  f"{'/'.join(m.parts[:i])!r}")
        seen = kinds.get(m.parts)
        if seen == "file" and m.kind == "file":
            raise RBenchError(f"{archive}: refusing member {name!r}: duplicate member name")
        if seen is not None and seen != m.kind:
            raise RBenchError(f"{archive}: refusing member {name!r}: a file and a folder have this name")
        kinds[m.parts] = m.kind
    return members


def _inside(path: Path, root: Path) -> bool:
    real, base = os.path.realpath(path), os.path.realpath(root)
    return real == base or real.startswith(base + os.sep)


def _extract_members(members: Iterable[_Member], dest: Path, archive: Path,
                     open_member: Callable[[Any], Any]) -> list[str]:
    written = []
    for m in members:
        name = "/".join(m.parts)
        target = dest.joinpath(*m.parts)
        if not _inside(target.parent, dest) or target.is_symlink():
            raise RBenchError(f"{archive}: refusing member {name!r}: its folder leaves the destination")
        try:
            if m.kind == "dir":
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            if not _inside(target.parent, dest):
                raise RBenchError(f"{archive}: refusing member {name!r}: its folder leaves the destination")
            with open_member(m.handle) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
        except (FileExistsError, IsADirectoryError, NotADirectoryError) as exc:  # clashes with what dest held
            raise RBenchError(f"{archive}: cannot write member {name!r} into {dest}: {exc.strerror}") from None
        written.append(name)
    return written


def safe_extract(archive: Path, dest: Path) -> list[str]:
    """Extract ``archive`` into ``dest`` (created), after checking every member (see module doc).

    Returns the member paths written. Raises ``RBenchError`` naming the first bad member, before
    anything is written.
    """
    archive, dest = Path(archive), Path(dest)
    kind = archive_kind(archive)
    if kind is None:
        raise RBenchError(f"{archive}: not an archive this tool extracts (zip, tar, tar.gz)")
    dest.mkdir(parents=True, exist_ok=True)
    try:
        if kind == "zip":
            with zipfile.ZipFile(archive) as zf:
                return _extract_members(_zip_members(zf, archive), dest, archive, zf.open)
        with tarfile.open(archive) as tf:
            return _extract_members(_tar_members(tf, archive), dest, archive, tf.extractfile)
    except (zipfile.BadZipFile, tarfile.TarError, EOFError) as exc:
        raise RBenchError(f"{archive}: damaged archive ({exc}); run `rbench data download --force`") from None
