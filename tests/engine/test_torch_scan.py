"""The torch evaluation path (``rbench.engine.torch_scan``) against the CPU engine.

On the CPU device (always run): tie-free random data gives the engine's ranks, counts, n_ranked,
top-k indices and metrics exactly (scores within fp32 rounding: torch sums in another order);
integer-valued data, whose products and sums are exact in fp32, gives identical scores on both
sides, so planted ties (duplicate candidates, twins of positives, ties straddling the top-k cut)
must be resolved identically, top-k scores included. Mutants of the module (equal counted as
higher, exclusions ignored, ties broken by the higher index, the straddling-tie fix skipped)
must fail these comparisons. ``cuda`` tests compare the CUDA path on a GPU.
"""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from rbench.core.errors import RankerOutputError
from rbench.engine import metrics, sharded
from rbench.engine import torch_scan as ts
from rbench.engine.scan import scan
from rbench.engine.scorers import vector_scorer
from tests.helpers import make_pool, make_queries

torch = pytest.importorskip("torch")

SOURCE = Path(ts.__file__).read_text(encoding="utf-8")


def _data(rng, n_pool, n_q, d, integer=False, max_pos=3, n_excl=15, lists=None):
    """Vectors and labelled queries: graded multi-positive, with exclusions (never a positive);
    ``lists``: per-query candidate lists of that length (the positives inside)."""
    if integer:
        emb = rng.integers(-3, 4, (n_pool, d)).astype(np.float32)
        qv = rng.integers(-3, 4, (n_q, d)).astype(np.float32)
    else:
        emb = rng.standard_normal((n_pool, d)).astype(np.float32)
        qv = rng.standard_normal((n_q, d)).astype(np.float32)
    pos, grades, excl, cand = [], [], [], []
    for _ in range(n_q):
        p = [int(x) for x in rng.choice(n_pool, int(rng.integers(1, max_pos + 1)), replace=False)]
        pos.append(p)
        grades.append([float(g) for g in rng.integers(1, 4, len(p))])
        if lists is None:
            excl.append([int(x) for x in rng.integers(0, n_pool, n_excl) if x not in p])
        else:
            others = rng.permutation(np.setdiff1d(np.arange(n_pool), p))[: lists - len(p)]
            row = rng.permutation(np.concatenate([p, others]))
            cand.append(row)
            excl.append([int(x) for x in rng.choice(others, min(n_excl, len(others) // 3), replace=False)])
    queries = make_queries(pos, grades, excl, candidates=np.array(cand, dtype=np.int64) if lists else None)
    return emb, qv, queries


def _engine(emb, qv, queries, topk, chunk_size=65536):
    return scan(None, queries, make_pool(len(emb)), scorer=vector_scorer(emb, qv, queries), topk=topk,
                batch_size=32, chunk_size=chunk_size)


def _same(ref, got, scores_exact=True):
    for name in ("higher", "equal", "pos_before", "n_ranked", "topk_index"):
        np.testing.assert_array_equal(getattr(got, name), getattr(ref, name), err_msg=name)
    np.testing.assert_array_equal(got.ranks.values, ref.ranks.values, err_msg="ranks")
    np.testing.assert_array_equal(got.ranks.offsets, ref.ranks.offsets)
    if scores_exact:
        np.testing.assert_array_equal(got.topk_score, ref.topk_score, err_msg="topk_score")
    else:
        np.testing.assert_allclose(got.topk_score, ref.topk_score, rtol=1e-5, atol=1e-5, err_msg="topk_score")


def _run(emb, qv, queries, module=ts, **kw):
    kw.setdefault("device", "cpu")
    return module.scan_dense_torch(emb, qv, queries, **kw)


@pytest.mark.parametrize("chunk_size,batch_size", [(65536, 64), (333, 7), (1, 5)])
def test_shared_pool_equals_the_engine(chunk_size, batch_size):
    rng = np.random.default_rng(1)
    emb, qv, queries = _data(rng, 1000, 40, 16)
    ref = _engine(emb, qv, queries, topk=20)
    got = _run(emb, qv, queries, topk=20, chunk_size=chunk_size, batch_size=batch_size)
    _same(ref, got, scores_exact=False)
    grades = queries.grades
    assert metrics.aggregate(metrics.per_query(got.ranks, grades)) == \
        metrics.aggregate(metrics.per_query(ref.ranks, grades))
    assert (got.n_ranked < 1000).all()  # the exclusions are not ranked
    assert got.timings["score_s"] > 0


@pytest.mark.parametrize("chunk_size", [65536, 7, 1])
def test_per_query_lists_equal_the_engine(chunk_size):
    rng = np.random.default_rng(2)
    emb, qv, queries = _data(rng, 500, 30, 16, lists=40)
    ref = _engine(emb, qv, queries, topk=10)
    got = _run(emb, qv, queries, topk=10, chunk_size=chunk_size, batch_size=8)
    _same(ref, got, scores_exact=False)


def test_k_larger_than_the_pool_pads_as_the_engine():
    rng = np.random.default_rng(3)
    emb, qv, queries = _data(rng, 30, 9, 8, n_excl=6)
    ref = _engine(emb, qv, queries, topk=50)
    got = _run(emb, qv, queries, topk=50, chunk_size=4)
    _same(ref, got, scores_exact=False)
    assert (got.topk_index[:, -20:] == -1).all() and np.isneginf(got.topk_score[:, -20:]).all()
    emb, qv, queries = _data(rng, 60, 5, 8, lists=12, n_excl=3)
    _same(_engine(emb, qv, queries, topk=50), _run(emb, qv, queries, topk=50, chunk_size=5), scores_exact=False)


def test_topk_zero_keeps_nothing():
    rng = np.random.default_rng(4)
    emb, qv, queries = _data(rng, 200, 6, 8)
    got = _run(emb, qv, queries, topk=0, chunk_size=64)
    assert got.topk_index.shape == (6, 0)
    np.testing.assert_array_equal(got.ranks.values, _engine(emb, qv, queries, topk=0).ranks.values)


@pytest.mark.parametrize("lists", [None, 60])
@pytest.mark.parametrize("chunk_size", [65536, 13, 1])
def test_planted_ties_equal_the_engine_exactly(lists, chunk_size):
    """Integer vectors in -3..3 at d = 6: scores repeat many times (ties everywhere, at the top-k
    cut too) and are exact in fp32, so both sides compute the same numbers; every candidate
    2k and 2k+1 are one vector (duplicates), and some candidates copy a positive (twins)."""
    rng = np.random.default_rng(5)
    emb, qv, queries = _data(rng, 400, 24, 6, integer=True, max_pos=4, lists=lists)
    emb[1::2] = emb[0::2]
    for p in queries.positives.values[:10]:
        emb[(p + 7) % len(emb)] = emb[p]
    ref = _engine(emb, qv, queries, topk=15)
    got = _run(emb, qv, queries, topk=15, chunk_size=chunk_size, batch_size=10)
    _same(ref, got)
    assert (got.equal > 0).mean() > 0.5  # the ties are there


def test_many_graded_positives_equal_the_engine():
    """More than 8 positives a query: the counts go through a sort and binary searches."""
    rng = np.random.default_rng(6)
    emb, qv, queries = _data(rng, 300, 12, 5, integer=True, max_pos=20)
    assert queries.positives.lengths().max() > 8
    _same(_engine(emb, qv, queries, topk=12), _run(emb, qv, queries, topk=12, chunk_size=50))


def test_twins_of_positives_tie_with_random_floats():
    """A candidate identical to a positive ties with it (docs/guides/scale.md) with scores that are not
    exact: the positives' scores come from the same GEMMs (same shape) as the candidates'."""
    rng = np.random.default_rng(7)
    emb, qv, queries = _data(rng, 2000, 40, 32, max_pos=2, n_excl=0)
    for i, p in enumerate(queries.positives.values):
        emb[(p + 1 + 97 * i) % len(emb)] = emb[p]
    for chunk_size in (65536, 300):
        got = _run(emb, qv, queries, topk=5, chunk_size=chunk_size, batch_size=16)
        ref = _engine(emb, qv, queries, topk=5)
        np.testing.assert_array_equal(got.equal, ref.equal)
        np.testing.assert_array_equal(got.ranks.values, ref.ranks.values)
        assert got.equal.sum() >= len(queries)


def test_precisions_on_the_cpu():
    """tf32 is fp32 on the CPU; bf16 rounds the operands: integer vectors in -3..3 are bf16 values,
    so every precision gives the engine's result there."""
    rng = np.random.default_rng(8)
    emb, qv, queries = _data(rng, 300, 10, 8, integer=True)
    ref = _engine(emb, qv, queries, topk=10)
    for precision in ("fp32", "tf32", "bf16"):
        _same(ref, _run(emb, qv, queries, topk=10, chunk_size=64, precision=precision))
    with pytest.raises(ValueError, match="precision"):
        _run(emb, qv, queries, precision="fp16")


def test_memmap_and_sharded_pools_stream_the_same(tmp_path):
    rng = np.random.default_rng(9)
    emb, qv, queries = _data(rng, 700, 12, 8)
    want = _run(emb, qv, queries, topk=10, chunk_size=128)
    np.save(tmp_path / "emb.npy", emb)
    mm = np.load(tmp_path / "emb.npy", mmap_mode="r")
    for a in range(0, 700, 250):
        sharded.write_shard(tmp_path / "sh", a, emb[a : a + 250])
    sh = sharded.finish(tmp_path / "sh", 700)
    for pool in (mm, sh):
        _same(want, _run(pool, qv, queries, topk=10, chunk_size=128))
    _, lists_qv, lists_q = _data(rng, 700, 6, 8, lists=30)  # (its queries over the same pool)
    _same(_run(emb, lists_qv, lists_q, topk=5, chunk_size=9), _run(sh, lists_qv, lists_q, topk=5, chunk_size=9))


def test_non_finite_scores_raise():
    """Finite vectors whose inner product overflows: one line, as the engine's ``_check`` says of
    a ranker's non-finite scores (the engine's fused GEMM scan does not look), never a -inf read
    as an exclusion."""
    rng = np.random.default_rng(10)
    emb, qv, queries = _data(rng, 50, 3, 4)
    emb[7], qv[:] = 3e38, 2.0
    with pytest.raises(RankerOutputError, match="not finite"):
        _run(emb, qv, queries, topk=5)
    qv[1, 0] = np.nan
    with pytest.raises(RankerOutputError, match="query 'q1'"):
        _run(emb, qv, queries, topk=5)


def test_rbench_imports_without_torch():
    code = ("import sys; sys.modules['torch'] = None; import rbench.engine.torch_scan, rbench.engine.scan; "
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "ok", out.stderr


# -- planted bugs: each mutant of the module must fail the comparisons above ---------------------

MUTANTS = {
    "equal counted as higher": ("torch.count_nonzero(s > tj", "torch.count_nonzero(s >= tj"),
    "exclusions ignored": ("s[excl] = -math.inf", "pass"),
    "ties to the higher index": ("((_LOW_BITS - 2) - i)", "(i + 1)"),
    "straddling ties not resolved": ("if len(redo):", "if False:"),
    "positives counted as candidates": ("self.higher[rows] -= (own", "self.higher[rows] += 0 * (own"),
}


def _mutant(old: str, new: str) -> types.ModuleType:
    assert SOURCE.count(old) == 1, old
    module = types.ModuleType("torch_scan_mutant")
    exec(compile(SOURCE.replace(old, new), "torch_scan_mutant", "exec"), module.__dict__)
    return module


def _last_index_first_topk(monkeypatch):
    """torch.topk made to prefer the highest column among ties (its tie order is not defined:
    this is one it may have), so that a result depending on it shows."""
    from collections import namedtuple

    result = namedtuple("topk", ["values", "indices"])

    def topk(x, k, dim=-1, largest=True, sorted=True):
        v, i = torch.sort(x.flip(dim), dim=dim, descending=largest, stable=True)
        return result(v.narrow(dim, 0, k), x.shape[dim] - 1 - i.narrow(dim, 0, k))

    monkeypatch.setattr(torch, "topk", topk)


def _tied_case():
    rng = np.random.default_rng(5)
    emb, qv, queries = _data(rng, 400, 24, 6, integer=True, max_pos=4)
    for r in (1, 2, 3):  # every vector four times: groups of ties straddle the top-k's cut
        emb[r::4] = emb[0::4]
    return emb, qv, queries, _engine(emb, qv, queries, topk=15)


def test_the_tie_order_of_torch_topk_does_not_matter(monkeypatch):
    emb, qv, queries, ref = _tied_case()
    _last_index_first_topk(monkeypatch)
    for chunk_size in (100, 65536):
        _same(ref, _run(emb, qv, queries, topk=15, chunk_size=chunk_size))


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_planted_bugs_fail(mutant, monkeypatch):
    module = _mutant(*MUTANTS[mutant])
    emb, qv, queries, ref = _tied_case()
    _last_index_first_topk(monkeypatch)
    caught = 0
    for chunk_size in (100, 65536):  # (the module itself passes both: the test above)
        try:
            _same(ref, _run(emb, qv, queries, module=module, topk=15, chunk_size=chunk_size))
        except AssertionError:
            caught += 1
    assert caught, f"mutant {mutant!r} passed"


# -- CUDA ------------------------------------------------------------------------------------------

@pytest.mark.cuda
def test_cuda_equals_the_engine_on_exact_data():
    rng = np.random.default_rng(11)
    for lists in (None, 200):
        emb, qv, queries = _data(rng, 20000, 300, 32, integer=True, max_pos=4, lists=lists)
        emb[1::2] = emb[0::2]
        ref = _engine(emb, qv, queries, topk=100, chunk_size=4096)
        for chunk_size in (65536, 3000):
            _same(ref, _run(emb, qv, queries, topk=100, chunk_size=chunk_size, batch_size=128, device="cuda"))


@pytest.mark.cuda
def test_cuda_random_data_differs_only_on_near_ties():
    """fp32 on CUDA sums in another order than rbench's GEMM: ranks may differ where two scores are
    within fp32 rounding of each other: rarely (< 1e-4 of the positive-candidate comparisons,
    < 5% of the positives), and every difference within the number of such near-ties; a
    positive's twins still tie with it. tf32 and bf16 run and rank every candidate."""
    rng = np.random.default_rng(12)
    emb, qv, queries = _data(rng, 200000, 2000, 128, max_pos=2, n_excl=50)
    for i, p in enumerate(queries.positives.values[:500]):
        emb[(p + 1 + 389 * i) % len(emb)] = emb[p]
    ref = _engine(emb, qv, queries, topk=100)
    got = _run(emb, qv, queries, topk=100, device="cuda")
    diff = got.ranks.values - ref.ranks.values
    flipped = np.abs(diff).sum() / (len(diff) * len(emb))  # pairwise comparisons decided otherwise
    assert flipped < 1e-4 and np.mean(diff != 0) < 0.05, (flipped, np.mean(diff != 0))
    rows = queries.positives.row_ids()
    d = emb.shape[1]
    for at in np.flatnonzero(diff)[:50]:  # each difference is explained by near-ties
        q, p = qv[rows[at]].astype(np.float64), int(queries.positives.values[at])
        exact = emb.astype(np.float64) @ q
        bound = 2 * d * 2.0**-24 * (np.abs(emb).astype(np.float64) @ np.abs(q))  # fp32 dot error bound
        near = np.count_nonzero(np.abs(exact - exact[p]) <= bound + bound[p]) - 1
        assert abs(diff[at]) <= near, (at, diff[at], near)
    np.testing.assert_array_equal(got.n_ranked, ref.n_ranked)
    assert (ref.equal > 0).sum() >= 400  # the planted twins (a few may be excluded or overwritten)
    assert (got.equal[ref.equal > 0] > 0).all()  # where the engine sees a twin's tie, so does CUDA
    assert np.mean(got.topk_index == ref.topk_index) > 0.999
    for precision in ("tf32", "bf16"):
        low = _run(emb, qv, queries, topk=100, device="cuda", precision=precision)
        np.testing.assert_array_equal(low.n_ranked, ref.n_ranked)
        assert np.corrcoef(low.ranks.values, ref.ranks.values)[0, 1] > 0.99
