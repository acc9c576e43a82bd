"""Compile time is not latency (issue 28): ``rbench.engine.fused.warmup`` compiles the kernel
signatures of an evaluation's roads before it is timed, the scan of a ranker's scores compiles
for its first chunk's precision inside a warm-up timed apart, so that nothing compiles outside a
warm-up and compile_s, never score_s or fit_s, holds the wait; each road compiles only its own
kernels (issue 44); and ``rbench reproduce --dry-run`` estimates leave a record's ``compile_s`` out.

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
# evaluations added to any numba dispatcher of the kernel modules outside a warm-up, and which
# warm-up groups each evaluation ran.
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

in_warmups, groups_run = {}, []
real_warm = fused._warm

def spy_warm(names):
    """fused._warm, noting the signatures each warm-up added and the groups it ran."""
    before, todo = signatures(), [n for n in names if n not in fused._WARM]
    spent = real_warm(names)
    groups_run.extend(todo)
    for k, v in signatures().items():
        in_warmups.setdefault(k, set()).update(set(v) - set(before.get(k, [])))
    return spent

fused._warm = spy_warm
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
new, lazy = {}, {}
for fused_on in ("1", "0"):
    os.environ["RBENCH_FUSED"] = fused_on
    for label, ranker, queries, scorer in runs:
        for topk in (0, 100):
            del groups_run[:]
            engine.scan(ranker, queries, pool, batch_size=3, chunk_size=128, topk=topk, scorer=scorer)
            after = signatures()
            added = {k: sorted(set(v) - set(before.get(k, [])) - in_warmups.get(k, set())) for k, v in after.items()}
            added = {k: v for k, v in added.items() if v}
            if added:
                new[f"{label}, topk={topk}, RBENCH_FUSED={fused_on}"] = added
            if groups_run:
                lazy[f"{label}, topk={topk}, RBENCH_FUSED={fused_on}"] = list(groups_run)
            before = after
out["new"], out["lazy"], out["end"] = new, lazy, signatures()
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


@pytest.fixture(scope="module", params=["tile", "own"])
def probe(request, tmp_path_factory) -> dict:
    """Both dense roads (``RBENCH_GEMM=auto`` takes one or the other by the CPU's vectors)."""
    pytest.importorskip("numba")
    out = _child(_PROBE, RBENCH_HOME=str(tmp_path_factory.mktemp("home")), RBENCH_GEMM=request.param)
    return {**out, "mode": request.param}


def test_warmup_follows_the_switches_once_per_process(probe):
    gemm_only = probe["gemm_only"]
    assert gemm_only["gemm.gemm"] and gemm_only["gemm.pair_dots"]
    assert len(gemm_only["gemm.pack_columns"]) == 1  # candidates read-only, memory-mapped or not
    assert not gemm_only["fused.scan"] and not gemm_only["fused.gemm_block"]  # RBENCH_FUSED=0
    warmed = probe["warmed"]
    tiles = probe["mode"] == "tile"
    assert len(warmed["tiles.tile_scan"]) == tiles  # BLAS tiles: candidates read-only, one signature
    # a ranker's scores: compiled by their first chunk, per precision; the own road scans its fp32
    # blocks with the same kernel, so its warm-up compiles that one (one signature for both)
    assert len(warmed["fused.scan"]) == (not tiles)
    assert len(warmed["fused.gemm_block"]) == (not tiles)  # rbench's fused GEMM on its own road only
    assert probe["gemm_only_s"] > 0 and probe["rest_s"] > 0  # each switch warmed when first on
    assert probe["again_s"] == 0.0
    assert len(probe["end"]["fused.scan"]) == 2  # fp32 and fp64 scores, once the evaluations saw both


def test_nothing_compiles_outside_a_warmup(probe):
    """Every road the engine takes to a kernel (dense GEMM + scan, per-query lists, score()
    rankers and harness scorers in fp32 / fp64 / read-only / fp64 then fp32, exclusions, topk 0
    and 100, the fused scan on and off) finds its signature compiled, or compiles it inside a
    warm-up (timed apart): none is added by the evaluations themselves."""
    assert probe["new"] == {}, f"compiled during a timed evaluation: {json.dumps(probe['new'], indent=1)}"


def test_each_road_compiles_only_its_own_kernels(probe):
    """The dense roads (BLAS tiles, per-query lists) compile no scan of a ranker's scores (rbench's
    own fused GEMM compiles the fp32 one, as it scans its blocks with it: the scores' warm-up then
    finds it compiled, ``test_warmup_follows_the_switches_once_per_process``); the
    scores' scan compiles its precision when a ranker first returns it (fp32, then fp64 for the
    first fp64 ranker: a run of one ranker waits for one kernel), and nothing again after."""
    assert probe["lazy"] == {"fp32, topk=0, RBENCH_FUSED=1": ["float32"],
                             "fp64, topk=0, RBENCH_FUSED=1": ["float64"]}, probe["lazy"]


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


class _ScoresOnValid:
    """A ranker of its own scores (fp64, as pop's) whose fit evaluates on valid."""

    name, version, config = "scores-on-valid", "1", {}

    def fit(self, task):
        from rbench.engine.scan import scan

        scan(self, task.valid, task.pool, topk=0)

    def index(self, pool):
        return None

    def score(self, queries, candidates):
        import numpy as np

        rows = np.array([sum(map(ord, str(q))) for q in queries.ids], dtype=np.float64)
        cols = np.asarray(candidates, dtype=np.float64)
        return np.sin(rows[:, None] * 0.37 + (cols if cols.ndim == 2 else cols[None, :]) * 0.011)


@pytest.mark.parametrize("ranker", ["pop", "fit"])
def test_the_first_chunk_compiles_apart_from_score_s_and_fit_s(monkeypatch, ranker):
    """The scan of a ranker's scores compiles when their first chunk comes, inside the timed loop
    (or inside fit_s, for a fit that evaluates on valid): those seconds go to compile_s."""
    import time

    import rbench
    from rbench.engine import fused

    fused.warmup()  # (every other kernel loaded first: only the fake compile below is timed)
    monkeypatch.setattr(fused, "_WARM", set(fused._WARM) - {"float32", "float64"})
    for name in ("float32", "float64"):
        def slow(real=fused._WARMUPS[name]) -> None:  # a first compile of 0.6 s
            time.sleep(0.6)
            real()

        monkeypatch.setitem(fused._WARMUPS, name, slow)
    rec = rbench.evaluate("pop" if ranker == "pop" else _ScoresOnValid(), "ml-100k", max_queries=20)
    assert rec.timings["compile_s"] >= 0.6
    assert rec.timings["score_s"] < 0.6 and rec.timings["fit_s"] < 0.6


def test_warmups_pause_the_garbage_collector(monkeypatch):
    """A warm-up runs with Python's cyclic collector paused (numba's compiler allocates millions of
    short-lived objects, and each collection walks every object the process holds: 10-20% of an
    empty cache's compile), and leaves it as it found it, on or off, even when a compile fails."""
    import gc

    from rbench.engine import fused

    seen: list[bool] = []

    def fails() -> None:
        seen.append(gc.isenabled())
        raise RuntimeError("a failed compile")

    monkeypatch.setitem(fused._WARMUPS, "float32", lambda: seen.append(gc.isenabled()))
    monkeypatch.setitem(fused._WARMUPS, "float64", fails)
    monkeypatch.setattr(fused, "_WARM", set())
    assert gc.isenabled()
    fused._warm(["float32"])
    with pytest.raises(RuntimeError):
        fused._warm(["float64"])
    assert seen == [False, False] and gc.isenabled()
    monkeypatch.setattr(fused, "_WARM", set())
    gc.disable()
    try:
        fused._warm(["float32"])
        assert not gc.isenabled()
    finally:
        gc.enable()
