"""On-disk cache of candidate embeddings, shared by every embedding ranker (dense, LRanker, ...).

Candidate vectors are computed once per (model, pool, pooling, ...) and stored as a ``.npy`` file
under ``RBENCH_HOME/cache/embeddings/<key>/``; later runs memory-map them and do no encoding.
Writing goes chunk by chunk into a memory-mapped temp file with a progress marker, so an
interrupted encoding of a million-item pool resumes where it stopped, and the final file appears
only complete (atomic rename).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rbench import paths
from rbench.api import Pool

Encoder = Callable[[list[str]], np.ndarray]


def cache_key(pool: Pool, key: dict[str, Any]) -> str:
    blob = json.dumps({"pool": pool.fingerprint or pool.name, "n": len(pool), **key}, sort_keys=True,
                      default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    os.replace(tmp, path)


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
    if dtype not in ("float32", "float16"):
        raise ValueError(f"embedding storage dtype must be float32 or float16, not {dtype}")
    key = {**key, "storage": dtype, "truncate": truncate}
    if truncate:
        inner = encode
        encode = lambda batch: np.asarray(inner(batch))[:, :truncate]  # noqa: E731
        dim = min(dim, truncate) if dim else truncate
    if not pool.fingerprint:
        # without a content fingerprint a cache could silently serve another pool's vectors
        return _encode_all(pool, encode, batch_size, dtype, progress, texts)
    base = (root or paths.cache_dir("embeddings")) / cache_key(pool, key)
    final = base / "emb.npy"
    if final.exists():
        return np.load(final, mmap_mode="r")
    base.mkdir(parents=True, exist_ok=True)
    _write_json(base / "key.json", {**key, "pool": pool.name, "fingerprint": pool.fingerprint, "n": len(pool)})
    partial, marker = base / "emb.partial.npy", base / "progress.json"
    n = len(pool)
    done = 0
    arr = None
    if partial.exists() and marker.exists():
        try:
            state = json.loads(marker.read_text())
            arr = np.load(partial, mmap_mode="r+")
            done = int(state["rows_done"]) if arr.shape[0] == n else 0
        except (ValueError, KeyError, OSError):
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
                arr = np.lib.format.open_memmap(partial, mode="w+", dtype=dtype, shape=(n, d))
            arr[idx[0] : idx[-1] + 1] = vecs.astype(dtype, copy=False)
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
        arr = np.lib.format.open_memmap(partial, mode="w+", dtype=dtype, shape=(0, dim or 0))
    arr.flush()
    del arr
    os.replace(partial, final)
    marker.unlink(missing_ok=True)
    return np.load(final, mmap_mode="r")


def _encode_all(pool: Pool, encode: Encoder, batch_size: int, dtype: str, progress: bool,
                texts: Callable[[np.ndarray], list[str]] | None) -> np.ndarray:
    fetch = texts or pool.text_batch
    parts = []
    for start in range(0, len(pool), batch_size):
        idx = np.arange(start, min(start + batch_size, len(pool)))
        parts.append(np.asarray(encode(fetch(idx)), dtype=dtype))
    return np.concatenate(parts) if parts else np.zeros((0, 0), dtype=dtype)


def _bar(enabled: bool, total: int, desc: str):
    if not enabled or total < 1000:
        return None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    prog = Progress(TextColumn(desc), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                    console=Console(stderr=True))
    prog.start()
    return prog, prog.add_task(desc, total=total)
