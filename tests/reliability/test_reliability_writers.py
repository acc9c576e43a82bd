"""Writers that lost or misnamed what they wrote (issue 29): concurrent writers of one RunRecord,
temporaries of killed runs and imports, ``-o`` paths, the table's footer, ``reproduce
--results-dir FILE``, a FIFO as a stage-1 run file, Markdown written from user text.

Choices: writers of the same RunRecord take turns (``rbench.results.record.write_run`` holds a lock
on the record's folder for the whole write: no lock file, released when a process dies), so the
last one wins whole and the side files of the runs before it are still removed at once; a
temporary is removed when it is older than ``rbench.core.atomic.STALE_AFTER_S`` (a live writer's is
younger) at the start of a run into that results folder and of an import; ``-o`` follows one
rule (``rbench.results.outputs.output_file``): a folder (existing, or ending in ``/``) gets the default
file name inside it, a name without a suffix gets the format's suffix, and the path printed is
the path written; ``rbench table``'s default output stays ``./leaderboards`` whatever
``--results-dir`` is (the help says so; the footer names the results folder read).
"""

from __future__ import annotations

import gzip
import hashlib
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from rbench.core.atomic import STALE_AFTER_S
from rbench.results import record as results
from rbench.results.record import RunRecord, read_per_query, read_record, record_path, write_run
from tests.helpers import cli, one_line
from tests.reliability.test_reliability_tables import record, write


def _run_bytes(tag: str) -> bytes:
    return gzip.compress(f"q0 Q0 d1 1 1.0 {tag}\n".encode(), mtime=0)


def _verify(path: Path) -> RunRecord:
    """The record at ``path`` with its per-query and run files present and matching their sha256."""
    rec = read_record(path)
    for name, digest in ((rec.per_query_file, rec.per_query_sha256), (rec.run_file, rec.run_sha256)):
        side = path.with_name(name)
        assert name and side.is_file(), f"{path.name} names {name}, which is missing"
        assert hashlib.sha256(side.read_bytes()).hexdigest() == digest
    assert read_per_query(path, rec) is not None
    return rec


def _age(path: Path, seconds: float = STALE_AFTER_S + 60) -> None:
    old = time.time() - seconds
    os.utime(path, (old, old), follow_symlinks=False)


# --------------------------------------------------------------------------------------------
# 1. two writers of the same RunRecord
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("slow", ["first", "second"])
def test_concurrent_writers_of_a_record_never_remove_each_others_files(tmp_path, monkeypatch, slow):
    """The first writer starts, writes its side files; the second starts then; one of them is slow
    to publish its record. The record left names files that exist and verify, in either order."""
    path = record_path(tmp_path, "large", "ml-100k", "pop", "")
    real = results.atomic_write_bytes
    sides_written = threading.Event()
    who = threading.local()

    def slowed(target, data):
        if Path(target) == path and who.name == slow:
            time.sleep(0.4)  # the record's publication is late
        real(target, data)
        if who.name == "first" and str(target).endswith(results.RUN_SUFFIX):
            sides_written.set()

    monkeypatch.setattr(results, "atomic_write_bytes", slowed)
    errors: list[BaseException] = []

    def writer(name: str, rr: float) -> None:
        who.name = name
        try:
            rec, pq = record("pop", np.full(20, rr))
            write_run(rec, path, pq, _run_bytes(name))
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)

    first = threading.Thread(target=writer, args=("first", 0.2))
    second = threading.Thread(target=writer, args=("second", 0.7))
    first.start()
    assert sides_written.wait(10)
    second.start()
    first.join(10)
    second.join(10)
    assert not errors, errors
    rec = _verify(path)
    rr = float(read_per_query(path, rec)["RR"].iloc[0])
    assert rr in (pytest.approx(0.2), pytest.approx(0.7))
    # the record left and its two files: the other writer's are gone with its record
    assert sorted(p.name for p in path.parent.iterdir()) == sorted([path.name, rec.per_query_file, rec.run_file])


