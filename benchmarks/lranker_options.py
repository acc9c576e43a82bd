"""LRanker's training steps/s under each value of one option (``--option compile --values off on``,
``--option length_buckets --values 1 4``), and the warm-up steps' wall time (a compile lands there).

Each setting trains a fresh model from the same seed for ``--warmup`` + ``--steps`` optimiser steps
through the real training loop (``benchmarks/lranker_train_throughput.run_setting``); only the
last ``--steps`` are timed. Settings are interleaved over ``--repeats`` rounds, medians reported,
the first value the reference. (``compile=on``: inductor compiles C++ on the CPU, a compiler must
be installed, and CUDA kernels on a GPU; the device is printed.)

Usage (heavy: run under the machine-wide lock):
    flock /tmp/heavy.lock python benchmarks/lranker_options.py --option compile --values off on --set preset=cpu
    flock /tmp/heavy.lock python benchmarks/lranker_options.py --option length_buckets --values 1 4 --set preset=cpu
Prints a rich table and writes benchmarks/results/lranker_options-OPTION.md.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.lranker_train_throughput import peak_rss_mib, run_setting, show_table  # noqa: E402  (the shared loop)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--option", required=True, help="the ranker option compared (e.g. compile, length_buckets)")
    ap.add_argument("--values", nargs="+", required=True, help="its values; the first is the reference")
    ap.add_argument("--task", default="ml-100k")
    ap.add_argument("--steps", type=int, default=3, help="timed optimiser steps per setting and repeat")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first (they include the compile)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--set", dest="sets", action="append", default=[], help="ranker option key=value")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="default benchmarks/results/lranker_options-OPTION.md")
    args = ap.parse_args(argv)
    out = args.out or ROOT / "benchmarks" / "results" / f"lranker_options-{args.option}.md"

    import torch

    from rbench.core.atomic import atomic_write_text
    from rbench.core.config import parse_assignments
    from rbench.tasks.registry import load_task

    sets = parse_assignments(args.sets)
    data = load_task(args.task, {}, seed=args.seed)
    modes = list(args.values)
    runs: dict[str, list[dict]] = {m: [] for m in modes}
    for _ in range(args.repeats):  # interleaved: machine-load drift hits every setting alike
        for m in modes:
            runs[m].append(run_setting(data, {**sets, args.option: m}, 0, args.steps, args.warmup, args.seed))
    med = {m: {k: statistics.median(r[k] for r in rs) for k in ("steps_per_s", "step_s", "warmup_s")}
           for m, rs in runs.items()}
    device = "cuda" if torch.cuda.is_available() else "cpu"
    card = torch.cuda.get_device_name() if device == "cuda" else platform.processor() or platform.machine()
    ref = modes[0]
    cols = (args.option, "steps/s", "s/step (compute)", f"warm-up ({args.warmup} steps) s", f"vs {ref}")
    rows = [[m, f"{r['steps_per_s']:.3f}", f"{r['step_s']:.2f}", f"{r['warmup_s']:.1f}",
             f"{r['steps_per_s'] / med[ref]['steps_per_s']:.2f}x"] for m, r in med.items()]
    console, lines = show_table(f"LRanker {args.option} on {args.task} ({device}: {card}; medians of {args.repeats} x "
                                f"{args.steps} steps)", cols, rows)
    summary = f"peak RSS {peak_rss_mib():,.0f} MiB; torch {torch.__version__}, threads {torch.get_num_threads()}"
    console.print(summary)
    opts = " ".join(f"--set {k}={v}" for k, v in sets.items())
    md = [f"# LRanker {args.option} ({args.task}, {device}: {card})", "",
          f"Command: `python benchmarks/lranker_options.py --option {args.option} --values {' '.join(modes)} "
          f"--task {args.task} --steps {args.steps} --warmup {args.warmup} --repeats {args.repeats} {opts}`", "",
          "Each setting trains a fresh model from the same seed through the real training loop; the warm-up "
          "steps (untimed here, their wall time shown) include any compile; steps/s over the timed steps, "
          "medians over interleaved repeats.", "", *lines, "", f"- {summary}", ""]
    atomic_write_text(out, "\n".join(md))
    console.print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
