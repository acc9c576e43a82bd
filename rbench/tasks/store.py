"""The prepared-data cache: a loaded task is written once and memory-mapped on every later load.

``load_cached(task, options, seed)`` returns the task from
``rbench.core.paths.prepared_dir(task)/<key>/`` when that entry exists, else calls its family's
``load``, writes
the entry and returns it read back from disk (so a first load and a cached load return the same
types and values).

The key (sha256 of a JSON record, first 20 hex digits) covers everything the result depends on:

- ``STORE_VERSION`` and the rbench version (the on-disk layout);
- the task name and its family's name;
- ``repr(options)`` (the task-options dataclass, every field) and the seed;
- the raw input files: every non-hidden file under the folders the family names
  (``TaskFamily.inputs``: ``raw_dir(task)`` by default; an imported task's
  ``RBENCH_HOME/imported/<name>/``), walked recursively and through symlinks, each as its
  relative path, size and, for files under ``CONTENT_HASH_LIMIT`` (64 MiB), the sha256 of its
  content; larger files contribute their modification time (ns) instead. Small files are hashed
  because tools that copy files often preserve mtimes (``cp -p``, ``rsync -a``, archive
  extraction), and a hand-edited small file can keep its size; hashing them all costs well under
  a second. Multi-GB files (Amazon 2023 reviews) are not read on every load: a rewritten large
  file with identical size and mtime would be missed, which copying tools do not produce
  for changed content;
- the source code of the task layer (``rbench/api.py``, ``rbench/tasks/*.py`` but this store,
  ``sources`` and ``pools``, and ``rbench/tasks/families/*.py``): a fixed loader
  bug must not be hidden by an entry it wrote. Editing that code therefore re-prepares.

When an entry is written, older entries of the same task that were built from different inputs,
code or layout (they can never be hit again) are deleted; entries for other options or seeds
stay. ``RBENCH_PREPARED_CACHE=0`` bypasses the cache (the family loads every time).

Layout of an entry (written into a temporary folder, then renamed into place: a reader never
sees a half-written entry, and of two concurrent writers the first rename wins):

- ``manifest.json``: key material, sizes, ``TaskData.info``, per-split flags and ``Queries.meta``;
- ``pool.arrow``: ids, texts and (variant pools) domains, as an uncompressed Arrow IPC (Feather
  v2) file. Parquet would be smaller on disk but must be decoded into memory on every load; the
  IPC file is memory-mapped, so a pool above ``ARROW_MIN_ROWS`` candidates (500,000) keeps
  its texts on disk (``ArrowTextColumn``, fetched by index, as ``Pool.texts`` allows) and only the ids
  are materialised. Smaller pools get a NumPy object array, like a fresh load;
- ``<split>.arrow``: query ids, texts, prompts and user ids (the string columns);
- ``<split>.<field>.offsets.npy`` / ``.values.npy``: positives, grades, history, exclude (Ragged)
  and ``<split>.candidates.npy``; arrays of 1 MiB or more are memory-mapped read-only on load
  (a ranker that writes into them fails loudly instead of corrupting the cache);
- ``titles-<k>.arrow``: recommendation query texts are the lazy column
  ``rbench.tasks.text_columns.HistoryTexts(history, titles, template)``; its titles (and template) are
  stored and the lazy column is rebuilt on load, so millions of training windows never become
  strings.

A task whose data cannot be stored faithfully (a text column that is not strings, a variant
with ``train_pool`` set, unserialisable ``info``) is returned uncached with a warning.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from rbench.api import Pool, Queries, Ragged, TaskData, TaskSpec
from rbench.core import paths
from rbench.core.atomic import atomic_dir, atomic_write_text, is_temporary, remove_stale
from rbench.core.errors import DataError
from rbench.core.hashing import file_sha256 as _file_sha256
from rbench.core.hashing import folder_digests, short_hash
from rbench.core.inputs import read_json
from rbench.core.version import __version__
from rbench.tasks.family import Task
from rbench.tasks.text_columns import ARROW_MIN_ROWS, ArrowTextColumn, HistoryTexts, read_arrow

STORE_VERSION = 1
INTEGRITY = "integrity.json"  # size + digest of every file of an entry, verified on every load
CONTENT_HASH_LIMIT = 64 << 20
MMAP_MIN_BYTES = 1 << 20
MATERIALISE_LIMIT = 2_000_000  # an unknown lazy query-text column longer than this is not cached
SPLITS = ("train", "valid", "test")
RAGGED_FIELDS = ("positives", "grades", "history", "exclude")



class Unsupported(Exception):
    """The task holds something this cache cannot store faithfully."""


# --------------------------------------------------------------------------------------------
# the key
# --------------------------------------------------------------------------------------------


def _walk(root: Path) -> list[tuple[str, Path]]:
    """(relative path, path) of every non-hidden file under ``root``, following symlinks once."""
    if root.is_file():
        return [(root.name, root)]
    out: list[tuple[str, Path]] = []
    seen: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        real = os.path.realpath(dirpath)
        if real in seen:  # a symlink cycle
            dirnames[:] = []
            continue
        seen.add(real)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in filenames:
            if not name.startswith("."):
                p = Path(dirpath) / name
                out.append((p.relative_to(root).as_posix(), p))
    return sorted(out)




def input_signature(task: Task) -> list[list[Any]]:
    rows: list[list[Any]] = []
    for k, root in enumerate(task.family.inputs(task.spec)):
        if not root.exists():
            rows.append([k, str(root), "missing"])
            continue
        for rel, path in _walk(root):
            try:
                st = path.stat()
            except OSError:  # a dangling symlink
                rows.append([k, rel, "dangling"])
                continue
            ident = f"sha256:{_file_sha256(path)}" if st.st_size < CONTENT_HASH_LIMIT else f"mtime:{st.st_mtime_ns}"
            rows.append([k, rel, st.st_size, ident])
    return rows


@functools.cache
def code_signature() -> str:
    """sha256 over the task layer's source files (see module doc)."""
    here = Path(__file__).resolve().parent  # rbench/tasks: the task families and the text columns,
    # not this store, the downloads (sources) or the pool variants (pools), which it also holds
    h = hashlib.sha256()
    for p in [here.parent / "api.py",
              *sorted(p for p in here.glob("*.py") if p.name not in ("store.py", "sources.py", "pools.py")),
              *sorted((here / "families").glob("*.py"))]:
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def key_material(task: Task, options: Any, seed: int) -> dict[str, Any]:
    return {"store_version": STORE_VERSION, "rbench": __version__, "task": task.name, "family": task.family.name,
            "options": repr(options), "seed": int(seed), "inputs": input_signature(task),
            "code": code_signature()}


