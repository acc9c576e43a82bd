"""On-disk cache of candidate embeddings, shared by every embedding ranker (dense, LRanker, ...).

Candidate vectors are computed once per (model, pool, pooling, ...) and stored as a ``.npy`` file
under ``RBENCH_HOME/cache/embeddings/<key>/``; later runs memory-map them and do no encoding.
Writing goes chunk by chunk into a memory-mapped temp file with a progress marker, so an
interrupted encoding of a million-item pool resumes where it stopped, and the final file appears
only complete (atomic rename).

Integrity: one process encodes a given entry at a time (an exclusive lock on the entry's folder;
a second run on the same new pool waits and then reads the finished file instead of crashing at
the end). A finished matrix is checked finite before it is published (a NaN is the encoder's
fault, named as such) and ``emb.json`` records its shape, dtype, byte size and a digest (sha256 of
``rbench.core.hashing.file_digest``: the whole file, or size plus sampled blocks for multi-GB
matrices). Every open verifies
them; a file that does not match (truncated, altered, another dimension, no record) is removed
and encoded again, with a one-line warning naming it.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rbench.api import Pool
from rbench.core import paths
from rbench.core.atomic import atomic_replace, atomic_write_text, locked
from rbench.core.errors import DataError, RankerOutputError
from rbench.core.hashing import file_digest, short_hash
from rbench.core.inputs import read_json

Encoder = Callable[[list[str]], np.ndarray]
STORAGE = ("float32", "float16", "bfloat16")


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """fp32 -> bfloat16 bit patterns (uint16), round to nearest even; NaN stays NaN."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((u + (0x7FFF + ((u >> 16) & 1))) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        rounded[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return rounded


