"""What a ranker returns, taken into arrays the engine owns before the engine reads anything in it.

Why: a ranker's return value is ranker code. An ``np.ndarray`` subclass runs its own
``__getitem__`` (and ``__array_ufunc__``, ``astype``, ...) whenever the engine indexes or computes
with it: indexed with the positives' pool indices to read their scores, it learns the answers and
can boost exactly those rows (issue 40: RR 1.0 on ml-100k from vectors that knew nothing). A plain
array the ranker still holds can be edited after it returned. So every array-like a ranker returns
(``score``'s scores, ``encode_pool``'s and ``encode_queries``' vectors) is turned once, at the
boundary, into a plain ``np.ndarray`` no one else holds, or a read-only memory map the engine opened
itself, and only then checked, in this order: dtype (real numbers: floating or integer; complex,
boolean, object and text values are refused, never cast), shape, finiteness. Every refusal is one
line naming the ranker, the call and what was expected (``RankerOutputError``: exit 2).

How the data is got out without ranker code seeing anything: ``np.array(x, copy=True,
subok=False)`` reads an ndarray subclass's buffer directly (none of its Python methods run), and
anything else through numpy's array protocols, called without any index; a torch tensor is read
through ``detach().cpu().numpy()`` first. Those calls happen before the engine holds any
label-derived index, and their arguments carry none.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

from rbench.core.errors import RankerOutputError
from rbench.engine.sharded import ShardedArray

REAL = "real numbers (floating or integer)"


def _is_tensor(x: Any) -> bool:
    return all(callable(getattr(x, m, None)) for m in ("detach", "cpu", "numpy"))


def plain_copy(x: Any, ranker: str, call: str, expected: str) -> np.ndarray:
    """``x`` as a fresh base-class ``np.ndarray`` of real numbers (not yet shape- or
    finiteness-checked: the caller knows the shape it expects)."""
    if _is_tensor(x):  # a torch tensor (on a GPU, or one that requires grad), without importing torch
        x = x.detach().cpu().numpy()
    try:
        out = np.array(x, copy=True, subok=False)
    except (TypeError, ValueError) as exc:  # ragged lists and the like
        raise RankerOutputError(f"ranker {ranker!r}: {call} returned {type(x).__name__}, which numpy cannot read "
                                f"as an array ({exc}); expected {expected}") from exc
    if type(out) is not np.ndarray:  # (numpy's promise for subok=False; checked, not assumed)
        raise RankerOutputError(f"ranker {ranker!r}: {call} returned {type(x).__name__}, which does not copy to "
                                f"a plain array; expected {expected}")
    return real(out, ranker, call, expected)


def real(arr: Any, ranker: str, call: str, expected: str) -> Any:
    """``arr`` itself when its values are real numbers; else one line (a complex part is never
    silently dropped by a cast, a boolean or a string never read as a number)."""
    if np.dtype(arr.dtype).kind not in "fiu":
        raise RankerOutputError(f"ranker {ranker!r}: {call} returned values of dtype {arr.dtype}, expected "
                                f"{expected} of {REAL}")
    return arr


def _engine_memmap(emb: np.memmap) -> np.memmap | None:
    """The engine's own read-only map of the ``.npy`` file behind ``emb`` (a whole file mapped
    read-only by numpy), or None when ``emb`` is anything else (a view of part of a file, a raw
    or writable map): those are copied instead."""
    name = getattr(emb, "filename", None)
    if emb.flags.writeable or not name or not Path(name).is_file():
        return None
    try:
        mine = np.load(name, mmap_mode="r")
    except (OSError, ValueError):
        return None
    # the same bytes: a view of part of the file, or another dtype or layout, differs in one of these
    if type(mine) is not np.memmap or not emb.flags.c_contiguous or \
            (mine.offset, mine.shape, mine.dtype) != (emb.offset, emb.shape, emb.dtype):
        return None
    return mine


def pool_matrix(emb: Any, ranker: str, n_rows: int) -> Any:
    """``encode_pool``'s matrix as the engine's own: a plain in-memory copy, or (so that a
    multi-GB pool is not copied into memory) a read-only ``.npy`` map the engine opened itself
    (``np.memmap``), a ``ShardedArray`` opened again from its folder, or a bfloat16
    ``BF16Matrix`` over either. Checked: real dtype (an integer copy becomes float32), shape
    (n_rows, d). (Finiteness: the caller scans it in blocks.)"""
    mine = _owned(emb, ranker, n_rows)
    if type(mine) is np.ndarray and mine.dtype.kind in "iu":
        mine = mine.astype(np.float32)
    real(mine, ranker, "encode_pool", f"a ({n_rows}, d) array")
    if len(mine.shape) != 2 or mine.shape[0] != n_rows:
        raise RankerOutputError(f"ranker {ranker!r}: encode_pool returned shape {tuple(mine.shape)}, "
                                f"expected ({n_rows}, d)")
    return mine


def _owned(emb: Any, ranker: str, n_rows: int) -> Any:
    """``emb`` as an object of the engine's (``pool_matrix``), values as they are."""
    expected = f"a ({n_rows}, d) array"
    embeddings = sys.modules.get("rbench.engine.embeddings")  # (a higher layer: never imported here)
    if type(emb) is np.memmap:
        mapped = _engine_memmap(emb)
        return mapped if mapped is not None else plain_copy(emb, ranker, "encode_pool", expected)
    if type(emb) is ShardedArray:
        return ShardedArray.open(emb.directory)  # the engine's own maps of the shards
    if embeddings is not None and type(emb) is embeddings.BF16Matrix:
        bits = _owned(emb.bits, ranker, n_rows)
        if np.dtype(bits.dtype) != np.uint16:
            raise RankerOutputError(f"ranker {ranker!r}: encode_pool returned a BF16Matrix over {bits.dtype} "
                                    "values, expected uint16 bfloat16 bit patterns")
        return embeddings.BF16Matrix(bits)
    return plain_copy(emb, ranker, "encode_pool", expected)
