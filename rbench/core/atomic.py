"""The one way rbench writes a file or a folder: atomically.

Every RunRecord, leaderboard, manifest, prepared task, embedding cache, download and checkpoint
goes through here, so a reader (or a crash, or a concurrent writer) only ever sees the old content
or the new, never half of it:

- the content goes to a temporary name beside the target (same file system, so the final
  ``os.replace`` is atomic); the name is unique (``mkstemp``/``mkdtemp``), so two processes (or
  threads) writing the same target never write into each other's temporary — the last to finish
  wins whole. A fixed name such as ``<file>.tmp`` is exactly what two writers collide on;
- the file is fsynced before the rename and the folder after it, so a power cut cannot leave a
  renamed-but-empty file;
- the mode comes from the process umask, as a plain ``open()`` would give (``mkstemp`` alone
  creates 0600 files: RunRecords and leaderboards must stay readable by the group/world);
- on an exception the temporary is removed and the target is untouched.

Temporaries start with ``.`` and contain ``.tmp`` (``is_temporary``), so listings skip them and
``remove_stale`` can clear what a SIGKILL left behind.

The API:

- ``atomic_write_bytes`` / ``atomic_write_text``: a whole file from memory;
- ``atomic_path``: a temporary path to hand to a writer that wants one (``np.save``,
  ``torch.save``, safetensors, ...), which replaces the target when the block succeeds;
- ``atomic_dir``: the same for a folder written as a whole (prepared tasks, checkpoints);
- ``atomic_replace``: publish a file or folder that was finished under a name of its own (a
  resumable download's ``.part``, an embedding matrix written in place, an extracted entry);
- ``swap_in`` + ``scratch_dir``: for a caller that must keep the previous folder until it has
  checked the new one (and put it back otherwise);
- ``locked``: one writer at a time for files that must keep a stable name to be resumed (a
  stable name cannot be unique, so the writers take turns instead).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

TMP_MARK = ".tmp"
STALE_AFTER_S = 3600.0  # a temporary older than this belongs to a process that is gone


def _umask_mode(base: int) -> int:
    mask = os.umask(0)
    os.umask(mask)
    return base & ~mask


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # e.g. platforms without directory handles
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _fresh_name(path: Path, tag: str = "") -> Path:
    """A unique, unused temporary name beside ``path`` (reserved by ``mkdtemp``, then freed)."""
    name = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.{tag}", suffix=TMP_MARK))
    os.rmdir(name)
    return name


def remove_path(p: Path | str) -> None:
    """Remove a file, a link (never what it points to) or a folder (links inside it are removed,
    not followed); nothing there is fine."""
    p = Path(p)
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


@contextlib.contextmanager
def atomic_path(path: Path | str) -> Iterator[Path]:
    """A unique temporary path beside ``path``; write it inside the block, and on leaving the
    block it replaces ``path`` (fsynced, mode from the umask). On an exception nothing changes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TMP_MARK)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        _fsync_file(tmp)
        os.chmod(tmp, _umask_mode(0o666))
        os.replace(tmp, path)
    except BaseException:
        remove_path(tmp)
        raise
    _fsync_dir(path.parent)


