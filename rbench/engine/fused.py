"""One fused pass over a chunk of scores: the rank counts and the top-k candidates together.

Why: after the GEMM, numpy needs a separate pass over the (queries x candidates) scores for each
quantity the engine keeps (how many candidates score above / equal to each positive, how many
are ranked, which may enter the top-k), and each pass streams the whole matrix from memory. At
d = 128 those passes cost more than the GEMM itself. This kernel walks each row once while it
sits in cache (rows in parallel), so exact evaluation with a top-100 costs little more than the
GEMM (``benchmarks/engine_scale.py``).

For the dense scorer the GEMM is rbench's own (``rbench.engine.kernels.gemm``) and the
two are fused (``gemm_scan``): each block of 144 query rows is multiplied and scanned while its
scores are in cache, so the 100 MB a 1,024 x 25,000 batch scores are never written to memory and
read back, which alone cost 20-25% of an OpenBLAS GEMM at d = 128.

It is an accelerator, not a second definition: ``rbench.engine.scan`` keeps its numpy passes as the
reference (``RBENCH_FUSED=0`` selects them; ``tests/engine/test_fused.py`` checks both give identical
results, ties and exclusions included), and falls back to them where numba is not installed.

Conventions (the engine's): the chunk ``s`` holds finite scores, ``-inf`` for excluded
candidates, and covers pool indices ``a .. a+C-1`` of a shared pool, chunks in ascending order.
Positives are *not* masked: the kernel counts them like any candidate and the kernel subtracts
their own contribution afterwards, so the top-k sees them as it must.

The top-k never sorts or selects over a whole row (a float max or a per-score branch does not
vectorise in numba; comparisons and int maxima do). An fp32 chunk row of at least k blocks of 64
scores gets its threshold from the blocks' maxima (a float max tree in LLVM IR, then int32
keys): a histogram bucket's edge that at least k maxima reach is reached by >= k scores, so it
needs no second try, and only the ~k blocks reaching it are collected, each by a 64-bit mask of
its scores at or above it (vector compares in LLVM IR). A row whose first chunk is its last
collects into its thread's own buffer. Otherwise a row's first chunk gives a threshold: the m-th largest of
every 16th score (m ~ 1.25 k / 16 + 5, so ~2k scores reach it). One vectorised pass writes a
flag byte per score (score >= threshold; the first positive's rank counts ride along); the flags
are read eight at a time and only the few non-zero words looked at, their candidates appended
to a per-row buffer in ascending pool index. The threshold is kept only if at least k scores
reach it (else a lower one from the same sample, else every finite candidate is collected), so
the top-k lies at or above it and the buffer holds it exactly. When the buffer fills (or when
later chunks follow), its k best are kept (quickselect; ties: the lower pool index) and the
threshold rises to their k-th best, strictly from then on: a later candidate tied with it has a
higher pool index and loses, as in one selection over everything. After the last chunk each
row's buffer is sorted into rank order (a stable radix sort on the scores' bits: ties keep the
lower pool index first), in the same visit while it is in cache.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from rbench.core.errors import RBenchError
from rbench.engine.kernels.rowblocks import row_blocks, run_blocks

_LOCK = threading.Lock()  # one kernel launch at a time: each takes every kernel thread and the TopK's buffers


def enabled() -> bool:
    """Whether the fused kernel is used (numba importable and not switched off)."""
    return os.environ.get("RBENCH_FUSED", "1") != "0" and _kernels() is not None


@cache
def _kernels() -> Any:
    try:
        from rbench.engine.kernels import fused as _fused_kernel
    except ImportError:  # numba is optional at run time: the numpy passes take over
        return None
    return _fused_kernel


class TopK:
    """Each row's top-k candidates so far, carried across the chunks of one query batch: a
    buffer of (score, pool index) in ascending pool index, holding every candidate seen that
    reaches the row's threshold (at least k do, once a threshold is set), and that threshold.

    Its arrays are views of flat buffers that may hold more: a batch reuses the buffers of the
    one before (a shorter last batch, or another k, included), and an evaluation those of the
    one before (``take_topk`` / ``keep_topk``)."""

    def __init__(self, n_rows: int, k: int, spare: TopK | None = None) -> None:
        """A fresh top-k for n_rows rows, in spare's buffers when they fit (fresh pages cost more
        than the scan on these machines: ~10 MB a 1,024-query batch)."""
        width = _kernels().buffer_width(k)
        need = (n_rows * width, n_rows * width, n_rows, n_rows, n_rows, n_rows * k, n_rows * k)
        if spare is not None and all(b.size >= m for b, m in zip(spare._base, need)):
            base = spare._base  # (flat: any k and rows that fit)
        else:
            base = (np.empty(need[0], dtype=np.float64),  # holds fp32 scores exactly
                    np.empty(need[1], dtype=np.int64), np.empty(n_rows, dtype=np.int64), np.empty(n_rows),
                    np.empty(n_rows, dtype=np.bool_), np.empty(need[5], dtype=np.float64),
                    np.empty(need[6], dtype=np.int64))
        self._base = base
        self.k = k
        self.scores, self.index = (b[: n_rows * width].reshape(n_rows, width) for b in base[:2])
        self.size, self.threshold, self.strict = (b[:n_rows] for b in base[2:5])
        self.out_v, self.out_i = (b[: n_rows * k].reshape(n_rows, k) for b in base[5:])  # the sorted top-k
        self.size[:] = -1  # -1: the row has seen no chunk yet
        self.threshold[:] = -np.inf
        self.strict[:] = False
        self.wide = False  # a float64 chunk was seen: thresholds may need fp64 from then on
        self.done = False
        # gemm_scan's per-thread blocks of scores (independent of k and of the rows)
        self.blocks: np.ndarray | None = spare.blocks if spare is not None else None
        # the BLAS-tile path's (rbench.engine.blas_tiles): its pending lists
        self.pending: tuple[np.ndarray, ...] | None = spare.pending if spare is not None else None

    def nbytes(self) -> int:
        extra = [self.blocks, *(self.pending or ())]
        return sum(b.nbytes for b in self._base) + sum(b.nbytes for b in extra if b is not None)


# Spare buffers an evaluation leaves for the next one in this process (as BLAS libraries keep
# theirs): faulting in fresh pages for them in every evaluation cost this machine about a tenth
# of a d = 128 evaluation of 3,000 x 25,000 (an ad-hoc paired check against the bare GEMM: 1.22x
# with fresh pages, 1.12x with glibc told to keep freed memory, 1.06x with these spares). One of
# each kind, at most _SPARE_BYTES each (a 25,000 x 1,024 pool packed: 102 MB); handed out once
# (an evaluation beside another in a thread allocates its own).
_SPARE_BYTES = 1 << 27
_SPARES: dict[str, Any] = {}
_SPARE_LOCK = threading.Lock()


def take_topk() -> TopK | None:
    """The top-k buffers the last evaluation left (or None): a ``TopK``'s spare."""
    with _SPARE_LOCK:
        return _SPARES.pop("topk", None)


