"""The dense scan on the fastest GEMM of the machine, with the engine's exact ranks.

Why: rbench's own GEMM (``kernels.gemm``, 8-lane AVX2) runs at about half the speed of MKL or of
OpenBLAS on its AVX-512 kernel (``benchmarks/engine_vs_blas.py``), and the scan after it costs
little. Here each kernel thread takes a block of a query batch's rows and, tile by tile of
candidates, computes its rows' scores with the best BLAS available (torch's ``mm``, MKL; numpy's
``matmul`` without torch), one BLAS thread per call, into its own buffer, and scans them at once
with ``kernels.tiles.tile_scan`` (no barrier between a GEMM on every core and a scan on every
core; the scores are read back while in cache). The scores a BLAS computes differ from the
engine's definition (one fp32 fma chain in k order: ``pair_dots``, the positives' scores) by a
few ulps; the scan is *certified*: it decides from the BLAS score only where the proven error
bound leaves no doubt and recomputes the rest exactly, so ranks, ties and the top-k are those
of the engine's own GEMM, bit for bit (``tests/engine/test_blas_tiles.py``). Each recomputed
score is also checked against the bound: a GEMM beyond it raises, it is never trusted.

``RBENCH_TILE_BLAS``: ``torch`` / ``numpy`` / ``auto`` (the default: torch when importable on an
Intel CPU, else numpy).
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from rbench.core.errors import RBenchError
from rbench.engine.kernels.rowblocks import run_blocks

TILE_COLS = 4096  # candidates a tile at most,
TILE_BYTES = 1 << 21  # and their vectors' bytes at most (what each GEMM call packs: a core's L2)
TILE_ROWS = 1024  # query rows a tile at most (a thread's rows of a 1,024-query batch: one tile high)
# Measured (ad-hoc, this 2-core VM): at d = 128, tiles of 0.5-2 MiB of scores that a core's L2
# holds (512 x 1,024, 256 x 2,048) ran no faster than these 8-16 MiB ones, read back from L3 (MKL
# packs its operands once a call, and each row pays its top-k's steps once a tile); at d = 1024,
# 2 threads, 512-candidate tiles (2 MiB of vectors, each thread packing its own) ran 1.70x the
# GEMM against 1.97x for 4,096 (16 MiB packed twice, once a thread).


def tile_cols(dim: int) -> int:
    """How many candidates a tile holds at dimension dim (TILE_COLS, fewer at large dim)."""
    return max(256, min(TILE_COLS, TILE_BYTES // (4 * max(1, dim))))


_U = 2.0**-24  # fp32's unit roundoff
_TINY = 2.0**-126  # smallest normal fp32: the most a flushed subnormal moves one operation


@functools.cache
def _intel() -> bool:
    """Whether the CPU is an Intel one (MKL's fast kernels are dispatched for Intel CPUs: on a Zen 3
    torch's ``mm`` ran 1.6-1.9x slower than OpenBLAS on its Haswell kernel, 3,000 x 25,000 at
    d = 128 and 1,024, ``benchmarks/engine_vs_blas.py``). Linux's /proc/cpuinfo; elsewhere assumed."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return "GenuineIntel" in line
    except OSError:
        pass
    return True


def backend() -> str:
    """Which GEMM computes the tiles: torch's (MKL) when importable on an Intel CPU, else numpy's
    (OpenBLAS)."""
    want = os.environ.get("RBENCH_TILE_BLAS", "auto")
    if want not in ("auto", "torch", "numpy"):
        raise RBenchError(f"RBENCH_TILE_BLAS must be auto, torch or numpy, got {want!r}")
    if want == "numpy":
        return "numpy"
    if "torch" not in sys.modules:
        # torch's OpenMP threads spin after each mm, on the cores the scan needs next (2.5x the
        # d = 128 scan on 2 cores); told to sleep unless the user chose (read when torch loads)
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if want == "auto" and not _intel():
        return "numpy"
    try:
        import torch  # noqa: F401  (MKL: ~1.2x OpenBLAS on its best kernel on a Xeon)
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


TileGemm = Callable[[int, int, int, np.ndarray], None]


def backend_gemm(q: np.ndarray, e: np.ndarray, starts: list[int], width: int) -> TileGemm:
    """The tile GEMM of one part by the tile backend, its operands wrapped and its column tiles
    (e[c0:c0+width] for c0 in starts) sliced once, so that a call per tile costs the GEMM and
    few Python objects (the collector's passes over a process's objects ran at 5-7% of a d = 128
    scan when each call made a dozen): ``mm(s0, s1, t, out)`` writes q[s0:s1] @ (tile t).T into
    out (fp32, C-contiguous)."""
    torch = sys.modules.get("torch") if backend() == "torch" else None
    if torch is None or not _torch_ieee(torch):
        cols = [e[c0 : c0 + width].T for c0 in starts]
        return lambda s0, s1, t, out: np.matmul(q[s0:s1], cols[t], out=out)
    with warnings.catch_warnings():  # (read-only operands, a memory-mapped pool's: torch only reads them)
        warnings.filterwarnings("ignore", "The given NumPy array is not writable")
        tq, te = torch.from_numpy(q), torch.from_numpy(e)
    tcols = [te[c0 : c0 + width].T for c0 in starts]

    def mm(s0: int, s1: int, t: int, out: np.ndarray) -> None:
        torch.mm(tq[s0:s1], tcols[t], out=torch.from_numpy(out))

    return mm


