"""Task downloads: checksummed, resumable transfers and archive extraction that cannot escape.

Where files go
--------------
``RBENCH_HOME/downloads/<task>/<file>`` is the download cache (kept, so ``rbench data download
--force`` and re-extraction never need the network twice). ``install`` then fills
``rbench.core.paths.raw_dir(task)``, which the task loaders read: archives (zip, tar, tar.gz) are
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

Length: a file is installed only when something vouches for its end. The length is known from
``Content-Length`` (status 200), the total in ``Content-Range`` (206, 416), or the
``RemoteFile.size``; a chunked body ends with an empty chunk (urllib3 raises when the connection
closes before it). A server that sends none of these ends the body by closing the connection, so
a transfer cut short looks exactly like the whole file: such a transfer is accepted only when a
sha256 (pinned, or recorded by an earlier download, below) or a size checks it, and is otherwise
refused with a line saying to pin ``sha256=`` or ``size=`` (no guess, no install with a warning).

Checksums
---------
sha256 values are pinned where a public source gives them: MovieLens 1M's archive (widely
published alongside GroupLens' own MD5 ``c4d9eecfca2ab87c1945afe126590906``) and the two ESCI
parquet files (the sha256 ``oid`` of their Git LFS pointers in amazon-science/esci-data at
commit 7e0e307, whose raw URLs are pinned to that commit). No checksum is published for the
Amazon 2014 review files (``rec-toy``, ``rec-music``) and 2023 ones (``rec-clothing``), for
GraphRouter's ``router_data.csv`` (a Google Drive file) and ``LLM_Descriptions.json`` (pinned to a
repository commit), nor for MS MARCO v1.1's Hugging Face parquet files (Hugging Face's LFS oid is
their sha256, but it cannot be read from this offline build machine): their ``sha256`` stays
``None``.
For them, and for any other unpinned file, the first sha256 seen is recorded in
``downloads/<task>/manifest.json`` (and printed) and from then on acts as the pin: a cached copy
whose sha256 differs from it (damaged on disk) is fetched again with a note; a fetch that yields a
different sha256 (the file changed upstream, or a cut transfer without a length) is refused with
one line naming both hashes and deleted, and the manifest keeps the recorded one. ``rbench data
download <task> --force`` is the way to accept an upstream change on purpose: it fetches anew,
records the new sha256 (the old one as ``previous_sha256``) and says so. Losing the manifest
(deleted, or unreadable, which is said) loses what was recorded: the next download records
afresh. A cached file whose size differs from a known ``RemoteFile.size`` is fetched again.
A file that turns out to be a Git LFS pointer (what ``raw.githubusercontent.com`` serves for LFS
files) or an HTML page where a data file was expected (Google Drive's virus-scan confirmation for
large files, a login wall) is deleted and refused with a clear message; the next mirror is tried.

Archives
--------
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

import json
import os
import re
import shutil
import stat
import tarfile
import warnings
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any

from rbench.api import RemoteFile, TaskSpec
from rbench.core import paths
from rbench.core.atomic import atomic_path, atomic_replace, atomic_write_text, locked, scratch_dir
from rbench.core.errors import DataError, RBenchError
from rbench.core.hashing import file_sha256 as sha256_of
from rbench.core.inputs import read_json

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
        self.called = False  # pooch asked for a transfer (the cache did not hold a good copy)
        self.framed = False  # the last transfer's length was known: Content-Length/-Range, or chunked

    # -- partial-file bookkeeping
    def _meta(self) -> dict[str, Any]:
        try:
            meta = read_json(self.meta_path)
        except DataError:
            return {}
        return meta if isinstance(meta, dict) else {}

    def _write_meta(self, data: dict[str, Any]) -> None:
        atomic_write_text(self.meta_path, json.dumps(data))

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
        self.called = True
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
        if not (self.framed or self.expected_size is not None or self.sha256_known):
            self.discard()
            raise DownloadError(
                f"{url}: the server sent no length (no Content-Length, not chunked), so a transfer cut short "
                "cannot be told from the whole file, and nothing else vouches for these "
                f"{size:,} bytes (no pinned sha256 or size, no sha256 recorded by an earlier download); "
                "refused. Pin sha256= or size= in the task's RemoteFile")
        target = output_file if isinstance(output_file, (str, os.PathLike)) else None
        if target is None:  # a file object: copy into it (pooch passes a path; kept for the protocol)
            with open(self.part, "rb") as fh:
                shutil.copyfileobj(fh, output_file)
            self.discard()
        else:  # pooch checks the sha256 of ``target`` (its own unique temporary) and moves it into place
            atomic_replace(self.part, target)
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
                    self.framed = True
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
            # a chunked body ends with an empty chunk: urllib3 raises when the connection closes first
            self.framed = total is not None or bool(getattr(resp.raw, "chunked", False))
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




def _not_the_file(path: Path, url: str, rf: RemoteFile, task: str) -> str | None:
    """Why the bytes at ``path`` are a stand-in rather than the file (None when they look right).

    Two stand-ins come back with status 200 and would otherwise be recorded as the file's first
    sha256: a Git LFS pointer (``raw.githubusercontent.com`` for LFS files) and an HTML page where
    a data file was expected (Google Drive's "can't scan this file for viruses" confirmation, a
    login wall, a hosting error page)."""
    with open(path, "rb") as fh:
        head = fh.read(1024)
    if head.startswith(LFS_POINTER_PREFIX) and path.stat().st_size < 1024:
        return (f"{url} returned a Git LFS pointer, not the file; use the "
                "github.com/<owner>/<repo>/raw/... URL (it redirects to the LFS object)")
    if not rf.filename.lower().endswith((".html", ".htm")) and _HTML_START.match(head):
        return (f"{url} returned an HTML page, not {rf.filename} (a confirmation page, a login wall or an "
                f"error page of the host); download it in a browser and use `rbench data prepare {task} "
                "--from DIR`")
    return None


_HTML_START = re.compile(rb"\s*(<!doctype\s+html|<html)", re.IGNORECASE)
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _read_manifest(folder: Path) -> dict[str, Any]:
    """``downloads/<task>/manifest.json``; an unreadable one is said (its recorded hashes are lost)."""
    path = folder / "manifest.json"
    if not os.path.lexists(path):
        return {}
    try:
        manifest = read_json(path)
    except DataError as exc:
        manifest = exc
    if isinstance(manifest, dict):
        return manifest
    why = manifest.reason if isinstance(manifest, DataError) else "not a JSON object"
    warnings.warn(f"{path} is unreadable ({why}); the sha256 values it recorded are lost and are recorded "
                  "again from these downloads", stacklevel=3)
    return {}


def _recorded(manifest: dict[str, Any], filename: str) -> dict[str, Any]:
    """The manifest's entry for ``filename`` when it holds a well-formed sha256, else {}."""
    entry = manifest.get(filename)
    ok = isinstance(entry, dict) and isinstance(entry.get("sha256"), str) and _SHA256.fullmatch(entry["sha256"])
    return entry if ok else {}


