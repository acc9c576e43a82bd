"""LRanker training throughput: optimiser steps/s, the share of step time the loop waits for data,
peak memory -- with the DataLoader pipeline at several worker counts, in one process.

Each setting trains a fresh model for ``--warmup`` + ``--steps`` steps from the same seed (the
warm-up steps start the loader's workers and fault in the first buffers; they are not counted),
settings are interleaved over ``--repeats`` rounds and the medians are reported. ``workers=0``
builds every step inside the training loop: the reference the loader is measured against.

Usage (heavy: run under the machine-wide lock):
    flock /tmp/rbench-heavy.lock python benchmarks/lranker_train_throughput.py --set preset=cpu
    python benchmarks/lranker_train_throughput.py --task ml-100k --steps 8 --workers 0 1 2 --set preset=cpu
Prints a rich table and writes benchmarks/results/lranker_train_throughput.md.
"""

from __future__ import annotations

import argparse
import platform
import resource
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def peak_rss_mib() -> float:
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib / 1024 if sys.platform != "darwin" else kib / 2**20


def prepare_training(ranker, data, seed: int):
    """LRanker's ``fit`` set-up without the training: the model, the pool's base vectors, the
    fitted aggregator with the projector attached, LoRA made trainable, and the partition sampler
    (None without ``global_info``). Shared with benchmarks/lranker_paper_scale.py."""
    import torch

    from rbench_rankers.lranker.train import PartitionSampler

    model = ranker._ensure_model()
    cfg = ranker.cfg
    base = ranker._base_vectors(data.fit_pool)
    ranker._agg.fit(base, cfg.pca_dim, seed)
    torch.manual_seed(seed)
    model.attach_projector(ranker._agg.slot_dim(base.shape[1]))
    if cfg.lora:
        model.make_trainable()
    sampler = PartitionSampler(ranker._agg, base, cfg.n_partitions, seed, data.train.candidates,
                               cfg.partition_sets) if cfg.global_info else None
    return model, base, sampler


def run_setting(data, sets: dict, workers: int, steps: int, warmup: int, seed: int) -> dict:
    """Train ``warmup + steps`` steps; time only the last ``steps`` (via the report's counters)."""
    import dataclasses

    import torch

    from rbench.api import RunContext
    from rbench.core import paths
    from rbench.rankers import make_ranker
    from rbench_rankers.lranker.train import train

    ranker = make_ranker("lranker", {**sets, "loader_workers": workers}, RunContext(cache_dir=paths.cache_dir(), seed=seed))
    cfg = ranker.cfg
    model, base, sampler = prepare_training(ranker, data, seed)
    out = {}
    for phase, n in (("warmup", warmup), ("timed", steps)):
        run_cfg = dataclasses.replace(cfg, max_steps=n, eval_every=0, epochs=1, warmup_ratio=0.0)
        model.cfg = run_cfg
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        rep = train(model, run_cfg, data.train, base, sampler, seed, pool_texts=data.fit_pool.texts)
        out[phase] = (time.perf_counter() - t0, rep)
    wall, rep = out["timed"]
    return {"workers": workers, "steps_per_s": rep.steps / wall, "queries_per_s": rep.examples_seen / wall,
            "warmup_s": out["warmup"][0],
            "wait_share": rep.data_wait_s / wall, "step_s": rep.step_s / max(1, rep.steps),
            "candidates": rep.candidates_per_step,
            "gpu_mib": torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else None}


def show_table(title: str, cols: tuple[str, ...], rows: list[list[str]]):
    """Print ``rows`` as a rich table; returns (the console, the same table as Markdown lines)."""
    from rich.table import Table

    from rbench.core.console import console as make_console

    table = Table(title=title)
    for c in cols:
        table.add_column(c, justify="right")
    for cells in rows:
        table.add_row(*cells)
    console = make_console(markup=True)
    console.print(table)
    return console, ["| " + " | ".join(cols) + " |", "|" + "---:|" * len(cols),
                     *("| " + " | ".join(cells) + " |" for cells in rows)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="ml-100k")
    ap.add_argument("--steps", type=int, default=8, help="timed optimiser steps per setting and repeat")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--set", dest="sets", action="append", default=[], help="ranker option key=value")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "lranker_train_throughput.md")
    args = ap.parse_args(argv)

    import torch

    from rbench.core.config import parse_assignments
    from rbench.tasks.registry import load_task

    sets = parse_assignments(args.sets)
    data = load_task(args.task, {}, seed=args.seed)
    runs: dict[int, list[dict]] = {w: [] for w in args.workers}
    for _ in range(args.repeats):  # interleaved: machine-load drift hits every setting alike
        for w in args.workers:
            runs[w].append(run_setting(data, sets, w, args.steps, args.warmup, args.seed))
    med = {w: {k: statistics.median(r[k] for r in rs) if rs[0][k] is not None else None for k in rs[0]}
           for w, rs in runs.items()}
    ref = med[args.workers[0]]["steps_per_s"]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    title = f"LRanker training throughput on {args.task} ({device}; medians of {args.repeats} x {args.steps} steps)"
    cols = ("loader workers", "steps/s", "queries/s", "s/step (compute)", "data-wait share", "candidates/step",
            f"vs workers={args.workers[0]}", "GPU peak MiB")
    rows = [[str(w), f"{m['steps_per_s']:.3f}", f"{m['queries_per_s']:.2f}", f"{m['step_s']:.2f}",
             f"{100 * m['wait_share']:.1f}%", f"{m['candidates']:.0f}", f"{m['steps_per_s'] / ref:.2f}x",
             f"{m['gpu_mib']:.0f}" if m["gpu_mib"] is not None else "-"] for w, m in med.items()]
    console, lines = show_table(title, cols, rows)
    summary = f"peak RSS {peak_rss_mib():,.0f} MiB; {platform.machine()}, torch threads {torch.get_num_threads()}"
    console.print(summary)
    opts = " ".join(f"--set {k}={v}" for k, v in sets.items())
    md = [f"# LRanker training throughput ({args.task}, {device})", "",
          f"Command: `python benchmarks/lranker_train_throughput.py --task {args.task} --steps {args.steps} "
          f"--repeats {args.repeats} --workers {' '.join(map(str, args.workers))} {opts}`", "",
          "Data-wait share = time the training loop waited for the next step's inputs / wall time of the "
          "timed steps (goal <= 5%). workers=0 builds each step (negatives, masks, partition centroids, "
          "tokens) inside the loop.", "", *lines, "", f"- {summary}", ""]
    from rbench.core.atomic import atomic_write_text

    atomic_write_text(args.out, "\n".join(md))
    console.print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
