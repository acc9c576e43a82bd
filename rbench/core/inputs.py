"""Reading input files: regular files only, bounded sizes, bounded JSON (one place).

A results folder or a task folder may hold anything under an expected name, and each way in
which reading it could hang or crash is a ``DataError`` naming the file (and the line of a
line-based file) and what was expected (one line, exit 2):

- Only regular files are read (symlinks are followed first). A FIFO named ``x.json`` would block
  ``open`` until a writer comes, a symlink to ``/dev/zero`` would be read until memory runs out,
  a directory or a device is never data. The file is opened non-blocking and checked with
  ``fstat`` on the open descriptor, so it cannot be swapped between the check and the read.
- A whole JSON document (a RunRecord, ``task.json``, ``candidate_models.json``, a cache
  manifest) is at most ``MAX_JSON_BYTES`` (64 MiB; RunRecords are a few kB), one line of a text input
  (a JSON-lines record, a qrels line) at most ``MAX_LINE_BYTES`` (64 MiB): a file without line
  ends is never read into memory whole.
- JSON nests at most ``MAX_JSON_DEPTH`` (64) arrays/objects: Python's parser recurses per level
  and deep nesting is a ``RecursionError`` (an internal error) past ~1,000 levels; the deepest
  RunRecord and recipe file in this repository nest 6 levels, the task formats fewer.
- An integer literal has at most Python's int-conversion limit of digits
  (``sys.get_int_max_str_digits()``, 4,300 by default), which ``json`` enforces with a bare
  ``ValueError``; it is said here, not raised.

``JsonSyntaxError`` (a ``DataError``) is the one kind a caller may still catch to try another
format (Amazon's 2014 metadata is Python literals); exceeded limits are never retried.
"""

from __future__ import annotations

import io
import json
import os
import re
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from rbench.core.errors import DataError

MAX_JSON_BYTES = 64 << 20
MAX_LINE_BYTES = 64 << 20
MAX_JSON_DEPTH = 64

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)  # a JSON string (unrolled: linear time)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class JsonSyntaxError(DataError):
    """The text is not JSON at all (as opposed to JSON over a limit)."""


def size_text(n: int) -> str:
    """``n`` bytes in words (64 MiB)."""
    return f"{n >> 20} MiB" if n >= 1 << 20 and not n % (1 << 20) else f"{n:,} bytes"


def _not_regular(path: Path, mode: int) -> DataError:
    kind = next((what for test, what in _KINDS if test(mode)), "not a regular file")
    via = f" (through the symlink to {os.path.realpath(path)})" if os.path.islink(path) else ""
    if stat.S_ISDIR(mode):
        return DataError(f"expected a file, got a directory{via}", path)
    return DataError(f"expected a regular file, got {kind}{via}", path)