def keep_topk(top: TopK | None) -> None:
    """Leave ``top``'s buffers for the next evaluation (nothing may refer to them any more);
    a larger spare already kept stays."""
    if top is not None and top.nbytes() <= _SPARE_BYTES:
        with _SPARE_LOCK:
            old = _SPARES.get("topk")
            if old is None or old.nbytes() <= top.nbytes():
                _SPARES["topk"] = top


def take_buffer(size: int) -> np.ndarray | None:
    """A spare 64-byte aligned fp32 buffer of at least ``size`` values, or None."""
    with _SPARE_LOCK:
        buf = _SPARES.get("buffer")
        if buf is None or buf.size < size:
            return None
        return _SPARES.pop("buffer")


def keep_buffer(buf: np.ndarray | None) -> None:
    """Leave a buffer from ``pack`` / ``take_buffer`` for later use (the largest one is kept)."""
    if buf is None or buf.nbytes > _SPARE_BYTES:
        return
    with _SPARE_LOCK:
        old = _SPARES.get("buffer")
        if old is None or old.size < buf.size:
            _SPARES["buffer"] = buf


def _writable(x: Any, dtype: Any) -> np.ndarray:
    """x as a C-contiguous, writable base ndarray of dtype (copied only when it is not one already).
    Why writable: numba compiles a read-only array as another type, so a ranker's read-only query
    vectors or positives' scores would compile a kernel afresh in the middle of a timed
    evaluation (``warmup`` compiles the writable types). These inputs are small (batch x d, batch
    x positives) or a gathered copy already (``pair_dots``' g): a copy, when one is made, costs
    nothing. (The candidates ``pack`` and the BLAS tiles read may be a memory map as large as the
    pool: those kernels take every candidate matrix read-only, a view, not a copy.)"""
    return np.require(x, dtype=dtype, requirements=("C", "W", "E"))


