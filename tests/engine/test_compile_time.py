"""Compile time is not latency (issue 28): ``rbench.engine.fused.warmup`` compiles every kernel signature
the engine calls before an evaluation is timed, so that an evaluation afterwards compiles
nothing; and ``rbench reproduce --dry-run`` estimates leave a record's ``compile_s`` out.

The kernel checks run in a fresh process: numba's dispatchers are per process, and a kernel an
earlier test compiled in this one would hide a signature the warm-up misses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from rbench.audit import reproduce

ROOT = Path(__file__).resolve().parents[2]

# Run in a child: warm up with RBENCH_FUSED=0 (rbench's GEMM only), then with it on, then scan
# small synthetic tasks down every road that reaches a kernel, recording any signature that the
# evaluations added to any numba dispatcher of the two kernel modules.
_PROBE = r'''
import json, os
import numpy as np
from numba.core.dispatcher import Dispatcher
from rbench.engine import scan as engine
from rbench.engine import fused
from tests.helpers import TableRanker, make_pool, make_queries

def signatures():
    import rbench.engine.kernels.fused as fk, rbench.engine.kernels.gemm as gk, rbench.engine.kernels.tiles as tk
    return {f"{m.__name__.rsplit('.', 1)[1]}.{name}": sorted(str(s) for s in d.signatures)
            for m in (fk, gk, tk) for name, d in vars(m).items() if isinstance(d, Dispatcher)}

out = {}
os.environ["RBENCH_FUSED"] = "0"
out["gemm_only_s"] = fused.warmup()
out["gemm_only"] = signatures()
os.environ["RBENCH_FUSED"] = "1"
out["rest_s"] = fused.warmup()
out["again_s"] = fused.warmup()
before = signatures()
out["warmed"] = before

rng = np.random.default_rng(0)
N_POOL, N_Q, D = 300, 5, 8
pool = make_pool(N_POOL)
positives = [rng.choice(N_POOL, 2, replace=False).tolist() for _ in range(N_Q)]
exclude = [np.setdiff1d(rng.choice(N_POOL, 30, replace=False), p).tolist() for p in positives]
shared = make_queries(positives, exclude=exclude)
lists = np.stack([np.concatenate([p, np.setdiff1d(rng.choice(N_POOL, 30, replace=False), p)[:18]])
                  for p in positives])
per_query = make_queries(positives, candidates=lists)

class Dense:
    """An EmbeddingRanker-like ranker: read-only (memory-mapped-like) candidate and query vectors."""
    name = "dense-probe"
    def __init__(self):
        self.emb = rng.standard_normal((N_POOL, D)).astype(np.float32)
        self.emb.flags.writeable = False
        self.q = rng.standard_normal((N_Q, D)).astype(np.float32)
        self.q.flags.writeable = False
    def encode_pool(self, pool):
        return self.emb
    def encode_queries(self, queries):
        rows = [int(i[1:]) for i in queries.ids]
        return self.q[rows[0] : rows[-1] + 1]  # (a read-only view)

class ReadOnly(TableRanker):
    """Scores as read-only views (as bm25's), of the table's own dtype."""
    def score(self, queries, candidates):
        s = np.ascontiguousarray(super().score(queries, candidates))
        s.flags.writeable = False
        return s

class Widening(ReadOnly):
    """fp64 scores for the first chunk, fp32 after: the fused scan goes on in fp64."""
    def score(self, queries, candidates):
        s = super().score(queries, candidates)
        return s if candidates.ndim == 2 or candidates[0] == 0 else s.astype(np.float32)

def harness(ranker):
    """ranker's scores as a harness scorer (as the dense one: scanned chunk by chunk)."""
    def score(queries, candidates):
        return ranker.score(queries, candidates)
    from rbench.engine.scorers import Scorer

    return Scorer(score, harness_scores=True)

table32 = rng.integers(0, 50, (N_Q, N_POOL)).astype(np.float32)
table64 = table32.astype(np.float64)
runs = [("dense", Dense(), shared, None), ("dense lists", Dense(), per_query, None),
        ("fp32", TableRanker(table32), shared, None), ("fp64", TableRanker(table64), shared, None),
        ("fp32 lists", TableRanker(table32), per_query, None), ("read-only fp32", ReadOnly(table32), shared, None),
        ("read-only fp64", ReadOnly(table64), shared, None), ("fp64 then fp32", Widening(table64), shared, None),
        ("harness read-only fp32", None, shared, harness(ReadOnly(table32))),
        ("harness read-only fp64", None, shared, harness(ReadOnly(table64))),
        ("harness fp64 then fp32", None, shared, harness(Widening(table64)))]
new = {}
for fused_on in ("1", "0"):
    os.environ["RBENCH_FUSED"] = fused_on
    for label, ranker, queries, scorer in runs:
        for topk in (0, 100):
            engine.scan(ranker, queries, pool, batch_size=3, chunk_size=128, topk=topk, scorer=scorer)
            after = signatures()
            added = {k: sorted(set(v) - set(before.get(k, []))) for k, v in after.items()}
            added = {k: v for k, v in added.items() if v}
            if added:
                new[f"{label}, topk={topk}, RBENCH_FUSED={fused_on}"] = added
            before = after
out["new"] = new
print("PROBE " + json.dumps(out))
'''


def _child(code: str, **env: str) -> dict:
    """Run code in a fresh interpreter at the repository root; its 'PROBE {json}' line, parsed."""
    clean = {k: v for k, v in os.environ.items() if k not in ("RBENCH_FUSED", "RBENCH_GEMM")}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**clean, **env}, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("PROBE "))
    return json.loads(line.removeprefix("PROBE "))


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> dict:
    pytest.importorskip("numba")
    return _child(_PROBE, RBENCH_HOME=str(tmp_path_factory.mktemp("home")))


def test_warmup_follows_the_switches_once_per_process(probe):
    gemm_only = probe["gemm_only"]
    assert gemm_only["gemm.gemm"] and gemm_only["gemm.pair_dots"]
    assert len(gemm_only["gemm.pack_columns"]) == 2  # writable and read-only candidates
    assert not gemm_only["fused.scan"] and not gemm_only["fused.gemm_scan"]  # RBENCH_FUSED=0
    warmed = probe["warmed"]
    assert len(warmed["fused.scan"]) == 2  # fp32 and fp64 scores
    assert len(warmed["tiles.tile_scan"]) == 2 and warmed["fused.finish"]  # BLAS tiles: writable, read-only
    assert not warmed["fused.gemm_scan"]  # (rbench's fused GEMM only with RBENCH_GEMM=own)
    assert probe["gemm_only_s"] > 0 and probe["rest_s"] > 0  # each switch warmed when first on
    assert probe["again_s"] == 0.0


def test_an_evaluation_after_warmup_compiles_nothing(probe):
    """Every road the engine takes to a kernel (dense GEMM + scan, per-query lists, score()
    rankers and harness scorers in fp32 / fp64 / read-only / fp64 then fp32, exclusions, topk 0
    and 100, the fused scan on and off) finds its signature compiled: none is added during the
    evaluations."""
    assert probe["new"] == {}, f"compiled during a timed evaluation: {json.dumps(probe['new'], indent=1)}"


def test_warmup_with_every_switch_off_compiles_nothing():
    code = ("import sys; from rbench.engine import fused; t = fused.warmup(); "
            "print('PROBE', __import__('json').dumps([t, 'numba' in sys.modules]))")
    assert _child(code, RBENCH_FUSED="0", RBENCH_GEMM="blas") == [0.0, False]


def _record(score_s: float, compile_s: float | None) -> SimpleNamespace:
    timings = {"fit_s": 0.0, "score_s": score_s, **({"compile_s": compile_s} if compile_s is not None else {})}
    return SimpleNamespace(task="ml-100k", ranker={"name": "pop"}, timings=timings, n_queries=100,
                           task_info={"n_train": 10, "n_valid": 0, "pool_size": 1000})


def test_dry_run_estimates_read_score_s_which_leaves_compile_time_out(monkeypatch, tmp_path):
    """A record's score_s is the ranker's cost (the JIT ran before the timer, its seconds are
    compile_s beside it): the estimate reads score_s as it is, never compile_s."""
    monkeypatch.setattr(reproduce, "_target_size", lambda task: reproduce.Size(10, 200, 1000, "the paper's counts"))
    run = reproduce.RecipeRun("pop", ("ml-100k", "esci"))
    here, there = reproduce.Cell(run, "ml-100k", "cpu"), reproduce.Cell(run, "esci", "cpu")
    assert reproduce.estimate(here, tmp_path, records=[_record(5.0, 45.0)]) == "~5 s"
    assert reproduce.estimate(there, tmp_path, records=[_record(5.0, 45.0)]).startswith("~10 s (scaled")
    assert reproduce.estimate(here, tmp_path, records=[_record(50.0, None)]) == "~50 s"


class _Vectors:
    """An embedding ranker (the runner's embedding road): hashed random vectors."""

    name, version, config = "vectors", "1", {}

    def fit(self, task):
        return None

    def encode_pool(self, pool):
        import numpy as np

        return np.random.default_rng(0).standard_normal((len(pool), 8)).astype(np.float32)

    def encode_queries(self, queries):
        import numpy as np

        return np.random.default_rng(1).standard_normal((len(queries), 8)).astype(np.float32)


class _SelectsOnValid(_Vectors):
    """An embedding ranker whose fit evaluates on valid (model selection, as LRanker's)."""

    name = "selects"

    def fit(self, task):
        from rbench.engine.scan import scan

        scan(self, task.valid, task.pool, topk=0)


@pytest.mark.parametrize("ranker", ["pop", "vectors", "selects"])
def test_records_time_the_jit_apart(monkeypatch, ranker):
    """The kernels' compilation is timed before fit_s and score_s start and recorded as
    compile_s, on the engine's road (a ranker's score), the embedding road (runner.score) and
    for a fit that evaluates on valid alike."""
    import time

    import rbench
    from rbench.engine import fused

    # Load every kernel (and the tile path's BLAS) in this process first: the fake first
    # compile below then stands alone, and loading cached kernels (torch's import among them,
    # 1-2 s on a loaded machine) is not mistaken for the ranker's time.
    fused.warmup()
    done: list[bool] = []

    def slow(**_: bool) -> float:  # a first compile of 0.6 s; later calls find it done, as fused.warmup's
        if done:
            return 0.0
        done.append(True)
        time.sleep(0.6)
        return 0.6

    monkeypatch.setattr(fused, "warmup", slow)
    made = {"pop": lambda: "pop", "vectors": _Vectors, "selects": _SelectsOnValid}[ranker]()
    rec = rbench.evaluate(made, "ml-100k", max_queries=20)
    assert rec.timings["compile_s"] >= 0.6
    assert rec.timings["score_s"] < 0.6 and rec.timings["fit_s"] < 0.6
