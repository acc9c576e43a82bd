"""Dense encoder throughput: texts/s of all-MiniLM-L6-v2 on ml-100k item texts (CPU, fp32).

Three ways candidates get their vectors in rbench:
- ``st``: the model's own sentence-transformers pipeline (what ``--ranker dense`` uses by default);
- ``mean``: rbench's transformers path (masked mean + L2 norm; what ``contriever`` does, plus norm);
- ``cached``: the second run over the same pool, served memory-mapped from the embedding cache.

Usage:
    python benchmarks/dense_throughput.py [--batch-size 64] [--repeats 2]
Prints a rich table and writes benchmarks/results/dense_throughput.md. Heavy: run it under
``flock /tmp/rbench-heavy.lock`` on a shared machine.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3, help="timed passes over the texts per path")
    args = ap.parse_args()

    import torch
    from rich.table import Table

    from rbench.api import RunContext
    from rbench.core.console import console as make_console
    from rbench.tasks.registry import load_task
    from rbench_rankers.dense import DenseOptions, DenseRanker

    os.environ.setdefault("RBENCH_HOME", tempfile.mkdtemp(prefix="rbench-bench-"))
    pool = load_task("ml-100k", {}, seed=0).pool
    texts = pool.text_batch(np.arange(len(pool)))
    cache = Path(tempfile.mkdtemp(prefix="dense-bench-"))
    ctx = RunContext(cache_dir=cache, seed=0, show_progress=False)
    paths = {"st": DenseRanker(DenseOptions(batch_size=args.batch_size), ctx),
             "mean": DenseRanker(DenseOptions(batch_size=args.batch_size, pooling="mean", normalize=True,
                                              max_length=256), ctx)}
    times: dict[str, list[float]] = {k: [] for k in paths}
    for r in paths.values():
        r.encoder()(texts[: args.batch_size])  # warm-up
    for _ in range(args.repeats):  # interleaved, so both paths see the same machine load
        for label, r in paths.items():
            times[label].append(_timed(r.encoder(), texts))
    enc = paths["st"].encoder()
    ids = enc._model.tokenizer(texts, truncation=True, max_length=enc.max_length)["input_ids"]
    mean_tokens = float(np.mean([len(t) for t in ids]))
    paths["st"].encode_pool(pool)  # fill the cache
    t0 = time.perf_counter()
    again = DenseRanker(DenseOptions(batch_size=args.batch_size), ctx)
    again.encoder()
    t_load = time.perf_counter()
    again.encode_pool(pool)
    hit = time.perf_counter() - t_load
    assert again.info["pool_cached"]
    model_load = t_load - t0
    rows = [(label, len(texts), mean_tokens, min(ts), float(np.median(ts))) for label, ts in times.items()]
    rows.append(("cached", len(texts), mean_tokens, hit, hit))

    title = (f"all-MiniLM-L6-v2 on ml-100k item texts, batch {args.batch_size}, fp32, "
             f"torch threads {torch.get_num_threads()}")
    t = Table(title=title)
    for col in ("path", "texts", "mean tokens", "best s", "texts/s (best)", "texts/s (median)"):
        t.add_column(col, justify="right" if col != "path" else "left")
    for label, n, tok, best, med in rows:
        t.add_row(label, str(n), f"{tok:.1f}", f"{best:.2f}", f"{n / max(best, 1e-9):,.0f}",
                  f"{n / max(med, 1e-9):,.0f}")
    make_console(markup=True).print(t)
    print(f"model load (warm): {model_load:.2f}s")
    from benchmarks.machine import machine_line  # (CPU, vector ISA, BLAS kernel, threads)

    md = ["# Dense encoder throughput\n", machine_line() + "\n", f"{title}; {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs (shared; other jobs may run). Command: "
          f"`python benchmarks/dense_throughput.py --batch-size {args.batch_size} --repeats {args.repeats}`.\n",
          "| path | texts | mean tokens | best s | texts/s (best) | texts/s (median) |",
          "|---|---:|---:|---:|---:|---:|"]
    md += [f"| {label} | {n} | {tok:.1f} | {best:.2f} | {n / max(best, 1e-9):,.0f} | {n / max(med, 1e-9):,.0f} |"
           for label, n, tok, best, med in rows]
    md.append("\n`st` = the model's sentence-transformers pipeline; `mean` = rbench's transformers path "
              "(masked mean + L2 norm, same vectors); `cached` = the second run over the same pool "
              "(memory-mapped embedding cache; no encoding).")
    md.append(f"\nModel load (second time, files in the page cache): {model_load:.2f} s.")
    out = ROOT / "benchmarks" / "results" / "dense_throughput.md"
    from rbench.core.atomic import atomic_write_text

    atomic_write_text(out, "\n".join(md) + "\n")
    print(f"wrote {out}")


def _timed(enc, texts: list[str]) -> float:
    t0 = time.perf_counter()
    enc(texts)
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
