"""The numba kernels of ``rbench.engine.fused`` (imported only when the engine first uses them: numba
is a heavy import). Module level, so that numba's on-disk cache keys them reliably.

Speed notes (2-core AMD Zen 3, numba 0.68): a count written as ``h = int32(h + int32(x > t))``
vectorises (8 lanes); a float ``max`` reduction does not (LLVM keeps it scalar), and neither
does anything that branches per score. So the top-k is found by comparisons and maxima only:
on long fp32 rows the blocks' maxima and each block's mask of scores at or above a threshold
are written in LLVM IR (``block_maxima_ir``, ``ge_mask``: a float max tree, vector compares and
their sign masks), elsewhere a threshold comes from a strided sample of the row, a vectorised
pass flags the scores at or above it (one byte each), and a scalar look visits the few 32-byte
spans of flags that hold any. Rows are split into one contiguous block per thread, so that each
thread allocates its scratch once per call: each kernel call runs one block, on the threads of
``rowblocks`` (not numba's ``parallel=True``, whose compile doubled the kernels': issue 44).

Compile time (a fresh install compiles ``scan`` for the precision of a ranker's scores, once;
issue 44): numba's ``inline="always"`` inlines a helper's IR at every call site and compiles each
copy anew, and copies it at a cost of its blocks times its variables, at every level of
nesting; so the helpers are called from few sites (``topk_row`` loops over its thresholds
rather than writing each try out) and the row's visit is written in ``scan`` itself. A helper
compiled apart costs a pipeline of its own and LLVM passes over what it calls, again in each
caller: the sorts are ``finish_row``'s implementations themselves, not called from a wrapper,
and no ``min``, ``max``, ``array.view`` or ``.copy()`` (each an implementation compiled apart).
``benchmarks/compile_breakdown.py`` measures each kernel."""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.cpython.unsafe.numbers import trailing_zeros
from numba.extending import intrinsic, overload

# (numba's on-disk cache keys gemm_block on this file alone: after changing the kernels.gemm helpers
# it calls (their code is compiled into its cache entry), touch this file, or the cache keeps the old ones)
from rbench.engine.kernels.gemm import NR, block_product, pack_rows
from rbench.engine.kernels.pipeline import BODY, HELPER, SIMPLIFIED

_FAST = {"nnan", "nsz", "reassoc"}  # scores are never NaN (the engine checks); -inf is allowed

STRIDE = 16  # the threshold's sample: every STRIDE-th score of a chunk row (one per cache line)


# Compile time (issue 44): numba compiles an implementation of ``min``/``max`` per argument types,
# of ``np.empty`` per (shape, dtype) and of ``array.view`` per dtype pair, each a pipeline of its
# own (0.05-0.2 s apiece on an empty cache). The kernels compare with conditional expressions,
# allocate few (shape, dtype) kinds and read bits through these intrinsics (a load or a
# bitcast: nothing to compile), so that each kernel's first compile is its own code.


@intrinsic
def load_u64(typingctx, addr):
    """The uint64 at byte address addr (eight flag bytes at a time, without a uint64 view)."""
    sig = types.uint64(types.int64)

    def codegen(context, builder, signature, args):
        return builder.load(builder.inttoptr(args[0], ir.PointerType(ir.IntType(64))), align=1)

    return sig, codegen


@intrinsic
def float_bits(typingctx, x):
    """A float's IEEE bits as the unsigned integer of its width (uint32 / uint64): a bitcast."""
    if x not in (types.float32, types.float64):
        return None
    width = x.bitwidth

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(width))

    return (types.uint32 if width == 32 else types.uint64)(x), codegen


@intrinsic
def in_row_precision(typingctx, row, t):
    """t converted to the precision of row's scores (exact for a threshold that is one of them,
    or -inf): compared with them in their own precision, their passes stay in its lanes."""
    if not isinstance(row, types.Array):
        return None

    def codegen(context, builder, signature, args):
        return context.cast(builder, args[1], signature.args[1], signature.return_type)

    return row.dtype(row, t), codegen


