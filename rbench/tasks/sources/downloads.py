"""Task downloads: checksummed, resumable transfers into ``RBENCH_HOME/downloads/<task>/``.

The transfer
------------
``transfer.ResumableTransfer`` streams each file under the one HTTP policy into ``<file>.part``
(resumable, capped by ``transfer.DownloadLimits``: deadline, stall, bytes; see its module doc).
``fetch`` then checks the whole part (its sha256 against the pin or the recorded hash, below; a
Git LFS pointer or an HTML page in its place) and only then renames it onto ``<file>``, under a
lock of the folder: the download cache never holds a half-written or unchecked file. A cached
file whose sha256 is known is hashed before it is reused.

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
from rbench.core.http import HttpPolicy, RequestFailed, open_stream, public_url
from rbench.core.inputs import read_json
from rbench.tasks.sources.transfer import DownloadError, DownloadLimits, Progress, ResumableTransfer

LFS_POINTER_PREFIX = b"version https://git-lfs.github.com/spec/v1"


def remote_files(spec: TaskSpec) -> tuple[RemoteFile, ...]:
    """The task's directly downloadable files (declared in its spec's sources), or a clear error
    naming how else to get the data."""
    if not spec.downloads:
        raise RBenchError(f"task {spec.name!r} has no direct public download; {spec.how_to_get}")
    return spec.downloads


def downloads_dir(task: str) -> Path:
    return paths.home() / "downloads" / task


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
    if isinstance(entry, dict) and isinstance(entry.get("sha256"), str) and _SHA256.fullmatch(entry["sha256"]):
        return entry
    return {}


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


def fetch(task: str, rf: RemoteFile, *, force: bool = False, progress: Progress | None = None,
          limits: DownloadLimits | None = None) -> Path:
    """Download ``rf`` into ``downloads/<task>/`` (or reuse the cached copy) and return its path.

    The sha256 checked is the pinned one, else the one recorded when the file was first downloaded
    (``force`` fetches again and accepts a changed file, with a note); ``limits`` cap each
    transfer (deadline, stall, bytes); see the module doc."""
    folder = downloads_dir(task)
    folder.mkdir(parents=True, exist_ok=True)
    # ``<file>.part`` keeps a fixed name (not a unique temporary) so that the next run finds and
    # resumes it; a fixed name can be shared, so downloads into one folder take turns instead
    with locked(folder):
        return _fetch(task, folder, rf, force=force, progress=progress, limits=limits or DownloadLimits())


def _fetch(task: str, folder: Path, rf: RemoteFile, *, force: bool, progress: Progress | None,
           limits: DownloadLimits) -> Path:
    target = folder / rf.filename
    part = folder / (rf.filename + ".part")
    manifest = _read_manifest(folder)
    recorded = None if rf.sha256 else _recorded(manifest, rf.filename).get("sha256")
    known = rf.sha256 or (None if force else recorded)
    if force:
        target.unlink(missing_ok=True)
        ResumableTransfer(part).discard()
    elif target.is_file() and rf.size is not None and target.stat().st_size != rf.size:
        warnings.warn(f"{target} holds {target.stat().st_size:,} bytes, not {rf.size:,}; fetched again", stacklevel=3)
        target.unlink()
    if target.is_file():
        digest = sha256_of(target)
        if known is None or digest == known:
            _record(folder, manifest, rf, public_url(rf.urls[0]), target, digest, fetched=False)
            return target
        warnings.warn(f"{target}: the cached copy did not match its sha256 {known}; fetched again", stacklevel=3)
        target.unlink()
    errors: list[str] = []
    for address in rf.urls:
        url = public_url(address)  # what messages and the manifest say: no credentials
        transfer = ResumableTransfer(part, progress=progress, sha256_known=known is not None,
                                     expected_size=rf.size, limits=limits)
        try:
            transfer.download(address)
        except DownloadError as exc:
            errors.append(str(exc))
            continue
        digest = sha256_of(part)
        if known is not None and digest != known:
            transfer.discard()
            if rf.sha256 is None:  # the recorded sha256 was checked
                errors.append(
                    f"{rf.filename}: {url} now gives sha256 {digest}, but {recorded} was recorded "
                    f"when it was first downloaded ({_recorded(manifest, rf.filename).get('downloaded', '?')}); "
                    f"refused, and the download deleted. If the file changed upstream on purpose, "
                    f"`rbench data download {task} --force` accepts the new one")
            else:
                errors.append(f"checksum mismatch for {url}: sha256 {digest}, expected {known}. The download "
                              f"was deleted; nothing was kept in {folder}.")
            continue
        stand_in = _not_the_file(part, url, rf, task)
        if stand_in is not None:
            transfer.discard()
            errors.append(stand_in)
            continue
        atomic_replace(part, target)
        transfer.meta_path.unlink(missing_ok=True)
        _record(folder, manifest, rf, url, target, digest, fetched=True)
        return target
    if len(errors) == 1:
        raise DownloadError(errors[0])
    raise DownloadError(f"{rf.filename}: every source failed: "
                        + "; ".join(f"({i}) {e}" for i, e in enumerate(errors, 1)))  # one line


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
    """The file's size from its first URL that answers HEAD with a Content-Length (under the one
    HTTP policy: redirects followed, no content decoding), or None: sizes are shown before a
    download, never trusted for checking (the sha256 and the transfer's own length do that)."""
    policy = HttpPolicy(timeout_s=timeout, retries=0)
    for url in rf.urls:
        try:
            with open_stream(url, policy=policy, method="HEAD") as answer:
                ok, headers = 200 <= answer.status < 300, answer.headers
        except RequestFailed:
            continue
        length = headers.get("Content-Length")
        if ok and length and length.isascii() and length.isdigit() and len(length) <= 18 \
                and "text/html" not in headers.get("Content-Type", ""):
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