def _digest(obj: Any) -> str:
    return short_hash(obj)


def lineage(material: dict[str, Any]) -> str:
    """What every entry of a task built from the same inputs/code/layout shares."""
    return _digest({k: material[k] for k in ("store_version", "rbench", "inputs", "code")})


def cache_key(material: dict[str, Any]) -> str:
    return _digest(material)[:20]


# --------------------------------------------------------------------------------------------
# writing
# --------------------------------------------------------------------------------------------


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise Unsupported(f"cannot store a {type(obj).__name__} in the manifest")


def _string_array(values: Any, what: str) -> Any:
    """Any text column -> pyarrow large_string array (refusing non-string values)."""
    import pyarrow as pa

    if callable(getattr(values, "to_arrow", None)):  # ArrowTextColumn, recsys.ArrowTextColumn, ...
        values = values.to_arrow()
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
            raise Unsupported(f"{what} is an Arrow {values.type} column, not strings")
        return values.cast(pa.large_string())
    if not isinstance(values, (list, np.ndarray)):
        if len(values) > MATERIALISE_LIMIT:
            raise Unsupported(f"{what} is a lazy {type(values).__name__} of {len(values):,} rows")
        values = [values[i] for i in range(len(values))]
    try:
        return pa.array(values, type=pa.large_string())
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise Unsupported(f"{what} does not hold strings ({exc})") from None


def _str_kind(arr: Any) -> str:
    return "U" if isinstance(arr, np.ndarray) and arr.dtype.kind == "U" else "O"


