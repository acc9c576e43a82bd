"""Inner-product evaluation on a torch device (CUDA; the CPU as its tested twin).

``scan_dense_torch`` does what ``rbench.engine.scan.scan`` does for a dense scorer
(``vector_scorer``): every positive's exact pessimistic rank, the number of ranked candidates and
a top-k, for a shared pool (every query ranks the whole pool minus its exclusions) or per-query
candidate lists (``queries.candidates``), and returns an ``EvalResult`` that ``merge`` and
``rbench.engine.metrics`` read unchanged. The scores are computed chunk by chunk on the device
(``torch.matmul``) and everything that reads them (counts, top-k) stays there; only the
(queries x positives) counts and the (queries x k) top-k come back.

The rules are the engine's:

- rank = 1 + (non-positive, non-excluded candidates scoring higher) + (those scoring equal)
  + (positives placed before it: higher score, then on a tie ascending grade, then descending
  pool index) (``rbench.engine.metrics.TIE_RULE``);
- an excluded candidate scores -inf: never higher, never tied, never in the top-k, not counted
  in ``n_ranked``; a score that is not finite is the ranker's fault and raises
  ``RankerOutputError`` (as the engine's ``_check`` does), so a -inf in the scan is always an
  exclusion (or padding);
- the top-k holds the k best non-excluded candidates in descending score, ties by lower pool
  index (``_sort_topk``/``fused.finish``); -1 / -inf where fewer. ``torch.topk``'s order among
  ties is not defined, so it is never trusted with one: a chunk's top-(k+1) is selected by
  value, a row whose two lowest selected values are equal (a tie that may straddle the cut) is
  selected again by an exact key, (the score's order-preserving int32 bits << 32) | (2^32 - 2 -
  pool index), and the running top-k is merged and finally sorted by that key.
- a candidate identical to a positive ties with it (docs/guides/scale.md): the positives' scores are
  read from the same GEMMs as every candidate's. The scanned columns are the positives' vectors
  (unique, shared pool; each row's own, per-query lists) followed by the pool (or the list), cut
  into chunks of one width, the last padded with zero vectors: every GEMM of a query batch has
  the same shape, so a vector's score does not depend on where it sits (a GEMM sums each output
  in the same order; tested on the CPU, checked on CUDA by ``tests/engine/test_torch_scan.py``).
  The positives cost min(#unique positives, pool) extra columns (one per query and positive
  per-query lists).

Exactness against the CPU engine. Ranks are exact for the scores this path computes; those
scores are not the CPU engine's bits: rbench's GEMM sums each dot product in one fma chain
over d, torch's CPU and CUDA GEMMs sum in other orders (blocked, split-K), so fp32 scores differ
in the last bits and a near-tie (two scores within fp32 rounding of each other) may order the
other way. Integer-valued vectors whose products and sums are exact in fp32 give identical
scores on every path, hence identical results (the tests). ``precision="tf32"`` (CUDA: 10-bit
mantissa products) and ``"bf16"`` (the operands rounded to bfloat16, 8-bit mantissa; products
summed in fp32) compute *different* scores: distinct candidates may tie, ties may split, and
ranks move by more than near-ties; they are speed options to measure, not the reference.
``"bf16-certified"`` and ``"tf32-certified"`` scan with those GEMMs, then give every candidate
within the proven error bound of a positive's score or of the top-k boundary its fp32 reference
score (``rbench.engine.certified``: the bound, the reference and why the rest is decided): ranks,
counts and top-k are those of the fp32 reference scores, bit for bit (on the CPU the TF32
operands are simulated: rounded to TF32, multiplied in fp32).

Memory on the device, bounded independently of the pool size: chunk vectors
``chunk_size x d x 4`` bytes (x3 on CUDA: one in use, two in flight), a batch's scores
``batch_size x chunk_size x 4`` bytes plus about as much again for comparison temporaries and
``torch.topk``'s workspace, and the per-query state (query vectors, running top-k, counts)
``n_queries x (4 d + 12 k + 24 P)`` bytes, P the most positives of a query. Per-query lists
gather each batch's candidate vectors: ``batch_size x chunk_size x d x 4`` bytes on the host and
on the device (the lists are short: the small scenario).

torch is imported inside the function only: ``rbench`` imports without it.
"""

from __future__ import annotations

import math
import time
import warnings
from typing import Any

