"""Task downloads: checksummed, resumable transfers and archive extraction that cannot escape.

Where files go
--------------
``RBENCH_HOME/downloads/<task>/<file>`` is the download cache (kept, so ``rbench data download
--force`` and re-extraction never need the network twice). ``install`` then fills
``rbench.paths.raw_dir(task)``, which the task loaders read: archives (zip, tar, tar.gz) are
extracted there with their own folder layout (MovieLens 1M lands in ``raw/rec-movie/ml-1m/``;
the loaders accept one subfolder), every other file is hard-linked there (no second copy on
disk, and deleting the download cache does not break the raw folder); when a hard link is not
possible (another file system) the file is copied.

What pooch gives and what is added here
---------------------------------------
``pooch.retrieve`` does the bookkeeping: a file already in the cache whose sha256 matches is not
fetched again; a new file is streamed into a temporary file next to its final name, its sha256 is
checked, and only then is it moved into place; on a mismatch the temporary file is deleted and a
``ValueError`` raised, so a bad download never sits in the cache. Pooch's own ``HTTPDownloader``
cannot resume: it writes into that temporary file, which pooch deletes when the transfer fails,
so every retry starts from byte 0 (pooch 1.9). ``ResumableDownloader`` (passed to pooch as its
``downloader``) keeps the bytes of an interrupted transfer in ``<file>.part`` beside the cache,
together with ``<file>.part.json`` (url, total size, the server's validator), and asks for the
rest with an HTTP ``Range: bytes=<have>-`` request. It resumes only when it can tell the remote
file is unchanged: the server's strong ``ETag`` or ``Last-Modified`` is sent as ``If-Range`` (a
changed file then comes back whole, status 200, and the part is discarded), or, for servers that
give no validator, when the sha256 is known (the final check catches a mixed file). A server
that ignores ``Range`` (status 200) simply restarts the file. Transfers are requested with
``Accept-Encoding: identity`` and read without content decoding, so byte offsets are file
offsets. A transfer that stops early (the connection closes mid-body, or fewer bytes than
``Content-Length`` arrive) is an error that names the bytes kept; the same command resumes it.

Checksums
---------
sha256 values are pinned where a public source gives them: MovieLens 1M's archive (widely
published alongside GroupLens' own MD5 ``c4d9eecfca2ab87c1945afe126590906``) and the two ESCI
parquet files (the sha256 ``oid`` of their Git LFS pointers in amazon-science/esci-data at
commit 7e0e307, whose raw URLs are pinned to that commit). No checksum is published for the
Amazon 2014 and 2023 review files: their ``sha256`` is ``None`` (not known, not checked); after
a download the computed sha256 is printed and recorded in ``downloads/<task>/manifest.json``
so that a user can pin it. A file that turns out to be a Git LFS pointer (what
``raw.githubusercontent.com`` serves for LFS files) is refused with a clear message.

Archives
--------
Every member is checked before anything is written: absolute paths (``/x``, ``C:\\x``), ``..``
components, symlinks or hard links whose target leaves the destination, and special files
(devices, fifos) are refused with the member's name, and nothing is extracted. Extraction then
goes member by member (never ``extractall``) into a fresh temporary folder, re-checking that each
member's parent folder resolves inside it, and the result is moved into the raw folder.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import tarfile
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any

from rbench import paths
from rbench.api import RemoteFile, TaskSpec
from rbench.errors import RBenchError
from rbench.hashing import file_sha256 as sha256_of

Progress = Callable[[int, "int | None"], None]  # (bytes done, total bytes or None)

LFS_POINTER_PREFIX = b"version https://git-lfs.github.com/spec/v1"


class DownloadError(RBenchError):
    """A transfer failed (unreachable host, HTTP error, interrupted body, checksum mismatch)."""


def remote_files(spec: TaskSpec) -> tuple[RemoteFile, ...]:
    """The task's directly downloadable files (declared in its spec's sources), or a clear error
    naming how else to get the data."""
    if not spec.downloads:
        raise RBenchError(f"task {spec.name!r} has no direct public download; {spec.how_to_get}")
    return spec.downloads


def downloads_dir(task: str) -> Path:
    return paths.home() / "downloads" / task


# --------------------------------------------------------------------------------------------
# the resumable downloader (a pooch ``downloader``)
# --------------------------------------------------------------------------------------------


def _content_range(value: str | None) -> tuple[int | None, int | None]:
    """``bytes 100-199/1000`` -> (100, 1000); ``bytes */1000`` -> (None, 1000)."""
    m = re.match(r"^\s*bytes\s+(?:(\d+)-\d+|\*)/(\d+|\*)\s*$", value or "")
    if not m:
        return None, None
    start = int(m.group(1)) if m.group(1) is not None else None
    total = int(m.group(2)) if m.group(2) != "*" else None
    return start, total


def _human(n: int | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


class ResumableDownloader:
    """Pooch downloader that resumes an interrupted transfer from ``part`` (see module doc)."""

    def __init__(self, part: Path, *, progress: Progress | None = None, sha256_known: bool = False,
                 expected_size: int | None = None, timeout: tuple[float, float] = (15.0, 60.0),
                 chunk_size: int = 1 << 20) -> None:
        self.part = Path(part)
        self.meta_path = self.part.with_name(self.part.name + ".json")
        self.progress = progress
        self.sha256_known = sha256_known
        self.expected_size = expected_size
        self.timeout = timeout
        self.chunk_size = chunk_size

    # -- partial-file bookkeeping
    def _meta(self) -> dict[str, Any]:
        try:
            return json.loads(self.meta_path.read_text())
        except (OSError, ValueError):
            return {}

    def _write_meta(self, data: dict[str, Any]) -> None:
        tmp = self.meta_path.with_name(self.meta_path.name + ".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.meta_path)

    def discard(self) -> None:
        for p in (self.part, self.meta_path):
            p.unlink(missing_ok=True)

    def _resume_offset(self, url: str) -> tuple[int, str | None]:
        if not self.part.exists():
            return 0, None
        have = self.part.stat().st_size
        meta = self._meta()
        validator = meta.get("validator")
        if have == 0 or meta.get("url") != url or not (validator or self.sha256_known):
            self.discard()
            return 0, None
        return have, validator

    # -- the pooch downloader protocol
    def __call__(self, url: str, output_file: Any, pooch: Any = None, check_only: bool = False) -> Any:
        import requests

        if check_only:
            try:
                return requests.head(url, timeout=self.timeout, allow_redirects=True).status_code == 200
            except requests.RequestException:
                return False
        self.part.parent.mkdir(parents=True, exist_ok=True)
        for _attempt in range(2):  # a refused resume restarts once from byte 0
            if self._transfer(url):
                break
        else:  # pragma: no cover - _transfer returns True on its from-zero attempt
            raise DownloadError(f"{url}: could not complete the transfer")
        size = self.part.stat().st_size
        if self.expected_size is not None and size != self.expected_size:
            self.discard()
            raise DownloadError(f"{url}: got {size:,} bytes, expected {self.expected_size:,}; "
                                "the file was discarded")
        target = output_file if isinstance(output_file, (str, os.PathLike)) else None
        if target is None:  # a file object: copy into it (pooch passes a path; kept for the protocol)
            with open(self.part, "rb") as fh:
                shutil.copyfileobj(fh, output_file)
            self.discard()
        else:
            os.replace(self.part, target)
            self.meta_path.unlink(missing_ok=True)
        return None

    def _transfer(self, url: str) -> bool:
        """One request; True when ``part`` holds the whole file, False to restart from zero."""
        import requests
        import urllib3

        have, validator = self._resume_offset(url)
        headers = {"Accept-Encoding": "identity"}
        if have:
            headers["Range"] = f"bytes={have}-"
            if validator:
                headers["If-Range"] = validator
        try:
            resp = requests.get(url, headers=headers, stream=True, timeout=self.timeout, allow_redirects=True)
        except requests.RequestException as exc:
            raise DownloadError(f"cannot download {url}: {exc}") from None
        with resp:
            if resp.status_code == 416 and have:
                _, total = _content_range(resp.headers.get("Content-Range"))
                if total == have:
                    return True  # the part already holds every byte
                self.discard()
                return False
            if resp.status_code == 206 and have:
                start, total = _content_range(resp.headers.get("Content-Range"))
                if start != have:
                    self.discard()
                    return False
                mode = "ab"
            elif resp.status_code == 200:
                have, mode = 0, "wb"
                length = resp.headers.get("Content-Length")
                total = int(length) if length and length.isdigit() else None
            else:
                raise DownloadError(f"cannot download {url}: HTTP {resp.status_code} {resp.reason or ''}".rstrip())
            etag = resp.headers.get("ETag")
            new_validator = etag if etag and not etag.startswith("W/") else resp.headers.get("Last-Modified")
            self._write_meta({"url": url, "validator": new_validator, "total": total})
            done = have
            if self.progress:
                self.progress(done, total)
            try:
                with open(self.part, mode) as fh:
                    for chunk in resp.raw.stream(self.chunk_size, decode_content=False):
                        if chunk:
                            fh.write(chunk)
                            done += len(chunk)
                            if self.progress:
                                self.progress(done, total)
            except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
                why = exc.args[0] if exc.args and isinstance(exc.args[0], str) else exc
                raise DownloadError(self._interrupted(url, total, why)) from None
        if total is not None and self.part.stat().st_size != total:
            raise DownloadError(self._interrupted(url, total, "connection closed early"))
        return True

    def _interrupted(self, url: str, total: int | None, why: object) -> str:
        kept = self.part.stat().st_size if self.part.exists() else 0
        return (f"download of {url} interrupted after {_human(kept)} of {_human(total)} ({why}); "
                f"the partial file is kept at {self.part} and the same command resumes it")


# --------------------------------------------------------------------------------------------
# fetching
# --------------------------------------------------------------------------------------------




def _check_not_lfs_pointer(path: Path, url: str) -> None:
    if path.stat().st_size < 1024:
        with open(path, "rb") as fh:
            if fh.read(len(LFS_POINTER_PREFIX)) == LFS_POINTER_PREFIX:
                path.unlink()
                raise DownloadError(f"{url} returned a Git LFS pointer, not the file; use the "
                                    "github.com/<owner>/<repo>/raw/... URL (it redirects to the LFS object)")


def _record(task: str, rf: RemoteFile, url: str, path: Path) -> str:
    digest = sha256_of(path)
    manifest_path = downloads_dir(task) / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError):
        manifest = {}
    manifest[rf.filename] = {"url": url, "sha256": digest, "size": path.stat().st_size,
                             "sha256_pinned": rf.sha256 is not None,
                             "downloaded": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    tmp = manifest_path.with_name("manifest.json.tmp")
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, manifest_path)
    return digest


def fetch(task: str, rf: RemoteFile, *, force: bool = False, progress: Progress | None = None) -> Path:
    """Download ``rf`` into ``downloads/<task>/`` (or reuse the cached copy) and return its path."""
    import pooch

    pooch.get_logger().setLevel("WARNING")
    folder = downloads_dir(task)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / rf.filename
    part = folder / (rf.filename + ".part")
    if force:
        target.unlink(missing_ok=True)
        ResumableDownloader(part).discard()
    errors: list[str] = []
    for url in rf.urls:
        downloader = ResumableDownloader(part, progress=progress, sha256_known=rf.sha256 is not None,
                                         expected_size=rf.size)
        try:
            got = Path(pooch.retrieve(url, known_hash=f"sha256:{rf.sha256}" if rf.sha256 else None,
                                      fname=rf.filename, path=folder, downloader=downloader))
        except DownloadError as exc:
            errors.append(str(exc))
            continue
        except ValueError as exc:  # pooch: hash mismatch (its temporary file is already deleted)
            errors.append(f"checksum mismatch for {url}: {exc} The download was deleted; nothing "
                          f"was kept in {folder}.")
            continue
        _check_not_lfs_pointer(got, url)
        _record(task, rf, url, got)
        return got
    if len(errors) == 1:
        raise DownloadError(errors[0])
    raise DownloadError(f"{rf.filename}: every source failed:\n  " + "\n  ".join(errors))


# --------------------------------------------------------------------------------------------
# safe archive extraction
# --------------------------------------------------------------------------------------------


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


def _link_inside(member_parts: tuple[str, ...], target: str, archive: Path, name: str,
                 relative_to_member: bool) -> tuple[str, ...]:
    """Lexically resolve a link target; refuse one that leaves the destination."""
    clean = target.replace("\\", "/")
    if clean.startswith("/") or re.match(r"^[A-Za-z]:", clean):
        raise RBenchError(f"{archive}: refusing link {name!r} -> {target!r}: absolute target")
    base = list(member_parts[:-1]) if relative_to_member else []
    for part in PurePosixPath(clean).parts:
        if part in ("", "."):
            continue
        if part == "..":
            if not base:
                raise RBenchError(f"{archive}: refusing link {name!r} -> {target!r}: points outside the destination")
            base.pop()
        else:
            base.append(part)
    return tuple(base)


@dataclass
class _Member:
    parts: tuple[str, ...]
    kind: str  # file | dir | symlink | hardlink
    link: str = ""
    handle: Any = None  # ZipInfo or TarInfo


def _zip_members(zf: zipfile.ZipFile, archive: Path) -> list[_Member]:
    out = []
    for info in zf.infolist():
        parts = _member_parts(info.filename, archive)
        if not parts:
            continue
        mode = info.external_attr >> 16
        if stat.S_ISLNK(mode):
            target = zf.read(info).decode("utf-8", "replace")
            _link_inside(parts, target, archive, info.filename, relative_to_member=True)
            out.append(_Member(parts, "symlink", target, info))
        elif info.is_dir():
            out.append(_Member(parts, "dir", handle=info))
        else:
            out.append(_Member(parts, "file", handle=info))
    return out


def _tar_members(tf: tarfile.TarFile, archive: Path) -> list[_Member]:
    out = []
    for info in tf.getmembers():
        parts = _member_parts(info.name, archive)
        if not parts:
            continue
        if info.issym():
            _link_inside(parts, info.linkname, archive, info.name, relative_to_member=True)
            out.append(_Member(parts, "symlink", info.linkname, info))
        elif info.islnk():
            _link_inside(parts, info.linkname, archive, info.name, relative_to_member=False)
            out.append(_Member(parts, "hardlink", info.linkname, info))
        elif info.isdir():
            out.append(_Member(parts, "dir", handle=info))
        elif info.isreg():
            out.append(_Member(parts, "file", handle=info))
        else:
            raise RBenchError(f"{archive}: refusing member {info.name!r}: special file (device, fifo)")
    return out


def _inside(path: Path, root: Path) -> bool:
    real, base = os.path.realpath(path), os.path.realpath(root)
    return real == base or real.startswith(base + os.sep)


def _extract_members(members: Iterable[_Member], dest: Path, archive: Path,
                     open_member: Callable[[Any], Any]) -> list[str]:
    written = []
    for m in members:
        target = dest.joinpath(*m.parts)
        if not _inside(target.parent, dest) or target.is_symlink():
            raise RBenchError(f"{archive}: refusing member {'/'.join(m.parts)!r}: its folder leaves the destination")
        if m.kind == "dir":
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if not _inside(target.parent, dest):
            raise RBenchError(f"{archive}: refusing member {'/'.join(m.parts)!r}: its folder leaves the destination")
        if m.kind == "symlink":
            os.symlink(m.link, target)
        elif m.kind == "hardlink":
            source = dest.joinpath(*_link_inside(m.parts, m.link, archive, m.link, relative_to_member=False))
            if not source.is_file() or not _inside(source, dest):
                raise RBenchError(f"{archive}: refusing hard link {'/'.join(m.parts)!r} -> {m.link!r}")
            shutil.copyfile(source, target)
        else:
            with open_member(m.handle) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
        written.append("/".join(m.parts))
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


# --------------------------------------------------------------------------------------------
# installing into the raw folder
# --------------------------------------------------------------------------------------------


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def link_or_copy(src: Path, dest: Path) -> str:
    """Hard-link ``src`` to ``dest`` (replacing it), copying when a link is impossible."""
    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
    _remove(tmp)
    try:
        os.link(src, tmp)
        how = "linked"
    except OSError:
        shutil.copy2(src, tmp)
        how = "copied"
    if dest.is_dir() and not dest.is_symlink():
        shutil.rmtree(dest)
    os.replace(tmp, dest)
    return how


def install(task: str, files: list[tuple[RemoteFile, Path]]) -> Path:
    """Put downloaded files into ``raw_dir(task)``: archives extracted, other files linked."""
    raw = paths.raw_dir(task)
    raw.mkdir(parents=True, exist_ok=True)
    for rf, path in files:
        if not (rf.extract and archive_kind(path)):
            link_or_copy(path, raw / rf.filename)
            continue
        tmp = raw.parent / f".extract-{task}-{os.getpid()}"
        _remove(tmp)
        try:
            safe_extract(path, tmp)
            for entry in sorted(tmp.iterdir()):
                _remove(raw / entry.name)
                os.replace(entry, raw / entry.name)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp)
    return raw


def download_task(spec: TaskSpec, *, force: bool = False,
                  progress: Callable[[RemoteFile], Progress | None] | None = None) -> Path:
    """Fetch every file of the task (cached, checksummed, resumable) and install it into raw_dir."""
    got = []
    for rf in remote_files(spec):
        got.append((rf, fetch(spec.name, rf, force=force, progress=progress(rf) if progress else None)))
    return install(spec.name, got)