def _write_arrow(path: Path, columns: dict[str, Any]) -> None:
    import pyarrow as pa
    import pyarrow.feather as feather

    feather.write_feather(pa.table(columns), str(path), compression="uncompressed")


def _save_npy(path: Path, arr: np.ndarray) -> None:
    np.save(path, np.ascontiguousarray(arr), allow_pickle=False)


class _Writer:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.titles: dict[int, str] = {}  # id(titles array) -> file name, shared across splits

    def lazy_texts(self, col: Any, q: Queries, split: str, name: str) -> dict[str, Any] | None:
        if not isinstance(col, HistoryTexts):
            return None
        titles = col.titles
        if id(titles) not in self.titles:
            fname = f"titles-{len(self.titles)}.arrow"
            _write_arrow(self.folder / fname, {"titles": _string_array(np.asarray(titles, dtype=object), "titles")})
            self.titles[id(titles)] = fname
        same = q.history is not None and (col.history is q.history or (
            np.array_equal(col.history.offsets, q.history.offsets)
            and np.array_equal(col.history.values, q.history.values)))
        history = "history"
        if not same:
            history = f"{name}_history"
            self.ragged(split, history, col.history)
        return {"kind": "history", "titles": self.titles[id(titles)], "template": col.template, "history": history}

    def ragged(self, split: str, name: str, r: Ragged) -> None:
        _save_npy(self.folder / f"{split}.{name}.offsets.npy", r.offsets)
        _save_npy(self.folder / f"{split}.{name}.values.npy", r.values)

    def queries(self, q: Queries, split: str) -> dict[str, Any]:
        columns: dict[str, Any] = {"ids": _string_array(np.asarray(q.ids, dtype=object), f"{split} ids")}
        info: dict[str, Any] = {"n": len(q), "ids_kind": _str_kind(q.ids), "ragged": []}
        for name in RAGGED_FIELDS:
            r = getattr(q, name)
            if r is not None:
                self.ragged(split, name, r)
                info["ragged"].append(name)
        for name in ("texts", "prompts"):
            col = getattr(q, name)
            if col is None:
                info[name] = None
                continue
            lazy = self.lazy_texts(col, q, split, name)
            if lazy is not None:
                info[name] = lazy
            else:
                columns[name] = _string_array(col, f"{split} {name}")
                info[name] = {"kind": "column"}
        if q.user_ids is not None:
            columns["user_ids"] = _string_array(np.asarray(q.user_ids, dtype=object), f"{split} user_ids")
            info["user_ids_kind"] = _str_kind(q.user_ids)
        if q.candidates is not None:
            _save_npy(self.folder / f"{split}.candidates.npy", q.candidates)
        info["candidates"] = q.candidates is not None
        info["meta"] = q.meta
        _write_arrow(self.folder / f"{split}.arrow", columns)
        return info

    def pool(self, pool: Pool) -> dict[str, Any]:
        columns = {"ids": _string_array(np.asarray(pool.ids, dtype=object), "pool ids"),
                   "texts": _string_array(pool.texts, "pool texts")}
        if pool.domains is not None:
            columns["domains"] = _string_array(np.asarray(pool.domains, dtype=object), "pool domains")
        _write_arrow(self.folder / "pool.arrow", columns)
        return {"n": len(pool), "name": pool.name, "fingerprint": pool.fingerprint,
                "ids_kind": _str_kind(pool.ids), "domains": pool.domains is not None}


def write_entry(data: TaskData, folder: Path, material: dict[str, Any]) -> None:
    """Write ``data`` into the (new, empty) ``folder``; raises ``Unsupported``."""
    if data.train_pool is not None or data.variant not in ("", "original"):
        raise Unsupported("only original tasks are cached (variants are built on load)")
    w = _Writer(folder)
    manifest: dict[str, Any] = {
        "key": cache_key(material), "lineage": lineage(material), "material": material,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "pool": w.pool(data.pool),
        "splits": {s: w.queries(getattr(data, s), s) for s in SPLITS},
        "info": data.info, "variant": data.variant,
    }
    manifest["sizes"] = sizes_of(manifest)
    text = json.dumps(manifest, indent=1, default=_json_default)
    (folder / "manifest.json").write_text(text + "\n", encoding="utf-8")


