"""Certified exact ranks from reduced-precision GEMMs (``--scan-precision bf16-certified`` or
``tf32-certified``; the torch scan, ``rbench.engine.torch_scan``).

Why. A tensor core multiplies bf16 (8-bit significand) or TF32 (11-bit) operands several times
faster than fp32 CUDA cores, but its scores are not fp32 scores: ties split, distinct candidates
tie, and ranks move. A rank only needs each candidate's *side* of each positive's score (and of the
top-k boundary); the low-precision score decides the side for every candidate that is farther
from the threshold than its proven error, and only the few candidates inside that band are scored
again in fp32. The result is the fp32 reference's ranks, top-k and top-k scores, bit for bit.

The fp32 reference score. An fp32 GEMM's bits depend on its summation order (blocked, split-K,
per library, device and shape), so "the fp32 score" is only defined with an order.
``exact_scores`` is that definition here: fp32 products ``q_i * c_i``, summed in a fixed pairwise
tree over d padded with zeros to a power of two. Elementwise IEEE operations give the same bits
on every device and at every batch shape, so a vector's reference score depends only on the two
vectors (a candidate identical to a positive ties with it). The plain ``fp32`` scan differs from
it in the last bits (near-ties within fp32 rounding order differently; counted by
``benchmarks/gpu_scale.py``).

The bound (standard dot-product error analysis, Higham, *Accuracy and Stability of Numerical
Algorithms*, 2nd ed., Sec. 3.1). Write S = sum_i |q_i| |c_i| <= ||q||_2 ||c||_2 (Cauchy-Schwarz).

- Low precision: each operand is rounded to the input format, x^ = x (1 + e), |e| <= u_in
  (bf16: 2^-8, round to nearest; TF32: 2^-10, which also covers truncation, since tensor cores
  may truncate instead of rounding). A product of two rounded operands is exact in fp32 (8 + 8
  and 11 + 11 significand bits <= 24), so it is q_i c_i (1 + e_i), |e_i| <= 2 u_in + u_in^2. The
  products are summed in fp32 in any order; with unit roundoff u_acc = 2^-23 (truncating
  accumulation, as tensor cores do) the sum's error is at most gamma_d(u_acc) sum |q^_i c^_i|,
  gamma_n(u) = n u / (1 - n u). So |s_low - q.c| <= (2 u_in + u_in^2 + gamma_d(u_acc)
  (1 + u_in)^2) S.
- Reference: products rounded once and a tree of depth ceil(log2 d): |s_ref - q.c| <=
  gamma_{d+1}(2^-24) S (a looser, simpler depth).
- Together: |s_low - s_ref| <= kappa ||q|| ||c||, kappa the sum of the two factors
  (``bound_factor``), plus an absolute term 4 (d + 1) 2^-126 for products and sums that underflow
  (flushed subnormals). The norms are computed in fp32 and inflated by (1 + (d + 4) 2^-23) each;
  per (query batch, pool chunk) the bound uses the query's norm and the chunk's largest candidate
  norm, so it is one number per query row: ``slack``. The slack is inflated by (1 + 2^-12), which
  covers the fp32 rounding of the comparisons ``s - t`` and ``s - slack`` themselves (each at
  most 2^-24 of a quantity below 2^-14 of the slack).

The re-check (``repair_targets``). For a block of low-precision scores s (excluded candidates
-inf), per row: a candidate is *near* when |s - t_j| <= slack for a positive's reference score
t_j, or when s >= L - slack, L the k-th largest of the running top-k's reference scores and the
block's lower bounds s - slack (at least k candidates score >= L, so a candidate whose upper bound
s + slack is below L cannot enter the top-k). Near candidates get their reference score; every
other candidate is strictly farther than its error from every threshold, so it is on the same side
of each t_j as its reference score, never equal to one, and below every top-k member: counting and
top-k selection on the repaired block give the reference's results exactly. Tested on the CPU
(``tests/engine/test_certified.py``) with simulated bf16/TF32 operands, adversarial near-ties
whose error reaches the bound (halving the bound or skipping the re-check fails them), exact ties
and duplicated vectors.

Cost: the low-precision GEMM, one compare per positive and a top-k per block (as the fp32 scan),
plus d multiply-adds per near candidate (k + a band of width 2 slack around each threshold: a few
per row on real data). torch is imported by the caller (``torch_scan``) and passed in.
"""

from __future__ import annotations

import math
from typing import Any

CERTIFIED = ("bf16-certified", "tf32-certified")
UNIT_ROUNDOFF_IN = {"bf16": 2.0**-8, "tf32": 2.0**-10}  # operand rounding (TF32: truncation covered)
U_ACC = 2.0**-23  # low-precision accumulation in fp32, truncating
U_REF = 2.0**-24  # the reference: fp32, round to nearest
TINY = 2.0**-126  # fp32's smallest normal: what a flushed subnormal can lose
COMPARE_SLACK = 2.0**-12  # relative inflation covering the comparisons' own fp32 rounding
PAIRS_PER_CALL = 1 << 16  # reference scores computed this many pairs at a time (pairs x d floats)