@intrinsic
def fp32_of_bits(typingctx, bits):
    """The fp32 value whose IEEE bits are the int32 bits: a bitcast."""
    sig = types.float32(types.int32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return sig, codegen


@numba.njit(**HELPER)
def kth_largest(vals, n, k):
    """The k-th largest of vals[:n] (1 <= k <= n) by quickselect on a copy (numba's own
    sorts cost tens of microseconds on a few hundred values; this costs a few)."""
    work = np.empty(n, dtype=np.float64)  # (not vals[:n].copy(): a copy compiles a subroutine per type)
    for i in range(n):
        work[i] = vals[i]
    want = n - k  # its position in ascending order
    lo, hi = 0, n - 1
    while lo < hi:
        mid = (lo + hi) // 2
        a, b, c = work[lo], work[mid], work[hi]  # median of three as the pivot
        lo_ab, hi_ab = (a, b) if a < b else (b, a)
        pivot = hi_ab if hi_ab < c else c  # median of three: max(min(a, b), min(max(a, b), c))
        pivot = pivot if pivot > lo_ab else lo_ab
        i, j = lo, hi
        while i <= j:
            while work[i] < pivot:
                i += 1
            while work[j] > pivot:
                j -= 1
            if i <= j:
                work[i], work[j] = work[j], work[i]
                i += 1
                j -= 1
        if want <= j:
            hi = j
        elif want >= i:
            lo = i
        else:
            break
    return work[want]


@numba.njit(**HELPER)
def keep_best(bv, bi, n, k):
    """Keep, in place, the k best of the first n buffer entries (held in ascending pool index),
    in the same order: everything above the k-th best score, then the first of those tied with it
    (the lower pool index wins). Returns (how many are kept, the k-th best score; -inf when
    n <= k: nothing was dropped)."""
    if n <= k:
        return n, -np.inf
    t = kth_largest(bv, n, k)
    room = k
    for i in range(n):
        room -= bv[i] > t
    m = 0
    for i in range(n):  # a filter in order: m <= i, so writing in place is safe
        x = bv[i]
        if x > t or (x == t and room > 0):
            if x == t:
                room -= 1
            bv[m] = x
            bi[m] = bi[i]
            m += 1
    return m, t


@numba.njit(fastmath=_FAST, inline="always")
def count_above(row, t):
    """How many of row's scores are > t and == t (int32 lanes: this loop vectorises)."""
    h = np.int32(0)
    e = np.int32(0)
    for c in range(row.shape[0]):
        x = row[c]
        h = np.int32(h + np.int32(x > t))
        e = np.int32(e + np.int32(x == t))
    return h, e


@numba.njit(fastmath=_FAST, inline="always")
def count_finite(row):
    """How many of row's scores are not -inf (excluded candidates are -inf)."""
    n = np.int32(0)
    for c in range(row.shape[0]):
        n = np.int32(n + np.int32(row[c] != -np.inf))
    return n


@numba.njit(fastmath=_FAST, inline="always")
def flag(row, t, strict, fl):
    """fl[c] = whether row[c] >= t (> t when strict): one byte a score, in lanes (it vectorises)."""
    if strict:
        for c in range(row.shape[0]):
            fl[c] = np.uint8(row[c] > t)
    else:
        for c in range(row.shape[0]):
            fl[c] = np.uint8(row[c] >= t)


@numba.njit(fastmath=_FAST, inline="always")
def flag_count(row, t, strict, fl, p):
    """``flag`` and ``count_above(row, p)`` in one pass (both vectorise)."""
    h = np.int32(0)
    e = np.int32(0)
    if strict:
        for c in range(row.shape[0]):
            x = row[c]
            fl[c] = np.uint8(x > t)
            h = np.int32(h + np.int32(x > p))
            e = np.int32(e + np.int32(x == p))
    else:
        for c in range(row.shape[0]):
            x = row[c]
            fl[c] = np.uint8(x >= t)
            h = np.int32(h + np.int32(x > p))
            e = np.int32(e + np.int32(x == p))
    return h, e


@numba.njit(inline="always")
def sample_threshold(row, k, sample):
    """A threshold that about 2k of the row's scores reach: the m-th largest of every STRIDE-th
    score (m about 1.25 k / STRIDE + 5). The sample is left in sample[:ns] for a second try.
    Returns (threshold, ns, m); -inf when the row is too short for a sample to mean anything
    (or holds too few finite scores): then every finite candidate is collected."""
    C = row.shape[0]
    ns = C // STRIDE
    m = (5 * k + 4 * STRIDE - 1) // (4 * STRIDE) + 5
    if ns < 4 * m:
        return -np.inf, 0, m
    top = sample[ns : ns + m]  # the m largest so far, descending (insertion: few are inserted)
    for j in range(m):
        top[j] = -np.inf
    low = top[m - 1]
    for i in range(ns):
        x = row[i * STRIDE + STRIDE // 2]
        sample[i] = x
        if x > low:
            j = m - 1
            while j > 0 and top[j - 1] < x:
                top[j] = top[j - 1]
                j -= 1
            top[j] = x
            low = top[m - 1]
    return low, ns, m


@numba.njit(inline="always")
def take(row, c, a, k, bv, bi, n, t, tt, strict):
    """Append row[c] (pool index a + c) to the buffer bv/bi (n entries, ascending pool index) if
    it reaches t (>= t; > t when strict; tt: t in the row's precision). When the buffer is full
    its k best are kept first and t rises to their k-th best, strict from then on (a later
    candidate tied with it has a higher pool index and loses). Returns (n, t, tt, strict)."""
    x = row[c]
    if x > tt or (x == tt and not strict):
        if n == bv.shape[0]:
            n, t = keep_best(bv, bi, n, k)  # (n > 2k here; the new t is >= the old one)
            strict = True
            tt = in_row_precision(row, t)
        if x > tt or (x == tt and not strict):  # (again: a compaction raises t)
            bv[n] = x
            bi[n] = a + c
            n += 1
    return n, t, tt, strict


@numba.njit(inline="always")
def collect(row, a, fl, t, strict, k, bv, bi, n):
    """Append (score, pool index) of the flagged scores that reach t to the buffer (``take``).
    The flags are read eight bytes at a time and only non-zero words are looked at (bits found
    by trailing zeros); after a compaction they are a superset (they were set for the old t).
    Returns (n, t, strict)."""
    tt = in_row_precision(row, t)
    base = fl.ctypes.data
    for j in range(fl.shape[0] // 8):  # (flags past the row's end are zero)
        w = load_u64(base + 8 * j)
        while w != 0:  # each set byte holds one bit: find them by trailing zeros
            c = 8 * j + (trailing_zeros(w) >> 3)
            w &= w - np.uint64(1)
            n, t, tt, strict = take(row, c, a, k, bv, bi, n, t, tt, strict)
    return n, t, strict


BLOCK = 64  # the block-maxima threshold's blocks: 64 contiguous fp32 scores (4 cache lines)
N_BUCKETS = 256  # its histogram of block maxima
_KEY_NEG_INF = np.int32(-2139095041)  # key(-inf): the order-preserving int32 key of -inf


_LANES = 8  # fp32 lanes of an AVX2 vector


def _v8_loads(builder, addr, n):
    """n consecutive 8-lane fp32 vectors from byte address addr (unaligned loads)."""
    v8p = ir.PointerType(ir.VectorType(ir.FloatType(), _LANES))
    return [builder.load(builder.inttoptr(builder.add(addr, ir.Constant(addr.type, 32 * j)), v8p), align=4)
            for j in range(n)]


def _splat(builder, x):
    """x in every lane of an 8-lane fp32 vector."""
    i32 = ir.IntType(32)
    undef = ir.Constant(ir.VectorType(ir.FloatType(), _LANES), ir.Undefined)
    return builder.shuffle_vector(builder.insert_element(undef, x, ir.Constant(i32, 0)), undef,
                                  ir.Constant(ir.VectorType(i32, _LANES), [0] * _LANES))


def _vmax(builder, a, b):
    """Lane-wise max as one vmaxps (a > b ? a : b; no NaN handling: scores are never NaN)."""
    return builder.select(builder.fcmp_ordered(">", a, b), a, b)


def _block_maxima_intrinsic(count: bool):
    """An intrinsic (row_addr, n_blocks, out_addr, p) -> int64: out[b] = the largest fp32 score of
    the row's b-th block of BLOCK (a float max tree over 8-lane vectors, then across the lanes),
    and with ``count`` (higher << 32) | equal, how many scores are > p / == p (lane counters),
    else 0. Written in LLVM IR as ``kernels.gemm.micro_tile`` is: numba leaves a float max
    reduction scalar, which cost 1.5x this pass (and 1.6x with the counts)."""

    def block_maxima_ir(typingctx, row_addr, n_blocks, out_addr, p):
        sig = types.int64(types.int64, types.int64, types.int64, types.float32)

        def codegen(context, builder, signature, args):
            row0, nb, out0, pv = args
            i32, i64 = ir.IntType(32), ir.IntType(64)
            v8i = ir.VectorType(i32, _LANES)
            ps = _splat(builder, pv)
            acc = [cgutils.alloca_once(builder, v8i) for _ in range(2)]
            for slot in acc:
                builder.store(ir.Constant(v8i, [0] * _LANES), slot)
            with cgutils.for_range(builder, nb) as loop:
                vs = _v8_loads(builder, builder.add(row0, builder.mul(loop.index, ir.Constant(i64, 4 * BLOCK))),
                               BLOCK // _LANES)
                if count:  # a true compare is -1 in its lane: subtracting counts it
                    for slot, op in zip(acc, (">", "==")):
                        total = builder.load(slot)
                        for v in vs:
                            total = builder.sub(total, builder.sext(builder.fcmp_ordered(op, v, ps), v8i))
                        builder.store(total, slot)
                while len(vs) > 1:
                    vs = [_vmax(builder, vs[j], vs[j + 1]) for j in range(0, len(vs), 2)]
                m = vs[0]
                for width in (4, 2, 1):  # across the lanes: halves, quarters, eighths
                    lo = builder.shuffle_vector(m, m, ir.Constant(ir.VectorType(i32, width), list(range(width))))
                    hi = builder.shuffle_vector(m, m, ir.Constant(ir.VectorType(i32, width),
                                                                  list(range(width, 2 * width))))
                    m = _vmax(builder, lo, hi)
                dst = builder.inttoptr(builder.add(out0, builder.mul(loop.index, ir.Constant(i64, 4))),
                                       ir.PointerType(ir.FloatType()))
                builder.store(builder.extract_element(m, ir.Constant(i32, 0)), dst)
            sums = []
            for slot in acc:
                v = builder.load(slot)
                total = ir.Constant(i32, 0)
                for lane in range(_LANES):
                    total = builder.add(total, builder.extract_element(v, ir.Constant(i32, lane)))
                sums.append(builder.zext(total, i64))
            return builder.or_(builder.shl(sums[0], ir.Constant(i64, 32)), sums[1])

        return sig, codegen

    block_maxima_ir.__name__ = "block_maxima_count_ir" if count else "block_maxima_ir"
    return intrinsic(block_maxima_ir)


block_maxima_count_ir = _block_maxima_intrinsic(True)
block_maxima_ir = _block_maxima_intrinsic(False)


@intrinsic
def ge_mask(typingctx, addr, t):
    """Bit c of the uint64 result: whether the fp32 score at addr + 4c is >= t (c < BLOCK = 64),
    eight compares and their sign masks (vcmpps, vmovmskps): no flag bytes stored and read back."""
    sig = types.uint64(types.int64, types.float32)

    def codegen(context, builder, signature, args):
        a0, tv = args
        i64 = ir.IntType(64)
        ts = _splat(builder, tv)
        mask = ir.Constant(i64, 0)
        for j, v in enumerate(_v8_loads(builder, a0, BLOCK // _LANES)):
            bits = builder.zext(builder.bitcast(builder.fcmp_ordered(">=", v, ts), ir.IntType(_LANES)), i64)
            mask = builder.or_(mask, builder.shl(bits, ir.Constant(i64, _LANES * j)))
        return mask

    return sig, codegen


@numba.njit(inline="always")
def fp32_key(x):
    """The int32 order-preserving key of an fp32 score's bits x (-0.0 mapped with 0.0): key order
    is the scores' order, ties included."""
    key = np.int32(x ^ np.int32(np.int32(x >> np.int32(31)) & np.int32(0x7FFFFFFF)))
    return np.int32(key + np.int32(key == np.int32(-1)))


@numba.njit(inline="always")  # (inlined into the block path alone, ``_first_by_blocks``, as collect_blocks)
def block_maxima(row, ri, bm, p, count):
    """bm[b] = the largest key of the row's b-th block of BLOCK scores (the last, shorter block
    included), where key is the int32 order-preserving map of the fp32 bits, -0.0 mapped with
    0.0 so that key order is the scores' order, ties included. The full blocks' maxima come from
    one vectorised pass (``block_maxima_ir``: float maxima, keyed afterwards; a float max
    orders -0.0 and 0.0 as equal, and so do their keys). With ``count``, the scores above /
    equal to p are counted on the way (the first positive's rank). Returns (blocks, higher, equal)."""
    C = row.shape[0]
    nb = C // BLOCK
    h = np.int32(0)
    e = np.int32(0)
    if nb > 0:
        if count:
            he = block_maxima_count_ir(row.ctypes.data, nb, bm.ctypes.data, np.float32(p))
            h = np.int32(he >> 32)
            e = np.int32(he & 0xFFFFFFFF)
        else:
            block_maxima_ir(row.ctypes.data, nb, bm.ctypes.data, np.float32(p))
        for b in range(nb):  # float bits -> keys (vectorises)
            bm[b] = fp32_key(bm[b])
    if nb * BLOCK < C:
        m = np.int32(-2147483648)
        for c in range(nb * BLOCK, C):
            key = fp32_key(ri[c])
            m = key if key > m else m
            if count:
                y = row[c]
                h = np.int32(h + np.int32(y > p))
                e = np.int32(e + np.int32(y == p))
        bm[nb] = m
        nb += 1
    return nb, h, e


@numba.njit(inline="always")
def block_threshold(bm, nb, k, hist):
    """A key that at least k of the blocks' maxima reach, and few more: the lower edge of the
    histogram bucket (N_BUCKETS over the finite maxima's range) where the count from the top
    reaches k. Each such block holds a score at or above it, so the row's top-k does too, and
    only the blocks whose maximum reaches it need a look (about k of them, ~1.17 k scores
    collected for k = 100 at BLOCK = 64 on Gaussian scores, against ~2 k for the sampled
    threshold). Returns (found, key); not found when fewer than k blocks hold a finite score."""
    lo = np.int64(2147483647)
    hi = np.int64(_KEY_NEG_INF)
    nf = 0
    for b in range(nb):
        v = np.int64(bm[b])
        if v > _KEY_NEG_INF:
            nf += 1
            lo = v if v < lo else lo
            hi = v if v > hi else hi
    if nf < k:
        return False, np.int64(0)
    shift = 0
    while ((hi - lo) >> shift) >= N_BUCKETS:
        shift += 1
    hist[:] = 0
    for b in range(nb):
        v = np.int64(bm[b])
        if v > _KEY_NEG_INF:
            hist[(v - lo) >> shift] += 1
    total = 0
    for j in range(N_BUCKETS - 1, -1, -1):
        total += hist[j]
        if total >= k:
            return True, lo + (np.int64(j) << shift)
    return True, lo  # (not reached: nf >= k)


@numba.njit(inline="always")
def append_capped(bv, bi, n, x, i):
    """Entry n of the buffer := (x, i) if it has room; the count goes on regardless (an overflow
    is seen by the caller). Returns n + 1."""
    if n < bv.shape[0]:
        bv[n] = x
        bi[n] = i
    return n + 1


@numba.njit(inline="always")
def collect_blocks(row, a, bm, nb, t_key, k, bv, bi, sel):
    """The first chunk's candidates at or above the block threshold t_key, in ascending pool
    index: only the blocks whose maximum reaches it are looked at (their indices gathered first
    into sel without a branch per block: which blocks qualify is random), each full block by one
    64-bit mask of its scores >= the threshold (``ge_mask``), the set bits found by trailing
    zeros. About k + k/6 are found (no compaction): they are written straight into the buffer.
    Returns (n, t); should they overflow the buffer (heavy
    ties at the threshold: n exceeds its room), the caller collects the row's scores >= t again
    through ``take``, which compacts (one collection written in the kernel, not two)."""
    kk = np.int32(t_key)
    # the score whose key is t_key (a score >= it has a key >= t_key, ties included)
    tt = fp32_of_bits(np.int32(kk ^ np.int32(np.int32(kk >> np.int32(31)) & np.int32(0x7FFFFFFF))))
    C = row.shape[0]
    ns = 0
    for b in range(nb):
        sel[ns] = b
        ns += np.int64(bm[b] >= kk)
    base = row.ctypes.data
    n = 0
    for j in range(ns):
        c0 = sel[j] * BLOCK
        if c0 + BLOCK <= C:
            w = ge_mask(base + 4 * c0, np.float32(tt))
            while w != 0:
                c = c0 + np.int64(trailing_zeros(w))
                w &= w - np.uint64(1)
                n = append_capped(bv, bi, n, row[c], a + c)
        else:  # the short last block
            for c in range(c0, C):
                if row[c] >= tt:
                    n = append_capped(bv, bi, n, row[c], a + c)
    return n, np.float64(tt)  # (n > the buffer's room: it overflowed)


@numba.njit(inline="always")
def flag_rank(row, t, strict, fl, r, thr, higher, equal, count):
    """Flag the row's scores against t, counting the first positive's higher/equal on the way
    (when ``count``)."""
    if count and thr.shape[1] > 0:
        h, e = flag_count(row, t, strict, fl, thr[r, 0])
        higher[r, 0] += h
        equal[r, 0] += e
    else:
        flag(row, t, strict, fl)


def first_by_blocks(row, rowi, a, k, bv, bi, r, thr, higher, equal, bm, hist, sel):
    """A row's first chunk by the block-maxima threshold (``_first_by_blocks`` compiles it by
    the row's type)."""
    raise NotImplementedError("numba only")


@overload(first_by_blocks)
def _first_by_blocks(row, rowi, a, k, bv, bi, r, thr, higher, equal, bm, hist, sel):
    """Compiled for fp32 rows only: an fp64 row never takes the block path (its int32 view is
    empty), so its kernel leaves the path out rather than compile it (a fifth of its compile).
    Returns (state, n, t, strict): 0, the path is not taken (a row shorter than k blocks);
    1, done (the collection's n, t, strict); 2, the buffer overflowed: collect the scores >= t;
    3, fewer than k blocks hold a finite score: collect every finite one. The first positive's
    rank is counted on the way (states 1-3)."""
    if not (isinstance(row, types.Array) and row.dtype == types.float32):
        def no_blocks(row, rowi, a, k, bv, bi, r, thr, higher, equal, bm, hist, sel):
            return 0, 0, -np.inf, False
        return no_blocks

    def blocks(row, rowi, a, k, bv, bi, r, thr, higher, equal, bm, hist, sel):
        if rowi.shape[0] == 0 or row.shape[0] // BLOCK < k:
            return 0, 0, -np.inf, False
        count = thr.shape[1] > 0
        nb, h, e = block_maxima(row, rowi, bm, thr[r, 0] if count else row[0], count)
        if count:
            higher[r, 0] += h
            equal[r, 0] += e
        found, t_key = block_threshold(bm, nb, k, hist)
        if not found:
            return 3, 0, -np.inf, True
        n, t = collect_blocks(row, a, bm, nb, t_key, k, bv, bi, sel)
        if n > bv.shape[0]:
            return 2, 0, t, False
        return 1, n, t, False

    return blocks


@numba.njit(inline="always")
def topk_row(row, a, k, bv, bi, n, t, strict, fl, sample, r, thr, higher, equal, rowi, bm, hist, sel):
    """Add chunk row's candidates to its top-k buffer (and count the first positive's rank on the
    way). n < 0: the row's first chunk; fp32 rows of >= k blocks take the block-maxima threshold,
    others one estimated from a sample and kept only if at least k scores reach it (so the top-k
    lies at or above it); otherwise a lower one, then every finite candidate (-inf ones never
    enter: excluded, or padding). Later chunks collect what reaches the row's current threshold.
    One flag pass and one collection written, in a loop over the thresholds tried: each call
    site of an inlined helper is compiled anew (four collections written out cost a fifth of
    the kernel's compile). Returns (n, t, strict)."""
    counted = False  # the first positive's rank: counted by the first pass over the row
    first = n < 0
    ns = m = 0
    if first:
        state, n, t, strict = first_by_blocks(row, rowi, a, k, bv, bi, r, thr, higher, equal, bm, hist, sel)
        if state == 1:
            return n, t, strict
        counted = state > 0
        if state == 0:
            t, ns, m = sample_threshold(row, k, sample)
            strict = t == -np.inf  # (no sample: every finite candidate)
    while True:
        flag_rank(row, in_row_precision(row, t), strict, fl, r, thr, higher, equal, not counted)
        counted = True
        got, t2, strict2 = collect(row, a, fl, t, strict, k, bv, bi, n)
        if not first or got >= k or t == -np.inf:
            return got, t2, strict2
        t = -np.inf  # an unlucky sample: a lower threshold from it, then every finite candidate
        if ns > 0:
            t = kth_largest(sample, ns, ns if ns < 4 * m else 4 * m)
            ns = 0
        strict = t == -np.inf


@numba.njit(inline="always")
def rank_counts(row, r, a, thr, pos, higher, equal, first):
    """Add to higher/equal[r] how many of the chunk's candidates score above / tie with each
    positive from the first-th on (the earlier ones are counted by the caller), then take back the positives' own contributions (a positive in this chunk is
    counted like any candidate)."""
    C = row.shape[0]
    P = thr.shape[1]
    for j in range(first, P):
        h, e = count_above(row, thr[r, j])
        higher[r, j] += h
        equal[r, j] += e
    for j in range(P):
        p = pos[r, j]
        if p >= a and p < a + C:
            v = row[p - a]
            for jj in range(P):
                higher[r, jj] -= v > thr[r, jj]
                equal[r, jj] -= v == thr[r, jj]


@numba.njit(inline="always")
def flag_scratch(C):
    """Flag bytes for rows of C scores, in whole 32-byte spans, zero (the bytes past the row stay
    zero: the flags are read eight at a time). An empty array zeroed here: ``np.zeros`` compiles
    two implementations more."""
    fl = np.empty(32 * -(-C // 32), dtype=np.uint8)
    for i in range(fl.shape[0]):
        fl[i] = 0
    return fl


@numba.njit(inline="always")
def row_scratch(C, k, bv, more):
    """One thread's scratch for ``scan`` over rows of C scores: the flags (whole 32-byte spans,
    zero past the row), the threshold's sample (fp64 whatever the scores' precision: one
    ``kth_largest`` to compile), the final sort's scratch (only when no chunk follows), the
    block maxima, their histogram, the selected blocks and the buffer of a row seen in one chunk
    (only when no chunk follows; bv's dtype is fp64, ``TopK``'s)."""
    fl = flag_scratch(C)
    sample = np.empty(C // STRIDE + k + 8, dtype=np.float64)
    width = bv.shape[1] if not more else 0
    keys, tmp_k, tmp_v, tmp_i, hist = sort_scratch(width)
    bm = np.empty(C // BLOCK + 1, dtype=np.int32)
    bhist = np.empty(N_BUCKETS, dtype=np.int64)
    sel = np.empty(C // BLOCK + 1, dtype=np.int64)
    own_v, own_i = np.empty(width, dtype=np.float64), np.empty(width, dtype=np.int64)
    return fl, sample, keys, tmp_k, tmp_v, tmp_i, hist, bm, bhist, sel, own_v, own_i


@numba.njit(**SIMPLIFIED)
def scan(s, ri, C, a, thr, pos, want_finite, higher, equal, finite, k, bv, bi, bn, bt, bs, more, out_v, out_i, r0,
         r1):
    """One visit per row r0 .. r1-1 of chunk s (scores s[r, :C], pool indices from a; the other
    rows: other threads' calls, ``rowblocks.run_blocks``): rank counts into higher/equal, finite
    counts into finite (when want_finite), each row's top-k buffer bv/bi (bn entries, -1 before
    the row's first chunk), threshold bt and strictness bs updated in place. more: later chunks
    follow (a buffer still on its sampled threshold is then cut to its k best, so that those
    chunks collect only what beats the k-th best so far); when none do, each row's top-k is
    sorted into out_v/out_i right away, while its buffer is in cache (by s's precision: an fp32
    chunk's rows saw fp32 scores only, the engine scans every chunk after an fp64 one in fp64).
    ri: s's int32 view when s is fp32 (the block-maxima threshold), else B x 0.

    A row's visit is written here rather than in an inlined helper: numba copies an inlined
    callee's IR at a cost of its blocks times its variables, and the visit is most of the kernel
    (0.8 s of its first compile: issue 44). ``fused.gemm_scan`` calls this kernel on each block of
    rows it computes."""
    fl, sample, keys, tmp_k, tmp_v, tmp_i, hist, bm, bhist, sel, own_v, own_i = row_scratch(C, k, bv, more)
    for r in range(r0, r1):
        row = s[r, :C]
        first = 0
        if k > 0:
            # a row whose first chunk is its last collects into the thread's own buffer (in cache)
            # rather than into its row of bv/bi: nothing needs the candidates after the sort
            alone = not more and bn[r] < 0
            rv = own_v if alone else bv[r]
            rix = own_i if alone else bi[r]
            n, t, strict = topk_row(row, a, k, rv, rix, bn[r], bt[r], bs[r], fl, sample, r, thr, higher, equal,
                                    ri[r, :C], bm, bhist, sel)
            if more and not strict and n > k:  # later chunks: only what beats the k-th best
                n, t = keep_best(rv, rix, n, k)
                strict = True
            bn[r], bt[r], bs[r] = n, t, strict
            if not more:
                finish_row(rv, rix, n, k, out_v[r], out_i[r], keys, tmp_k, tmp_v, tmp_i, hist, row)
            first = 1
        rank_counts(row, r, a, thr, pos, higher, equal, first)
        if want_finite:
            finite[r] += count_finite(row)


@numba.njit(**BODY)
def gemm_block(q, bp, i0, i1, ex_off, ex_col, ap, cb, tmp):
    """The scores of query rows i0 .. i1-1 (at most MC) with the C candidates packed in bp
    (``kernels.gemm.pack_columns``) into cb (rows Cp = bp's panels x NR apart): the bits
    ``kernels.gemm.gemm`` writes; row r's excluded candidates, ex_col[ex_off[r]:ex_off[r+1]]
    (chunk columns), -inf. ap, tmp: the caller's scratch for the packed rows and an edge tile.
    ``rbench.engine.fused.gemm_scan`` scans each block with ``scan`` while it is in cache. Not
    one kernel with the scan: a kernel that calls ``scan`` has LLVM optimise scan's code again
    in its own module (3.7 s of the first compile, issue 44), and a block's call costs
    microseconds against its milliseconds of GEMM."""
    Cp = bp.shape[0] * NR
    pack_rows(q, i0, i1, ap)
    block_product(ap, i1 - i0, bp, cb, Cp, Cp, tmp)
    for r in range(i0, i1):
        o = (r - i0) * Cp
        for j in range(ex_off[r], ex_off[r + 1]):
            cb[o + ex_col[j]] = -np.inf


def buffer_width(k: int) -> int:
    """The top-k buffer's width per row: k kept, room for k + 256 more before the next compaction
    """
    return 2 * k + 256 if k > 0 else 0


def threads() -> int:
    """How many threads the parallel kernels run on (numba's setting)."""
    return int(numba.get_num_threads())


@numba.njit(inline="always")
def sort_scratch(width):
    """One thread's scratch for ``finish_row`` (radix keys, the ping-pong copies of the fp64
    buffer, 8 x 256 byte histograms, flat), for rows of ``width`` buffered scores."""
    return (np.empty(width, dtype=np.uint64), np.empty(width, dtype=np.uint64), np.empty(width, dtype=np.float64),
            np.empty(width, dtype=np.int64), np.empty(8 * 256, dtype=np.int64))


@numba.njit(inline="always")
def counts_to_offsets(h):
    """A radix pass's byte histogram -> each byte value's first slot (exclusive prefix sum), in place."""
    total = 0
    for b in range(h.shape[0]):
        c = h[b]
        h[b] = total
        total += c


def finish_row(bv, bi, n, k, out_v, out_i, keys, tmp_k, tmp_v, tmp_i, hist, row):
    """One row's buffer (n entries of bv/bi, held in ascending pool index) sorted into rank
    order, its first k (or fewer) into out_v/out_i (-inf / -1 padded). ``_finish_row`` compiles
    it by the type of the row whose scores the buffer holds. keys/tmp_*: scratch of n entries;
    hist: 8 x 256 counts, flat (byte d's at 256 d)."""
    raise NotImplementedError("numba only")


@overload(finish_row)
def _finish_row(bv, bi, n, k, out_v, out_i, keys, tmp_k, tmp_v, tmp_i, hist, row):
    """An fp32 row's scores are fp32 values: ``sort_narrow``; an fp64 row's may not be:
    ``sort_wide``. Only the row type's sort is compiled into a kernel (the other would be dead
    code compiled all the same), as the implementation itself, not a call to it from a wrapper
    (each function compiled apart costs a pipeline and LLVM passes over its callees again)."""
    if isinstance(row, types.Array) and row.dtype == types.float32:
        return sort_narrow
    return sort_wide


def sort_wide(bv, bi, n, k, out_v, out_i, keys, tmp_k, tmp_v, tmp_i, hist, row):
    """``finish_row`` for scores that may not be fp32 values: a stable LSD radix sort of
    bv[:n] / bi[:n] into rank order (score descending, ties in the order held) on the scores'
    fp64 bits, 8 bits a pass, passes whose byte is the same for every entry skipped: no
    comparisons, so no mispredicted branches (a comparison sort of ~200 entries costs several
    times more). (numba code: ``_finish_row`` compiles it.)"""
    if n > 0:
        hist[:] = 0
        top_bit = np.uint64(1 << 63)
        ones = ~np.uint64(0)
        for i in range(n):
            u = float_bits(bv[i]) if bv[i] != 0.0 else np.uint64(0)  # -0.0 ties with 0.0
            # order-preserving map of the float's bits, complemented: ascending keys = descending scores
            u = (u ^ ones) if u & top_bit else (u | top_bit)
            u = u ^ ones
            keys[i] = u
            for d in range(8):
                hist[256 * d + ((u >> np.uint64(8 * d)) & np.uint64(255))] += 1
        src_k, src_v, src_i = keys, bv, bi
        dst_k, dst_v, dst_i = tmp_k, tmp_v, tmp_i
        moved = False
        for d in range(8):
            h = hist[256 * d : 256 * (d + 1)]
            if h[(src_k[0] >> np.uint64(8 * d)) & np.uint64(255)] == n:  # one byte value: nothing moves
                continue
            counts_to_offsets(h)
            for i in range(n):
                u = src_k[i]
                b = (u >> np.uint64(8 * d)) & np.uint64(255)
                p = h[b]
                h[b] = p + 1
                dst_k[p] = u
                dst_v[p] = src_v[i]
                dst_i[p] = src_i[i]
            src_k, dst_k = dst_k, src_k
            src_v, dst_v = dst_v, src_v
            src_i, dst_i = dst_i, src_i
            moved = not moved
        if moved:  # the sorted entries are in the scratch: copy them back
            for i in range(n):
                bv[i] = tmp_v[i]
                bi[i] = tmp_i[i]
    m = n if n < k else k
    for i in range(m):
        out_v[i] = bv[i]
        out_i[i] = bi[i]
    for i in range(m, k):
        out_v[i] = -np.inf
        out_i[i] = -1


def sort_narrow(bv, bi, n, k, out_v, out_i, keys, tmp_k, tmp_v, tmp_i, hist, row):
    """``finish_row`` when every score is an fp32 value: the stable radix sort runs on one
    uint64 a entry, the score's order-preserving fp32 key (complemented: ascending keys =
    descending scores) above the entry's buffer position, which keeps equal keys in buffer
    (pool index) order. 8 bits a pass over the key's 4 bytes, a byte the same for every entry
    skipped (tmp_v, tmp_i unused). (numba code: ``_finish_row`` compiles it.)"""
    hist[: 4 * 256] = 0
    m32 = np.uint64((1 << 32) - 1)
    b8 = np.uint64(255)
    for i in range(n):
        # (+ 0.0: -0.0 ties with 0.0; numba widens uint32 arithmetic: stay in uint64, masked)
        u = np.uint64(float_bits(np.float32(bv[i] + 0.0)))
        u = (~u & m32) if u >> np.uint64(31) else (u | np.uint64(1 << 31))
        u = ~u & m32
        keys[i] = (u << np.uint64(32)) | np.uint64(i)
        hist[u & b8] += 1
        hist[256 + ((u >> np.uint64(8)) & b8)] += 1
        hist[512 + ((u >> np.uint64(16)) & b8)] += 1
        hist[768 + ((u >> np.uint64(24)) & b8)] += 1
    src, dst = keys, tmp_k
    for d in range(4):
        h = hist[256 * d : 256 * (d + 1)]
        shift = np.uint64(32 + 8 * d)
        if n == 0 or h[(src[0] >> shift) & b8] == n:  # one byte value: nothing moves
            continue
        counts_to_offsets(h)
        for i in range(n):
            u = src[i]
            b = (u >> shift) & b8
            p = h[b]
            h[b] = p + 1
            dst[p] = u
        src, dst = dst, src
    m = n if n < k else k
    for i in range(m):
        j = src[i] & m32
        out_v[i] = bv[j]
        out_i[i] = bi[j]
    for i in range(m, k):
        out_v[i] = -np.inf
        out_i[i] = -1
