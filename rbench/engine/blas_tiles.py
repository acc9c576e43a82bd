"""The dense scan on the fastest GEMM of the machine, with the engine's exact ranks.

Why: rbench's own GEMM (``kernels.gemm``, 8-lane AVX2) runs at about half the speed of MKL or of
OpenBLAS on its AVX-512 kernel (``benchmarks/engine_vs_blas.py``), and the scan after it costs
little. Here each column tile of a query batch's scores is computed by the best BLAS available
(torch's ``mm``, MKL, into one reused buffer; numpy's ``matmul`` without torch), then scanned
by ``kernels.tiles.tile_scan`` while it is in cache. The scores a BLAS computes differ from the
engine's definition (one fp32 fma chain in k order: ``pair_dots``, the positives' scores) by a
few ulps; the scan is *certified*: it decides from the BLAS score only where the proven error
bound leaves no doubt and recomputes the rest exactly, so ranks, ties and the top-k are those
of the engine's own GEMM, bit for bit (``tests/engine/test_blas_tiles.py``). Each recomputed
score is also checked against the bound: a GEMM beyond it raises, it is never trusted.

``RBENCH_TILE_BLAS``: ``torch`` / ``numpy`` / ``auto`` (torch when importable, the default).
"""

from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from rbench.core.errors import RBenchError
from rbench.engine.kernels.rowblocks import run_blocks

TILE_COLS = 4096  # candidates a tile: a 1,024-query tile (16 MiB) stays in cache for its scan
_U = 2.0**-24  # fp32's unit roundoff
_TINY = 2.0**-126  # smallest normal fp32: the most a flushed subnormal moves one operation


def backend() -> str:
    """Which GEMM computes the tiles: torch's (MKL) when importable, else numpy's."""
    want = os.environ.get("RBENCH_TILE_BLAS", "auto")
    if want not in ("auto", "torch", "numpy"):
        raise RBenchError(f"RBENCH_TILE_BLAS must be auto, torch or numpy, got {want!r}")
    if want == "numpy":
        return "numpy"
    if "torch" not in sys.modules:
        # torch's OpenMP threads spin after each mm, on the cores the scan needs next (2.5x the
        # d = 128 scan on 2 cores); told to sleep unless the user chose (read when torch loads)
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        import torch  # noqa: F401  (MKL: ~1.2x OpenBLAS on its best kernel here)
    except ImportError:
        if want == "torch":
            raise RBenchError("RBENCH_TILE_BLAS=torch but torch is not installed") from None
        return "numpy"
    return "torch"


def _torch_ieee(torch: Any) -> bool:
    """Whether torch's fp32 matmul is IEEE fp32 (a lowered precision, e.g. bf16 through oneDNN,
    would leave the bound: then numpy's GEMM is used)."""
    if torch.get_float32_matmul_precision() != "highest":
        return False
    mkldnn = getattr(getattr(torch.backends, "mkldnn", None), "matmul", None)
    return getattr(mkldnn, "fp32_precision", "ieee") in ("ieee", "none")


def gemm(q: np.ndarray, e: np.ndarray, out: np.ndarray) -> None:
    """out (B x C fp32, C-contiguous) = q @ e.T by the tile backend."""
    torch = sys.modules.get("torch") if backend() == "torch" else None
    if torch is not None and _torch_ieee(torch):
        with warnings.catch_warnings():  # (a read-only pool chunk: torch only reads it)
            warnings.filterwarnings("ignore", "The given NumPy array is not writable")
            te = torch.from_numpy(e)
        torch.mm(torch.from_numpy(q), te.T, out=torch.from_numpy(out))
    else:
        np.matmul(q, e.T, out=out)


def tile_norms(e: np.ndarray) -> np.ndarray:
    """Each TILE_COLS tile's largest squared candidate norm (fp32 sums: within gamma_K of the
    truth, widened in ``bound``). The dense scorer keeps them per chunk for every query batch."""
    sq = np.einsum("ij,ij->i", e, e)
    return np.array([sq[c : c + TILE_COLS].max(initial=0.0) for c in range(0, len(e), TILE_COLS)])


def bound(q: np.ndarray, e: np.ndarray, e_sq: float | None = None) -> np.ndarray:
    """Per query row: the most any two fp32 computations of its dot product with one of e's rows
    may differ (any summation order, fma or not, subnormals flushed or not): 2 gamma_K |q| max|e|
    with gamma_K = K u / (1 - K u), widened for the norms' own rounding. ``e_sq``: e's largest
    squared norm, when known (``tile_norms``)."""
    K = q.shape[1]
    gamma = K * _U / (1.0 - K * _U)
    if e_sq is None:
        e_sq = float(np.einsum("ij,ij->i", e, e).max(initial=0.0))
    q_norm = np.sqrt(np.einsum("ij,ij->i", q, q, dtype=np.float64))
    e_norm = np.sqrt(float(e_sq) / (1.0 - gamma))
    return 2.0 * gamma * (1.0 + 1e-6) * q_norm * e_norm + 4.0 * K * _TINY