def low_precision(precision: str) -> str:
    """The GEMM format of a scan precision: "bf16-certified" -> "bf16"; others unchanged."""
    return precision.removesuffix("-certified")


def gamma(n: int, u: float) -> float:
    """Higham's gamma_n = n u / (1 - n u): the relative error bound of n roundings."""
    if n * u >= 0.5:
        raise ValueError(f"no error bound: {n} roundings of {u:g} (d too large)")
    return n * u / (1.0 - n * u)


def bound_factor(low: str, d: int) -> float:
    """kappa: |s_low - s_ref| <= kappa * sum_i |q_i c_i| for a d-dimensional dot product whose
    operands are rounded to ``low`` ("bf16" or "tf32") and accumulated in fp32 (module docstring)."""
    u = UNIT_ROUNDOFF_IN[low]
    return 2 * u + u * u + gamma(d, U_ACC) * (1 + u) ** 2 + gamma(d + 1, U_REF)


def norm_inflation(d: int) -> float:
    """An fp32-computed 2-norm times this is at least the true norm."""
    return 1.0 + (d + 4) * 2.0**-23


def slack(qn: Any, cmax: Any, low: str, d: int) -> Any:
    """Per query row (B, 1): the proven bound on |s_low - s_ref| against any candidate whose norm
    is at most ``cmax`` (a float or a 0-d tensor: no device sync); ``qn`` (B,) the rows' fp32
    norms. Inflated to cover the comparisons."""
    f = norm_inflation(d)
    b = qn.double() * (bound_factor(low, d) * f * f) * cmax + 4 * (d + 1) * TINY
    return (b * (1.0 + COMPARE_SLACK)).float()[:, None]


def exact_scores(torch: Any, q: Any, c: Any) -> Any:
    """The fp32 reference scores of ``q`` and ``c`` (broadcast over leading dimensions, last
    dimension d): fp32 products summed in a fixed pairwise tree (zero-padded to a power of two).
    Shape- and device-independent bits: see the module docstring."""
    x = q.float() * c.float()
    d = int(x.shape[-1])
    width = 1 << max(0, (d - 1).bit_length())
    if width != d:
        x = torch.nn.functional.pad(x, (0, width - d))
    while x.shape[-1] > 1:
        h = x.shape[-1] // 2
        x = x[..., :h] + x[..., h:]
    return x[..., 0] + 0.0  # (-0.0 -> +0.0: the same score)


def exact_pairs(torch: Any, q: Any, c: Any, rows: Any, cols: Any) -> Any:
    """Reference scores of the pairs (q[rows[i]], c[cols[i]]), ``PAIRS_PER_CALL`` at a time."""
    out = torch.empty(len(rows), dtype=torch.float32, device=q.device)
    for a in range(0, len(rows), PAIRS_PER_CALL):
        b = a + PAIRS_PER_CALL
        out[a:b] = exact_scores(torch, q[rows[a:b]], c[cols[a:b]])
    return out


def round_tf32(torch: Any, x: Any, truncate: bool = False) -> Any:
    """fp32 values rounded to TF32's 10 explicit significand bits (to nearest even, or toward
    zero with ``truncate``), kept as fp32: the CPU's simulation of a TF32 tensor core's operands
    (their products are exact in fp32, so an fp32 GEMM of them is a TF32 GEMM's arithmetic)."""
    b = x.float().contiguous().view(torch.int32)
    if not truncate:
        b = b + (0x0FFF + ((b >> 13) & 1))
    return (b & -8192).view(torch.float32)


def near_targets(torch: Any, s: Any, t: Any, ok: Any, sl: Any) -> Any:
    """(B, C) bool: scores within ``sl`` (B, 1) of a valid target t (B, P) (``ok``: valid)."""
    near = torch.zeros(s.shape, dtype=torch.bool, device=s.device)
    t = torch.where(ok, t, torch.full_like(t, math.nan))  # (nan: never near)
    for j in range(t.shape[1]):
        near |= (s - t[:, j : j + 1]).abs_() <= sl  # (one temporary block)
    return near


def near_topk(torch: Any, s: Any, top_v: Any, sl: Any, k: int) -> Any:
    """(B, C) bool: scores that may enter the top-k (reference scores ``top_v`` (B, k) so far)."""
    low = torch.topk(s, min(k, int(s.shape[1])), dim=1).values - sl
    floor = torch.topk(torch.cat([top_v, low], dim=1), k, dim=1).values[:, k - 1 : k]
    return (s - floor) >= -sl  # (-inf - floor: -inf or nan, never near)


def repair_targets(torch: Any, s: Any, t: Any, ok: Any, top_v: Any, sl: Any, k: int) -> tuple[Any, Any]:
    """(rows, cols) of the block ``s`` whose reference score must be computed: near a positive's
    score or the top-k boundary (module docstring: why every other one is decided)."""
    near = near_targets(torch, s, t, ok, sl)
    if k:
        near |= near_topk(torch, s, top_v, sl, k)
    rows, cols = torch.nonzero(near, as_tuple=True)
    return rows, cols
