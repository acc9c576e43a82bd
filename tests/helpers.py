"""Small builders shared by tests: synthetic pools, queries and table-driven rankers."""

from __future__ import annotations

import numpy as np

from rbench.api import Pool, Queries, Ragged
from rbench.plugins import BaseRanker


def make_pool(n: int, prefix: str = "d") -> Pool:
    ids = np.array([f"{prefix}{i}" for i in range(n)], dtype=object)
    return Pool(ids=ids, texts=np.array([f"text {i}" for i in range(n)], dtype=object), name="synthetic",
                fingerprint=f"synthetic-{n}")


def make_queries(positives: list[list[int]], grades: list[list[float]] | None = None,
                 exclude: list[list[int]] | None = None, candidates: np.ndarray | None = None) -> Queries:
    n = len(positives)
    grades = grades or [[1.0] * len(p) for p in positives]
    return Queries(
        ids=np.array([f"q{i}" for i in range(n)], dtype=object),
        texts=[f"query {i}" for i in range(n)],
        positives=Ragged.from_rows(positives),
        grades=Ragged.from_rows(grades, dtype=np.float64),
        exclude=Ragged.from_rows(exclude) if exclude is not None else None,
        candidates=candidates,
    )


class TableRanker(BaseRanker):
    """Scores looked up in a fixed (n_queries, pool) table, keyed by query id."""

    name = "table"
    version = "test"

    def __init__(self, table: np.ndarray) -> None:
        super().__init__()
        self.table = table
        self.calls = 0

    def score(self, queries: Queries, candidates: np.ndarray) -> np.ndarray:
        self.calls += 1
        rows = np.array([int(q[1:]) for q in queries.ids])
        if candidates.ndim == 1:
            return self.table[np.ix_(rows, candidates)]
        return np.take_along_axis(self.table[rows], candidates, axis=1)


def with_downloads(monkeypatch, name: str, files) -> None:
    """Point built-in task ``name``'s download files at ``files`` (e.g. a loopback server)."""
    import dataclasses

    from rbench.api import Source
    from rbench.tasks import registry

    task = registry.BUILTIN[name]
    spec = dataclasses.replace(task.spec, sources=(Source("test files", "http://127.0.0.1/", "test",
                                                          files=tuple(files)),))
    monkeypatch.setitem(registry.BUILTIN, name, dataclasses.replace(task, spec=spec))


def cli(capsys, *args) -> tuple[int, str, str]:
    """Run ``rbench ARGS`` in-process: (exit code, stdout, stderr)."""
    from rbench.cli import main

    code = main(list(args))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def one_line(err: str) -> str:
    """The one line a user error prints on stderr (no traceback, no internal error, no Abort)."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err and "internal error" not in err and "Abort" not in err, err
    return lines[0]