def bands(thr: np.ndarray, eps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each positive's band [thr - eps, thr + eps], rounded outwards to fp32 values."""
    t = thr.astype(np.float64)
    hi, lo = t + eps[:, None], t - eps[:, None]
    hi32, lo32 = hi.astype(np.float32), lo.astype(np.float32)
    hi32 = np.where(hi32 < hi, np.nextafter(hi32, np.float32(np.inf)), hi32)
    lo32 = np.where(lo32 > lo, np.nextafter(lo32, np.float32(-np.inf)), lo32)
    return hi32, lo32


def _exclusions(ex_off: np.ndarray, ex_col: np.ndarray, c0: int, c1: int) -> tuple[np.ndarray, np.ndarray]:
    """The exclusions among columns c0 .. c1-1, as (offsets, tile columns)."""
    if not len(ex_col):
        return ex_off * 0, ex_col
    rows = np.repeat(np.arange(len(ex_off) - 1), np.diff(ex_off))
    keep = (ex_col >= c0) & (ex_col < c1)
    off = np.zeros(len(ex_off), dtype=np.int64)
    np.cumsum(np.bincount(rows[keep], minlength=len(ex_off) - 1), out=off[1:])
    return off, (ex_col[keep] - c0).astype(np.int64)


def _pending(top: Any, n_rows: int) -> tuple[np.ndarray, ...]:
    """The rows' pending top-k candidates (BLAS score, part column; count, bound), in buffers
    kept on ``top`` from call to call (fresh pages cost more than the scan here). The scores are
    fp32 values held in fp64, as the top-k buffers hold theirs: the kernels' quickselect is then
    compiled for one precision."""
    width = 2 * top.k + 256
    have = top.pending
    if have is None or have[0].shape[0] < n_rows or have[0].shape[1] != width:
        have = (np.empty((n_rows, width), dtype=np.float64), np.empty((n_rows, width), dtype=np.int64),
                np.empty(n_rows, dtype=np.int64), np.empty(n_rows))
        top.pending = have
    px, pc, pn, pt = (b[:n_rows] for b in have)
    pn[:] = 0
    pt[:] = -np.inf
    return px, pc, pn, pt


@dataclass(frozen=True)
class Candidates:
    """A chunk's candidates for the tile scan: fp32 vectors (C x K, C-contiguous) and, when the
    scorer keeps them, their ``tile_norms`` (else computed per call)."""

    e: np.ndarray
    norms: np.ndarray | None = None


def scan(q: np.ndarray, cands: Candidates, a: int, thr: np.ndarray, pos: np.ndarray, ex_off: np.ndarray,
         ex_col: np.ndarray, count_finite: bool, higher: np.ndarray, equal: np.ndarray, finite: np.ndarray,
         top: Any, more: bool, kernels: Any, n_threads: int) -> None:
    """``fused.gemm_scan``'s contract for the candidates (pool indices from a): the same counts
    and top-k, from BLAS tiles (see the module's docstring). ``top``: a ``fused.TopK`` (its
    buffers hold exact scores here; ``tiles``, ``pending``: this path's)."""
    e = cands.e
    norms = cands.norms if cands.norms is not None else tile_norms(e)
    if e.flags.writeable:  # the kernel reads it: one compiled signature, memory-mapped pool or not
        e = e.view()
        e.flags.writeable = False
    B, C = len(q), len(e)
    if top.tiles is None or top.tiles.size < B * TILE_COLS:
        top.tiles = np.empty(B * TILE_COLS, dtype=np.float32)
    px, pc, pn, pt = _pending(top, B)
    bad = 0
    eps = np.zeros(B)
    for c0 in range(0, C, TILE_COLS):
        c1 = min(C, c0 + TILE_COLS)
        tile = top.tiles[: B * (c1 - c0)].reshape(B, c1 - c0)
        eps = np.maximum(eps, bound(q, e[c0:c1], float(norms[c0 // TILE_COLS])))  # (the part's so far)
        hi, lo = bands(thr, eps)
        gemm(q, e[c0:c1], tile)
        off, col = _exclusions(ex_off, ex_col, c0, c1)
        bad += sum(run_blocks(kernels.tile_scan, B, n_threads, tile, q, e, c0, int(a), thr, hi, lo, pos, off, col,
                              bool(count_finite), higher, equal, finite, eps, top.k, top.scores, top.index, top.size,
                              top.threshold, px, pc, pn, pt, c1 == C, bool(more), top.out_v, top.out_i))
    if bad:
        raise RBenchError(f"the tile GEMM ({backend()}) returned {bad} scores beyond the proven fp32 "
                          "error bound: set RBENCH_GEMM=own (rbench's own GEMM) and report it")
