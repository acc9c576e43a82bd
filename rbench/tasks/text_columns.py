"""Lazy text columns: the three ways a pool or a query split holds texts without holding a Python
string per row.

- ``ArrowTextColumn``: texts in one Arrow string array (in memory, or memory-mapped from an Arrow
  IPC file). Used by loaders for catalogues of ``ARROW_MIN_ROWS`` items and more, and by the
  prepared-data cache for pools that large. It pickles as its (file, column) when it has a file,
  so Ray workers memory-map the same file instead of receiving millions of strings.
- ``HistoryTexts``: recommendation queries rendered on access from their history indices, so a
  million training windows do not become a million long strings.
- ``MergedTexts``: a variant's pool read through from its source columns (lazy stays lazy).

They live here, below the tasks, the store and the pools, because all three use them: one column
class, one threshold, one place that knows how a text column is indexed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rbench.api import Ragged

ARROW_MIN_ROWS = 500_000  # a text column at least this long is kept as Arrow, not as Python strings
_BLOCK = 65_536


def read_arrow(path: Path | str) -> Any:
    """An Arrow IPC (feather v2) file as a table, memory-mapped."""
    import pyarrow as pa

    return pa.ipc.open_file(pa.memory_map(str(path), "r")).read_all()


class ArrowTextColumn(Sequence):
    """Texts held in one Arrow string array, converted to ``str`` on access; indexed by int,
    slice or an int array like a numpy object array."""

    def __init__(self, array: Any, source: tuple[str, str] | None = None) -> None:
        import pyarrow as pa

        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
        self.array, self.source = array, source

    @classmethod
    def from_file(cls, path: str, column: str) -> ArrowTextColumn:
        return cls(read_arrow(path).column(column), source=(str(path), column))

    def __reduce__(self) -> Any:
        if self.source is not None:
            return (ArrowTextColumn.from_file, self.source)
        return (ArrowTextColumn, (self.array,))

    def __len__(self) -> int:
        return len(self.array)

    def __getitem__(self, i: Any) -> Any:  # type: ignore[override]
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self))
            if step == 1:
                return self.array.slice(start, max(stop - start, 0)).to_pylist()
            i = np.arange(start, stop, step)
        if isinstance(i, (int, np.integer)):
            j = int(i)
            if j < 0:
                j += len(self)
            if not 0 <= j < len(self):
                raise IndexError(f"text index {int(i)} out of range for {len(self)} texts")
            return self.array[j].as_py()
        idx = np.asarray(i, dtype=np.int64)
        return np.asarray(self.array.take(idx).to_pylist(), dtype=object)

    def __iter__(self) -> Iterator[str]:
        for start in range(0, len(self), _BLOCK):
            yield from self.array.slice(start, _BLOCK).to_pylist()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return np.asarray(self.array.to_pylist(), dtype=dtype or object)

    def to_arrow(self) -> Any:
        return self.array

    def take(self, idx: np.ndarray) -> ArrowTextColumn:
        import pyarrow as pa

        return ArrowTextColumn(self.array.take(pa.array(np.asarray(idx, dtype=np.int64))))


def text_column(array: Any) -> Any:
    """An Arrow string array as a loader's text column: an object array for ordinary sizes, an
    ``ArrowTextColumn`` from ``ARROW_MIN_ROWS`` rows on."""
    if len(array) >= ARROW_MIN_ROWS:
        return ArrowTextColumn(array)
    return np.asarray(array.to_pylist(), dtype=object)


def take_texts(col: Any, idx: np.ndarray) -> Any:
    """Rows ``idx`` of any text column, keeping an Arrow column Arrow."""
    return col.take(idx) if isinstance(col, ArrowTextColumn) else col[idx]


class HistoryTexts(Sequence):
    """Query texts rendered on access from the history indices: ``"; "``-joined titles, placed in
    ``template`` at ``{query}`` when one is given."""

    def __init__(self, history: Ragged, titles: Any, template: str | None = None) -> None:
        self.history, self.titles, self.template = history, titles, template

    def __len__(self) -> int:
        return len(self.history)

    def __getitem__(self, i: Any) -> Any:  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        text = "; ".join(self.titles[self.history[int(i)]])
        return self.template.replace("{query}", text) if self.template else text


class MergedTexts(Sequence):
    """Texts of a merged pool read from the source columns: position i is
    ``columns[src[i]][loc[i]]``. Keeps lazy (memory-mapped) source columns lazy."""

    def __init__(self, columns: Sequence[Any], src: np.ndarray, loc: np.ndarray) -> None:
        self.columns, self.src, self.loc = list(columns), src, loc

    def __len__(self) -> int:
        return len(self.src)

    def __getitem__(self, i: Any) -> Any:  # type: ignore[override]
        if isinstance(i, (int, np.integer)):
            return self.columns[int(self.src[i])][int(self.loc[i])]
        idx = np.arange(len(self))[i] if isinstance(i, slice) else np.asarray(i, dtype=np.int64)
        out = np.empty(len(idx), dtype=object)
        src, loc = self.src[idx], self.loc[idx]
        for s in np.unique(src):
            rows = np.flatnonzero(src == s)
            col = self.columns[int(s)]
            out[rows] = [col[int(j)] for j in loc[rows]]
        return out