def scan(s: np.ndarray, a: int, thr: np.ndarray, pos: np.ndarray, count_finite: bool, higher: np.ndarray,
         equal: np.ndarray, finite: np.ndarray, top: TopK, more: bool = True) -> None:
    """Run the kernel over chunk ``s`` (B x C, pool indices from ``a``). Adds to ``higher``/``equal``
    (B x P) how many candidates score above / tie with each positive's score ``thr`` (in the
    chunk's precision; the positives ``pos``, B x P pool indices, -1 for padding, left out), to
    ``finite`` (B) how many are not -inf (when ``count_finite``), and adds the chunk's candidates
    to ``top``. ``more``: whether later chunks follow for these rows (if not, the top-k is
    sorted in the same visit, while each row's buffer is in cache)."""
    thr = _writable(thr, s.dtype)
    if s.dtype == np.float64:
        top.wide = True
    elif top.wide:  # a threshold taken from fp64 scores may not be an fp32 value: compare in
        s, thr = s.astype(np.float64), thr.astype(np.float64)  # fp64 (exact: fp32 -> fp64 is)
    kernels = _kernels()
    s = np.ascontiguousarray(s)
    if s.dtype.name not in _WARM and s.dtype.name in _WARMUPS:
        _ready(s.dtype.name)  # the first chunk in this precision compiles its kernel (see ``warmup``)
    ri = s.view(np.int32) if s.dtype == np.float32 else np.empty((s.shape[0], 0), dtype=np.int32)
    with _LOCK:
        run_blocks(kernels.scan, s.shape[0], kernels.threads(), s, ri, s.shape[1], int(a), thr, pos,
                   bool(count_finite), higher, equal, finite, top.k, top.scores, top.index, top.size, top.threshold,
                   top.strict, bool(more), top.out_v, top.out_i)
    top.done = top.k > 0 and not more


@cache
def _gemm_kernels() -> Any:
    if _kernels() is None:  # (imports the scan's kernels first: they choose numba's threading layer)
        return None
    from rbench.engine.kernels import gemm as _gemm_kernel
    return _gemm_kernel


@cache
def host_avx512() -> bool:
    """Whether this CPU has AVX-512 (LLVM's reading of the host, as numba compiles for it)."""
    from llvmlite import binding

    return bool(binding.get_host_cpu_features().get("avx512f", False))


