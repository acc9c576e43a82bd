"""A fresh install's first runs: wall time of `rbench run` on an empty numba cache, with the
engine's small-scan rule (scans below rbench.engine.fused.SMALL_SCAN scores on the numpy passes,
nothing compiled) against the kernel compiled for every scan (RBENCH_FUSED_MIN_SCORES=0, what
rbench did before the rule).

    python benchmarks/cold_start.py [--rankers pop,bm25] [--repeats 3]

Each run is a fresh process with its own empty NUMBA_CACHE_DIR and RBENCH_HOME; the wall time
includes the interpreter's start, loading ml-100k from RecBole and the record's compile_s. The
process's CPU seconds are measured beside it: on a loaded machine the wall time grows with the
load, its CPU time much less (a compile is one thread's work). Writes benchmarks/results/cold_start.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _children_cpu() -> float:
    """User + system CPU seconds of this process's finished children so far."""
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def cold_run(ranker: str, task: str, floor: str | None) -> tuple[float, float, float]:
    """(wall s, the record's compile_s, CPU s) of one `rbench run` on an empty numba cache."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if k != "RBENCH_FUSED_MIN_SCORES"}
        env.update(NUMBA_CACHE_DIR=str(Path(tmp) / "numba"), RBENCH_HOME=str(Path(tmp) / "home"))
        if floor is not None:
            env["RBENCH_FUSED_MIN_SCORES"] = floor
        t0, c0 = time.perf_counter(), _children_cpu()
        done = subprocess.run([sys.executable, "-m", "rbench.cli", "run", "-r", ranker, "-t", task, "--no-write",
                               "--json", "-q"], env=env, capture_output=True, text=True, cwd=ROOT, timeout=1800)
        wall, cpu = time.perf_counter() - t0, _children_cpu() - c0
    if done.returncode:
        raise SystemExit(done.stderr[-2000:])
    rec = json.loads(done.stdout)
    rec = rec[0] if isinstance(rec, list) else rec
    return wall, float(rec["timings"]["compile_s"]), cpu


def main() -> None:
    from rbench.core.atomic import atomic_write_text

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rankers", default="pop,bm25")
    ap.add_argument("--task", default="ml-100k")
    ap.add_argument("--repeats", type=int, default=3, help="cold runs per cell with the rule (the old way: 1)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "cold_start.md")
    args = ap.parse_args()
    from benchmarks.machine import load_now, machine_line  # (CPU, vector ISA, BLAS kernel, threads)

    load = [load_now()]
    rows = []
    for ranker in args.rankers.split(","):
        new = [cold_run(ranker, args.task, None) for _ in range(args.repeats)]
        old = cold_run(ranker, args.task, "0")
        rows.append((ranker, statistics.median(w for w, _, _ in new), statistics.median(c for _, c, _ in new),
                     *old, len(new)))
        print(rows[-1], flush=True)
    load.append(load_now())

    lines = [f"# Cold start: `rbench run` on an empty numba cache ({args.task})", "", machine_line(), "",
             f"`python benchmarks/cold_start.py {' '.join(sys.argv[1:])}`".replace(" `", "`"), "",
             f"{os.cpu_count()} logical CPUs; each run a fresh process, empty NUMBA_CACHE_DIR and RBENCH_HOME; wall time "
             "from the process start to its exit (median of the runs with the rule; one run of the old way); CPU: "
             "the run's process's user + system seconds.", "",
             f"Load (`uptime`): at the start {load[0]}; at the end {load[1]}", "",
             "| ranker | wall, small scans on numpy (s) | its compile_s | wall, kernel compiled (s) | its compile_s | "
             "its CPU s | runs |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r} | {w:.1f} | {c:.2f} | {ow:.1f} | {oc:.1f} | {ocpu:.1f} | {n} + 1 |"
              for r, w, c, ow, oc, ocpu, n in rows]
    atomic_write_text(args.out, "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
