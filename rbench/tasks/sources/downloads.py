"""Task downloads: checksummed, resumable transfers into ``RBENCH_HOME/downloads/<task>/``.

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

"""

from __future__ import annotations

import json
import os
import re
import shutil
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rbench.api import RemoteFile, TaskSpec
from rbench.core import paths
from rbench.core.atomic import atomic_replace, atomic_write_text, locked
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
