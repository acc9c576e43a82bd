"""Which numba kernels an evaluation compiles on an empty cache, and for how long (issue 44).

Each road runs in a fresh process with its own empty NUMBA_CACHE_DIR: one engine scan
(``rbench.engine.scan.scan``, with ``RBENCH_FUSED_MIN_SCORES=0`` so that its small synthetic
task takes the road a large one takes) of

- ``scores32`` / ``scores64``: a ranker's own scores in fp32 (as bm25's) / fp64 (as pop's);
- ``dense``: an embedding ranker on a shared pool on BLAS tiles (``RBENCH_GEMM=tile``: the
  default on CPUs with AVX-512);
- ``dense-own``: the same with ``RBENCH_GEMM=own`` (rbench's GEMM fused with the scan: the
  default without AVX-512);
- ``dense-small``: an embedding ranker below the small-scan floor (numpy passes over rbench's GEMM).

numba's compile events give each kernel's seconds, those of the kernels it calls included
(``incl``) and its own (``excl``), as wall time and as the compiling thread's CPU time: a compile
is one thread's work, so its CPU seconds are what it takes on an idle core, whatever else the
machine runs (wall seconds on a loaded machine are inflated by the load). ``compile_s`` is the
evaluation's own record of it.

    python benchmarks/compile_breakdown.py [--roads scores32,scores64,dense,dense-own,dense-small] [--repeats 3]

With ``--repeats N`` each road runs N times (each a fresh process, an empty cache) and the run of
median compile CPU seconds is reported (a loaded machine moves single runs by 10-30%).

Writes benchmarks/results/compile_breakdown.md (machine line, load).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ROADS = ("scores32", "scores64", "dense", "dense-own", "dense-small")
_ENV = {"dense": {"RBENCH_GEMM": "tile"}, "dense-own": {"RBENCH_GEMM": "own"}, "dense-small": {"RBENCH_FUSED_MIN_SCORES": str(10**12)}}


class _Table:
    """A ranker of its own scores, looked up in a fixed table (query row x pool index)."""

    name, version, config = "table", "0", {}

    def __init__(self, table):
        self.table = table

    def fit(self, task):
        return None

    def index(self, pool):
        return None

    def score(self, queries, candidates):
        import numpy as np

        rows = np.array([int(str(i)[1:]) for i in queries.ids])
        return self.table[rows][:, candidates] if candidates.ndim == 1 else \
            np.take_along_axis(self.table[rows], candidates, axis=1)


def child(road: str) -> None:
    """One road's scan in this (fresh) process; prints its compile events and compile_s as JSON."""
    import numpy as np
    from numba import types
    from numba.core import event

    from benchmarks.engine_scale import _setup, _Stub
    from rbench.engine.scan import scan

    stack: list[list] = []
    kernels: list[dict] = []

    class Listener(event.Listener):
        def on_start(self, ev: event.Event) -> None:
            stack.append([ev.data, time.perf_counter(), time.thread_time(), 0.0, 0.0])

        def on_end(self, ev: event.Event) -> None:
            data, t0, c0, child_wall, child_cpu = stack.pop()
            wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
            if stack:
                stack[-1][3] += wall
                stack[-1][4] += cpu
            fn, arrays = data["dispatcher"].py_func, [a for a in data["args"] if isinstance(a, types.Array)]
            tag = f"[{arrays[0].dtype}{', read-only' if any(not a.mutable for a in arrays) else ''}]" if arrays else ""
            kernels.append({"kernel": f"{fn.__module__.rsplit('.', 1)[-1]}.{fn.__name__}{tag}", "depth": len(stack),
                            "args": ", ".join(str(a) for a in data["args"])[:120], "wall": wall,
                            "cpu": cpu, "cpu_own": cpu - child_cpu})

    event.register("numba:compile", Listener())
    rng = np.random.default_rng(0)
    n_pool, n_q, dim = 300, 5, 8
    emb = rng.standard_normal((n_pool, dim), dtype=np.float32)
    pool, queries = _setup(n_pool, n_q, emb)
    if road.startswith("scores"):
        ranker = _Table(rng.standard_normal((n_q, n_pool)).astype(np.float32 if road == "scores32" else np.float64))
    else:
        ranker = _Stub(emb, rng.standard_normal((n_q, dim), dtype=np.float32))
    c0, t0 = time.process_time(), time.perf_counter()
    res = scan(ranker, queries, pool, batch_size=3, chunk_size=128, topk=10)
    print(json.dumps({"road": road, "compile_s": res.timings["compile_s"], "wall_s": time.perf_counter() - t0,
                      "cpu_s": time.process_time() - c0, "kernels": kernels}))