def sizes_of(manifest: dict[str, Any]) -> dict[str, Any]:
    splits = manifest["splits"]
    return {"pool": manifest["pool"]["n"], **{s: splits[s]["n"] for s in SPLITS},
            "queries": sum(splits[s]["n"] for s in SPLITS)}


# --------------------------------------------------------------------------------------------
# reading
# --------------------------------------------------------------------------------------------


def _strings(table: Any, name: str, kind: str = "O") -> np.ndarray:
    arr = table.column(name).to_numpy(zero_copy_only=False)
    arr = np.asarray(arr, dtype=object)
    return arr.astype(str) if kind == "U" else arr


def _load_npy(path: Path) -> np.ndarray:
    mmap = "r" if path.stat().st_size >= MMAP_MIN_BYTES else None
    return np.load(path, mmap_mode=mmap, allow_pickle=False)


class _Reader:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.titles: dict[str, np.ndarray] = {}

    def ragged(self, split: str, name: str) -> Ragged:
        return Ragged(_load_npy(self.folder / f"{split}.{name}.offsets.npy"),
                      _load_npy(self.folder / f"{split}.{name}.values.npy"))

    def text_column(self, info: dict[str, Any] | None, table: Any, name: str, split: str,
                    ragged: dict[str, Ragged]) -> Any:
        if info is None:
            return None
        if info["kind"] == "column":
            return table.column(name).to_pylist()
        fname = info["titles"]
        if fname not in self.titles:
            self.titles[fname] = _strings(read_arrow(self.folder / fname), "titles")
        name_h = info["history"]
        history = ragged[name_h] if name_h in ragged else self.ragged(split, name_h)
        return HistoryTexts(history, self.titles[fname], info["template"])

    def queries(self, split: str, info: dict[str, Any]) -> Queries:
        table = read_arrow(self.folder / f"{split}.arrow")
        ragged = {name: self.ragged(split, name) for name in info["ragged"]}
        return Queries(
            ids=_strings(table, "ids", info["ids_kind"]),
            texts=self.text_column(info["texts"], table, "texts", split, ragged),
            positives=ragged["positives"],
            grades=ragged["grades"],
            prompts=self.text_column(info["prompts"], table, "prompts", split, ragged),
            history=ragged.get("history"),
            candidates=_load_npy(self.folder / f"{split}.candidates.npy") if info["candidates"] else None,
            exclude=ragged.get("exclude"),
            user_ids=_strings(table, "user_ids", info.get("user_ids_kind", "O"))
            if "user_ids" in table.column_names else None,
            meta=info.get("meta") or {},
        )

    def pool(self, info: dict[str, Any]) -> Pool:
        table = read_arrow(self.folder / "pool.arrow")
        texts: Any = ArrowTextColumn(table.column("texts"), source=(str(self.folder / "pool.arrow"), "texts")) \
            if info["n"] > ARROW_MIN_ROWS \
            else _strings(table, "texts")
        domains = _strings(table, "domains") if info["domains"] else None
        return Pool(ids=_strings(table, "ids", info["ids_kind"]), texts=texts, domains=domains,
                    name=info["name"], fingerprint=info["fingerprint"])


def read_entry(spec: TaskSpec, folder: Path) -> TaskData:
    manifest = read_json(folder / "manifest.json")
    r = _Reader(folder)
    pool = r.pool(manifest["pool"])
    splits = {s: r.queries(s, manifest["splits"][s]) for s in SPLITS}
    return TaskData(spec=spec, pool=pool, **splits, variant=manifest.get("variant", "original"),
                    info=manifest.get("info") or {})


# --------------------------------------------------------------------------------------------
# the cache
# --------------------------------------------------------------------------------------------


def enabled() -> bool:
    return os.environ.get("RBENCH_PREPARED_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")


