"""One fused pass over a chunk of scores: the rank counts and the top-k candidates together.

Why: after the GEMM, numpy needs a separate pass over the (queries x candidates) scores for each
quantity the engine keeps (how many candidates score above / equal to each positive, how many
are ranked, which may enter the top-k), and each pass streams the whole matrix from memory. At
d = 128 those passes cost more than the GEMM itself. This kernel walks each row once while it
sits in cache (rows in parallel), so exact evaluation with a top-100 costs little more than the
GEMM (``benchmarks/engine_scale.py``).

It is an accelerator, not a second definition: ``rbench.engine`` keeps its numpy passes as the
reference (``RBENCH_FUSED=0`` selects them; ``tests/test_fused.py`` checks both give identical
results, ties and exclusions included), and falls back to them where numba is not installed.

Conventions (the engine's): the chunk ``s`` holds finite scores, ``-inf`` for excluded
candidates, and covers pool indices ``a .. a+C-1`` of a shared pool, chunks in ascending order.
Positives are *not* masked: the kernel counts them like any candidate and the engine subtracts
their own contribution afterwards, so the top-k sees them as it must. The top-k of each row is
carried across chunks in a buffer kept in ascending pool index; a later candidate enters only
with a strictly higher score than the k-th best so far (an equal score never enters: the lower
pool index wins, as in one selection over everything), and only candidates at or above a lower
bound of the chunk's k-th best (the k-th best of group maxima) are looked at one by one.
"""

from __future__ import annotations

import os
from functools import cache
from typing import Any

import numpy as np


def enabled() -> bool:
    """Whether the fused kernel is used (numba importable and not switched off)."""
    return os.environ.get("RBENCH_FUSED", "1") != "0" and _kernels() is not None


@cache
def _kernels() -> Any:
    try:
        from rbench import _fused_kernel
    except ImportError:  # numba is optional at run time: the numpy passes take over
        return None
    return _fused_kernel


def scan(s: np.ndarray, a: int, thr: np.ndarray, pos: np.ndarray, count_finite: bool, higher: np.ndarray,
         equal: np.ndarray, finite: np.ndarray, hv: np.ndarray, hi: np.ndarray, hn: np.ndarray) -> None:
    """Run the kernel over chunk ``s`` (B x C, pool indices from ``a``). Adds to ``higher``/``equal``
    (B x P) how many candidates score above / tie with each positive's score ``thr`` (the positives
    ``pos``, B x P pool indices, -1 for padding, left out), to ``finite`` (B) how many are not -inf
    (when ``count_finite``), and updates the carried top-k ``hv``/``hi``/``hn`` (B x k scores, pool
    indices in ascending order, sizes) in place."""
    thr = np.ascontiguousarray(thr, dtype=s.dtype)
    kernels = _kernels()
    kernels.scan(np.ascontiguousarray(s), int(a), thr, pos, bool(count_finite), higher, equal, finite,
                 hv, hi, hn, kernels.threads())


def finish(hv: np.ndarray, hi: np.ndarray, hn: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The carried top-k in rank order: (pool indices, fp64 scores), B x k, -1/-inf padded."""
    out_v = np.empty(hv.shape, dtype=np.float64)
    out_i = np.empty(hi.shape, dtype=np.int64)
    _kernels().finish(hv, hi, hn, out_v, out_i)
    return out_i, out_v