def _gemm_mode() -> str:
    """``RBENCH_GEMM``: ``auto`` (the default), ``tile`` (BLAS tiles, certified scan), ``own`` or
    ``blas``. auto takes the faster road on this CPU's widest vectors: with AVX-512, ``tile``
    (MKL's or OpenBLAS's 16-lane kernels; rbench's micro-kernel is 8 lanes wide: on a Sapphire
    Rapids-class Xeon its fused scan ran 2.1-2.4x the fastest GEMM at d = 128 and 2.5-2.9x at
    d = 1,024, the tiles 2.1-2.6x and 1.5-2.0x); without, ``own`` (AVX2: the micro-kernel is as
    wide as the BLAS kernels, and its scores are scanned in cache: on a Zen 3, three runs of 5
    rounds, 1.04-1.23x the fastest GEMM, the tiles 1.32-1.66x; ``benchmarks/engine_vs_blas.py``).
    Both give the same ranks and top-k, bit for bit."""
    mode = os.environ.get("RBENCH_GEMM", "auto")
    if mode not in ("auto", "tile", "own", "blas"):
        raise RBenchError(f"RBENCH_GEMM must be auto, tile, own or blas, got {mode!r}")
    if mode == "auto":
        return "tile" if host_avx512() else "own"
    return mode


def own_gemm(dim: int) -> bool:
    """Whether the dense scorer's scores are rbench's own arithmetic (``rbench.engine.kernels.gemm``:
    one fp32 fma chain in k order): numba importable and ``RBENCH_GEMM`` not ``blas``. Independent
    of ``RBENCH_FUSED``: the fused and the reference path see the same bits. ``tile`` (the
    default) computes the fused scan's tiles with the fastest BLAS and certifies them against
    these bits (``rbench.engine.blas_tiles``); ``own`` runs rbench's GEMM fused with the scan;
    ``blas`` (numpy's GEMM, a comparison switch) gives up bit-equal positives: an identical
    candidate may then miss its tie by an ulp."""
    if _gemm_mode() == "blas":
        return False
    return dim > 0 and _gemm_kernels() is not None


def tile_gemm() -> bool:
    """Whether ``gemm_scan`` takes raw candidates and computes BLAS tiles (``RBENCH_GEMM=tile``, or
    auto on an AVX-512 CPU)."""
    return _gemm_mode() == "tile" and _gemm_kernels() is not None


@cache
def _tile_kernels() -> Any:
    if _gemm_kernels() is None:
        return None
    from rbench.engine.kernels import tiles as _tiles_kernel
    return _tiles_kernel


def gemm_width() -> int:
    """How many candidates ``gemm_scan`` should take at a time: a block of rows' scores over
    them stays in cache for the scan (measured: a 262,144-candidate chunk at d = 128 in one call
    ran 1.5x slower than the same chunk in parts). Not fewer at large d: each part costs every
    row a scan with its own top-k step (at d = 1,024, parts sized by the packed candidates'
    bytes, 4,096 candidates, made the top-100 add 10% to the rank counts alone), while the packed
    candidates streaming from memory cost little against a GEMM that long."""
    return _gemm_kernels().PART_COLS


def pack(e: Any, buf: np.ndarray | None = None) -> np.ndarray:
    """Candidates e (C x d) packed for ``gemm`` / ``gemm_scan`` (fp32; about the size of e in
    fp32), in buf's memory when it is large enough, else in a spare buffer (``take_buffer``)."""
    kernels = _gemm_kernels()
    size = kernels.n_panels(len(e)) * e.shape[1] * kernels.NR
    return kernels.pack(e, buf if buf is not None and buf.size >= size else take_buffer(size), _kernels().threads())


def gemm(q: np.ndarray, packed: np.ndarray, out: np.ndarray) -> np.ndarray:
    """out (B x C, C-contiguous fp32) = q (B x d) @ the packed candidates' transpose."""
    with _LOCK:
        run_blocks(_gemm_kernels().gemm, len(q), _kernels().threads(), _writable(q, np.float32), packed, out)
    return out


def pair_dots(q: np.ndarray, g: np.ndarray) -> np.ndarray:
    """out[b, j] = q[b] . g[b, j] (q: B x d, g: B x m x d), the same bits as ``gemm`` for the pair."""
    out = np.empty(g.shape[:2], dtype=np.float32)
    with _LOCK:
        run_blocks(_gemm_kernels().pair_dots, len(g), _kernels().threads(), _writable(q, np.float32),
                   _writable(g, np.float32), out)
    return out


