"""LRanker with and without ``torch.compile`` (``--set compile=on``): training steps/s after the
compile, and what the compile itself costs (the warm-up steps' wall time).

Each setting trains a fresh model from the same seed for ``--warmup`` + ``--steps`` optimiser steps
through the real training loop (``benchmarks/lranker_train_throughput.run_setting``); only the
last ``--steps`` are timed. Settings are interleaved over ``--repeats`` rounds, medians reported,
``compile=off`` the reference. Inductor compiles C++ on the CPU (a compiler must be installed) and
CUDA kernels on a GPU; the device is printed.

Usage (heavy: run under the machine-wide lock):
    flock /tmp/heavy.lock python benchmarks/lranker_compile.py --set preset=cpu
Prints a rich table and writes benchmarks/results/lranker_compile.md.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.lranker_train_throughput import peak_rss_mib, run_setting  # noqa: E402  (the shared loop)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="ml-100k")
    ap.add_argument("--steps", type=int, default=3, help="timed optimiser steps per setting and repeat")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first (they include the compile)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--set", dest="sets", action="append", default=[], help="ranker option key=value")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "lranker_compile.md")
    args = ap.parse_args(argv)

    import torch
    from rich.table import Table

    from rbench.core.atomic import atomic_write_text
    from rbench.core.config import parse_assignments
    from rbench.core.console import console as make_console
    from rbench.tasks.registry import load_task

    sets = parse_assignments(args.sets)
    data = load_task(args.task, {}, seed=args.seed)
    modes = ("off", "on")
    runs: dict[str, list[dict]] = {m: [] for m in modes}
    for _ in range(args.repeats):  # interleaved: machine-load drift hits both settings alike
        for m in modes:
            runs[m].append(run_setting(data, {**sets, "compile": m}, 0, args.steps, args.warmup, args.seed))
    med = {m: {k: statistics.median(r[k] for r in rs) for k in ("steps_per_s", "step_s", "warmup_s")}
           for m, rs in runs.items()}
    device = "cuda" if torch.cuda.is_available() else "cpu"
    card = torch.cuda.get_device_name() if device == "cuda" else platform.processor() or platform.machine()
    cols = ("compile", "steps/s", "s/step (compute)", f"warm-up ({args.warmup} steps, incl. compile) s", "vs off")
    table = Table(title=f"LRanker torch.compile on {args.task} ({device}: {card}; medians of {args.repeats} x "
                        f"{args.steps} steps)")
    for c in cols:
        table.add_column(c, justify="right")
    lines = ["| " + " | ".join(cols) + " |", "|" + "---:|" * len(cols)]
    for m in modes:
        r = med[m]
        cells = [m, f"{r['steps_per_s']:.3f}", f"{r['step_s']:.2f}", f"{r['warmup_s']:.1f}",
                 f"{r['steps_per_s'] / med['off']['steps_per_s']:.2f}x"]
        table.add_row(*cells)
        lines.append("| " + " | ".join(cells) + " |")
    console = make_console(markup=True)
    console.print(table)
    summary = f"peak RSS {peak_rss_mib():,.0f} MiB; torch {torch.__version__}, threads {torch.get_num_threads()}"
    console.print(summary)
    opts = " ".join(f"--set {k}={v}" for k, v in sets.items())
    md = [f"# LRanker torch.compile ({args.task}, {device}: {card})", "",
          f"Command: `python benchmarks/lranker_compile.py --task {args.task} --steps {args.steps} --warmup "
          f"{args.warmup} --repeats {args.repeats} {opts}`", "",
          "Each setting trains a fresh model from the same seed through the real training loop; the warm-up "
          "steps (untimed here, their wall time shown) include the compile; steps/s over the timed steps, "
          "medians over interleaved repeats.", "", *lines, "", f"- {summary}", ""]
    atomic_write_text(args.out, "\n".join(md))
    console.print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
