"""SASRec on ml-100k: seconds per RecBole training epoch, and rbench's full-ranking time.

Each setting runs in a fresh subprocess (its own allocator settings and peak RSS), training
SASRec (RecBole defaults, history window 20, CE over all items) for ``--epochs`` epochs with
early stopping off, then scoring the 943 test users against all 1,682 items through the engine.
Settings: the default glibc allocator, and ``MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1e11``
(keeps freed memory in the process: on these VMs fresh pages are expensive to fault in).

Usage:
    python benchmarks/sasrec_epoch.py [--epochs 2] [--settings default,malloc]
Prints a rich table and writes benchmarks/results/sasrec_epoch.md. Heavy (minutes): run it under
``flock /tmp/rbench-heavy.lock`` on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SETTINGS = {
    "default": {},
    "malloc": {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": "100000000000"},
}


def worker(epochs: int) -> dict:
    """One measurement, in this process."""
    import resource

    import torch

    from rbench.api import RunContext
    from rbench.engine.metrics import MEASURES, aggregate, per_query
    from rbench.engine.scan import scan
    from rbench.tasks.registry import load_task
    from rbench_rankers.recbole import SASRecOptions, SASRecRanker

    task = load_task("ml-100k", {}, seed=0)
    cache = Path(tempfile.mkdtemp(prefix="sasrec-bench-"))
    opts = SASRecOptions(epochs=epochs, stopping_step=epochs + 1, reuse=False)
    r = SASRecRanker(opts, RunContext(cache_dir=cache, seed=0, show_progress=False))
    t0 = time.perf_counter()
    r.fit(task)
    fit_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    res = scan(r, task.test, task.pool)
    score_s = time.perf_counter() - t0
    m = aggregate(per_query(res.ranks, task.test.grades, MEASURES))
    return {"epochs": r.info["epochs_run"], "train_s": r.info["train_s"], "s_per_epoch": r.info["s_per_epoch"],
            "fit_s": fit_s, "score_s": score_s, "index_s": res.timings.get("index_s", 0.0),
            "train_rows": r.info["data_train_rows"], "n_queries": len(task.test), "pool": len(task.pool),
            "MRR": m["RR"], "nDCG@10": m["nDCG@10"], "threads": torch.get_num_threads(),
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--settings", default="default,malloc")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print("RESULT " + json.dumps(worker(args.epochs)), flush=True)
        return

    from rich.table import Table

    from rbench.core.console import console as make_console

    results = {}
    for name in args.settings.split(","):
        env = {**os.environ, **SETTINGS[name]}
        env.setdefault("RBENCH_HOME", tempfile.mkdtemp(prefix="rbench-bench-"))
        out = subprocess.run([sys.executable, __file__, "--worker", "--epochs", str(args.epochs)], env=env,
                             capture_output=True, text=True, check=False)
        line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
        if line is None:
            sys.stderr.write(out.stderr[-3000:])
            raise SystemExit(f"setting {name!r} failed")
        results[name] = json.loads(line[len("RESULT "):])
        print(f"{name}: {results[name]}", flush=True)

    first = next(iter(results.values()))
    title = (f"SASRec (RecBole defaults, window 20) on ml-100k: {first['train_rows']:,} training rows, "
             f"{first['n_queries']} test queries x {first['pool']:,} items, {first['threads']} torch threads")
    cols = ("setting", "epochs", "s / epoch", "fit s", "score s (engine)", "test MRR", "test nDCG@10", "peak RSS GB")
    t = Table(title=title)
    for c in cols:
        t.add_column(c, justify="left" if c == "setting" else "right")
    from benchmarks.machine import machine_line  # (CPU, vector ISA, BLAS kernel, threads)

    md = ["# SASRec training epoch and scoring time\n", machine_line() + "\n",
          f"{title}; {platform.machine()}, {os.cpu_count()} CPUs (shared; other jobs may run). "
          f"Command: `python benchmarks/sasrec_epoch.py --epochs {args.epochs} --settings {args.settings}`. "
          "`s / epoch` includes RecBole's validation pass after each epoch; `fit s` adds writing RecBole's "
          "input files and building its dataset; `score s` is rbench's full ranking of every test user "
          "(encode queries + GEMM + exact ranks + top-100). Metrics after only these few epochs are not "
          "baseline results.\n",
          "| " + " | ".join(cols) + " |", "|---|" + "---:|" * (len(cols) - 1)]
    for name, r in results.items():
        cells = (name, str(r["epochs"]), f"{r['s_per_epoch']:.1f}", f"{r['fit_s']:.1f}", f"{r['score_s']:.2f}",
                 f"{100 * r['MRR']:.2f}", f"{100 * r['nDCG@10']:.2f}", f"{r['peak_rss_gb']:.2f}")
        t.add_row(*cells)
        md.append("| " + " | ".join(cells) + " |")
    md.append("\n`malloc` = `MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=100000000000`.")
    make_console(markup=True).print(t)
    path = ROOT / "benchmarks" / "results" / "sasrec_epoch.md"
    from rbench.core.atomic import atomic_write_text

    atomic_write_text(path, "\n".join(md) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