@dataclass(frozen=True)
class _OwnBlocks:
    """rbench's GEMM fused with the scan, a block of MC query rows at a time: ``gemm_block`` writes
    the block's scores into the thread's buffer, ``scan`` reads them back while in cache (two
    kernel calls a block: see ``gemm_block``). The operands of one ``gemm_scan`` call."""

    q: np.ndarray
    packed: np.ndarray
    n_cols: int
    a: int
    thr: np.ndarray
    pos: np.ndarray
    ex_off: np.ndarray
    ex_col: np.ndarray
    want_finite: bool
    higher: np.ndarray
    equal: np.ndarray
    finite: np.ndarray
    top: TopK
    more: bool

    def rows(self, buf: np.ndarray, r0: int, r1: int) -> None:
        """Rows r0 .. r1-1, in this thread's buffer buf."""
        g, kernels, top = _gemm_kernels(), _kernels(), self.top
        Cp = self.packed.shape[0] * self.packed.shape[2]
        cb = buf[: g.MC * Cp]
        cb2, cbi2 = cb.reshape(g.MC, Cp), cb.view(np.int32).reshape(g.MC, Cp)
        ap = np.empty((g.MC // g.MR, self.q.shape[1], g.MR), dtype=np.float32)
        tmp = np.empty((g.MR, g.NR), dtype=np.float32)
        for i0 in range(r0, r1, g.MC):
            i1 = min(r1, i0 + g.MC)
            kernels.gemm_block(self.q, self.packed, i0, i1, self.ex_off, self.ex_col, ap, cb, tmp)
            b = slice(i0, i1)
            kernels.scan(cb2, cbi2, self.n_cols, self.a, self.thr[b], self.pos[b], self.want_finite, self.higher[b],
                         self.equal[b], self.finite[b], top.k, top.scores[b], top.index[b], top.size[b],
                         top.threshold[b], top.strict[b], self.more, top.out_v[b], top.out_i[b], 0, i1 - i0)


def gemm_scan(q: np.ndarray, packed: Any, n_cols: int, a: int, thr: np.ndarray, pos: np.ndarray,
              ex_off: np.ndarray, ex_col: np.ndarray, count_finite: bool, higher: np.ndarray, equal: np.ndarray,
              finite: np.ndarray, top: TopK, more: bool = True) -> None:
    """``scan`` over the scores ``gemm`` would write for q and the n_cols packed candidates
    (pool indices from a), computed and scanned a block of query rows at a time while the block
    is in cache, never written whole. Row r's excluded candidates are the chunk columns
    ``ex_col[ex_off[r]:ex_off[r+1]]`` (they score -inf). Only for rows that saw no fp64 chunk.
    ``packed`` a ``blas_tiles.Candidates`` (``tile_gemm``): BLAS tiles, the same results."""
    if top.wide:
        raise ValueError("gemm_scan computes fp32 scores: it cannot follow an fp64 chunk")
    kernels = _kernels()
    if not isinstance(packed, np.ndarray):  # blas_tiles.Candidates
        from rbench.engine import blas_tiles
        with _LOCK:
            blas_tiles.scan(_writable(q, np.float32), packed, a, _writable(thr, np.float32), pos, ex_off, ex_col,
                            count_finite, higher, equal, finite, top, more, _tile_kernels(), kernels.threads())
        top.done = top.k > 0 and not more
        return
    n_threads = kernels.threads()
    size = _gemm_kernels().MC * packed.shape[0] * packed.shape[2]  # (a multiple of 16: rows stay 64-byte aligned)
    if top.blocks is None or top.blocks.shape[0] < n_threads or top.blocks.shape[1] < size:
        top.blocks = _gemm_kernels().aligned_empty((n_threads, size))
    slot = {r0: i for i, (r0, _) in enumerate(row_blocks(len(q), n_threads))}  # each thread's own block
    own = _OwnBlocks(_writable(q, np.float32), packed, int(n_cols), int(a), _writable(thr, np.float32), pos, ex_off,
                     ex_col, bool(count_finite), higher, equal, finite, top, bool(more))

    def rows(r0: int, r1: int) -> None:
        own.rows(top.blocks[slot[r0]], r0, r1)

    with _LOCK:
        run_blocks(rows, len(q), n_threads)
    top.done = top.k > 0 and not more


def finish(top: TopK) -> tuple[np.ndarray, np.ndarray]:
    """The top-k in rank order: (pool indices, fp64 scores), B x k, -1/-inf padded. Sorted here
    only when the last scan left it unsorted (a batch whose chunks end before the pool does):
    by numpy, a stable sort of each buffer (held in ascending pool index) by descending score,
    so ties keep the lower pool index first and -0.0 ties with 0.0, as the kernels' radix sort
    (a rare road: a kernel of its own cost seconds of compile on a fresh install)."""
    if not top.done:
        width = top.scores.shape[1]
        live = np.arange(width) < np.maximum(top.size, 0)[:, None]
        order = np.argsort(np.where(live, -top.scores, np.inf), axis=1, kind="stable")[:, : top.k]
        kept = np.take_along_axis(live, order, axis=1)
        top.out_v[:] = np.where(kept, np.take_along_axis(top.scores, order, axis=1), -np.inf)
        top.out_i[:] = np.where(kept, np.take_along_axis(top.index, order, axis=1), -1)
        top.done = True
    return top.out_i, top.out_v


# ---------------------------------------------------------------------------------------------
# warm-up: the kernels compiled before an evaluation is timed
# ---------------------------------------------------------------------------------------------
# numba compiles each kernel on first use, per signature (its argument types: dtypes, dimensions,
# layout, read-only or not), and loads it from numba's on-disk cache afterwards (0.25 s, numba's
# import included). Timed inside an evaluation, a first compile made a popularity run's 0.3 ms a
# query read 45 ms. ``warmup`` runs the kernels an evaluation's roads call on tiny inputs,
# through the same wrappers as the engine (so the same argument types), before the engine
# starts its clock; the scan of a ranker's scores is compiled for the precision of its first
# chunk when that chunk comes (fp32 or fp64: each kernel is most of a fresh install's compile
# wait, and a run needs one), timed apart all the same (``compile_seconds``).
# tests/engine/test_compile_time.py checks that nothing is compiled outside a warm-up, and
# benchmarks/compile_breakdown.py measures each kernel's compile on an empty cache.

_WARM: set[str] = set()  # the groups of kernels warmed in this process
_WARM_LOCK = threading.Lock()
_WARM_DIM = 8  # the tiny inputs' vector length (any d > 0 compiles the same signatures)
_CLOCK = threading.local()  # this thread's seconds in warm-ups, and whether one is running


# Below this many scores an evaluation's scan runs on the numpy passes: the fused kernel would
# save well under a second there, while compiling it on a fresh install (an empty numba cache)
# costs seconds (a minute and a half on two cores before issue 44; the first `rbench run
# --ranker pop --task ml-100k`, 943 x 1,682 scores, paid it in full). The numpy passes count
# ranks exactly as the kernel does, so the choice moves no number (tests/engine/test_fused.py).
# ``RBENCH_FUSED_MIN_SCORES`` overrides it (the test suite sets 0, so that its small inputs run
# through the kernel the large ones use).
SMALL_SCAN = 50_000_000


def scan_pays(n_rows: int, width: int) -> bool:
    """Whether an evaluation of ``n_rows`` queries x ``width`` candidates is large enough for the
    fused scan (``SMALL_SCAN``); the engine and the runner ask before compiling anything."""
    floor = os.environ.get("RBENCH_FUSED_MIN_SCORES", "").strip()
    if floor and not floor.isdigit():
        raise RBenchError(f"RBENCH_FUSED_MIN_SCORES must be a number of scores (an integer >= 0), got {floor!r}")
    return int(n_rows) * int(width) >= (int(floor) if floor else SMALL_SCAN)


def compile_seconds() -> float:
    """The seconds this thread has spent in warm-ups so far (``warmup``, and a scan's first chunk
    in a precision not compiled yet). A timer around an evaluation (or around a fit, which may
    evaluate) takes the difference out of its seconds: they are ``compile_s``, not the ranker's."""
    return float(getattr(_CLOCK, "spent", 0.0))


def warming() -> bool:
    """Whether this thread is inside a warm-up (the only place a kernel may compile)."""
    return bool(getattr(_CLOCK, "warming", False))


def warmup(scan: bool = True, gemm: bool = True) -> float:
    """Compile (or load from numba's cache) the kernels of the engine's roads, once per process;
    returns the seconds it took (0.0 when nothing was left to do: later calls cost a lock and a
    set lookup). The engine calls it before timing an evaluation and records the seconds as
    ``compile_s``, so that ``score_s`` is the ranker's cost, not the JIT's.

    It follows the switches as the engine reads them: the fused scan only when ``enabled()``,
    rbench's GEMM only when ``own_gemm`` (independent of ``RBENCH_FUSED``), their fusion when
    both; numba not installed: nothing. A switch turned on later is warmed by the next call.
    ``scan=False``: a small scan (the numpy passes), ``gemm=False``: a ranker without vectors;
    what they would call is not compiled: a fresh install's first small run compiles nothing.
    The scan of a ranker's scores is compiled by its first chunk (``scan``), per precision."""
    return _warm([name for name, wanted in _groups(scan, gemm) if wanted])


def _groups(scan: bool = True, gemm: bool = True) -> list[tuple[str, bool]]:
    """(group, whether the engine would call it now), in the order they are warmed: the
    positives' dense scores (``pair_dots``); the dense scores written out (``pack``, ``gemm``:
    small scans, and ``gemm_scan``'s packed operands); the dense scan on rbench's GEMM
    (``RBENCH_GEMM=own``) or on BLAS tiles (the default)."""
    scan_on = scan and enabled()
    gemm_on = gemm and own_gemm(_WARM_DIM)
    tiles = gemm_on and tile_gemm()
    return [("pair_dots", gemm_on), ("gemm", gemm_on and not (scan_on and tiles)),
            ("gemm_scan", scan_on and gemm_on and not tiles), ("tile_scan", scan_on and tiles)]


def _warm(names: list[str]) -> float:
    """Run the named groups' warm-ups not run yet in this process; the seconds it took (added to
    this thread's ``compile_seconds``).

    Python's cyclic garbage collector is paused meanwhile: numba's compiler allocates millions of
    short-lived objects (copies of its IR), and each of the collections they trigger walks every
    object the process holds (torch's, on the dense road): an empty cache's compile took 10-20%
    longer with it on (issue 44: ``benchmarks/compile_breakdown.py``). It runs again afterwards
    (if it ran before), and collects the compiler's garbage then."""
    t0 = time.perf_counter()
    with _WARM_LOCK:
        todo = [name for name in names if name not in _WARM]
        if not todo:
            return 0.0
        _CLOCK.warming = True
        collecting = gc.isenabled()
        gc.disable()
        try:
            for name in todo:
                _WARMUPS[name]()
                _WARM.add(name)
        finally:
            _CLOCK.warming = False
            if collecting:
                gc.enable()
    spent = time.perf_counter() - t0
    _CLOCK.spent = compile_seconds() + spent
    return spent


def _ready(name: str) -> None:
    """Group ``name`` warmed before its first use (unless this is a warm-up's own call)."""
    if not warming():
        _warm([name])


def _tiny_counts(n_rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The engine's per-batch arguments for n_rows rows and one positive each: (scores of the
    positives' column 0 stand-in, positives, higher, equal, finite), typed as the engine's."""
    pos = np.zeros((n_rows, 1), dtype=np.int64)
    higher = np.zeros((n_rows, 1), dtype=np.int64)
    equal = np.zeros((n_rows, 1), dtype=np.int64)
    return np.zeros((n_rows, 1)), pos, higher, equal, np.zeros(n_rows, dtype=np.int64)


def _warm_scan(dtype: Any) -> None:
    """``scan`` of scores in one precision (a ranker's fp32 or fp64 scores; fp32 after fp64 is
    scanned in fp64), without and with a top-k, over two chunks (the second the last, which
    sorts). The flags (exclusions, ``more``) and k are values, not types: one compilation
    serves them all, but each is run once here all the same."""
    for k in (0, 3):
        s = np.arange(16, dtype=dtype).reshape(2, 8)
        thr, pos, higher, equal, finite = _tiny_counts(2)
        top = TopK(2, k)
        scan(s, 0, thr, pos, True, higher, equal, finite, top, more=True)
        scan(s.copy(), 8, thr, pos, False, higher, equal, finite, top, more=False)


def _tiny_packed(e: np.ndarray) -> np.ndarray:
    """e packed into a buffer of its own (``pack`` without one would take the spare buffer an
    evaluation left for the next)."""
    kernels = _gemm_kernels()
    return pack(e, np.empty(kernels.n_panels(len(e)) * e.shape[1] * kernels.NR, dtype=np.float32))


def _warm_gemm() -> None:
    """``pack`` (it reads every candidate matrix as read-only: one signature, memory-mapped or
    not) and ``gemm``."""
    e = np.ones((20, _WARM_DIM), dtype=np.float32)
    q = np.ones((2, _WARM_DIM), dtype=np.float32)
    gemm(q, _tiny_packed(e), np.empty((2, len(e)), dtype=np.float32))


def _warm_pair_dots() -> None:
    """``pair_dots``: the positives' scores (and per-query lists') by rbench's arithmetic."""
    pair_dots(np.ones((2, _WARM_DIM), dtype=np.float32), np.ones((2, 3, _WARM_DIM), dtype=np.float32))


def _scan_two_parts(first: Any, second: Any, n: int) -> None:
    """``gemm_scan`` over two parts of ``n`` candidates each (``first`` without exclusions,
    ``second`` with one), without and with a top-k: every road a warm-up must compile."""
    q = np.ones((2, _WARM_DIM), dtype=np.float32)
    no_off, no_col = np.zeros(3, dtype=np.int64), np.zeros(0, dtype=np.int64)
    ex_off, ex_col = np.array([0, 1, 1], dtype=np.int64), np.array([4], dtype=np.int64)
    for k in (0, 3):
        thr, pos, higher, equal, finite = _tiny_counts(2)
        top = TopK(2, k)
        gemm_scan(q, first, n, 0, thr, pos, no_off, no_col, False, higher, equal, finite, top, more=True)
        gemm_scan(q, second, n, n, thr, pos, ex_off, ex_col, True, higher, equal, finite, top, more=False)


def _warm_gemm_scan() -> None:
    """``gemm_scan`` on the engine's packed operands."""
    packed = _tiny_packed(np.ones((20, _WARM_DIM), dtype=np.float32))
    _scan_two_parts(packed, packed, 20)


def _warm_tile_scan() -> None:
    """``gemm_scan`` on BLAS tiles (raw candidates; ``blas_tiles.scan`` reads them as read-only:
    one signature, a memory-mapped pool's chunk or not)."""
    from rbench.engine.blas_tiles import Candidates

    raw = np.ones((20, _WARM_DIM), dtype=np.float32)
    _scan_two_parts(Candidates(raw), Candidates(raw), len(raw))


_WARMUPS = {"float32": lambda: _warm_scan(np.float32), "float64": lambda: _warm_scan(np.float64),
            "pair_dots": _warm_pair_dots, "gemm": _warm_gemm, "gemm_scan": _warm_gemm_scan,
            "tile_scan": _warm_tile_scan}