def open_regular(path: Path | str) -> BinaryIO:
    """``path`` opened for binary reading, or a DataError when it is missing, unreadable or not
    a regular file (module doc). The caller closes it."""
    p = Path(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(p, flags)
    except FileNotFoundError:
        raise DataError("file not found", p) from None
    except OSError as exc:
        try:
            mode = os.stat(p).st_mode
        except OSError:
            mode = stat.S_IFREG
        if not stat.S_ISREG(mode):  # a socket refuses open (ENXIO): say what it is
            raise _not_regular(p, mode) from None
        raise DataError(f"cannot read it ({exc.strerror or exc})", p) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(p, mode)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def require_regular(path: Path | str) -> Path:
    """``path`` when it is a readable regular file (for readers that open it themselves, e.g.
    pyarrow or pandas), else the DataError ``open_regular`` gives."""
    open_regular(path).close()
    return Path(path)


def read_capped(path: Path | str, limit: int, what: str = "") -> bytes:
    """A regular file's bytes, at most ``limit`` of them: a larger file is a DataError (``what``
    says what the file should be, e.g. "a RunRecord")."""
    with open_regular(path) as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise DataError(f"larger than {size_text(limit)}" + (f": not {what}" if what else ""), path)
    return data


def iter_capped_lines(fh: BinaryIO, path: Path | str, limit: int | None = None) -> Iterator[tuple[int, bytes]]:
    """(line number, raw line) of an open binary file, each line at most ``limit`` bytes
    (``MAX_LINE_BYTES``): a longer one is a DataError naming the line, never read whole."""
    cap = MAX_LINE_BYTES if limit is None else limit
    lineno = 0
    while True:
        raw = fh.readline(cap + 1)
        if not raw:
            return
        lineno += 1
        if len(raw) > cap and not raw.endswith(b"\n"):
            raise DataError(f"a line longer than {size_text(cap)}: not a line of text data", path, lineno)
        yield lineno, raw


BOM = "\ufeff"  # a UTF-8 byte order mark, as Windows editors start a text file with it


def iter_text_lines(path: Path | str, strict: bool = True, limit: int | None = None) -> Iterator[tuple[int, str]]:
    """(line number, line without its end) of a text file a user hands over (qrels, run files,
    JSON lines), the one way such a file is read:

    - a regular file only (``open_regular``), gzipped or plain (told by its first two bytes);
    - each line at most ``limit`` (``MAX_LINE_BYTES``) bytes, never read whole when longer;
    - UTF-8: with ``strict``, a byte that is not UTF-8 is a DataError naming the line and column,
      never text silently replaced by U+FFFD (else replaced);
    - a UTF-8 byte order mark at the start is dropped: kept, it became part of the first id, and
      a run file's first line silently matched no query (issue 42);
    - CRLF (Windows) and LF line ends are both taken off.

    A corrupt or truncated gzip stream is a DataError naming the last line read."""
    import contextlib
    import gzip
    import zlib

    lineno = 0
    try:
        with contextlib.ExitStack() as stack:
            fh: Any = stack.enter_context(open_regular(path))
            if fh.read(2) == b"\x1f\x8b":
                fh.seek(0)
                fh = stack.enter_context(gzip.GzipFile(fileobj=fh, mode="rb"))
            else:
                fh.seek(0)
            for lineno, raw in iter_capped_lines(fh, path, limit):  # noqa: B007 - lineno is read after the loop
                try:
                    text = raw.decode("utf-8") if strict else raw.decode("utf-8", errors="replace")
                except UnicodeDecodeError as exc:
                    raise DataError(f"not valid UTF-8 at column {exc.start + 1} (byte 0x{raw[exc.start]:02x}); "
                                    "re-encode the file as UTF-8", path, lineno) from None
                if lineno == 1 and text.startswith(BOM):
                    text = text[1:]
                yield lineno, text.rstrip("\r\n")
    except (EOFError, OSError, zlib.error) as exc:
        raise DataError(f"corrupt or truncated compressed data after line {lineno} ({exc})", path) from None


def _check_depth(text: str, path: Path | str, line: int | None) -> None:
    """Refuse JSON nested deeper than ``MAX_JSON_DEPTH`` before ``json`` recurses into it: the
    brackets outside strings, counted in one pass (C regexes strip everything else)."""
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:  # the common case: nothing to scan
        return
    depth = 0
    for c in _NOT_BRACKET.sub("", _STRING.sub('""', text)):
        depth += 1 if c in "[{" else -1
        if depth > MAX_JSON_DEPTH:
            raise DataError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels: not what rbench reads", path, line)


def parse_json(text: str, path: Path | str, line: int | None = None) -> Any:
    """``text`` parsed as JSON within the limits of the module doc; every failure a DataError
    naming ``path`` and the line (``line``: the line of a JSON-lines file; else the document's
    line where the error is, in the message)."""
    _check_depth(text, path, line)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        where = f"at column {exc.colno}" if line is not None else f"at line {exc.lineno}, column {exc.colno}"
        raise JsonSyntaxError(f"not valid JSON ({exc.msg} {where})", path, line) from None
    except RecursionError:
        raise DataError("JSON nested too deeply for Python to read", path, line) from None
    except ValueError:  # json's only other ValueError: an integer over Python's digit limit
        limit = getattr(sys, "get_int_max_str_digits", lambda: 4300)()
        raise DataError(f"an integer longer than {limit:,} digits: not a number rbench reads", path, line) from None


def read_json(path: Path | str, what: str = "", limit: int | None = None) -> Any:
    """A whole JSON file: a regular file of at most ``limit`` (``MAX_JSON_BYTES``) bytes of
    UTF-8 text (what ``json.dump`` writes; never guessed as UTF-16/32), parsed by ``parse_json``.
    ``what`` names what the file should be, for the messages ("a RunRecord")."""
    raw = read_capped(path, MAX_JSON_BYTES if limit is None else limit, what)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JsonSyntaxError(f"not a text file (byte {exc.start} is not UTF-8)"
                              + (f": not {what}" if what else ""), path) from None
    return parse_json(text, path)


def text_reader(path: Path | str) -> io.TextIOWrapper:
    """A regular file (``open_regular``) as UTF-8 text, undecodable bytes replaced, line ends
    left to the caller (``newline=""``: what the csv module needs)."""
    return io.TextIOWrapper(open_regular(path), encoding="utf-8", errors="replace", newline="")