def atomic_write_bytes(path: Path | str, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def atomic_write_text(path: Path | str, text: str, encoding: str = "utf-8") -> None:
    atomic_write_bytes(path, text.encode(encoding))


@contextlib.contextmanager
def scratch_dir(path: Path | str, tag: str = "") -> Iterator[Path]:
    """A unique temporary folder beside ``path`` (same file system, so what is built in it can be
    moved onto ``path`` atomically), removed on leaving the block whatever happens; what was moved
    out of it (``swap_in``, ``atomic_replace``) stays where it went."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.{tag}", suffix=TMP_MARK))
    try:
        yield tmp
    finally:
        remove_path(tmp)


def swap_in(src: Path | str, path: Path | str) -> Path | None:
    """Move the finished ``src`` (file or folder, beside ``path``) onto ``path``. What ``path``
    held is moved aside to a unique temporary name and returned (None when there was nothing), for
    the caller to drop (``remove_path``) or to put back (``swap_in(old, path)``). When the move
    fails the previous content is put back and the error raised."""
    path = Path(path)
    old = None
    if path.exists() or path.is_symlink():
        old = _fresh_name(path, "old.")
        os.replace(path, old)
    try:
        os.replace(src, path)
    except BaseException:
        if old is not None:
            os.replace(old, path)
        raise
    _fsync_dir(path.parent)
    return old


def atomic_replace(src: Path | str, path: Path | str) -> None:
    """Publish the finished file or folder ``src`` (beside ``path``) as ``path``, replacing what
    was there. A file is fsynced and renamed over the target in one step (readers see old or new);
    a folder cannot be renamed over a non-empty one, so the old one is moved aside first and then
    removed. The mode is left as it is: ``src`` was created by a plain ``open()``/``mkdir``."""
    src, path = Path(src), Path(path)
    if src.is_dir() and not src.is_symlink():
        old = swap_in(src, path)
        if old is not None:
            remove_path(old)
        return
    if not src.is_symlink():
        _fsync_file(src)
    if path.is_dir() and not path.is_symlink():
        remove_path(path)
    os.replace(src, path)
    _fsync_dir(path.parent)


@contextlib.contextmanager
def atomic_dir(path: Path | str, *, replace: bool = True) -> Iterator[Path]:
    """A unique temporary folder beside ``path``; fill it inside the block, and on leaving the
    block it becomes ``path``. An existing ``path`` is replaced (moved aside, then removed) when
    ``replace``, else kept and the new folder dropped (another writer finished first with the same
    content, as for cache entries keyed by their content). On an exception nothing changes."""
    path = Path(path)
    with scratch_dir(path) as tmp:
        yield tmp
        os.chmod(tmp, _umask_mode(0o777))
        if replace:
            atomic_replace(tmp, path)
            return
        if path.exists() or path.is_symlink():
            return  # the first writer's folder stays; ours is removed with the scratch folder
        try:
            os.replace(tmp, path)
        except OSError:
            if not path.exists():  # not a lost race (the other writer's folder appeared): an error
                raise
            return
        _fsync_dir(path.parent)


@contextlib.contextmanager
def locked(path: Path | str) -> Iterator[None]:
    """Hold an exclusive advisory lock on ``path`` for the block: one writer at a time for files
    that keep a stable name so that they can be resumed. ``path`` is an existing folder (locked
    itself: no lock file appears in it) or a lock file (created if missing). POSIX ``flock``;
    elsewhere (or on a file system that has no locks) no lock. Waiters block until the holder
    leaves the block or dies."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - non-POSIX
        yield
        return
    path = Path(path)
    if path.is_dir():
        fd = os.open(path, os.O_RDONLY)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as exc:  # a file system without locks (some network or FUSE mounts): as elsewhere
            if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL):
                raise
        yield  # closing the descriptor releases the lock
    finally:
        os.close(fd)


def is_temporary(name: str) -> bool:
    return name.startswith(".") and TMP_MARK in name


def remove_stale(directory: Path | str, older_than_s: float = STALE_AFTER_S) -> list[str]:
    """Remove temporaries in ``directory`` left by processes that died (older than
    ``older_than_s``); returns their names. A live writer's temporary is younger and stays."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    now, gone = time.time(), []
    for entry in directory.iterdir():
        if not is_temporary(entry.name):
            continue
        try:
            age = now - entry.lstat().st_mtime
        except FileNotFoundError:
            continue
        if age >= older_than_s:
            try:  # a clean-up: one it may not remove (another user's, in a shared folder) stays
                remove_path(entry)
            except OSError:
                continue
            gone.append(entry.name)
    return sorted(gone)
