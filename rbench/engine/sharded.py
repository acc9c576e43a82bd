"""A candidate matrix stored as row shards: one ``.npy`` per row range plus a manifest.

Why shards: a pool embedded by many workers (``rbench.engine.distributed``) is written by those workers,
each its own rows, straight to shared storage; nobody ever holds or funnels the whole matrix.
A shard that exists is complete (written to a temp name, then renamed), so an interrupted
embedding resumes by skipping the shards already there. The manifest appears last, after every
row is accounted for, so an opened ``ShardedArray`` is never partial.

``ShardedArray`` behaves like the memory-mapped ``(N, d)`` arrays the engine already scores:
``shape``, ``dtype``, slicing and integer-array indexing (rows gathered shard by shard).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rbench.core.atomic import atomic_path, atomic_write_text

MANIFEST = "manifest.json"


def shard_path(directory: str | Path, start: int) -> Path:
    return Path(directory) / f"shard-{start:012d}.npy"


def write_shard(directory: str | Path, start: int, rows: np.ndarray) -> Path:
    """Write rows ``start .. start+len(rows)`` atomically (temp file + rename)."""
    path = shard_path(directory, start)
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.save(fh, np.ascontiguousarray(rows))
    return path


def finish(directory: str | Path, n_rows: int) -> ShardedArray:
    """Check the shards cover rows 0..n_rows-1 exactly once, then write the manifest (atomic)."""
    directory = Path(directory)
    shards, dim, dtype, at = [], None, None, 0
    for path in sorted(directory.glob("shard-*.npy")):
        start = int(path.stem.split("-")[1])
        arr = np.load(path, mmap_mode="r")
        if start != at:
            raise ValueError(f"{directory}: rows {at}..{start - 1} have no shard (next shard: {path.name})"
                             if start > at else f"{path.name} overlaps rows before {at}")
        if arr.ndim != 2 or (dim is not None and (arr.shape[1] != dim or arr.dtype != dtype)):
            raise ValueError(f"{path}: shape {arr.shape} / dtype {arr.dtype}, expected (rows, {dim}) {dtype}")
        dim, dtype = arr.shape[1], arr.dtype
        shards.append({"file": path.name, "start": start, "stop": start + arr.shape[0]})
        at += arr.shape[0]
    if at != n_rows:
        raise ValueError(f"{directory}: shards hold {at} rows, expected {n_rows}")
    manifest = {"shape": [n_rows, dim or 0], "dtype": str(dtype or "float32"), "shards": shards}
    atomic_write_text(directory / MANIFEST, json.dumps(manifest, indent=1))
    return ShardedArray.open(directory)


@dataclass
class ShardedArray:
    """Read-only ``(N, d)`` view over row shards; each shard is memory-mapped on first use."""

    directory: Path
    starts: np.ndarray  # first row of each shard
    stops: np.ndarray
    files: list[str]
    shape: tuple[int, int]
    dtype: np.dtype
    _maps: dict[int, np.ndarray] = field(default_factory=dict, repr=False)

    @classmethod
    def open(cls, directory: str | Path) -> ShardedArray:
        directory = Path(directory)
        try:
            m = json.loads((directory / MANIFEST).read_text())
        except FileNotFoundError:
            raise FileNotFoundError(f"{directory} has no {MANIFEST}: not a finished sharded array") from None
        shards = m["shards"]
        return cls(directory, np.array([s["start"] for s in shards], dtype=np.int64),
                   np.array([s["stop"] for s in shards], dtype=np.int64), [s["file"] for s in shards],
                   tuple(m["shape"]), np.dtype(m["dtype"]))

    def __reduce__(self) -> Any:  # ship the path to workers, never the data
        return (ShardedArray.open, (str(self.directory),))

    @property
    def ndim(self) -> int:
        return 2

    def __len__(self) -> int:
        return self.shape[0]

    def shard(self, i: int) -> np.ndarray:
        if i not in self._maps:
            self._maps[i] = np.load(self.directory / self.files[i], mmap_mode="r")
        return self._maps[i]

    def _rows(self, a: int, b: int) -> np.ndarray:
        first = int(np.searchsorted(self.stops, a, side="right"))
        parts = []
        for i in range(first, len(self.files)):
            if self.starts[i] >= b:
                break
            s0 = int(self.starts[i])
            parts.append(self.shard(i)[max(a, s0) - s0 : min(b, int(self.stops[i])) - s0])
        if len(parts) == 1:
            return parts[0]  # a view of one memory map: no copy
        return np.concatenate(parts) if parts else np.zeros((0, self.shape[1]), self.dtype)

    def _take(self, idx: np.ndarray) -> np.ndarray:
        flat = idx.ravel()
        if len(flat) and (flat.min() < 0 or flat.max() >= self.shape[0]):
            raise IndexError(f"row index out of range for {self.shape[0]} rows")
        which = np.searchsorted(self.stops, flat, side="right")
        out = np.empty((len(flat), self.shape[1]), dtype=self.dtype)
        for i in np.unique(which):
            sel = which == i
            out[sel] = self.shard(int(i))[flat[sel] - self.starts[i]]
        return out.reshape(*idx.shape, self.shape[1])

    def __getitem__(self, key: Any) -> np.ndarray:
        cols: Any = slice(None)
        if isinstance(key, tuple):
            key, cols = key
        if isinstance(key, slice):
            a, b, step = key.indices(self.shape[0])
            rows = self._rows(a, max(a, b)) if step == 1 else self._take(np.arange(a, b, step))
        elif isinstance(key, (int, np.integer)):
            k = int(key) + (self.shape[0] if int(key) < 0 else 0)
            rows = self._take(np.array([k]))[0]
        else:
            rows = self._take(np.asarray(key, dtype=np.int64))
        full = isinstance(cols, slice) and cols == slice(None)
        return rows if full else rows[..., cols]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        arr = self._rows(0, self.shape[0])
        return arr if dtype is None else arr.astype(dtype, copy=False)


def open_matrix(source: str | Path | Any) -> Any:
    """A candidate matrix from a ``.npy`` file (memory-mapped), a sharded directory, or as is."""
    if isinstance(source, (str, Path)):
        p = Path(source)
        return ShardedArray.open(p) if p.is_dir() else np.load(p, mmap_mode="r")
    return source