def _manifest(folder: Path) -> dict[str, Any] | None:
    """An entry's manifest; None when it is unreadable or not an object (``rbench.core.inputs``)."""
    try:
        m = read_json(folder / "manifest.json")
    except DataError:
        return None
    return m if isinstance(m, dict) else None


def verify_entry(entry: Path) -> None:
    """Raise ValueError naming the first file whose size or digest differs from the record
    written with the entry (altered, truncated, missing, or an entry without a record)."""
    try:
        want = read_json(entry / INTEGRITY)
    except DataError:
        want = None
    if not isinstance(want, dict):
        raise ValueError(f"no integrity record ({INTEGRITY})")
    have = folder_digests(entry)
    have.pop(INTEGRITY, None)
    for name in sorted(set(want) | set(have)):
        if name not in have:
            raise ValueError(f"{name} is missing")
        if name not in want:
            raise ValueError(f"{name} was not written with the entry")
        if have[name] != want[name]:
            raise ValueError(f"{name} changed since it was written ({have[name]['bytes']} bytes, "
                             f"expected {want[name]['bytes']})")


def _prune(task_dir: Path, keep: str, current_lineage: str) -> None:
    for d in task_dir.iterdir():
        if d.name == keep or not d.is_dir():
            continue
        if is_temporary(d.name):
            continue  # another process may be writing it (stale ones: remove_stale)
        m = _manifest(d)
        if m is not None and m.get("lineage") != current_lineage:
            shutil.rmtree(d, ignore_errors=True)


def load_cached(task: Task, options: Any, seed: int) -> TaskData:
    """The task from its prepared entry, preparing it first when there is none (module doc)."""
    spec, loader = task.spec, task.family.load
    if not enabled():
        return loader(spec, options, seed)
    material = key_material(task, options, seed)
    key = cache_key(material)
    task_dir = paths.prepared_dir(spec.name)
    entry = task_dir / key
    if entry.exists():
        try:
            verify_entry(entry)
            return read_entry(spec, entry)
        except Exception as exc:  # a damaged entry is rebuilt, never trusted
            warnings.warn(f"prepared data in {entry} is unusable ({exc}); preparing again", stacklevel=2)
            shutil.rmtree(entry, ignore_errors=True)
    data = loader(spec, options, seed)
    task_dir.mkdir(parents=True, exist_ok=True)
    remove_stale(task_dir)  # temporaries of runs that were killed
    try:
        # same key, same data: a writer that loses the race keeps the other's entry
        with atomic_dir(entry, replace=False) as tmp:
            write_entry(data, tmp, material)
            atomic_write_text(tmp / INTEGRITY, json.dumps(folder_digests(tmp), indent=1))
    except Unsupported as exc:
        warnings.warn(f"task {spec.name!r} is not cached: {exc}", stacklevel=2)
        return data
    _prune(task_dir, key, lineage(material))
    return read_entry(spec, entry)


def entries(task: str) -> list[dict[str, Any]]:
    """Manifests of the task's prepared entries, newest first, each with its folder and size."""
    task_dir = paths.prepared_dir(task)
    if not task_dir.is_dir():
        return []
    out = []
    for d in task_dir.iterdir():
        if not d.is_dir() or d.name.startswith("."):
            continue
        m = _manifest(d)
        if m is None:
            continue
        m["folder"] = str(d)
        m["bytes"] = sum(p.stat().st_size for p in d.iterdir() if p.is_file())
        m["mtime"] = (d / "manifest.json").stat().st_mtime
        out.append(m)
    return sorted(out, key=lambda m: m["mtime"], reverse=True)


def prepared_sizes(spec: TaskSpec) -> dict[str, Any] | None:
    """Sizes of the newest prepared entry of ``spec`` (pool, queries per split), or None."""
    found = entries(spec.name)
    if not found:
        return None
    m = found[0]
    sizes = dict(m.get("sizes") or sizes_of(m))
    material = m.get("material", {})
    sizes.update({"options": material.get("options"), "seed": material.get("seed"), "key": m.get("key"),
                  "bytes": m["bytes"], "bytes_all": sum(e["bytes"] for e in found), "entries": len(found),
                  "folder": m["folder"]})
    return sizes