tile_gemm = backend_gemm  # what ``scan`` calls (a test puts a GEMM off by up to the bound here)


def gemm(q: np.ndarray, e: np.ndarray, out: np.ndarray) -> None:
    """out (B x C fp32, C-contiguous) = q @ e.T by the tile backend."""
    backend_gemm(q, e, [0], len(e))(0, len(q), 0, out)


def tile_norms(e: np.ndarray) -> np.ndarray:
    """Each tile's (``tile_cols``) largest squared candidate norm (fp32 sums: within gamma_K of the
    truth, widened in ``bound``). The dense scorer keeps them per chunk for every query batch."""
    sq = np.einsum("ij,ij->i", e, e)
    w = tile_cols(e.shape[1])
    return np.array([sq[c : c + w].max(initial=0.0) for c in range(0, len(e), w)])


def bound(q: np.ndarray, e: np.ndarray, e_sq: float | None = None) -> np.ndarray:
    """Per query row: the most any two fp32 computations of its dot product with one of e's rows
    may differ (any summation order, fma or not, subnormals flushed or not): 2 gamma_K |q| max|e|
    with gamma_K = K u / (1 - K u), widened for the norms' own rounding. ``e_sq``: e's largest
    squared norm, when known (``tile_norms``)."""
    if e_sq is None:
        e_sq = float(np.einsum("ij,ij->i", e, e).max(initial=0.0))
    return bound_of(np.sqrt(np.einsum("ij,ij->i", q, q, dtype=np.float64)), q.shape[1], e_sq)


def bound_of(q_norm: np.ndarray, K: int, e_sq: float) -> np.ndarray:
    """``bound`` from the query rows' norms (fp64), the dimension and e's largest squared norm."""
    gamma = K * _U / (1.0 - K * _U)
    e_norm = np.sqrt(float(e_sq) / (1.0 - gamma))
    return 2.0 * gamma * (1.0 + 1e-6) * q_norm * e_norm + 4.0 * K * _TINY


