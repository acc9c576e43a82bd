"""The kernels' threads: one call per block of rows, on a pool of Python threads.

Why not numba's ``parallel=True``: a parallel kernel's first compile runs numba's parfor passes
and compiles its loop body again as a gufunc, about half of the scan kernels' compile time on an
empty cache (issue 44: ``benchmarks/compile_breakdown.py``). The kernels are ``nogil``, and their
parallel loops were one contiguous block of rows per thread, each with its own scratch: the
same split on Python threads costs a thread hand-off per call (tens of microseconds, against
milliseconds of work), and the pool's threads sleep between calls rather than spin on the
cores a BLAS call needs next.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

_POOL: ThreadPoolExecutor | None = None
_POOL_SIZE = 0
_POOL_LOCK = threading.Lock()


def _pool(workers: int) -> ThreadPoolExecutor:
    """The shared pool, with at least ``workers`` threads (grown by a new pool when short)."""
    global _POOL, _POOL_SIZE
    with _POOL_LOCK:
        if _POOL is None or _POOL_SIZE < workers:
            if _POOL is not None:
                _POOL.shutdown(wait=False)
            _POOL, _POOL_SIZE = ThreadPoolExecutor(workers, thread_name_prefix="rbench-kernel"), workers
        return _POOL


def row_blocks(n_rows: int, n_threads: int) -> list[tuple[int, int]]:
    """Contiguous (first, stop) row ranges, one per thread (at most one per row; one if none)."""
    n = max(1, min(n_rows, n_threads))
    return [(b * n_rows // n, (b + 1) * n_rows // n) for b in range(n)]


def run_blocks(kernel: Callable[..., Any], n_rows: int, n_threads: int, *args: Any) -> list[Any]:
    """``kernel(*args, first, stop)`` for each block of ``row_blocks``, the first in this thread
    and the others on the pool at the same time; their results in block order. Every call has
    ended when this returns or raises (a kernel may not run on after its arrays are handed back)."""
    blocks = row_blocks(n_rows, n_threads)
    futures: list[Future[Any]] = []
    if len(blocks) > 1:
        pool = _pool(len(blocks) - 1)
        futures = [pool.submit(kernel, *args, r0, r1) for r0, r1 in blocks[1:]]
    try:
        first = kernel(*args, *blocks[0])
    finally:
        for f in futures:
            f.exception()  # (waits)
    return [first, *(f.result() for f in futures)]
