"""rbench's own fp32 GEMM for the dense scorer (queries x candidates inner products), in numba.

Why not numpy's (OpenBLAS): the engine must read every score back after the GEMM (the rank
counts and the top-k), and at d <= a few hundred that read-back from memory costs 20-40% of the
GEMM itself. A GEMM of our own can hand each block of rows to the scan while it is still in
cache (``rbench.engine.fused.gemm_scan``), which OpenBLAS through numpy cannot. Alone it is
about as fast as OpenBLAS here (2-core Zen 3, 1,024 x 25,000, 2 threads: 0.95-1.06x of numpy's
GEMM at d = 64-4096; ``benchmarks/gemm_kernel.py``, results in ``benchmarks/results/``).

The design is the usual one (Goto/BLIS): the candidates are packed once per chunk into panels of
NR = 16 (each panel: K steps of 16 consecutive fp32), the queries into panels of MR = 6, and an
MR x NR micro-tile is computed in 12 AVX registers of 8 lanes by fused multiply-adds over k
(``micro_tile``: LLVM IR written through numba's ``intrinsic``, so that the accumulators stay in
registers, which numba's own loops do not guarantee). Each score is one fma chain over k = 0 ..
K-1 in order, whatever the blocking, batch size or thread count: the scores are the same bits
in every run, in the fused and in the reference path. ``pair_dots`` computes single (query,
candidate) scores by the same chain, so a positive's score, computed apart from the pool's GEMM,
is the same bits as its column in the GEMM: a candidate identical to a positive ties with it
(the pessimistic tie rule sees the tie), which no BLAS call order guarantees (numpy's einsum and
GEMM of a gathered subset differ from the pool GEMM's bits in 4-90% of scores here).
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from rbench.engine.kernels.pipeline import BODY
from rbench.engine.kernels.rowblocks import run_blocks

MR = 6  # rows (queries) of a micro-tile
NR = 16  # columns (candidates) of a micro-tile: two 8-lane fp32 vectors
MC = 144  # query rows per block: each candidate panel read from L3 serves this many rows (BLIS's
# Zen choice; a block's packed rows, 72 KiB at d = 128, stay in L2)
PART_COLS = 1 << 15  # candidates per fused GEMM + scan call: each part costs every row a top-k step,
# so parts are wide; a block's scores (MC x PART_COLS fp32, 18 MiB a thread) are read back from L3
# or memory, which costs less than more top-k steps.
# Measured (issue 44, 2-core Zen 3): the kernel alone at d = 128 ran 43 GFLOP/s with 48 rows a
# block over 25,000 candidates (their panels streamed from L3 for every 48 rows) and 56-61 with
# 144; the whole scan of 3,000 x 25,000 with top-100 (in-process alternating rounds, medians of 5,
# against numpy's OpenBLAS on its Haswell kernel) with 144 rows a block and parts of 4,096 /
# 16,384 / 32,768 candidates: 1.32 / 1.21 / 1.12x (d = 128, 1 thread), 1.29 / 0.99 / 0.91x (2
# threads), 1.16 / 1.10 / 1.02x (d = 1,024, 1 thread)


@intrinsic
def micro_tile(typingctx, a_addr, b_addr, depth, c_addr, ldc):
    """C[0:MR, 0:NR] = A_panel @ B_panel: a_addr -> K x MR packed query values, b_addr -> K x NR
    packed candidate values, c_addr -> the tile's first score, ldc: bytes between C's rows."""
    sig = types.void(types.int64, types.int64, types.int64, types.int64, types.int64)

    def codegen(context, builder, signature, args):
        a0, b0, kk, c0, row_bytes = args
        f32 = ir.FloatType()
        v8 = ir.VectorType(f32, 8)
        i64 = ir.IntType(64)
        i32 = ir.IntType(32)
        vptr, fptr = ir.PointerType(v8), ir.PointerType(f32)
        fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(v8, [v8, v8, v8]), "llvm.fma.v8f32")
        acc = [cgutils.alloca_once(builder, v8) for _ in range(2 * MR)]
        for slot in acc:
            builder.store(ir.Constant(v8, [0.0] * 8), slot)
        undef = ir.Constant(v8, ir.Undefined)
        splat = ir.Constant(ir.VectorType(i32, 8), [0] * 8)
        with cgutils.for_range(builder, kk) as loop:
            b_k = builder.add(b0, builder.mul(loop.index, ir.Constant(i64, NR * 4)))
            halves = [builder.load(builder.inttoptr(builder.add(b_k, ir.Constant(i64, 32 * h)), vptr), align=4)
                      for h in range(2)]
            a_k = builder.add(a0, builder.mul(loop.index, ir.Constant(i64, MR * 4)))
            for r in range(MR):
                x = builder.load(builder.inttoptr(builder.add(a_k, ir.Constant(i64, 4 * r)), fptr), align=4)
                xs = builder.shuffle_vector(builder.insert_element(undef, x, ir.Constant(i32, 0)), undef, splat)
                for h in range(2):
                    slot = acc[2 * r + h]
                    builder.store(builder.call(fma, [xs, halves[h], builder.load(slot)]), slot)
        for r in range(MR):
            row = builder.add(c0, builder.mul(ir.Constant(i64, r), row_bytes))
            for h in range(2):
                dst = builder.inttoptr(builder.add(row, ir.Constant(i64, 32 * h)), vptr)
                builder.store(builder.load(acc[2 * r + h]), dst, align=4)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def fma32(typingctx, x, y, z):
    """x * y + z in fp32, rounded once (LLVM's fma: the micro-tile's operation, lane by lane)."""
    sig = types.float32(types.float32, types.float32, types.float32)

    def codegen(context, builder, signature, args):
        f32 = ir.FloatType()
        fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(f32, [f32, f32, f32]), "llvm.fma.f32")
        return builder.call(fma, list(args))

    return sig, codegen


@numba.njit(**BODY)
def pair_dots(q, g, out, r0, r1):
    """out[b, j] = q[b] . g[b, j] for rows b = r0 .. r1-1 (q: B x K fp32, g: B x m x K fp32; the
    other rows: other threads' calls, ``rowblocks.run_blocks``), each the micro-tile's fma chain
    over k = 0 .. K-1 from 0: the bits ``gemm`` gives the same pair."""
    B, m, K = g.shape
    for b in range(r0, r1):
        for j in range(m):
            acc = np.float32(0.0)
            for k in range(K):
                acc = fma32(q[b, k], g[b, j, k], acc)
            out[b, j] = acc


def n_panels(n_cols: int) -> int:
    """How many NR-wide candidate panels hold n_cols candidates."""
    return -(-n_cols // NR)


@numba.njit(inline="always")
def pack_panel(src, first, stop, panel):
    """One panel of rows first .. first+w-1 of src (w = panel.shape[1]), vector-major:
    panel[k, j] = src[first + j, k], zeros for rows at or past stop."""
    K = src.shape[1]
    for j in range(panel.shape[1]):
        i = first + j
        if i < stop:
            for k in range(K):
                panel[k, j] = src[i, k]
        else:
            for k in range(K):
                panel[k, j] = 0.0


@numba.njit(**BODY)
def pack_columns(e, out, p0, p1):
    """Panels p0 .. p1-1 of the candidates e (C x K fp32, row-major; read-only: one signature
    whether they are a memory map or not): out[p, k, j] = e[p * NR + j, k], zeros past C (out:
    n_panels(C) x K x NR)."""
    for p in range(p0, p1):
        pack_panel(e, p * NR, e.shape[0], out[p])


@numba.njit(inline="always")
def pack_rows(q, i0, i1, ap):
    """Query rows i0 .. i1-1 as MR-row panels: ap[t, k, r] = q[i0 + t * MR + r, k], zeros past i1."""
    for t in range(-(-(i1 - i0) // MR)):
        pack_panel(q, i0 + t * MR, i1, ap[t])


@numba.njit(cache=True, nogil=True)
def block_product(ap, n_rows, bp, dst, ldc, n_cols, tmp):
    """dst[0:n_rows, 0:n_cols] = the packed rows ap (n_rows valid) x the packed columns bp, dst's
    rows ldc floats apart. Candidate panels outermost: each stays in L1 while every row panel of
    the block (in L2) passes over it. Tiles that would cross dst's edges go through tmp (MR x NR).
    A function of its own, not inlined into its callers: inlined into ``gemm_scan``, its machine
    code changed with the scan code around it, and a change to the top-k alone made the rank
    counts (the GEMM, mostly) 3-5% slower (ad-hoc paired runs at d = 128); called once per block
    of MC rows, the call costs nothing measurable."""
    K = ap.shape[1]
    n_tiles = -(-n_rows // MR)
    full_cols = n_cols // NR
    base = dst.ctypes.data
    tbase = tmp.ctypes.data
    for p in range(bp.shape[0]):
        b_addr = bp[p].ctypes.data
        for t in range(n_tiles):
            rows = min(MR, n_rows - t * MR)
            if rows == MR and p < full_cols:
                micro_tile(ap[t].ctypes.data, b_addr, K, base + 4 * (t * MR * ldc + p * NR), 4 * ldc)
            else:
                micro_tile(ap[t].ctypes.data, b_addr, K, tbase, 4 * NR)
                cols = min(NR, n_cols - p * NR)
                for r in range(rows):
                    o = (t * MR + r) * ldc + p * NR
                    for j in range(cols):
                        dst[o + j] = tmp[r, j]


@numba.njit(**BODY)
def gemm(q, bp, out, r0, r1):
    """Rows r0 .. r1-1 of out (B x C, C-contiguous) = q (B x K fp32) @ the candidates packed in
    bp (``pack_columns``); the other rows: other threads' calls (``rowblocks.run_blocks``)."""
    K = q.shape[1]
    C = out.shape[1]
    flat = out.reshape(-1)
    ap = np.empty((MC // MR, K, MR), dtype=np.float32)
    tmp = np.empty((MR, NR), dtype=np.float32)
    for i0 in range(r0, r1, MC):
        i1 = min(r1, i0 + MC)
        pack_rows(q, i0, i1, ap)
        block_product(ap, i1 - i0, bp, flat[i0 * C :], C, C, tmp)


def aligned_empty(shape: tuple[int, ...]) -> np.ndarray:
    """An fp32 array whose first element sits on a 64-byte cache line (numpy's large arrays start
    16 bytes past one, so every other 8-lane load or store of the kernel would straddle two)."""
    size = int(np.prod(shape))
    raw = np.empty(size + 16, dtype=np.float32)
    skip = (-raw.ctypes.data % 64) // 4
    return raw[skip : skip + size].reshape(shape)


def pack(e: np.ndarray, buf: np.ndarray | None = None, n_threads: int = 1) -> np.ndarray:
    """The packed panels of candidates e (C x K; converted to fp32, C-contiguous), written into
    buf's memory when it is large enough (a view of it is returned), on n_threads threads."""
    e = np.ascontiguousarray(e, dtype=np.float32)
    shape = (n_panels(len(e)), e.shape[1], NR)
    size = shape[0] * shape[1] * shape[2]
    if buf is not None and buf.size >= size:
        out = buf.reshape(-1)[:size].reshape(shape)
    else:
        out = aligned_empty(shape)
    if e.flags.writeable:
        e = e.view()
        e.flags.writeable = False
    run_blocks(pack_columns, shape[0], n_threads, e, out)
    return out
