"""Certified exact ranks from reduced precision (``rbench.engine.certified`` through the torch scan).

The reference is the CPU engine scanning the fp32 reference scores (``certified.exact_scores``)
of every pair; the certified scans (bf16 operands, TF32 operands simulated on the CPU, fp32
accumulation by torch's CPU GEMM) must give its ranks, counts, top-k indices and top-k scores bit
for bit. The adversarial cases put a candidate whose low-precision error reaches the proven bound
on the far side of a positive's score and of the top-k boundary: halving the bound, or skipping
the re-check, gives other ranks there (checked below, so the cases stay sharp).
"""

from __future__ import annotations

import numpy as np
import pytest

from rbench.engine import certified
from rbench.engine import torch_scan as ts
from rbench.engine.scan import scan
from tests.engine.test_torch_scan import _data, _same
from tests.helpers import make_pool, make_queries

torch = pytest.importorskip("torch")
CERT = ["bf16-certified", "tf32-certified"]


def _reference(emb, qv, queries, topk, chunk_size=65536):
    """The CPU engine over the fp32 reference scores of every (query, candidate) pair."""
    return scan(None, queries, make_pool(len(emb)), scorer=ts.reference_scorer(emb, qv, queries), topk=topk,
                batch_size=16, chunk_size=chunk_size)


def _scan(emb, qv, queries, precision, **kw):
    kw.setdefault("device", "cpu")
    return ts.scan_dense_torch(emb, qv, queries, precision=precision, **kw)


def _with_twins(rng, emb, n):
    """Pool rows rewritten as copies of other rows (duplicated vectors: exact ties)."""
    emb = emb.copy()
    src = rng.integers(0, len(emb), n)
    emb[rng.integers(0, len(emb), n)] = emb[src]
    return emb


@pytest.mark.parametrize("precision", CERT)
@pytest.mark.parametrize("chunk_size,batch_size", [(65536, 64), (97, 7), (1, 5)])
def test_shared_pool_equals_the_reference(precision, chunk_size, batch_size):
    rng = np.random.default_rng(3)
    emb, qv, queries = _data(rng, 400, 30, 24)
    emb = _with_twins(rng, emb, 60)
    emb[rng.integers(0, len(emb), 10)] = emb[queries.positives.values[:10]]  # twins of positives
    ref = _reference(emb, qv, queries, topk=12)
    got = _scan(emb, qv, queries, precision, topk=12, chunk_size=chunk_size, batch_size=batch_size)
    _same(ref, got)


@pytest.mark.parametrize("precision", CERT)
def test_per_query_lists_equal_the_reference(precision):
    rng = np.random.default_rng(4)
    emb, qv, queries = _data(rng, 300, 25, 16, lists=50)
    emb = _with_twins(rng, emb, 40)
    _same(_reference(emb, qv, queries, topk=8), _scan(emb, qv, queries, precision, topk=8, chunk_size=13))