def test_a_file_system_without_locks_still_gets_its_record(tmp_path, monkeypatch):
    import errno
    import fcntl

    def no_locks(*_a):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    path = record_path(tmp_path, "large", "ml-100k", "pop", "")
    rec, pq = record("pop", np.full(5, 0.3))
    write_run(rec, path, pq, _run_bytes("pop"))
    _verify(path)


def test_orphaned_side_files_are_removed_by_the_next_write(tmp_path):
    path = record_path(tmp_path, "large", "ml-100k", "pop", "")
    path.parent.mkdir(parents=True)
    orphans = [path.with_name(f"pop.{'a' * 12}{results.PER_QUERY_SUFFIX}"), path.with_name(f"pop.{'b' * 12}.run.gz")]
    for o in orphans:  # left by a writer killed before its record
        o.write_bytes(b"x")
        _age(o)
    other = path.with_name(f"pop-{'c' * 12}.{'d' * 12}{results.PER_QUERY_SUFFIX}")  # another record's
    other.write_bytes(b"y")
    rec, pq = record("pop", np.full(5, 0.3))
    write_run(rec, path, pq, _run_bytes("pop"))
    _verify(path)
    assert not any(o.exists() for o in orphans) and other.exists()


# --------------------------------------------------------------------------------------------
# 2. temporaries of killed runs and imports
# --------------------------------------------------------------------------------------------


def _temporaries(folder: Path) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    stale, live = folder / ".pop.json.k1ll3d.tmp", folder / ".pop.json.l1v3.tmp"
    stale.write_text("{half a record")
    live.write_text("{a live writer's")
    _age(stale)
    return stale, live


def test_a_run_removes_stale_temporaries_of_its_results_folder(capsys, tmp_path):
    folder = tmp_path / "large" / "ml-100k"
    stale, live = _temporaries(folder)
    code, _, err = cli(capsys, "run", "-r", "pop", "-t", "ml-100k", "-q", "--results-dir", str(tmp_path))
    assert code == 0, err
    assert not stale.exists() and live.exists()
    assert (folder / "pop.json").is_file()


def test_an_import_removes_stale_hidden_copies_of_killed_imports(tmp_path):
    from rbench.tasks.families.imported import imported_root
    from rbench.tasks.registry import import_task
    from tests.tasks.test_tasks_imported import beir

    root = imported_root()
    stale_dir = root / ".byo.k1ll3d.tmp"
    (stale_dir / "corpus").mkdir(parents=True)
    (stale_dir / "corpus" / "corpus.jsonl").write_text("{}")
    _age(stale_dir)
    live_dir = root / ".other.l1v3.tmp"
    live_dir.mkdir()
    d, _ = beir(tmp_path)
    import_task("byo", d / "corpus.jsonl", d / "queries.jsonl", d / "qrels.tsv")
    assert not stale_dir.exists() and live_dir.is_dir()
    assert (root / "byo" / "task.json").is_file()


# --------------------------------------------------------------------------------------------
# 3. -o: a folder gets the default name inside it, no suffix gets the format's; the path printed is
#    the path written
# --------------------------------------------------------------------------------------------


@pytest.fixture
def res(tmp_path):
    out = tmp_path / "results"
    write(out, "pop", np.linspace(0.05, 0.5, 30))
    write(out, "bm25", np.linspace(0.1, 0.9, 30))
    return out


@pytest.mark.parametrize("given, fmt, written", [
    ("boards", "md", "boards/large.md"),  # an existing folder
    ("fresh/", "csv", "fresh/large.csv"),  # a folder to make (ends in /)
    ("board", "csv", "board.csv"),  # no suffix
    ("board.txt", "md", "board.txt"),  # a suffix: as given
])
def test_table_output_rule(capsys, tmp_path, res, monkeypatch, given, fmt, written):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "boards").mkdir()
    code, out, err = cli(capsys, "table", "-s", "large", "--results-dir", str(res), "-f", fmt, "-o", given)
    assert code == 0, err
    assert (tmp_path / written).is_file()
    assert f"written: {written}" in out.replace("\n", "")
    if given != written:  # never a file under the name given
        assert not (tmp_path / given.rstrip("/")).is_file()


