"""A fresh install's first runs: wall time of `rbench run` on an empty numba cache, with the
engine's small-scan rule (scans below rbench.engine.fused.SMALL_SCAN scores on the numpy passes,
nothing compiled) against the kernel compiled for every scan (RBENCH_FUSED_MIN_SCORES=0, what
rbench did before the rule).

    python benchmarks/cold_start.py [--rankers pop,bm25] [--repeats 3]

Each run is a fresh process with its own empty NUMBA_CACHE_DIR and RBENCH_HOME; the wall time
includes the interpreter's start, loading ml-100k from RecBole and the record's compile_s.
Writes benchmarks/results/cold_start.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def cold_run(ranker: str, task: str, floor: str | None) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if k != "RBENCH_FUSED_MIN_SCORES"}
        env.update(NUMBA_CACHE_DIR=str(Path(tmp) / "numba"), RBENCH_HOME=str(Path(tmp) / "home"))
        if floor is not None:
            env["RBENCH_FUSED_MIN_SCORES"] = floor
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "rbench.cli", "run", "-r", ranker, "-t", task, "--no-write",
                               "--json", "-q"], env=env, capture_output=True, text=True, cwd=ROOT, timeout=1800)
        wall = time.perf_counter() - t0
    if done.returncode:
        raise SystemExit(done.stderr[-2000:])
    rec = json.loads(done.stdout)
    rec = rec[0] if isinstance(rec, list) else rec
    return wall, float(rec["timings"]["compile_s"])


def main() -> None:
    from rbench.core.atomic import atomic_write_text

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rankers", default="pop,bm25")
    ap.add_argument("--task", default="ml-100k")
    ap.add_argument("--repeats", type=int, default=3, help="cold runs per cell with the rule (the old way: 1)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "cold_start.md")
    args = ap.parse_args()
    rows = []
    for ranker in args.rankers.split(","):
        new = [cold_run(ranker, args.task, None) for _ in range(args.repeats)]
        old = [cold_run(ranker, args.task, "0")]
        rows.append((ranker, statistics.median(w for w, _ in new), statistics.median(c for _, c in new),
                     old[0][0], old[0][1], len(new)))
        print(rows[-1], flush=True)
    from benchmarks.machine import machine_line  # (CPU, vector ISA, BLAS kernel, threads)

    lines = [f"# Cold start: `rbench run` on an empty numba cache ({args.task})", "", machine_line(), "",
             f"`python benchmarks/cold_start.py {' '.join(sys.argv[1:])}`".replace(" `", "`"), "",
             f"{os.cpu_count()} logical CPUs; each run a fresh process, empty NUMBA_CACHE_DIR and RBENCH_HOME; wall time "
             "from the process start to its exit (median of the runs with the rule; one run of the old way).", "",
             "| ranker | wall, small scans on numpy (s) | its compile_s | wall, kernel compiled (s) | its compile_s | runs |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r} | {w:.1f} | {c:.2f} | {ow:.1f} | {oc:.1f} | {n} + 1 |" for r, w, c, ow, oc, n in rows]
    atomic_write_text(args.out, "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
