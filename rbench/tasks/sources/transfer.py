"""One file's transfer under the one HTTP policy (``rbench.core.http``): resumable, capped in
time and bytes, and never installed half-way.

Every byte of a dataset download goes through ``rbench.core.http.open_stream``, so downloads
follow the rules of every other request rbench makes: a credential (a ``user:password@`` in a
URL) never follows a redirect to another host (the other host is never contacted); redirects
without credentials are followed (mirrors and CDNs need them); a whole transfer ends at its
deadline however slowly the server trickles bytes; a server that goes silent is cut after
``stall_s``; and a server that sends more than the cap is cut there. The limits are
``DownloadLimits``, sized for datasets (hours, not the seconds of a chat request) and settable
(``rbench data download --deadline-s / --stall-s / --max-gb``).

The bytes go to ``<file>.part`` beside the download cache, together with ``<file>.part.json``
(url, total size, the server's validator); only a whole, checked file is renamed onto its final
name (``downloads.fetch``), so a cut transfer never looks like a file. An interrupted transfer
(a lost connection, the deadline, a stall) keeps its part and says so: the same command asks for
the rest with ``Range: bytes=<have>-``. It resumes only when it can tell the remote file is
unchanged: the server's strong ``ETag`` or ``Last-Modified`` is sent as ``If-Range`` (a changed
file then comes back whole, status 200, and the part is discarded), or, for servers that give no
validator, when the sha256 is known (the final check catches a mixed file). A server that ignores
``Range`` (status 200) restarts the file. A flood (more bytes than the cap, or than the file's
declared size) discards the part: there is nothing to resume. Transfers are requested with
``Accept-Encoding: identity`` and never decoded, so byte offsets are file offsets.

Length: a transfer counts as whole only when something vouches for its end: ``Content-Length``
(status 200), the total in ``Content-Range`` (206, 416), the ``RemoteFile.size``, or chunked
framing (its last chunk marks the end; a connection closed before it is an interruption). A
server that sends none of these ends the body by closing the connection, so a cut transfer looks
exactly like the whole file: it is accepted only when a sha256 (pinned, or recorded by an earlier
download) or a size checks it, else refused with a line saying to pin ``sha256=`` or ``size=``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rbench.core.atomic import atomic_write_text
from rbench.core.errors import DataError, RBenchError
from rbench.core.http import HttpPolicy, RequestFailed, StreamCut, open_stream, public_url
from rbench.core.inputs import read_json, size_text

Progress = Callable[[int, "int | None"], None]  # (bytes done, total bytes or None)


class DownloadError(RBenchError):
    """A transfer failed (unreachable host, HTTP error, interrupted body, checksum mismatch)."""


@dataclass(frozen=True)
class DownloadLimits:
    """The caps of one file's transfer. ``deadline_s``: the whole transfer (connecting, headers
    and body) of one file; ``stall_s``: connecting, and the wait for each next byte;
    ``max_bytes``: the most a file may hold (a file whose size is declared may hold only that).
    The defaults fit the largest file a task downloads (a few GB) on a slow line: 6 hours, 2
    minutes, 64 GiB."""

    deadline_s: float = 6 * 3600.0
    stall_s: float = 120.0
    max_bytes: int = 64 << 30

    def __post_init__(self) -> None:
        for name in ("deadline_s", "stall_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value <= 0:
                raise RBenchError(f"download limit {name}={value!r}: expected a finite number of seconds above 0")
        if isinstance(self.max_bytes, bool) or not isinstance(self.max_bytes, int) or self.max_bytes < 1:
            raise RBenchError(f"download limit max_bytes={self.max_bytes!r}: expected a whole number of bytes, at least 1")

    def policy(self) -> HttpPolicy:
        """The HTTP policy of one transfer (no retries: the next command resumes)."""
        return HttpPolicy(timeout_s=self.deadline_s, retries=0, stall_s=self.stall_s, max_bytes=self.max_bytes)

    def says(self) -> str:
        return f"deadline {self.deadline_s:g} s, stall {self.stall_s:g} s, cap {size_text(self.max_bytes)}"


def _content_range(value: str | None) -> tuple[int | None, int | None]:
    """``bytes 100-199/1000`` -> (100, 1000); ``bytes */1000`` -> (None, 1000)."""
    m = re.match(r"^\s*bytes\s+(?:(\d{1,18})-\d{1,18}|\*)/(\d{1,18}|\*)\s*$", value or "")
    if not m:
        return None, None
    start = int(m.group(1)) if m.group(1) is not None else None
    total = int(m.group(2)) if m.group(2) != "*" else None
    return start, total


def _length(value: str | None) -> int | None:
    """A ``Content-Length`` as a number (ASCII digits only, at most 18: a byte count)."""
    return int(value) if value and re.fullmatch(r"[0-9]{1,18}", value.strip()) else None


class ResumableTransfer:
    """Fetches one URL into ``part`` (see the module doc); ``download`` leaves the whole file
    there or raises ``DownloadError``."""

    def __init__(self, part: Path, *, progress: Progress | None = None, sha256_known: bool = False,
                 expected_size: int | None = None, limits: DownloadLimits | None = None,
                 chunk_size: int = 1 << 20) -> None:
        self.part = Path(part)
        self.meta_path = self.part.with_name(self.part.name + ".json")
        self.progress = progress
        self.sha256_known = sha256_known
        self.expected_size = expected_size
        self.limits = limits or DownloadLimits()
        self.chunk_size = chunk_size
        self.framed = False  # the last transfer's length was known: Content-Length/-Range, or chunked

    @property
    def cap(self) -> int:
        """The most bytes the file may hold: its declared size when known, else the limit."""
        return min(self.limits.max_bytes, self.expected_size) if self.expected_size is not None \
            else self.limits.max_bytes

    # -- partial-file bookkeeping
    def _meta(self) -> dict[str, Any]:
        try:
            meta = read_json(self.meta_path)
        except DataError:
            return {}
        return meta if isinstance(meta, dict) else {}

    def discard(self) -> None:
        for p in (self.part, self.meta_path):
            p.unlink(missing_ok=True)

    def _resume_offset(self, url: str) -> tuple[int, str | None]:
        if not self.part.exists():
            return 0, None
        have = self.part.stat().st_size
        meta = self._meta()
        validator = meta.get("validator")
        validator = validator if isinstance(validator, str) and validator.isprintable() else None
        if have == 0 or have > self.cap or meta.get("url") != url or not (validator or self.sha256_known):
            self.discard()
            return 0, None
        return have, validator

    def download(self, address: str) -> None:
        """``address``'s whole file into ``part``, resuming what an earlier transfer kept. Messages
        and the part's note name the URL without its credentials (``public_url``)."""
        self.part.parent.mkdir(parents=True, exist_ok=True)
        url = public_url(address)
        for _attempt in range(2):  # a refused resume restarts once from byte 0
            if self._transfer(address, url):
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

    def _transfer(self, address: str, url: str) -> bool:
        """One request to ``address`` (``url``: the same without credentials, for messages); True
        when ``part`` holds the whole file, False to restart from zero."""
        have, validator = self._resume_offset(url)
        headers = {}
        if have:
            headers["Range"] = f"bytes={have}-"
            if validator:
                headers["If-Range"] = validator
        total: int | None = None
        writing = False
        try:
            with open_stream(address, headers, self.limits.policy()) as answer:
                if answer.status == 416 and have:
                    _, total = _content_range(answer.headers.get("Content-Range"))
                    if total == have:
                        self.framed = True
                        return True  # the part already holds every byte
                    self.discard()
                    return False
                if answer.status == 206 and have:
                    start, total = _content_range(answer.headers.get("Content-Range"))
                    if start != have:
                        self.discard()
                        return False
                    mode = "ab"
                elif answer.status == 200:
                    have, mode = 0, "wb"
                    total = _length(answer.headers.get("Content-Length"))
                else:
                    raise DownloadError(f"cannot download {url}: HTTP {answer.status} {answer.reason}".rstrip())
                if total is not None and total > self.cap:
                    self.discard()
                    raise DownloadError(f"cannot download {url}: the server announces {total:,} bytes, more than "
                                        f"{self._cap_says()}: refused")
                self.framed = total is not None or answer.framed
                etag = answer.headers.get("ETag")
                new_validator = etag if etag and not etag.startswith("W/") else answer.headers.get("Last-Modified")
                atomic_write_text(self.meta_path, json.dumps({"url": url, "validator": new_validator, "total": total}))
                done = have
                if self.progress:
                    self.progress(done, total)
                writing = True
                with open(self.part, mode) as fh:
                    for chunk in answer.chunks(self.chunk_size, limit=self.cap - have):
                        fh.write(chunk)
                        done += len(chunk)
                        if self.progress:
                            self.progress(done, total)
        except StreamCut as exc:
            raise DownloadError(self._interrupted(url, total, exc)) from None
        except RequestFailed as exc:
            if writing:  # more bytes than the cap: nothing worth resuming
                self.discard()
                raise DownloadError(f"cannot download {url}: more than {self._cap_says()}; refused, "
                                    "nothing kept") from None
            text = str(exc)
            text = text[len(url):].lstrip(": ") if text.startswith(url) else text
            raise DownloadError(f"cannot download {url}: {text}") from None
        except OSError as exc:  # the disk: full, or the part unwritable
            raise DownloadError(f"cannot write {self.part}: {exc.strerror or exc}") from None
        if total is not None and self.part.stat().st_size != total:
            raise DownloadError(self._interrupted(url, total, "connection closed early"))
        return True

    def _cap_says(self) -> str:
        if self.expected_size is not None and self.expected_size <= self.limits.max_bytes:
            return f"the {self.expected_size:,} bytes the task declares"
        return f"the {size_text(self.limits.max_bytes)} cap (--max-gb)"

    def _interrupted(self, url: str, total: int | None, why: object) -> str:
        kept = self.part.stat().st_size if self.part.exists() else 0
        return (f"download of {url} interrupted after {_human(kept)} of {_human(total)} ({why}; limits: "
                f"{self.limits.says()}); the partial file is kept at {self.part} and the same command resumes it")


def _human(n: int | None) -> str:
    return "?" if n is None else size_text(n)
