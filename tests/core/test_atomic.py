"""The one atomic writer: whole old or whole new, unique temporaries, umask modes, stale cleanup."""

from __future__ import annotations

import os
import threading
import time

import pytest

from rbench.core.atomic import (
    atomic_dir,
    atomic_path,
    atomic_replace,
    atomic_write_bytes,
    is_temporary,
    locked,
    remove_path,
    remove_stale,
    scratch_dir,
    swap_in,
)


def test_concurrent_writers_never_mix_and_leave_no_temporaries(tmp_path):
    target = tmp_path / "record.json"
    payloads = [bytes([65 + k]) * 200_000 for k in range(8)]
    barrier = threading.Barrier(len(payloads))

    def write(data):
        barrier.wait()
        atomic_write_bytes(target, data)

    threads = [threading.Thread(target=write, args=(p,)) for p in payloads]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert target.read_bytes() in payloads  # one writer's content, whole
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]


def test_a_failure_keeps_the_old_file_and_removes_the_temporary(tmp_path):
    target = tmp_path / "lb.md"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("disk full")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["lb.md"]


def test_mode_follows_the_umask_not_0600(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_write_bytes(tmp_path / "a.json", b"{}")
        with atomic_dir(tmp_path / "entry") as d:
            (d / "x").write_text("1")
    finally:
        os.umask(old)
    assert (tmp_path / "a.json").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "entry").stat().st_mode & 0o777 == 0o755


def test_folders_replace_keep_or_roll_back(tmp_path):
    target = tmp_path / "ckpt"
    with atomic_dir(target) as d:
        (d / "w").write_text("first")
    with atomic_dir(target, replace=False) as d:  # same key, finished second: the first stays
        (d / "w").write_text("second")
    assert (target / "w").read_text() == "first"
    with atomic_dir(target) as d:
        (d / "w").write_text("third")
    assert (target / "w").read_text() == "third"
    with pytest.raises(ValueError), atomic_dir(target) as d:
        (d / "w").write_text("broken")
        raise ValueError
    assert (target / "w").read_text() == "third"
    assert not [p for p in tmp_path.iterdir() if is_temporary(p.name)]


def test_stale_temporaries_are_removed_and_live_ones_kept(tmp_path):
    stale, live = tmp_path / ".a.json.x1.tmp", tmp_path / ".b.x2.tmp"
    stale.write_text("dead writer")
    live.mkdir()
    old = time.time() - 7200
    os.utime(stale, (old, old))
    (tmp_path / "keep.json").write_text("{}")
    assert remove_stale(tmp_path) == [stale.name]
    assert sorted(p.name for p in tmp_path.iterdir()) == [live.name, "keep.json"]


def test_a_lost_race_keeps_the_first_writers_folder(tmp_path):
    target = tmp_path / "entry"
    with atomic_dir(target, replace=False) as d:
        (d / "w").write_text("second")
        target.mkdir()  # another writer finished first while this one was writing
        (target / "w").write_text("first")
    assert (target / "w").read_text() == "first"
    assert [p.name for p in tmp_path.iterdir()] == ["entry"]


def test_atomic_replace_publishes_files_and_folders(tmp_path):
    part = tmp_path / "big.npy.partial"  # a file finished under a stable name of its own
    part.write_bytes(b"new")
    (tmp_path / "big.npy").write_bytes(b"old")
    atomic_replace(part, tmp_path / "big.npy")
    assert (tmp_path / "big.npy").read_bytes() == b"new" and not part.exists()
    with scratch_dir(tmp_path / "raw", "extract.") as scratch:
        (scratch / "ml-1m").mkdir()
        (scratch / "ml-1m" / "ratings.dat").write_text("1::2")
        (tmp_path / "ml-1m").mkdir()
        (tmp_path / "ml-1m" / "stale.dat").write_text("x")
        atomic_replace(scratch / "ml-1m", tmp_path / "ml-1m")
    assert sorted(p.name for p in (tmp_path / "ml-1m").iterdir()) == ["ratings.dat"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.npy", "ml-1m"]  # scratch and old gone


def test_swap_in_keeps_the_old_folder_until_the_caller_decides(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "a").write_text("old")
    with scratch_dir(raw, "from.") as scratch:
        staged = scratch / "raw"
        staged.mkdir()
        (staged / "a").write_text("new")
        old = swap_in(staged, raw)
    assert (raw / "a").read_text() == "new" and (old / "a").read_text() == "old" and is_temporary(old.name)
    dropped = swap_in(old, raw)  # put the previous one back
    assert (raw / "a").read_text() == "old" and (dropped / "a").read_text() == "new"
    remove_path(dropped)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["raw"]


def test_locked_lets_one_writer_in_at_a_time(tmp_path):
    inside, overlaps = [], []
    lock = threading.Lock()

    def work():
        with locked(tmp_path):  # a folder is locked itself: no lock file appears in it
            with lock:
                inside.append(1)
                overlaps.append(len(inside))
            time.sleep(0.02)
            with lock:
                inside.pop()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlaps == [1, 1, 1, 1] and list(tmp_path.iterdir()) == []