def bands(thr: np.ndarray, eps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each positive's band [thr - eps, thr + eps] (eps broadcast against thr), rounded outwards
    to fp32 values."""
    t = thr.astype(np.float64)
    hi, lo = t + eps, t - eps
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


BAND_QUEUE = 64  # band members a row queues for recomputation before it recomputes them


def _pending(top: Any, n_rows: int) -> tuple[np.ndarray, ...]:
    """The rows' pending top-k candidates (BLAS score, part column; count, bound) and queued band
    members (BLAS score, part column, whose band; count), in buffers kept on ``top`` from call to
    call (fresh pages cost more than the scan here). The scores are fp32 values held in fp64, as
    the top-k buffers hold theirs: the kernels' quickselect is then compiled for one precision."""
    width = 2 * top.k + 256
    have = top.pending
    if have is None or have[0].shape[0] < n_rows or have[0].shape[1] != width:
        have = (np.empty((n_rows, width), dtype=np.float64), np.empty((n_rows, width), dtype=np.int64),
                np.empty(n_rows, dtype=np.int64), np.empty(n_rows),
                np.empty((n_rows, BAND_QUEUE)), np.empty((n_rows, BAND_QUEUE), dtype=np.int64),
                np.empty((n_rows, BAND_QUEUE), dtype=np.int64), np.empty(n_rows, dtype=np.int64))
        top.pending = have
    px, pc, pn, pt, qx, qc, qj, qn = (b[:n_rows] for b in have)
    pn[:] = 0
    pt[:] = -np.inf
    qn[:] = 0
    return px, pc, pn, pt, qx, qc, qj, qn


@dataclass(frozen=True)
class Candidates:
    """A chunk's candidates for the tile scan: fp32 vectors (C x K, C-contiguous) and, when the
    scorer keeps them, their ``tile_norms`` (else computed per call)."""

    e: np.ndarray
    norms: np.ndarray | None = None


def _with_one_blas_thread(backend_name: str) -> Any:
    """A context in which each BLAS call runs on its caller's thread alone: the tile path runs
    one GEMM per kernel thread (a block of rows each, scanned while its tile is in that core's
    cache) instead of one GEMM on every core between scans. torch: MKL's thread count (a
    process-wide setting, restored on exit); numpy: threadpoolctl's limit on its BLAS."""
    if backend_name == "torch":
        return _one_torch_thread(sys.modules["torch"])
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # (numpy's BLAS then threads each tile itself: slower, the same results)
        return contextlib.nullcontext()
    return threadpool_limits(1, user_api="blas")


@contextlib.contextmanager
def _one_torch_thread(torch: Any) -> Any:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


_LOCAL = threading.local()


def _tile_buffer(n: int) -> np.ndarray:
    """This thread's tile of scores (kept from call to call: fresh pages cost more than a scan)."""
    buf = getattr(_LOCAL, "tile", None)
    if buf is None or buf.size < n:
        buf = _LOCAL.tile = np.empty(n, dtype=np.float32)
    return buf


@dataclass(frozen=True)
class _Tile:
    """One column tile of a part, as its kernel calls take it: columns c0 .. c1-1, each row's
    bound so far (the running maximum over the part's tiles: entries pending from earlier tiles
    are cut with it), the positives' bands under it, the tile's exclusions (offsets, columns)."""

    c0: int
    c1: int
    eps: np.ndarray  # (rows,)
    his: np.ndarray  # (rows, positives) fp32
    los: np.ndarray
    ex_off: np.ndarray
    ex_col: np.ndarray


def _tiles(q: np.ndarray, e: np.ndarray, norms: np.ndarray, thr: np.ndarray, ex_off: np.ndarray,
           ex_col: np.ndarray) -> list[_Tile]:
    """The part's column tiles, for every thread's rows (made once, before the threads)."""
    C = len(e)
    w = tile_cols(e.shape[1])
    starts = range(0, C, w)
    q_norm = np.sqrt(np.einsum("ij,ij->i", q, q, dtype=np.float64))
    eps = np.maximum.accumulate(np.stack([bound_of(q_norm, q.shape[1], float(norms[c0 // w]))
                                          for c0 in starts]), axis=0)
    his, los = bands(thr[None, :, :], eps[:, :, None])
    return [_Tile(c0, min(C, c0 + w), eps[t], his[t], los[t], *_exclusions(ex_off, ex_col, c0, min(C, c0 + w)))
            for t, c0 in enumerate(starts)]


def scan(q: np.ndarray, cands: Candidates, a: int, thr: np.ndarray, pos: np.ndarray, ex_off: np.ndarray,
         ex_col: np.ndarray, count_finite: bool, higher: np.ndarray, equal: np.ndarray, finite: np.ndarray,
         top: Any, more: bool, kernels: Any, n_threads: int) -> None:
    """``fused.gemm_scan``'s contract for the candidates (pool indices from a): the same counts
    and top-k, from BLAS tiles (see the module's docstring). Each kernel thread takes a block of
    the batch's rows and walks it TILE_ROWS rows x ``tile_cols`` candidates at a time: its own GEMM
    (one BLAS thread) into its own tile, scanned at once while in its core's cache. ``top``: a
    ``fused.TopK`` (its buffers hold exact scores here; ``pending``: this path's)."""
    e = cands.e
    norms = cands.norms if cands.norms is not None else tile_norms(e)
    if e.flags.writeable:  # the kernel reads it: one compiled signature, memory-mapped pool or not
        e = e.view()
        e.flags.writeable = False
    B, C = len(q), len(e)
    tiles = _tiles(q, e, norms, thr, ex_off, ex_col)
    px, pc, pn, pt, qx, qc, qj, qn = _pending(top, B)
    name = backend()
    width = tile_cols(e.shape[1])
    mm = tile_gemm(q, e, [t.c0 for t in tiles], width)
    a, count_finite, more = int(a), bool(count_finite), bool(more)

    def rows(r0: int, r1: int) -> int:
        bad = 0
        buf = _tile_buffer(min(TILE_ROWS, r1 - r0) * min(width, C))
        for s0 in range(r0, r1, TILE_ROWS):
            s1 = min(r1, s0 + TILE_ROWS)
            shaped: dict[int, np.ndarray] = {}  # (the buffer as each tile width's rows)
            for i, t in enumerate(tiles):
                w = t.c1 - t.c0
                out = shaped.get(w)
                if out is None:
                    out = shaped[w] = buf[: (s1 - s0) * w].reshape(s1 - s0, w)
                mm(s0, s1, i, out)
                bad += kernels.tile_scan(out, q, e, t.c0, a, thr, t.his, t.los, pos, t.ex_off, t.ex_col, count_finite,
                                         higher, equal, finite, t.eps, top.k, top.scores, top.index, top.size,
                                         top.threshold, px, pc, pn, pt, qx, qc, qj, qn, t.c1 == C, more, top.out_v, top.out_i, s0, s1)
        return bad

    with _with_one_blas_thread(name):
        bad = sum(run_blocks(rows, B, n_threads))
    if bad:
        raise RBenchError(f"the tile GEMM ({name}) returned {bad} scores beyond the proven fp32 "
                          "error bound: set RBENCH_GEMM=own (rbench's own GEMM) and report it")