import numpy as np

from rbench.api import Queries, Ragged
from rbench.core.errors import RankerOutputError
from rbench.core.settings import DEFAULTS, SCAN_PRECISIONS
from rbench.engine import certified
from rbench.engine.scan import EvalResult, validate_queries
from rbench.engine.scorers import Scorer, checked_query_vectors

PRECISIONS = SCAN_PRECISIONS  # fp32, tf32, bf16 and their certified forms (rbench.engine.certified)
_LOW_BITS = 4294967296  # 2^32: the key's low word holds 2^32 - 2 - pool index (index -1 .. 2^32 - 2)


class _Sized:
    """What ``validate_queries`` reads of a pool: its length."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n


def scan_dense_torch(
    pool_vectors: Any,
    query_vectors: Any,
    queries: Queries,
    *,
    topk: int = DEFAULTS.topk,
    chunk_size: int = DEFAULTS.chunk_size,
    batch_size: int = DEFAULTS.batch_size,
    device: str = "cuda",
    precision: str = DEFAULTS.scan_precision,
    unlabelled_rows: bool = False,
    check_finite: bool = True,
    name: str = "dense",
) -> EvalResult:
    """Rank ``pool_vectors`` (N, d) for every query by inner product with ``query_vectors``
    (len(queries), d; row i belongs to ``queries`` row i), on ``device``; exact pessimistic ranks.

    ``pool_vectors``: a numpy array, a memory map, a ``ShardedArray`` or a ``BF16Matrix``
    (anything sliced ``[a:b]`` and indexed by an int array, read as fp32): streamed to the device a
    chunk of ``chunk_size`` rows at a time. ``precision``: "fp32" (default; TF32 switched off for
    the call), "tf32" (CUDA's TF32 GEMM), "bf16" (operands rounded to bfloat16, fp32
    accumulation) or "bf16-certified"/"tf32-certified" (exact ranks from those GEMMs; entries
    re-scored in ``timings["rescored"]``); see the module docstring for what each means for
    exactness. ``check_finite``:
    scan every score for NaN/inf (a non-finite score raises, as in the engine); the vectors are
    checked either way. ``timings``: ``score_s`` (the whole scan, device synchronised),
    ``per_query_ms``, ``transfer_s`` (host reads of the pool, CUDA only: overlapped with the
    scan). Module docstring: the rules, the exactness and the memory bound."""
    import torch

    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: expected one of {', '.join(PRECISIONS)}")
    if chunk_size < 1 or batch_size < 1:
        raise ValueError("chunk_size and batch_size must be >= 1")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device 'cuda': torch sees no CUDA device")
    n_pool, dim = int(pool_vectors.shape[0]), int(pool_vectors.shape[1])
    validate_queries(queries, _Sized(n_pool), require_positive=not unlabelled_rows)
    qv = checked_query_vectors(query_vectors, queries, dim, name)  # the engine's one check
    k = max(0, int(topk))
    scan = _Scan(torch, dev, precision, k, check_finite, name, queries)
    t0 = time.perf_counter()
    # TF32 in hardware: "tf32", and "tf32-certified" on CUDA (on the CPU its operands are rounded by
    # certified.round_tf32 and multiplied in fp32: the same arithmetic, and torch's CPU "high"
    # precision may mean bf16)
    hardware_tf32 = precision == "tf32" or (precision == "tf32-certified" and dev.type == "cuda")
    with _matmul_precision(torch, "tf32" if hardware_tf32 else "fp32", fp32_reductions=precision in certified.CERTIFIED):
        if queries.candidates is None:
            scan.shared(pool_vectors, qv, batch_size, chunk_size)
        else:
            scan.lists(pool_vectors, qv, batch_size, chunk_size)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
    result = scan.result()
    result.timings.update(score_s=time.perf_counter() - t0, transfer_s=scan.transfer_s)
    result.timings["per_query_ms"] = 1000.0 * result.timings["score_s"] / max(len(queries), 1)
    if scan.certified:
        result.timings["rescored"] = float(scan.n_rescored)  # entries scored again in fp32
    return result


def reference_scorer(pool_vectors: Any, query_vectors: np.ndarray, queries: Queries, device: str = "cpu",
                     pairs_per_call: int = 1 << 26) -> Scorer:
    """The CPU engine's scorer of the certified precisions' reference: every (query, candidate)
    score is ``certified.exact_scores`` computed on ``device`` (row i of ``query_vectors`` belongs
    to ``queries.ids[i]``). Slow (d multiply-adds per score outside a GEMM): the check that a
    certified scan's ranks, counts and top-k are the reference's, on a sample of queries
    (``tests/engine/test_certified.py``, ``benchmarks/gpu_scale.py``)."""
    import torch

    row_of = {str(q): i for i, q in enumerate(queries.ids)}
    dev = torch.device(device)

    def score(batch: Queries, cand: np.ndarray) -> np.ndarray:
        q = torch.from_numpy(np.asarray(query_vectors[[row_of[str(i)] for i in batch.ids]], dtype=np.float32))
        c = torch.from_numpy(np.asarray(pool_vectors[cand], dtype=np.float32)).to(dev)
        q = q.to(dev)[:, None, :]
        c = c[None] if cand.ndim == 1 else c
        per = max(1, pairs_per_call // max(1, c.shape[-2] * c.shape[-1]))  # query rows per call
        out = [certified.exact_scores(torch, q[a : a + per], c if len(c) == 1 else c[a : a + per])
               for a in range(0, len(q), per)]
        return torch.cat(out).cpu().numpy()

    return Scorer(score, harness_scores=True)


class _matmul_precision:
    """fp32 GEMMs as asked for the call: TF32 only for "tf32" (CUDA's allow_tf32, and torch's
    float32 matmul precision, which may let oneDNN use bf16 on CPUs that have it), restored after.
    ``fp32_reductions``: bf16 GEMMs may not reduce split-K partial sums in bf16 (torch's
    allow_bf16_reduced_precision_reduction): the certified bound assumes fp32 accumulation."""

    def __init__(self, torch: Any, precision: str, fp32_reductions: bool = False) -> None:
        self.torch, self.precision, self.fp32_reductions = torch, precision, fp32_reductions

    def __enter__(self) -> None:
        t = self.torch
        m = t.backends.cuda.matmul
        self.saved = (t.get_float32_matmul_precision(), m.allow_tf32, m.allow_bf16_reduced_precision_reduction)
        with warnings.catch_warnings():  # (newer torch prefers its fp32_precision switches: same effect)
            warnings.simplefilter("ignore")
            t.set_float32_matmul_precision("high" if self.precision == "tf32" else "highest")
            m.allow_tf32 = self.precision == "tf32"
            if self.fp32_reductions:
                m.allow_bf16_reduced_precision_reduction = False

    def __exit__(self, *exc: Any) -> None:
        m = self.torch.backends.cuda.matmul
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.torch.set_float32_matmul_precision(self.saved[0])
            m.allow_tf32 = self.saved[1]
            m.allow_bf16_reduced_precision_reduction = self.saved[2]


def _pad(r: Ragged, fill: Any, dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    """Ragged -> dense (n, max(1, longest row)) and its validity mask."""
    n = len(r)
    width = max(1, int(r.lengths().max()) if n else 1)
    out = np.full((n, width), fill, dtype=dtype)
    mask = np.zeros((n, width), dtype=bool)
    if len(r.values):
        rows = r.row_ids()
        cols = np.arange(len(r.values)) - np.repeat(r.offsets[:-1], r.lengths())
        out[rows, cols] = r.values
        mask[rows, cols] = True
    return out, mask


def _virtual_chunk(emb: Any, uniq: np.ndarray, N: int, W: int, c: int, out: np.ndarray) -> np.ndarray:
    """Virtual columns c*W .. c*W+W-1 into out (W, d): the positives' vectors (``uniq``), the pool's
    N rows, then zeros."""
    U = len(uniq)
    v0, v1 = c * W, min((c + 1) * W, U + N)
    at = 0
    if v0 < U:
        m = min(v1, U) - v0
        out[:m] = np.asarray(emb[uniq[v0 : v0 + m]], dtype=np.float32)
        at = m
    p0, p1 = max(v0, U) - U, v1 - U
    if p1 > p0:
        out[at : at + p1 - p0] = np.asarray(emb[p0:p1], dtype=np.float32)
        at += p1 - p0
    out[at:] = 0.0
    return out


def _widths(total: int, chunk_size: int) -> tuple[int, int]:
    """(number of chunks, their common width <= chunk_size) for ``total`` columns: as few chunks
    as chunk_size allows, of equal width (the last padded by fewer than n_chunks columns)."""
    n_chunks = max(1, math.ceil(total / chunk_size))
    return n_chunks, max(1, math.ceil(total / n_chunks))


class _Scan:
    """The state of one evaluation on the device: per query, the positives' scores, the counts
    and the running top-k; and the per-chunk work (``_part``) both scenarios share."""

    def __init__(self, torch: Any, dev: Any, precision: str, k: int, check_finite: bool, name: str,
                 queries: Queries) -> None:
        self.torch, self.dev, self.precision, self.k = torch, dev, precision, k
        self.low = certified.low_precision(precision)  # the GEMM's format: fp32, tf32 or bf16
        self.certified = precision in certified.CERTIFIED
        self.check_finite, self.name, self.queries = check_finite, name, queries
        n = len(queries)
        self.pos, self.pos_ok = _pad(queries.positives, -1, np.int64)
        self.grade, _ = _pad(queries.grades, 0.0, np.float64)
        P = self.pos.shape[1]
        self.t_pos = torch.from_numpy(self.pos).to(dev)
        self.t_ok = torch.from_numpy(self.pos_ok).to(dev)
        self.sp = torch.zeros((n, P), dtype=torch.float32, device=dev)
        self.higher = torch.zeros((n, P), dtype=torch.int64, device=dev)
        self.equal = torch.zeros((n, P), dtype=torch.int64, device=dev)
        self.top_v = torch.full((n, k), -math.inf, dtype=torch.float32, device=dev)
        self.top_i = torch.full((n, k), -1, dtype=torch.int64, device=dev)
        self.finite = torch.ones((), dtype=torch.bool, device=dev)  # every score seen finite
        self.n_ranked = np.zeros(n, dtype=np.int64)
        self.transfer_s = 0.0
        self.n_rescored = 0  # certified precisions: entries scored again in fp32
        self._mm_dtype: Any = None  # bf16 on CUDA: whether torch.mm takes out_dtype (tried once)

    # -- the GEMMs -------------------------------------------------------------------------------

    def _operand(self, x: Any) -> Any:
        """An fp32 operand as the precision wants it (bf16: rounded to bfloat16; certified TF32 on
        the CPU: rounded to TF32's significand, the simulation of the tensor core's operands)."""
        if self.low == "bf16":
            return x.to(self.torch.bfloat16)
        if self.low == "tf32" and self.certified and self.dev.type != "cuda":
            return certified.round_tf32(self.torch, x)
        return x

    def _mm(self, q: Any, c: Any) -> Any:
        """q (B, d) @ c (W, d).T in fp32 scores (operands already ``_operand``)."""
        torch = self.torch
        if self.low != "bf16":
            return torch.mm(q, c.T)
        if self.dev.type == "cuda" and self._mm_dtype is not False:
            try:  # bf16 tensor-core GEMM, fp32 accumulation and output (no bf16 rounding of the scores)
                out = torch.mm(q, c.T, out_dtype=torch.float32)
                self._mm_dtype = True
                return out
            except (TypeError, RuntimeError, NotImplementedError):
                self._mm_dtype = False
        # the same numbers computed in fp32: bf16 x bf16 products are exact in fp32
        return torch.mm(q.float(), c.float().T)

    # -- one part of a chunk -----------------------------------------------------------------------

    def _part(self, r0: int, s: Any, base: Any, excl: tuple[Any, Any] | None, pos_cols: Any,
              cert: tuple[Any, Any] | None = None) -> None:
        """Scan scores ``s`` (B x C view, rows r0 .. r0+B-1) of pool candidates: ``base`` their pool
        indices (an int: a .. a+C-1, or a B x C tensor); ``excl``: (rows, cols) of excluded
        entries; ``pos_cols``: B x P column of each positive in s (-1: not in this part).
        ``cert``: (slack (B, 1), reference(rows, cols) -> fp32 reference scores) for low-precision
        scores: the entries near a threshold get their reference score first (``_repair``)."""
        torch = self.torch
        B, C = s.shape
        rows = slice(r0, r0 + B)
        if C == 0:
            return
        if self.check_finite:
            self.finite &= torch.isfinite(s).all()
        if excl is not None:
            s[excl] = -math.inf
        if cert is not None:
            self._repair(rows, s, *cert)
        if self.k:
            self._topk(rows, s, base)
        # counts against each positive's score, positives included, then their own share removed
        t = self.sp[rows]
        P = t.shape[1]
        if P <= 8:
            for j in range(P):
                tj = t[:, j : j + 1]
                self.higher[rows, j] += torch.count_nonzero(s > tj, dim=1)
                self.equal[rows, j] += torch.count_nonzero(s == tj, dim=1)
        else:  # many graded positives: one sort per row, a binary search per positive
            srt = torch.sort(s, dim=1).values
            hi = torch.searchsorted(srt, t.contiguous(), right=True)
            lo = torch.searchsorted(srt, t.contiguous(), right=False)
            self.higher[rows] += C - hi
            self.equal[rows] += hi - lo
        inside = pos_cols >= 0
        own = torch.gather(s, 1, pos_cols.clamp(min=0))  # the positives' scores here (this GEMM's)
        own = torch.where(inside, own, torch.full_like(own, -math.inf))  # (-inf: counts nowhere)
        self.higher[rows] -= (own[:, None, :] > t[:, :, None]).sum(dim=2)
        self.equal[rows] -= (own[:, None, :] == t[:, :, None]).sum(dim=2)

    def _repair(self, rows: slice, s: Any, sl: Any, reference: Any) -> None:
        """Certified precisions: every entry of ``s`` within its error bound ``sl`` of a positive's
        reference score or of the top-k boundary is replaced by its reference score, so counting
        and top-k on ``s`` give the reference's results (``rbench.engine.certified``)."""
        r, c = certified.repair_targets(self.torch, s, self.sp[rows], self.t_ok[rows], self.top_v[rows], sl, self.k)
        self.n_rescored += len(r)
        if len(r):
            fixed = reference(r, c)
            if self.check_finite:
                self.finite &= self.torch.isfinite(fixed).all()
            s[r, c] = fixed

    def _topk(self, rows: slice, s: Any, base: Any) -> None:
        """Merge the part's best candidates into the rows' running top-k (exactly: see the module)."""
        torch = self.torch
        B, C = s.shape
        k = self.k
        if C <= k:  # everything enters the merge
            vals = s
            idx = base + torch.arange(C, device=self.dev).expand(B, C) if isinstance(base, int) else base
        else:
            vals, cols = torch.topk(s, k + 1, dim=1, largest=True, sorted=False)
            low = vals.min(dim=1, keepdim=True).values
            # two selected values equal to the lowest: a tie may straddle the cut (else every
            # candidate tied with the k-th best is among the k + 1)
            unsure = ((vals == low).sum(dim=1) > 1) & torch.isfinite(low[:, 0])
            redo = torch.nonzero(unsure).flatten()  # (a sync: rare rows)
            if len(redo):
                keys = self._keys(s[redo], base + torch.arange(C, device=self.dev).expand(len(redo), C)
                                  if isinstance(base, int) else base[redo])
                cols[redo] = torch.topk(keys, k + 1, dim=1, sorted=False).indices
                vals = torch.gather(s, 1, cols)
            idx = base + cols if isinstance(base, int) else torch.gather(base, 1, cols)
        all_v = torch.cat([self.top_v[rows], vals], dim=1)
        all_i = torch.cat([self.top_i[rows], idx], dim=1)
        best = torch.topk(self._keys(all_v, all_i), k, dim=1, sorted=False).indices
        self.top_v[rows] = torch.gather(all_v, 1, best)
        self.top_i[rows] = torch.gather(all_i, 1, best)

    def _keys(self, v: Any, i: Any) -> Any:
        """int64 keys ordered as (score descending, pool index ascending): the score's fp32 bits
        made order-preserving (negative floats' magnitude bits flipped; -0.0 made +0.0 first, as
        the two compare equal) in the high word, 2^32 - 2 - index in the low one."""
        torch = self.torch
        b = (v.float() + 0.0).view(torch.int32)
        o = torch.where(b >= 0, b, b ^ 0x7FFFFFFF).to(torch.int64)
        return o * _LOW_BITS + ((_LOW_BITS - 2) - i)

    # -- a shared pool -----------------------------------------------------------------------------

    def shared(self, emb: Any, qv: np.ndarray, batch_size: int, chunk_size: int) -> None:
        """Chunks of the columns [the queries' unique positives' vectors, the pool], each streamed
        to the device once and scanned by every query batch (chunk-major: the pool is read once)."""
        torch = self.torch
        n, N = len(qv), int(emb.shape[0])
        uniq = np.unique(self.pos[self.pos_ok])
        if self.certified:  # the positives' reference scores come from certified.exact_scores
            uniq = uniq[:0]
        U = len(uniq)
        slot = np.where(self.pos_ok, np.searchsorted(uniq, np.where(self.pos_ok, self.pos, 0)), -1)
        t_slot = torch.from_numpy(slot).to(self.dev)
        n_chunks, W = _widths(U + N, chunk_size)
        q32 = torch.from_numpy(qv).to(self.dev)
        q_dev = self._operand(q32)
        if self.certified:
            self._reference_positives(emb, q32, batch_size)
            qn = torch.linalg.vector_norm(q32, dim=1)
        ex_rows, ex_vals = self._shared_exclusions(N)
        self.n_ranked += N
        batches = [(r0, min(n, r0 + batch_size)) for r0 in range(0, n, batch_size)]

        def host_chunk(c: int, out: np.ndarray) -> np.ndarray:
            return _virtual_chunk(emb, uniq, N, W, c, out)

        for c, chunk in self._stream(n_chunks, W, int(emb.shape[1]), host_chunk):
            v0 = c * W
            cv = self._operand(chunk)
            s_pos = max(0, min(U - v0, W))  # the chunk's positives' columns: 0 .. s_pos-1
            s_end = max(s_pos, min(W, U + N - v0))  # pool columns: s_pos .. s_end-1
            a = v0 + s_pos - U  # the first pool column's pool index
            pool_cols = chunk[s_pos:s_end]
            cmax = torch.linalg.vector_norm(pool_cols, dim=1).max() if self.certified and s_end > s_pos else 0.0
            for r0, r1 in batches:
                s = self._mm(q_dev[r0:r1], cv)
                rows = slice(r0, r1)
                if s_pos:  # the positives' scores (read before any pool column is counted)
                    col = t_slot[rows] - v0
                    here = (col >= 0) & (col < s_pos)
                    got = torch.gather(s, 1, col.clamp(0, W - 1))
                    self.sp[rows] = torch.where(here, got, self.sp[rows])
                if s_end == s_pos:
                    continue
                C = s_end - s_pos
                pc = self.t_pos[rows] - a
                pc = torch.where(self.t_ok[rows] & (pc >= 0) & (pc < C), pc, torch.full_like(pc, -1))
                cert = None
                if self.certified:
                    qb = q32[r0:r1]
                    cert = (certified.slack(qn[r0:r1], cmax, self.low, qv.shape[1]),
                            lambda r, c, qb=qb, cols=pool_cols: certified.exact_pairs(torch, qb, cols, r, c))
                self._part(r0, s[:, s_pos:s_end], a, self._part_exclusions(ex_rows, ex_vals, a, C, r0, r1), pc, cert)

    def _shared_exclusions(self, N: int) -> tuple[np.ndarray | None, np.ndarray | None]:
        """The exclusions inside the pool as (rows, pool indices), sorted by pool index (a repeat
        excludes once), each taken off its query's ranked count."""
        excl = self.queries.exclude
        if excl is None or not len(excl.values):
            return None, None
        er, ev = excl.row_ids(), np.asarray(excl.values, dtype=np.int64)
        keep = (ev >= 0) & (ev < N)
        pairs = np.unique(np.stack([er[keep], ev[keep]], axis=1), axis=0)  # (a repeat excludes once)
        np.subtract.at(self.n_ranked, pairs[:, 0], 1)
        order = np.argsort(pairs[:, 1], kind="stable")
        return pairs[order, 0], pairs[order, 1]

    def _part_exclusions(self, ex_rows: np.ndarray | None, ex_vals: np.ndarray | None, a: int, C: int,
                         r0: int, r1: int) -> tuple[Any, Any] | None:
        """The exclusions of rows r0..r1-1 among pool columns a..a+C-1, on the device (None: none)."""
        if ex_vals is None or ex_rows is None:
            return None
        lo, hi = np.searchsorted(ex_vals, [a, a + C])
        sel = (ex_rows[lo:hi] >= r0) & (ex_rows[lo:hi] < r1)
        if not sel.any():
            return None
        torch = self.torch
        return (torch.from_numpy(ex_rows[lo:hi][sel] - r0).to(self.dev),
                torch.from_numpy(ex_vals[lo:hi][sel] - a).to(self.dev))

    def _reference_positives(self, emb: Any, q32: Any, batch_size: int) -> None:
        """Certified precisions: every positive's fp32 reference score (``certified.exact_scores``)."""
        torch = self.torch
        for r0 in range(0, len(q32), batch_size):
            r1 = min(len(q32), r0 + batch_size)
            idx = np.where(self.pos_ok[r0:r1], self.pos[r0:r1], 0)
            vec = torch.from_numpy(np.asarray(emb[idx.ravel()], dtype=np.float32)).to(self.dev)
            vec = vec.reshape(r1 - r0, idx.shape[1], -1)
            self.sp[r0:r1] = certified.exact_scores(torch, q32[r0:r1, None, :], vec)

    def _stream(self, n_chunks: int, W: int, d: int, fill: Any) -> Any:
        """Yield (c, chunk c on the device as (W, d) fp32). On CUDA the host reads chunk c+1 in a
        thread (into pinned memory) and copies it on a stream of its own while chunk c is scanned."""
        torch = self.torch
        if self.dev.type != "cuda":
            buf = np.empty((W, d), dtype=np.float32)
            for c in range(n_chunks):
                t = time.perf_counter()
                fill(c, buf)
                self.transfer_s += time.perf_counter() - t
                yield c, torch.from_numpy(buf)
            return
        from concurrent.futures import ThreadPoolExecutor

        pinned = [torch.empty((W, d), dtype=torch.float32, pin_memory=True) for _ in range(2)]
        copied: list[Any] = [None, None]  # the event after which each pinned buffer may be refilled
        copy_stream = torch.cuda.Stream(self.dev)
        main = torch.cuda.current_stream(self.dev)

        def read(c: int) -> int:
            t = time.perf_counter()
            if copied[c % 2] is not None:
                copied[c % 2].synchronize()
            fill(c, pinned[c % 2].numpy())
            self.transfer_s += time.perf_counter() - t
            return c

        def upload(c: int) -> Any:
            with torch.cuda.stream(copy_stream):
                dev = pinned[c % 2].to(self.dev, non_blocking=True)
                ev = torch.cuda.Event()
                ev.record(copy_stream)
            copied[c % 2] = ev
            return dev, ev

        with ThreadPoolExecutor(1) as pool:
            nxt = pool.submit(read, 0)
            for c in range(n_chunks):
                nxt.result()
                dev, ev = upload(c)
                if c + 1 < n_chunks:
                    nxt = pool.submit(read, c + 1)
                main.wait_event(ev)
                dev.record_stream(main)
                yield c, dev

    # -- per-query candidate lists ---------------------------------------------------------------

    def lists(self, emb: Any, qv: np.ndarray, batch_size: int, chunk_size: int) -> None:
        """Each row's columns [its positives' vectors, its list], in chunks of one width: a batch's
        vectors gathered on the host (B x W x d), one batched matrix-vector product per chunk."""
        torch = self.torch
        cand = np.asarray(self.queries.candidates, dtype=np.int64)
        n, m = cand.shape
        P = self.pos.shape[1]
        hit = (cand[:, :, None] == self.pos[:, None, :]) & self.pos_ok[:, None, :]
        pos_col = np.where(self.pos_ok, np.argmax(hit, axis=1), -1)  # (validated: exactly once)
        excl = self.queries.exclude
        ex_mask = np.zeros(cand.shape, dtype=bool)
        if excl is not None and len(excl.values):
            for r in np.unique(excl.row_ids()):
                ex_mask[r] = np.isin(cand[r], excl[r])
        self.n_ranked += m - ex_mask.sum(axis=1)
        n_chunks, W = _widths(P + m, chunk_size)
        d = int(emb.shape[1])
        for r0 in range(0, n, batch_size):
            r1 = min(n, r0 + batch_size)
            rows, B = slice(r0, r1), r1 - r0
            q32 = torch.from_numpy(qv[r0:r1]).to(self.dev)
            q = self._operand(q32)
            t_cand = torch.from_numpy(cand[r0:r1]).to(self.dev)
            t_ex = torch.from_numpy(ex_mask[r0:r1]).to(self.dev)
            t_pc = torch.from_numpy(pos_col[r0:r1]).to(self.dev)
            for c in range(n_chunks):
                v0, v1 = c * W, min((c + 1) * W, P + m)
                host = np.zeros((B, W, d), dtype=np.float32)
                t = time.perf_counter()
                if v0 < P:  # the rows' own positives (padding: zero vectors)
                    j = np.arange(v0, min(v1, P))
                    idx = self.pos[r0:r1, v0 : v0 + len(j)]
                    vec = np.asarray(emb[np.where(idx >= 0, idx, 0).ravel()], dtype=np.float32)
                    host[:, : len(j)] = vec.reshape(B, len(j), d) * (idx >= 0)[:, :, None]
                l0, l1 = max(v0, P) - P, v1 - P
                s_pos = max(0, min(P - v0, W))
                if l1 > l0:
                    host[:, s_pos : s_pos + l1 - l0] = np.asarray(emb[cand[r0:r1, l0:l1].ravel()],
                                                                  dtype=np.float32).reshape(B, l1 - l0, d)
                self.transfer_s += time.perf_counter() - t
                if self.certified:  # short lists: every entry's reference score (exact, no bound needed)
                    s = certified.exact_scores(torch, q32[:, None, :], torch.from_numpy(host).to(self.dev))
                else:
                    vecs = self._operand(torch.from_numpy(host).to(self.dev))
                    qq = q.float() if self.low == "bf16" else q
                    s = torch.bmm(vecs.float() if self.low == "bf16" else vecs, qq[:, :, None])[:, :, 0]  # (B, W)
                if s_pos:
                    cols = torch.arange(P, device=self.dev).expand(B, P) - v0
                    here = self.t_ok[rows] & (cols >= 0) & (cols < s_pos)
                    got = torch.gather(s, 1, cols.clamp(0, W - 1))
                    self.sp[rows] = torch.where(here, got, self.sp[rows])
                if l1 <= l0:
                    continue
                part = s[:, s_pos : s_pos + l1 - l0]
                ex_here = t_ex[:, l0:l1]
                ex = torch.nonzero(ex_here, as_tuple=True) if bool(ex_here.any()) else None
                pc = t_pc - l0
                pc = torch.where((t_pc >= 0) & (pc >= 0) & (pc < l1 - l0), pc, torch.full_like(pc, -1))
                self._part(r0, part, t_cand[:, l0:l1], ex, pc)

    # -- the result --------------------------------------------------------------------------------

    def result(self) -> EvalResult:
        torch = self.torch
        if not bool(self.finite):
            self._raise_not_finite()
        queries = self.queries
        n = len(queries)
        if self.k:
            order = torch.sort(self._keys(self.top_v, self.top_i), dim=1, descending=True).indices
            top_v = torch.gather(self.top_v, 1, order).cpu().numpy().astype(np.float64)
            top_i = torch.gather(self.top_i, 1, order).cpu().numpy()
            top_i[~np.isfinite(top_v)] = -1
            top_v[~np.isfinite(top_v)] = -np.inf
        else:
            top_v, top_i = np.zeros((n, 0), np.float64), np.zeros((n, 0), np.int64)
        sp = self.sp.cpu().numpy()
        higher, equal = self.higher.cpu().numpy(), self.equal.cpu().numpy()
        pos, ok, grade = self.pos, self.pos_ok, self.grade
        # order among positives (the engine's): higher score first; ties by ascending grade, then
        # by descending pool index
        both = ok[:, :, None] & ok[:, None, :]
        s_i, s_j = sp[:, :, None], sp[:, None, :]
        before = (s_j > s_i) | ((s_j == s_i) & ((grade[:, None, :] < grade[:, :, None])
                                                | ((grade[:, None, :] == grade[:, :, None])
                                                   & (pos[:, None, :] > pos[:, :, None]))))
        pos_before = (before & both).sum(axis=2)
        h, e, b = higher[ok].astype(np.int64), equal[ok].astype(np.int64), pos_before[ok].astype(np.int64)
        return EvalResult(
            ranks=Ragged(queries.positives.offsets.copy(), 1 + h + e + b),
            topk_index=top_i, topk_score=top_v, n_ranked=self.n_ranked.copy(), timings={},
            higher=h, equal=e, pos_before=b)

    def _raise_not_finite(self) -> None:
        raise RankerOutputError(f"ranker {self.name!r}: a score is not finite (NaN or inf: the inner "
                                "products of finite vectors overflowed fp32)")