def run_road(road: str) -> dict:
    """``child(road)`` in a fresh process with an empty numba cache."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if k not in ("RBENCH_GEMM", "RBENCH_FUSED", "RBENCH_FUSED_MIN_SCORES")}
        env.update({"NUMBA_CACHE_DIR": tmp, "RBENCH_FUSED_MIN_SCORES": "0", **_ENV.get(road, {})})
        done = subprocess.run([sys.executable, __file__, "--child", road], env=env, capture_output=True, text=True,
                              cwd=ROOT, timeout=3600)
    if done.returncode:
        raise SystemExit(done.stderr[-3000:])
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["compile_cpu_s"] = sum(k["cpu"] for k in out["kernels"] if k["depth"] == 0)  # (the kernels' compiles)
    return out


def report(rows: list[dict], command: str, load: tuple[str, str]) -> str:
    """The results file: per road its compile_s and each kernel compiled at the top (the kernels
    the engine calls; what they call is inside their seconds), then every compile of 0.5 CPU
    seconds or more of its own."""
    from benchmarks.machine import machine_line

    lines = ["# numba compile on an empty cache, per road", "", f"Command: `{command}`", "", machine_line(), "",
             f"Load (`uptime`): at the start {load[0]}; at the end {load[1]}", "",
             "compile_s: the evaluation's record (wall seconds; loading what the kernels need included, torch "
             "for the BLAS tiles). CPU s: the kernels' compiles, the compiling thread's CPU seconds (about what "
             "they take on an idle core; a busy sibling hyperthread still inflates them); wall s: as measured "
             "here under the load above.", "",
             "| road | compile_s (wall) | CPU s | every run's CPU s | kernels compiled (top level: CPU s, wall s) |",
             "|---|---|---|---|---|"]
    for r in rows:
        top = [k for k in r["kernels"] if k["depth"] == 0]
        top.sort(key=lambda k: -k["cpu"])
        names = "; ".join(f"`{k['kernel']}` {k['cpu']:.1f}, {k['wall']:.1f}" for k in top) or "none"
        runs = ", ".join(f"{c:.1f}" for c in r.get("runs", []))
        lines.append(f"| {r['road']} | {r['compile_s']:.1f} | {r['compile_cpu_s']:.1f} | {runs} | {names} |")
    lines += ["", "Compiles of >= 0.5 CPU s of their own (helpers compiled inside the kernels above):", "",
              "| road | kernel | depth | own CPU s | signature |", "|---|---|---|---|---|"]
    for r in rows:
        for k in sorted(r["kernels"], key=lambda k: -k["cpu_own"]):
            if k["cpu_own"] >= 0.5:
                lines.append(f"| {r['road']} | `{k['kernel']}` | {k['depth']} | {k['cpu_own']:.1f} | {k['args']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--roads", default=",".join(ROADS))
    ap.add_argument("--repeats", type=int, default=1, help="runs of each road (the median one is reported)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "compile_breakdown.md")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child)
        return
    from benchmarks.machine import load_now
    from rbench.core.atomic import atomic_write_text

    start = load_now()
    rows = []
    for road in args.roads.split(","):
        runs = []
        for _ in range(args.repeats):
            runs.append(run_road(road))
            print(json.dumps({k: v for k, v in runs[-1].items() if k != "kernels"}), flush=True)
        runs.sort(key=lambda r: r["compile_cpu_s"])
        rows.append({**runs[len(runs) // 2], "runs": [r["compile_cpu_s"] for r in runs]})
    text = report(rows, " ".join(["python benchmarks/compile_breakdown.py", *sys.argv[1:]]), (start, load_now()))
    atomic_write_text(args.out, text)
    print(text)


if __name__ == "__main__":
    main()