def _adversarial(unit, k_rows=6, d=16, n_background=200):
    """A case whose low-precision error reaches the bound. Every query is the vector
    (1 + unit - 2^-20) * ones, which rounds to ones: candidate A (a copy of the query, pool index
    last) has low-precision score d but reference d (1 + unit)^2 ~ d (1 + 2 unit), the whole error
    the bound allows; the positive P (three quarters ones, one quarter 1 + 2 unit, exact in the
    low format) scores d (1 + 1.5 unit) in the reference: between A's low score plus half the
    bound and A's reference. So A is above P (rank 2, not 1) and is the top-1, which only the
    re-check finds. Background candidates have small norms (the chunk's largest norm is A's)."""
    rng = np.random.default_rng(5)
    qval = np.float32(1 + unit - 2.0**-20)
    p = np.ones(d, np.float32)
    p[: d // 4] = np.float32(1 + 2 * unit)
    bg = (0.05 * rng.standard_normal((n_background, d))).astype(np.float32)
    emb = np.vstack([p[None], bg, np.full((1, d), qval, np.float32)])
    qv = np.full((k_rows, d), qval, np.float32)
    queries = make_queries([[0]] * k_rows, [[1.0]] * k_rows, [[] for _ in range(k_rows)])
    return emb, qv, queries


def _truncate(torch, x):
    """fp32 -> TF32 by truncation (what a tensor core may do instead of rounding)."""
    b = x.float().contiguous().view(torch.int32)
    return (b & -8192).view(torch.float32)


# (precision, the operand's relative rounding error, truncate TF32 operands): the bound's u_in
# (bf16 2^-8; TF32 2^-10, covering truncation) reached
CASES = [("bf16-certified", 2.0**-8, False), ("tf32-certified", 2.0**-10, True)]


@pytest.mark.parametrize("precision,unit,truncate", CASES + [("tf32-certified", 2.0**-11, False)])
@pytest.mark.parametrize("chunk_size", [65536, 50])
@pytest.mark.parametrize("topk", [0, 1, 3])
def test_errors_at_the_bound_are_rechecked(precision, unit, truncate, chunk_size, topk, monkeypatch):
    if truncate:
        monkeypatch.setattr(certified, "round_tf32", _truncate)
    emb, qv, queries = _adversarial(unit)
    ref = _reference(emb, qv, queries, topk=topk)
    assert (ref.ranks.values == 2).all() and (ref.topk_index[:, :1] == len(emb) - 1).all()  # the case is sharp
    _same(ref, _scan(emb, qv, queries, precision, topk=topk, chunk_size=chunk_size))
    if precision == "bf16-certified":  # (the CPU's plain "tf32" multiplies in fp32)
        plain = _scan(emb, qv, queries, "bf16", topk=topk, chunk_size=chunk_size)
        assert (plain.ranks.values != ref.ranks.values).any()  # the uncertified low precision is wrong here


@pytest.mark.parametrize("precision,unit,truncate", CASES)
def test_a_halved_bound_or_no_recheck_fails(precision, unit, truncate, monkeypatch):
    """The planted bugs the tests above must catch: each gives other ranks on the adversarial case
    (a halved bound: at the positive with one chunk, at the top-k boundary across chunks)."""
    if truncate:
        monkeypatch.setattr(certified, "round_tf32", _truncate)
    emb, qv, queries = _adversarial(unit)
    ref = _reference(emb, qv, queries, topk=3)
    kappa = certified.bound_factor
    monkeypatch.setattr(certified, "bound_factor", lambda low, d: kappa(low, d) / 2)
    for chunk_size, topk in ((65536, 0), (50, 1)):  # (with one chunk the top-k re-check covers A)
        halved = _scan(emb, qv, queries, precision, topk=topk, chunk_size=chunk_size)
        assert (halved.ranks.values != ref.ranks.values).any()
    monkeypatch.setattr(certified, "bound_factor", kappa)
    monkeypatch.setattr(certified, "repair_targets", lambda torch, s, *a: (torch.zeros(0, dtype=torch.long),) * 2)
    skipped = _scan(emb, qv, queries, precision, topk=3)
    assert (skipped.ranks.values != ref.ranks.values).any()


@pytest.mark.parametrize("low", ["bf16", "tf32"])
def test_the_bound_holds_on_random_and_aligned_vectors(low):
    """|s_low - s_ref| <= slack for every pair: Gaussian, all-positive (errors of one sign) and
    large-dynamic-range vectors."""
    rng = np.random.default_rng(6)
    d = 96
    sets = [rng.standard_normal((64, d)), np.abs(rng.standard_normal((64, d))) + 1,
            rng.standard_normal((64, d)) * np.exp2(rng.integers(-20, 20, (64, d)))]
    for x in sets:
        x = torch.from_numpy(x.astype(np.float32))
        q, c = x[:32], x[32:]
        if low == "bf16":
            s_low = q.bfloat16().float() @ c.bfloat16().float().T
        else:
            s_low = _truncate(torch, q) @ _truncate(torch, c).T
        s_ref = certified.exact_scores(torch, q[:, None, :], c[None])
        cmax = torch.linalg.vector_norm(c, dim=1).max()
        bound = certified.slack(torch.linalg.vector_norm(q, dim=1), cmax, low, d)
        assert ((s_low - s_ref).abs() <= bound).all()
        assert ((s_low - s_ref).abs() > bound / 64).any() or low == "tf32"  # the bound is not vacuous


def test_reference_scores_do_not_depend_on_the_shape():
    rng = np.random.default_rng(7)
    q = torch.from_numpy(rng.standard_normal((5, 37)).astype(np.float32))
    c = torch.from_numpy(rng.standard_normal((11, 37)).astype(np.float32))
    full = certified.exact_scores(torch, q[:, None, :], c[None])
    pairs = certified.exact_pairs(torch, q, c, torch.tensor([4, 0, 2]), torch.tensor([10, 3, 3]))
    assert torch.equal(pairs, full[[4, 0, 2], [10, 3, 3]])
    one = certified.exact_scores(torch, q[1], c[7])
    assert torch.equal(one, full[1, 7])


def test_round_tf32_keeps_ten_bits_to_nearest_even():
    x = torch.tensor([1 + 2.0**-11, 1 + 3 * 2.0**-11, -(1 + 2.0**-11 + 2.0**-20), 1.0, 0.0, -0.0])
    got = certified.round_tf32(torch, x)
    assert got.tolist() == [1.0, 1 + 2.0**-9, -(1 + 2.0**-10), 1.0, 0.0, -0.0]


def test_the_precision_is_a_run_setting_and_recorded():
    from rbench.core.settings import SCAN_PRECISIONS

    assert set(CERT) <= set(SCAN_PRECISIONS) and ts.PRECISIONS is SCAN_PRECISIONS


def test_a_certified_run_is_recorded_with_its_precision(tmp_path):
    """``--scan torch --scan-precision bf16-certified``: the record says so (its own config hash)
    and, on integer vectors (exact in bf16 and fp32 on every path), gives the engine's numbers."""
    import rbench
    from tests.run.test_scan_setting import IntegerVectors

    cpu = rbench.evaluate(IntegerVectors(), "ml-100k", max_queries=200, results_dir=tmp_path)
    run = rbench.evaluate(IntegerVectors(), "ml-100k", max_queries=200, results_dir=tmp_path, scan="torch",
                          scan_precision="bf16-certified")
    assert run.run_options["scan_precision"] == "bf16-certified" and run.config_hash != cpu.config_hash
    assert run.metrics == cpu.metrics
    assert (cpu.per_query["rank"].to_numpy() == run.per_query["rank"].to_numpy()).all()
