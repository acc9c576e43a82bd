"""The prepared-data cache: exact round trip of every TaskData field, lazy history texts, no work
the second time, rebuild on changed inputs, atomic writes, memory-mapped loads."""

from __future__ import annotations

import dataclasses
import json
import os
import warnings

import numpy as np
import pandas as pd
import pytest

from rbench.api import Pool, Queries, Ragged, Source, TaskData, TaskSpec
from rbench.core import paths
from rbench.tasks import store
from rbench.tasks.families.recsys import SequentialOptions, build_sequential_task
from rbench.tasks.family import Task, TaskFamily
from rbench.tasks.text_columns import ArrowTextColumn, HistoryTexts

SPEC = TaskSpec(name="toy-store", title="toy", scenario="large", domain="passage", description="",
                paper_candidates=None, paper_queries=None, sources=(Source("x", "https://example.org", "-"),),
                license="-", how_to_get="written by the test")


class FnFamily(TaskFamily):
    """A family whose loading is one function (the tests' loaders)."""

    name = "test"

    def __init__(self, fn) -> None:
        self.fn = fn

    def load(self, spec, options, seed):
        return self.fn(spec, options, seed)


def load_cached(spec: TaskSpec, options, seed: int, loader) -> TaskData:
    return store.load_cached(Task(spec, FnFamily(loader)), options, seed)


@dataclasses.dataclass
class Opts:
    n: int = 3


def write_raw(text: str = "alpha beta gamma delta epsilon zeta eta theta iota kappa") -> None:
    raw = paths.raw_dir(SPEC.name)
    raw.mkdir(parents=True, exist_ok=True)
    (raw / "docs.txt").write_text(text)


def queries(n: int, pool_n: int, seed: int, with_all: bool) -> Queries:
    rng = np.random.default_rng(seed)
    pos = [sorted(rng.choice(pool_n, size=rng.integers(1, 3), replace=False).tolist()) for _ in range(n)]
    return Queries(
        ids=np.array([f"q{seed}-{i}" for i in range(n)]),  # a '<U' array, as recsys builds them
        texts=[f"query {i} of {seed}" for i in range(n)],
        positives=Ragged.from_rows(pos),
        grades=Ragged.from_rows([[float(k + 1) for k in range(len(p))] for p in pos], dtype=np.float64),
        prompts=[f"Task: x\n\nQuery: query {i}" for i in range(n)],
        history=Ragged.from_rows([[(i + k) % pool_n for k in range(i % 4)] for i in range(n)]) if with_all else None,
        candidates=np.stack([np.roll(np.arange(pool_n), i)[:5] for i in range(n)]) if with_all else None,
        exclude=Ragged.from_rows([[(i + 7) % pool_n] if i % 2 else [] for i in range(n)]) if with_all else None,
        user_ids=np.array([f"u{i % 3}" for i in range(n)], dtype=object) if with_all else None,
        meta={"note": "graded", "k": [1, 2]},
    )