def _record(folder: Path, manifest: dict[str, Any], rf: RemoteFile, url: str, path: Path,
            digest: str | None, fetched: bool) -> str:
    """Write the file's entry; ``digest`` is its already verified sha256 (None: compute it)."""
    digest = digest or sha256_of(path)
    old = _recorded(manifest, rf.filename)
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    entry = {"url": url, "sha256": digest, "size": path.stat().st_size, "sha256_pinned": rf.sha256 is not None,
             "downloaded": now if fetched or "downloaded" not in old else old["downloaded"]}
    if old and old["sha256"] != digest:
        entry["previous_sha256"] = old["sha256"]
        if rf.sha256 is None:
            warnings.warn(f"{rf.filename}: sha256 changed from {old['sha256']} (recorded {old.get('downloaded', '?')})"
                          f" to {digest} (--force); the new one is recorded", stacklevel=3)
    elif "previous_sha256" in old:
        entry["previous_sha256"] = old["previous_sha256"]
    manifest[rf.filename] = entry
    atomic_write_text(folder / "manifest.json", json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return digest


def fetch(task: str, rf: RemoteFile, *, force: bool = False, progress: Progress | None = None) -> Path:
    """Download ``rf`` into ``downloads/<task>/`` (or reuse the cached copy) and return its path.

    The sha256 checked is the pinned one, else the one recorded when the file was first downloaded
    (``force`` fetches again and accepts a changed file, with a note); see the module doc."""
    folder = downloads_dir(task)
    folder.mkdir(parents=True, exist_ok=True)
    # ``<file>.part`` keeps a fixed name (not a unique temporary) so that the next run finds and
    # resumes it; a fixed name can be shared, so downloads into one folder take turns instead
    with locked(folder):
        return _fetch(task, folder, rf, force=force, progress=progress)


def _fetch(task: str, folder: Path, rf: RemoteFile, *, force: bool, progress: Progress | None) -> Path:
    import pooch

    pooch.get_logger().setLevel("WARNING")
    target = folder / rf.filename
    part = folder / (rf.filename + ".part")
    manifest = _read_manifest(folder)
    recorded = None if rf.sha256 else _recorded(manifest, rf.filename).get("sha256")
    known = rf.sha256 or (None if force else recorded)
    if force:
        target.unlink(missing_ok=True)
        ResumableDownloader(part).discard()
    elif target.is_file() and rf.size is not None and target.stat().st_size != rf.size:
        warnings.warn(f"{target} holds {target.stat().st_size:,} bytes, not {rf.size:,}; fetched again", stacklevel=2)
        target.unlink()
    cached = target.is_file()
    errors: list[str] = []
    for url in rf.urls:
        downloader = ResumableDownloader(part, progress=progress, sha256_known=known is not None,
                                         expected_size=rf.size)
        try:
            got = Path(pooch.retrieve(url, known_hash=f"sha256:{known}" if known else None,
                                      fname=rf.filename, path=folder, downloader=downloader))
        except DownloadError as exc:
            errors.append(str(exc))
            continue
        except ValueError as exc:  # pooch: hash mismatch (its temporary file is already deleted)
            if cached and downloader.called:  # pooch found the cached copy bad before fetching again
                target.unlink(missing_ok=True)
            if rf.sha256 is None:  # the recorded sha256 was checked
                new = _SHA256.findall(str(exc))
                errors.append(
                    f"{rf.filename}: {url} now gives sha256 {new[-1] if new else '?'}, but {recorded} was recorded "
                    f"when it was first downloaded ({_recorded(manifest, rf.filename).get('downloaded', '?')}); "
                    f"refused, and the download deleted. If the file changed upstream on purpose, "
                    f"`rbench data download {task} --force` accepts the new one")
            else:
                errors.append(f"checksum mismatch for {url}: {exc} The download was deleted; nothing "
                              f"was kept in {folder}.")
            continue
        if cached and downloader.called:
            warnings.warn(f"{target}: the cached copy did not match its sha256 {known}; fetched again", stacklevel=2)
        stand_in = _not_the_file(got, url, rf, task)
        if stand_in is not None:
            got.unlink()
            errors.append(stand_in)
            continue
        _record(folder, manifest, rf, url, got, known, fetched=downloader.called)
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


# --------------------------------------------------------------------------------------------
# installing into the raw folder
# --------------------------------------------------------------------------------------------


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


@dataclass(frozen=True)
class PlannedFile:
    """One file of ``rbench data download --all``: its size (pinned, recorded by an earlier
    download, or what the server answers to HEAD; None when nothing says) and whether a copy is
    already in the download cache (``fetch`` still checks it)."""

    task: str
    file: RemoteFile
    size: int | None
    cached: bool


def remote_size(rf: RemoteFile, timeout: float = 10.0) -> int | None:
    """The file's size from its first URL that answers HEAD with a Content-Length (redirects
    followed, no content decoding), or None: sizes are shown before a download, never trusted
    for checking (the sha256 and the transfer's own length do that)."""
    import requests

    for url in rf.urls:
        try:
            r = requests.head(url, allow_redirects=True, timeout=timeout, headers={"Accept-Encoding": "identity"})
        except requests.RequestException:
            continue
        length = r.headers.get("Content-Length")
        if r.ok and length and length.isdigit() and "text/html" not in r.headers.get("Content-Type", ""):
            return int(length)
    return None


def plan_downloads(specs: list[TaskSpec], probe: Callable[[RemoteFile], int | None] = remote_size
                   ) -> list[PlannedFile]:
    """Every downloadable file of ``specs`` with its size, for the total shown before ``--all``
    starts. A cached file counts with its cached size and is not probed."""
    planned = []
    for spec in specs:
        folder = downloads_dir(spec.name)
        manifest = _read_manifest(folder) if folder.is_dir() else {}
        for rf in spec.downloads:
            target = folder / rf.filename
            cached = target.is_file()
            size = rf.size or (target.stat().st_size if cached else None) \
                or _recorded(manifest, rf.filename).get("size") or probe(rf)
            planned.append(PlannedFile(spec.name, rf, size, cached))
    return planned


def download_task(spec: TaskSpec, *, force: bool = False,
                  progress: Callable[[RemoteFile], Progress | None] | None = None) -> Path:
    """Fetch every file of the task (cached, checksummed, resumable) and install it into raw_dir."""
    got = []
    for rf in remote_files(spec):
        got.append((rf, fetch(spec.name, rf, force=force, progress=progress(rf) if progress else None)))
    raw = install(spec.name, got)
    fetched = {rf.filename for rf, _ in got}
    names = ", ".join(s.name for s in spec.sources if any(f.filename in fetched for f in s.files))
    write_provenance(raw, DataSource(names or spec.sources[0].name, own=True, how="rbench data download"))
    return raw


# --------------------------------------------------------------------------------------------
# provenance: what data a task was built from (a table names it when it is not the task's own)
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# collections from ir_datasets and Hugging Face datasets (rbench data import --ir-datasets / --hf)
# --------------------------------------------------------------------------------------------
# Each writes a BEIR folder (corpus.jsonl, queries.jsonl, qrels/{train,dev,test}.tsv) that
# ``rbench.tasks.families.imported.import_beir_folder`` then validates and imports like any
# other; the packages keep their own downloads and caches. Both are optional extras, imported
# only here, inside the functions that need them.

_HF_SPLITS = {"train": "train", "dev": "dev", "validation": "dev", "valid": "dev", "test": "test"}


def _external_error(flag: str, ident: str, exc: BaseException) -> RBenchError:
    """A failure inside ir_datasets / datasets (no network, an unknown id) as one line."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    cause = exc.__cause__ or exc.__context__
    if cause is not None and str(cause).strip():  # datasets wraps the reason (a schema clash) in its own error
        text += f" ({type(cause).__name__}: {' '.join(str(cause).split())[:200]})"
    return RBenchError(f"{flag} {ident}: {type(exc).__name__}: {text[:500]}")


def _jsonl_writer(path: Path) -> Any:
    path.parent.mkdir(parents=True, exist_ok=True)
    return open(path, "w", encoding="utf-8", newline="\n")


def _json_line(obj: dict[str, Any]) -> str:
    return json.dumps(obj, ensure_ascii=False) + "\n"


def _tsv_id(value: Any, where: str, row: int, field: str) -> str:
    """An id as a qrels TSV field: a tab or line break would split the line."""
    if isinstance(value, bool) or not isinstance(value, (str, int)) or str(value) == "":
        raise DataError(f"expected a non-empty string id, got {value!r}", where, row, field)
    text = str(value)
    if any(c in text for c in "\t\r\n"):
        raise DataError(f"id {text!r} holds a tab or line break", where, row, field)
    return text


def ir_datasets_folder(ident: str, folder: Path) -> str:
    """Write the ``ir_datasets`` collection ``ident`` as a BEIR folder in ``folder``; returns the
    import option that fetches it again. An id with qrels is one split, the test split (a zero-shot
    collection: ``beir/scifact/test``, ``msmarco-passage/trec-dl-2019/judged``); an id without
    (``beir/scifact``) takes its ``/train``, ``/dev`` and ``/test`` subsets as the three splits."""
    flag = "--ir-datasets"
    try:
        import ir_datasets
    except ImportError:
        raise RBenchError(f"{flag} needs the ir_datasets package: pip install 'rbench[ir-datasets]'") from None
    try:
        ds = ir_datasets.load(ident)
    except KeyError:
        raise RBenchError(f"{flag} {ident}: not an ir_datasets id (see https://ir-datasets.com)") from None
    try:
        if not ds.has_docs():
            raise RBenchError(f"{flag} {ident}: the dataset has no documents")
        splits: dict[str, Any] = {}
        if ds.has_qrels():
            splits["test"] = ds
        else:
            for split in ("train", "dev", "test"):
                try:
                    sub = ir_datasets.load(f"{ident}/{split}")
                except KeyError:
                    continue
                if sub.has_qrels() and sub.has_queries():
                    splits[split] = sub
        if "test" not in splits:
            raise RBenchError(f"{flag} {ident}: no qrels here nor in a {ident}/test subset; name the judged "
                              "subset (e.g. beir/scifact/test, msmarco-passage/trec-dl-2019/judged)")
        if not all(s.has_queries() for s in splits.values()):
            raise RBenchError(f"{flag} {ident}: the dataset has qrels but no queries")
        with _jsonl_writer(folder / "corpus.jsonl") as fh:
            for doc in ds.docs_iter():
                fields = getattr(doc, "_fields", ())
                text = doc.text if "text" in fields else doc.default_text()
                title = doc.title if "title" in fields else ""
                fh.write(_json_line({"_id": doc.doc_id, "title": title or "", "text": text}))
        seen: dict[str, str] = {}
        with _jsonl_writer(folder / "queries.jsonl") as fh:
            for sub in splits.values():
                for q in sub.queries_iter():
                    text = q.text if "text" in getattr(q, "_fields", ()) else q.default_text()
                    if q.query_id in seen:
                        if seen[q.query_id] != text:
                            raise RBenchError(f"{flag} {ident}: query {q.query_id!r} has two texts in two subsets")
                        continue
                    seen[q.query_id] = text
                    fh.write(_json_line({"_id": q.query_id, "text": text}))
        for split, sub in splits.items():
            where = f"{ident} qrels" if sub is ds else f"{ident}/{split} qrels"
            with _jsonl_writer(folder / "qrels" / f"{split}.tsv") as fh:
                fh.write("query-id\tcorpus-id\tscore\n")
                for row, qrel in enumerate(sub.qrels_iter(), 1):
                    qid = _tsv_id(qrel.query_id, where, row, "query_id")
                    did = _tsv_id(qrel.doc_id, where, row, "doc_id")
                    fh.write(f"{qid}\t{did}\t{qrel.relevance}\n")
    except RBenchError:
        raise
    except Exception as exc:  # the package's own failures (a download without network, a bad file)
        raise _external_error(flag, ident, exc) from exc
    return f"{flag} {ident}"


def hf_spec(text: str) -> tuple[str, str | None]:
    """``REPO[:CONFIG]`` (a hub repository or a local dataset folder) -> (repo, config)."""
    repo, sep, config = text.rpartition(":")
    if sep and repo and config and not any(c in config for c in "/\\") and len(repo) > 1:
        return repo, config
    return text, None


def _hf_rows(dataset: Any, where: str, fields: dict[str, tuple[str, ...]]) -> Iterable[tuple[int, dict[str, Any]]]:
    """(row number, {name: value}) of a ``datasets.Dataset``, each wanted field taken from the
    first of its accepted column names; a missing column is one line naming the config."""
    columns = set(dataset.column_names)
    chosen = {}
    for name, accepted in fields.items():
        found = [c for c in accepted if c in columns]
        if not found and name != "title":
            raise DataError(f"no {' or '.join(repr(c) for c in accepted)} column (columns: "
                            f"{', '.join(sorted(columns))})", where)
        chosen[name] = found[0] if found else None
    row = 0
    for batch in dataset.iter(batch_size=10_000):
        for i in range(len(next(iter(batch.values())))):
            row += 1
            yield row, {name: (batch[col][i] if col else None) for name, col in chosen.items()}


def _hf_text(value: Any, where: str, row: int, field: str, required: bool = True) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise DataError(f"expected a string, got {type(value).__name__}", where, row, field)
    return value


def hf_folder(spec: str, folder: Path) -> str:
    """Write the MTEB-style retrieval dataset ``REPO[:CONFIG]`` (Hugging Face ``datasets``: a hub
    repository or a local folder) as a BEIR folder in ``folder``; returns the import option that
    fetches it again. Its ``corpus`` and ``queries`` configs hold ``_id``/``title``/``text`` and
    ``_id``/``text``; its qrels config (CONFIG, else ``qrels`` where there is one, else ``default``)
    has ``query-id``, ``corpus-id``, ``score`` in splits named train, dev (or validation) and test.
    With CONFIG, ``CONFIG-corpus`` and ``CONFIG-queries`` are used where they exist (multilingual
    layouts)."""
    flag = "--hf"
    repo, config = hf_spec(spec)
    try:
        import datasets
    except ImportError:
        raise RBenchError(f"{flag} needs the datasets package: pip install 'rbench[hf]'") from None
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    try:
        configs = list(datasets.get_dataset_config_names(repo))
        qrels_cfg = config or ("qrels" if "qrels" in configs else "default")
        corpus_cfg = f"{config}-corpus" if config and f"{config}-corpus" in configs else "corpus"
        queries_cfg = f"{config}-queries" if config and f"{config}-queries" in configs else "queries"
        missing = [c for c in (corpus_cfg, queries_cfg, qrels_cfg) if c not in configs]
        if missing:
            raise RBenchError(f"{flag} {spec}: no {', '.join(missing)} config (it has: {', '.join(configs) or 'none'}); "
                              "an MTEB-style retrieval dataset has corpus, queries and qrels (or default) configs")

        def one_split(cfg: str) -> tuple[Any, str]:
            parts = datasets.load_dataset(repo, cfg)
            names = list(parts)
            if len(names) != 1:
                raise RBenchError(f"{flag} {spec}: the {cfg} config has splits {', '.join(names)}; expected one")
            return parts[names[0]], f"{repo} ({cfg} config, {names[0]} split)"

        qrels = datasets.load_dataset(repo, qrels_cfg)
        unknown = [s for s in qrels if s not in _HF_SPLITS]
        if unknown:
            raise RBenchError(f"{flag} {spec}: the {qrels_cfg} config has split {unknown[0]!r}; expected train, "
                              "dev (or validation) and test")
        if "test" not in qrels:
            raise RBenchError(f"{flag} {spec}: the {qrels_cfg} config has no test split (it has: "
                              f"{', '.join(qrels)})")
        corpus, where = one_split(corpus_cfg)
        with _jsonl_writer(folder / "corpus.jsonl") as fh:
            for row, r in _hf_rows(corpus, where, {"_id": ("_id", "id", "doc_id"), "title": ("title",),
                                                   "text": ("text",)}):
                fh.write(_json_line({"_id": _tsv_id(r["_id"], where, row, "_id"),
                                     "title": _hf_text(r["title"], where, row, "title", required=False),
                                     "text": _hf_text(r["text"], where, row, "text")}))
        queries, where = one_split(queries_cfg)
        with _jsonl_writer(folder / "queries.jsonl") as fh:
            for row, r in _hf_rows(queries, where, {"_id": ("_id", "id", "query_id"), "text": ("text",)}):
                fh.write(_json_line({"_id": _tsv_id(r["_id"], where, row, "_id"),
                                     "text": _hf_text(r["text"], where, row, "text")}))
        for split in qrels:
            target = folder / "qrels" / f"{_HF_SPLITS[split]}.tsv"
            if target.exists():
                raise RBenchError(f"{flag} {spec}: the {qrels_cfg} config has both dev and validation splits")
            where = f"{repo} ({qrels_cfg} config, {split} split)"
            with _jsonl_writer(target) as fh:
                fh.write("query-id\tcorpus-id\tscore\n")
                for row, r in _hf_rows(qrels[split], where, {"q": ("query-id", "query_id", "qid"),
                                                             "d": ("corpus-id", "corpus_id", "doc_id"),
                                                             "s": ("score", "relevance", "label")}):
                    score = r["s"]
                    if isinstance(score, bool) or not isinstance(score, (int, float)):
                        raise DataError(f"expected a number, got {score!r}", where, row, "score")
                    shown = int(score) if float(score).is_integer() else score
                    fh.write(f"{_tsv_id(r['q'], where, row, 'query-id')}\t{_tsv_id(r['d'], where, row, 'corpus-id')}"
                             f"\t{shown}\n")
    except RBenchError:
        raise
    except Exception as exc:  # the package's own failures (no network, an unknown repository)
        raise _external_error(flag, spec, exc) from exc
    return f"{flag} {spec}"