def test_plot_output_rule(capsys, tmp_path, monkeypatch):
    from tests.results.test_plots import _rec

    res = tmp_path / "results"
    for n, rr in ((1682, 0.05), (10000, 0.03)):
        _rec(res, "pop", "original" if n == 1682 else f"scaled:{n}", n, rr)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "figs").mkdir()
    for given, written in (("figs", "figs/scaling-ml-100k.png"), ("fig", "fig.png")):
        code, out, err = cli(capsys, "plot", "scaling", "-t", "ml-100k", "-r", "pop", "--results-dir", str(res),
                             "-o", given)
        assert code == 0, err
        assert (tmp_path / written).read_bytes()[:4] == b"\x89PNG"
        assert f"written: {written}" in out.replace("\n", "")
    assert not (tmp_path / "fig").exists()


@pytest.mark.parametrize("given, written", [("q/", "q/ml-100k.test.qrels.txt"), ("qrels", "qrels.txt"),
                                            ("qrels.test.gz", "qrels.test.gz")])
def test_qrels_output_rule(capsys, tmp_path, monkeypatch, given, written):
    monkeypatch.chdir(tmp_path)
    code, _, err = cli(capsys, "data", "qrels", "ml-100k", "-o", given)
    assert code == 0, err
    assert (tmp_path / written).is_file() and f"written to {written}" in err.replace("\n", "")
    if given != written:  # never a file under the name given
        assert not (tmp_path / given.rstrip("/")).is_file()


# --------------------------------------------------------------------------------------------
# 4. the table's footer names the results folder read; the default output stays ./leaderboards
# --------------------------------------------------------------------------------------------