class Loader:
    """Reads the raw file (so its content matters) and counts calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, spec: TaskSpec, options: Opts | None, seed: int) -> TaskData:
        self.calls += 1
        words = (paths.raw_dir(spec.name) / "docs.txt").read_text().split()
        pool = Pool(ids=np.array([f"d{i}" for i in range(len(words))], dtype=object),
                    texts=np.array([f"doc {w}" for w in words], dtype=object), name=spec.name,
                    fingerprint=f"fp-{'-'.join(words)}-{seed}")
        return TaskData(spec=spec, pool=pool, train=queries(6, len(words), 1, True),
                        valid=queries(2, len(words), 2, False), test=queries(3, len(words), 3, True),
                        info={"source": "synthetic", "n": np.int64(len(words)), "seed": seed})


def assert_ragged_equal(a: Ragged | None, b: Ragged | None) -> None:
    assert (a is None) == (b is None)
    if a is not None:
        np.testing.assert_array_equal(a.offsets, b.offsets)
        np.testing.assert_array_equal(a.values, b.values)
        assert a.values.dtype == b.values.dtype


def assert_queries_equal(a: Queries, b: Queries) -> None:
    np.testing.assert_array_equal(a.ids, b.ids)
    assert a.ids.dtype.kind == b.ids.dtype.kind
    assert list(a.texts) == list(b.texts)
    assert (a.prompts is None) == (b.prompts is None)
    if a.prompts is not None:
        assert list(a.prompts) == list(b.prompts)
    for name in ("positives", "grades", "history", "exclude"):
        assert_ragged_equal(getattr(a, name), getattr(b, name))
    assert (a.candidates is None) == (b.candidates is None)
    if a.candidates is not None:
        np.testing.assert_array_equal(a.candidates, b.candidates)
    assert (a.user_ids is None) == (b.user_ids is None)
    if a.user_ids is not None:
        assert list(a.user_ids) == list(b.user_ids)
    assert a.meta == b.meta


def assert_task_equal(a: TaskData, b: TaskData) -> None:
    assert list(a.pool.ids) == list(b.pool.ids)
    assert [a.pool.texts[i] for i in range(len(a.pool))] == [b.pool.texts[i] for i in range(len(b.pool))]
    assert a.pool.fingerprint == b.pool.fingerprint and a.pool.name == b.pool.name
    for split in ("train", "valid", "test"):
        assert_queries_equal(getattr(a, split), getattr(b, split))


def entries() -> list[str]:
    d = paths.prepared_dir(SPEC.name)
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


# --------------------------------------------------------------------------------------------


def test_round_trip_is_exact_and_the_second_load_does_no_work():
    write_raw()
    loader = Loader()
    first = load_cached(SPEC, Opts(), 0, loader)
    assert_task_equal(loader(SPEC, Opts(), 0), first)  # what the loader makes, field by field
    assert first.info == {"source": "synthetic", "n": 10, "seed": 0}
    assert loader.calls == 2
    second = load_cached(SPEC, Opts(), 0, loader)
    assert loader.calls == 2  # the loader was not called again
    assert_task_equal(first, second)
    assert len(entries()) == 1
    manifest = json.loads((paths.prepared_dir(SPEC.name) / entries()[0] / "manifest.json").read_text())
    assert manifest["sizes"] == {"pool": 10, "train": 6, "valid": 2, "test": 3, "queries": 11}
    assert manifest["material"]["options"] == "Opts(n=3)"


def test_options_and_seed_are_part_of_the_key_and_entries_coexist():
    write_raw()
    loader = Loader()
    load_cached(SPEC, Opts(), 0, loader)
    load_cached(SPEC, Opts(n=4), 0, loader)
    b = load_cached(SPEC, Opts(), 1, loader)
    assert loader.calls == 3 and len(entries()) == 3
    assert b.pool.fingerprint.endswith("-1")
    load_cached(SPEC, Opts(n=4), 0, loader)
    assert loader.calls == 3


def test_a_changed_input_file_rebuilds_and_replaces_stale_entries():
    write_raw()
    loader = Loader()
    load_cached(SPEC, Opts(), 0, loader)
    load_cached(SPEC, Opts(), 1, loader)
    old = entries()
    raw = paths.raw_dir(SPEC.name) / "docs.txt"
    stat = raw.stat()
    write_raw("alpha beta gamma delta epsilon zeta eta theta iota KAPPA")  # same size, new content
    os.utime(raw, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # and the old mtime, as cp -p would leave
    data = load_cached(SPEC, Opts(), 0, loader)
    assert loader.calls == 3
    assert data.pool.texts[9] == "doc KAPPA"
    assert len(entries()) == 1 and entries()[0] not in old  # both stale entries are gone
    (paths.raw_dir(SPEC.name) / "extra.tsv").write_text("new file\n")
    load_cached(SPEC, Opts(), 0, loader)
    assert loader.calls == 4


def test_small_files_are_keyed_by_content_large_ones_by_mtime(monkeypatch):
    write_raw()
    loader = Loader()
    raw = paths.raw_dir(SPEC.name) / "docs.txt"
    load_cached(SPEC, Opts(), 0, loader)
    os.utime(raw, ns=(1, 10**18))  # touched, same content: nothing to do
    load_cached(SPEC, Opts(), 0, loader)
    assert loader.calls == 1
    monkeypatch.setattr(store, "CONTENT_HASH_LIMIT", 4)  # now docs.txt counts as "large"
    load_cached(SPEC, Opts(), 0, loader)
    assert loader.calls == 2
    os.utime(raw, ns=(1, 2 * 10**18))
    load_cached(SPEC, Opts(), 0, loader)
    assert loader.calls == 3


def test_inputs_behind_symlinks_are_followed(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "docs.txt").write_text("one two three four five")
    raw = paths.raw_dir(SPEC.name)
    raw.parent.mkdir(parents=True)
    raw.mkdir()
    os.symlink(src / "docs.txt", raw / "docs.txt")
    loader = Loader()
    load_cached(SPEC, None, 0, loader)
    (src / "docs.txt").write_text("one two three four six")
    assert load_cached(SPEC, None, 0, loader).pool.texts[4] == "doc six"
    assert loader.calls == 2


def test_a_failed_write_leaves_no_entry_and_no_temp_folder(monkeypatch):
    write_raw()
    loader = Loader()

    def broken(data, folder, material):
        (folder / "pool.arrow").write_bytes(b"half")
        raise OSError("disk full")

    monkeypatch.setattr(store, "write_entry", broken)
    with pytest.raises(OSError, match="disk full"):
        load_cached(SPEC, Opts(), 0, loader)
    assert entries() == []

    def failing_loader(spec, options, seed):
        raise ValueError("bad raw file")

    monkeypatch.undo()
    with pytest.raises(ValueError):
        load_cached(SPEC, Opts(), 0, failing_loader)
    assert entries() == []


def _flip_last_byte(f):
    data = bytearray(f.read_bytes())
    data[-1] ^= 0x01
    f.write_bytes(bytes(data))


DAMAGE = {
    "missing file": (lambda e: (e / "test.positives.values.npy").unlink(), "is missing"),
    "altered values": (lambda e: _flip_last_byte(e / "test.positives.values.npy"), "changed since it was written"),
    "truncated": (lambda e: (e / "pool.arrow").write_bytes((e / "pool.arrow").read_bytes()[:-9]), "changed since"),
    "no manifest": (lambda e: (e / "manifest.json").unlink(), "manifest.json is missing"),
    "no integrity record": (lambda e: (e / "integrity.json").unlink(), "no integrity record"),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_damaged_entry_is_rebuilt_with_a_warning(case):
    write_raw()
    loader = Loader()
    load_cached(SPEC, Opts(), 0, loader)
    damage, why = DAMAGE[case]
    damage(paths.prepared_dir(SPEC.name) / entries()[0])
    with pytest.warns(UserWarning, match=why):
        data = load_cached(SPEC, Opts(), 0, loader)
    assert loader.calls == 2 and len(data.test) == 3
    assert load_cached(SPEC, Opts(), 0, loader) is not None and loader.calls == 2  # rebuilt entry verifies


def test_temporaries_of_killed_runs_are_cleaned_and_live_ones_kept():
    import time

    write_raw()
    task_dir = paths.prepared_dir(SPEC.name)
    stale, live = task_dir / ".abc.x1.tmp", task_dir / ".abc.x2.tmp"
    for d in (stale, live):
        d.mkdir(parents=True)
        (d / "pool.arrow").write_bytes(b"half")
    old = time.time() - 2 * 3600
    os.utime(stale, (old, old))
    load_cached(SPEC, Opts(), 0, Loader())
    assert not stale.exists() and live.exists()


def test_large_arrays_are_memory_mapped_read_only(monkeypatch):
    write_raw()
    monkeypatch.setattr(store, "MMAP_MIN_BYTES", 0)
    data = load_cached(SPEC, Opts(), 0, Loader())
    values = data.train.positives.values
    assert isinstance(values, np.memmap)
    with pytest.raises(ValueError):
        values[0] = 99
    assert isinstance(data.test.candidates, np.memmap)


def test_big_pools_keep_their_texts_on_disk(monkeypatch):
    write_raw()
    monkeypatch.setattr(store, "ARROW_MIN_ROWS", 5)
    data = load_cached(SPEC, Opts(), 0, Loader())
    texts = data.pool.texts
    assert isinstance(texts, ArrowTextColumn) and len(texts) == 10
    assert texts[0] == "doc alpha" and texts[-1] == "doc kappa" and texts[np.int64(2)] == "doc gamma"
    assert list(texts[[3, 1]]) == ["doc delta", "doc beta"]
    assert texts[1:3] == ["doc beta", "doc gamma"] and list(texts[::4]) == ["doc alpha", "doc epsilon", "doc iota"]
    assert data.pool.text_batch(np.array([9, 0])) == ["doc kappa", "doc alpha"]
    with pytest.raises(IndexError):
        texts[10]


def test_history_texts_stay_lazy_and_render_the_same():
    rows = [("u1", "i1", 1), ("u1", "i2", 2), ("u1", "i3", 3), ("u1", "i4", 4), ("u2", "i2", 1), ("u2", "i4", 2),
            ("u2", "i1", 3), ("u3", "i3", 5), ("u3", "i1", 6), ("u3", "i2", 7), ("u3", "i5", 8)]
    inter = pd.DataFrame(rows, columns=["user", "item", "ts"])
    items = pd.DataFrame({"item": [f"i{k}" for k in range(1, 6)], "title": [f"Film {k}" for k in range(1, 6)],
                          "text": [f"Film {k}. Genres: Drama" for k in range(1, 6)]})
    spec = dataclasses.replace(SPEC, name="toy-rec", domain="recommendation")
    raw = paths.raw_dir(spec.name)
    raw.mkdir(parents=True)
    (raw / "toy.inter").write_text("user_id:token\titem_id:token\ttimestamp:float\n")
    calls = []

    def loader(s, o, seed):
        calls.append(1)
        return build_sequential_task(s, inter, items, o)

    fresh = build_sequential_task(spec, inter, items, SequentialOptions())
    load_cached(spec, SequentialOptions(), 0, loader)
    data = load_cached(spec, SequentialOptions(), 0, loader)
    assert len(calls) == 1
    assert_task_equal(fresh, data)
    for split in ("train", "valid", "test"):
        q = getattr(data, split)
        assert isinstance(q.texts, HistoryTexts) and isinstance(q.prompts, HistoryTexts)
        assert q.texts.history is q.history  # rebuilt over the stored history, not a copy
        assert q.prompts.template == spec.prompt and q.texts.template is None
    assert data.train.texts.titles is data.test.prompts.titles  # one titles column for all splits
    import pyarrow as pa

    folder = paths.prepared_dir(spec.name) / os.listdir(paths.prepared_dir(spec.name))[0]
    stored = pa.ipc.open_file(pa.memory_map(str(folder / "train.arrow"))).read_all().column_names
    assert "texts" not in stored and "prompts" not in stored  # no rendered strings on disk


def test_what_cannot_be_stored_is_returned_uncached():
    write_raw()
    loader = Loader()

    def int_ids(spec, options, seed):
        data = loader(spec, options, seed)
        data.pool.ids = np.arange(len(data.pool))
        return data

    with pytest.warns(UserWarning, match="not cached"):
        data = load_cached(SPEC, Opts(), 0, int_ids)
    assert data.pool.ids.dtype.kind == "i"  # untouched
    assert entries() == []


def test_cache_can_be_switched_off(monkeypatch):
    write_raw()
    monkeypatch.setenv("RBENCH_PREPARED_CACHE", "0")
    loader = Loader()
    load_cached(SPEC, Opts(), 0, loader)
    load_cached(SPEC, Opts(), 0, loader)
    assert loader.calls == 2 and entries() == []


def test_registry_loads_through_the_cache_and_reports_sizes(tmp_path, monkeypatch):
    from rbench.tasks.families import imported
    from rbench.tasks.registry import get_task, import_task, load_task

    d = tmp_path / "beir"
    d.mkdir()
    (d / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "text": f"body {i}"}) + "\n" for i in range(30)))
    (d / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": f"question {i}"}) + "\n"
                                             for i in range(20)))
    (d / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(20)))
    import_task("byo-cached", d / "corpus.jsonl", d / "queries.jsonl", d / "qrels.tsv")
    spec = get_task("byo-cached")
    assert store.prepared_sizes(spec) is None
    calls = []
    real = imported.load_imported
    monkeypatch.setattr(imported, "load_imported", lambda *a: calls.append(1) or real(*a))
    a = load_task("byo-cached", seed=2)
    b = load_task("byo-cached", seed=2)
    assert len(calls) == 1
    assert_task_equal(a, b)
    sizes = store.prepared_sizes(spec)
    assert (sizes["pool"], sizes["queries"], sizes["test"], sizes["seed"]) == (30, 20, len(a.test), 2)


def test_the_embedded_default_is_not_cached():
    pytest.importorskip("recbole")
    from rbench.tasks.registry import load_task

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_task("ml-100k")
    assert not paths.prepared_dir("ml-100k").exists()