def from_bf16_bits(b: np.ndarray) -> np.ndarray:
    return (np.asarray(b, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


class BF16Matrix:
    """A bfloat16-stored ``(N, d)`` matrix (uint16 bit patterns, usually memory-mapped) that reads
    as fp32, chunk by chunk. Why bf16: half the bytes of fp32 with fp32's exponent range, so
    unnormalised dot-product embeddings (Contriever's) cannot overflow as they can in fp16."""

    def __init__(self, bits: np.ndarray) -> None:
        self.bits = bits
        self.shape, self.ndim, self.dtype = bits.shape, bits.ndim, np.dtype(np.float32)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: Any) -> np.ndarray:
        return from_bf16_bits(self.bits[key])

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = from_bf16_bits(self.bits)
        return out if dtype is None else out.astype(dtype, copy=False)


def _open(path: Path, dtype: str) -> Any:
    arr = np.load(path, mmap_mode="r")
    return BF16Matrix(arr) if dtype == "bfloat16" else arr


def _stored(vecs: np.ndarray, dtype: str) -> np.ndarray:
    return to_bf16_bits(vecs) if dtype == "bfloat16" else vecs.astype(dtype, copy=False)


def cache_key(pool: Pool, key: dict[str, Any]) -> str:
    return short_hash({"pool": pool.fingerprint or pool.name, "n": len(pool), **key}, 24)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    atomic_write_text(path, json.dumps(data, indent=1, default=str))


def _record(final: Path) -> dict[str, Any]:
    arr = np.load(final, mmap_mode="r")
    return {"shape": list(arr.shape), "dtype": str(arr.dtype), "bytes": final.stat().st_size,
            "digest": file_digest(final)}


def _damage(final: Path, meta: Path, dim: int | None, n: int) -> str | None:
    """Why a cached matrix cannot be trusted, or None when it verifies."""
    try:
        want = read_json(meta)
    except DataError:
        want = None
    if not isinstance(want, dict):
        return "no integrity record"
    try:
        if final.stat().st_size != want.get("bytes"):
            return f"{final.stat().st_size} bytes, expected {want.get('bytes')} (truncated or replaced)"
        arr = np.load(final, mmap_mode="r")
    except (OSError, ValueError) as exc:
        return f"unreadable ({exc})"
    if list(arr.shape) != want.get("shape") or arr.ndim != 2 or arr.shape[0] != n or (dim and arr.shape[1] != dim):
        return f"shape {tuple(arr.shape)}, expected ({n}, {dim or want.get('shape', [0, '?'])[1]})"
    if file_digest(final) != want.get("digest"):
        return "content changed since it was written"
    return None


def pool_embeddings(
    pool: Pool,
    key: dict[str, Any],
    encode: Encoder,
    *,
    dim: int | None = None,
    batch_size: int = 256,
    dtype: str = "float32",
    root: Path | None = None,
    progress: bool = True,
    texts: Callable[[np.ndarray], list[str]] | None = None,
    truncate: int | None = None,
) -> np.ndarray:
    """Return the (N, d) candidate matrix of ``pool`` (memory-mapped), encoding what is missing.

    ``key`` must identify everything the vectors depend on (model id/revision/path hash, pooling,
    max length, normalisation); the pool fingerprint, storage dtype and truncation are added here.
    ``dtype="float16"`` halves the disk/page-cache footprint (the engine computes in fp32 chunk by
    chunk); ``truncate=128`` keeps the first 128 dimensions (Matryoshka truncation).
    """
    if dtype not in STORAGE:
        raise ValueError(f"embedding storage dtype must be one of {', '.join(STORAGE)}, not {dtype}")
    key = {**key, "storage": dtype, "truncate": truncate}
    if truncate:
        inner = encode
        encode = lambda batch: np.asarray(inner(batch))[:, :truncate]  # noqa: E731
        dim = min(dim, truncate) if dim else truncate
    if not pool.fingerprint:
        # without a content fingerprint a cache could silently serve another pool's vectors
        return _encode_all(pool, encode, batch_size, dtype, progress, texts)
    base = (root or paths.cache_dir("embeddings")) / cache_key(pool, key)
    final, meta = base / "emb.npy", base / "emb.json"
    if final.exists() and _damage(final, meta, dim, len(pool)) is None:
        return _open(final, dtype)
    base.mkdir(parents=True, exist_ok=True)
    with locked(base / ".lock"):  # one writer per entry: emb.partial.npy keeps its name to resume
        if final.exists():
            why = _damage(final, meta, dim, len(pool))
            if why is None:  # another process finished it while we waited
                return _open(final, dtype)
            warnings.warn(f"embedding cache {final} is damaged ({why}); encoding again", stacklevel=2)
            final.unlink()
            meta.unlink(missing_ok=True)
        return _encode_into(pool, key, encode, base, dim, batch_size, dtype, progress, texts)


def _encode_into(pool: Pool, key: dict[str, Any], encode: Encoder, base: Path, dim: int | None, batch_size: int,
                 dtype: str, progress: bool, texts: Callable[[np.ndarray], list[str]] | None) -> Any:
    final, meta = base / "emb.npy", base / "emb.json"
    _write_json(base / "key.json", {**key, "pool": pool.name, "fingerprint": pool.fingerprint, "n": len(pool)})
    partial, marker = base / "emb.partial.npy", base / "progress.json"
    n = len(pool)
    done = 0
    arr = None
    if partial.exists() and marker.exists():
        try:
            state = read_json(marker)
            arr = np.load(partial, mmap_mode="r+")
            done = int(state["rows_done"]) if arr.shape[0] == n else 0
        except (DataError, ValueError, KeyError, TypeError, OSError):
            arr, done = None, 0
    fetch = texts or pool.text_batch
    bar = _bar(progress, n, f"encoding {pool.name or 'pool'}")
    try:
        if bar is not None:
            bar[0].advance(bar[1], done)
        start = done
        while start < n:
            idx = np.arange(start, min(start + batch_size, n))
            vecs = np.asarray(encode(fetch(idx)), dtype=np.float32)
            if arr is None:
                d = dim or vecs.shape[1]
                disk = np.uint16 if dtype == "bfloat16" else dtype
                arr = np.lib.format.open_memmap(partial, mode="w+", dtype=disk, shape=(n, d))
            arr[idx[0] : idx[-1] + 1] = _stored(vecs, dtype)
            start = idx[-1] + 1
            if start % (batch_size * 16) == 0 or start == n:
                arr.flush()
                _write_json(marker, {"rows_done": int(start)})
            if bar is not None:
                bar[0].advance(bar[1], len(idx))
    finally:
        if bar is not None:
            bar[0].stop()
    if arr is None:  # empty pool
        arr = np.lib.format.open_memmap(partial, mode="w+", dtype=np.uint16 if dtype == "bfloat16" else dtype,
                                        shape=(0, dim or 0))
    arr.flush()
    bad = _first_non_finite(arr, dtype)
    del arr
    if bad is not None:
        partial.unlink(missing_ok=True)
        marker.unlink(missing_ok=True)
        raise RankerOutputError(f"the encoder returned a non-finite value for candidate {bad} of pool "
                                f"{pool.name!r} (id {pool.ids[bad]!r}); nothing was cached")
    atomic_replace(partial, final)
    _write_json(meta, _record(final))
    marker.unlink(missing_ok=True)
    return _open(final, dtype)


def _first_non_finite(arr: np.ndarray, dtype: str, rows: int = 65536) -> int | None:
    for start in range(0, arr.shape[0], rows):
        block = arr[start : start + rows]
        block = from_bf16_bits(block) if dtype == "bfloat16" else np.asarray(block, dtype=np.float32)
        ok = np.isfinite(block).all(axis=1)
        if not ok.all():
            return start + int(np.flatnonzero(~ok)[0])
    return None


def _encode_all(pool: Pool, encode: Encoder, batch_size: int, dtype: str, progress: bool,
                texts: Callable[[np.ndarray], list[str]] | None) -> np.ndarray:
    fetch = texts or pool.text_batch
    parts = []
    for start in range(0, len(pool), batch_size):
        idx = np.arange(start, min(start + batch_size, len(pool)))
        parts.append(_stored(np.asarray(encode(fetch(idx)), dtype=np.float32), dtype))
    # in memory too, bf16 stays bf16-stored (same values as the cached path)
    out = np.concatenate(parts) if parts else np.zeros((0, 0), dtype=np.uint16 if dtype == "bfloat16" else dtype)
    return BF16Matrix(out) if dtype == "bfloat16" else out


def _bar(enabled: bool, total: int, desc: str):
    if not enabled or total < 1000:
        return None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    from rbench.core.console import console, description_column

    prog = Progress(description_column(), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                    console=console(stderr=True))
    prog.start()
    return prog, prog.add_task(desc, total=total)