def test_table_footer_names_the_results_dir_given(capsys, tmp_path, res, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(capsys, "table", "-s", "large", "--results-dir", str(res))
    assert code == 0, err
    md = (tmp_path / "leaderboards" / "large.md").read_text()
    assert f"from the RunRecords in `{res}/`." in md and "in `results/`" not in md
    assert "written: leaderboards/large.md" in out.replace("\n", "")
    from rbench.results.leaderboard import build, to_markdown

    odd = to_markdown(build(res, "large"), results_dir="a`b\nc|d")
    assert "in ``a`b c|d/``." in odd.splitlines()[-1]  # one line, the span not closed early


# --------------------------------------------------------------------------------------------
# 5. reproduce --results-dir FILE
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dry_run", [False, True])
def test_reproduce_results_dir_that_is_a_file_is_refused_before_running(capsys, tmp_path, monkeypatch, dry_run):
    from rbench.audit import reproduce

    def refuse(*_a, **_k):
        raise AssertionError("the experiment ran before the check")

    monkeypatch.setattr(reproduce, "run", refuse)
    monkeypatch.setattr(reproduce, "dry_run", refuse)
    blocker = tmp_path / "results"
    blocker.write_text("keep me")
    args = ["reproduce", "smoke", "-q", "--results-dir", str(blocker), "-o", str(tmp_path / "out")]
    code, _, err = cli(capsys, *args, *(["--dry-run"] if dry_run else []))
    line = one_line(err)
    assert code == 2 and "--results-dir" in line and f"{blocker} is a file" in line
    assert blocker.read_text() == "keep me" and not (tmp_path / "out").exists()


# --------------------------------------------------------------------------------------------
# 6. a FIFO or /dev/zero as the stage-1 run file
# --------------------------------------------------------------------------------------------


@pytest.fixture
def alarm():
    """Fail instead of hanging: SIGALRM after 30 s."""

    def hung(*_a):
        raise TimeoutError("hung on a non-regular file")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(30)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_stage1_run_file_that_is_not_a_regular_file_is_one_line(capsys, tmp_path, monkeypatch, alarm, kind):
    from rbench.run import runner

    def refuse(*_a, **_k):
        raise AssertionError("the task was loaded before the check")

    monkeypatch.setattr(runner, "load", refuse)
    bad = tmp_path / "stage1.run"
    os.mkfifo(bad) if kind == "fifo" else bad.symlink_to("/dev/zero")
    code, _, err = cli(capsys, "run", "-r", "pop", "-t", "ml-100k", "-q", "--results-dir", str(tmp_path / "r"),
                       "--rerank-from", f"run:{bad}")
    line = one_line(err)
    assert code == 2 and f"--rerank-from run:{bad}" in line and "regular file" in line
    assert ("FIFO" if kind == "fifo" else "character device") in line and "no such" not in line
    # the reader refuses it too (a file swapped for a FIFO after the check)
    from rbench.core.errors import DataError
    from rbench.engine.runfile import read_run

    with pytest.raises(DataError, match="regular file"):
        read_run(bad, ["1"], ["a"])


# --------------------------------------------------------------------------------------------
# 7. Markdown from user text: the budget table
# --------------------------------------------------------------------------------------------


def test_the_budget_table_escapes_its_cells(tmp_path):
    from rbench.results.leaderboard import budget_markdown, build
    from tests.results.test_plots import _curve

    res = tmp_path / "results"
    info = {"training_budget": {"examples_seen": 10, "epochs": 3.0, "optimizer_steps": 3, "train_wall_s": 1.0,
                                "negatives_per_example": 1, "trainable_params": 5, "selection": "last"},
            "training_curve": _curve(3, 2.0, 0.05)}
    rec, pq = record("lranker", np.full(10, 0.3))
    rec.ranker["label"] = "mine|v2\nbig"
    rec.ranker_info = info
    write_run(rec, record_path(res, "large", "ml-100k", "lranker", ""), pq)
    lines = [line for line in budget_markdown(build(res, "large")) if line.startswith("|")]
    assert len(lines) == 3, lines
    pipes = {len(line.replace("\\|", "")) - len(line.replace("\\|", "").replace("|", "")) for line in lines}
    assert len(pipes) == 1 and any("mine\\|v2 big" in line for line in lines), lines


# --------------------------------------------------------------------------------------------
# 7b. figure legends from user text: drawn as written
# --------------------------------------------------------------------------------------------


def test_a_training_plot_draws_labels_as_written(capsys, tmp_path, monkeypatch):
    from rbench.results import plots
    from tests.results.test_plots import _curve

    res = tmp_path / "results"
    budget = {"examples_seen": 10, "epochs": 3.0, "optimizer_steps": 3, "train_wall_s": 1.0,
              "negatives_per_example": 1, "trainable_params": 5, "selection": "last"}
    for stem, label in (("a1", r"cost $\frac$ x"), ("b2", "_mine")):  # bad math text; a hidden legend entry
        rec = RunRecord(task="ml-100k", variant="original", scenario="large", task_fingerprint="f",
                        ranker={"name": "lranker", "version": "1", "config": {}, "label": label}, seed=0,
                        n_queries=10, metrics={"nDCG@10": 0.1, "RR": 0.1}, timings={}, peak_rss_bytes=0,
                        created="2026-01-01T00:00:00+00:00",
                        ranker_info={"training_budget": budget, "training_curve": _curve(3, 2.0, 0.05)})
        write_run(rec, record_path(res, "large", "ml-100k", "lranker", stem), None)
    legends: list[str] = []
    real = plots._save

    def keep(plt, fig, output):
        legends.extend(t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts())
        return real(plt, fig, output)

    monkeypatch.setattr(plots, "_save", keep)
    png = tmp_path / "t.png"
    code, _, err = cli(capsys, "plot", "training", "-t", "ml-100k", "-r", "lranker", "--results-dir", str(res),
                       "-o", str(png))
    assert code == 0, err
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert sorted(legends) == sorted([r"cost \$\frac\$ x", " _mine"] * 2), legends  # both panels, both rankers
