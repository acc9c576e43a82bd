"""Exact evaluation at Rec-Clothing's scale on one GPU: the torch scan (``--scan cuda``,
``rbench.engine.torch_scan``) over the paper's largest test set, 185,925 queries x 6,805,462
candidates, at the LLM backbone's width d = 1024 (Qwen3-0.6B's hidden size): about 2.6e15
multiply-adds, estimated at ~10 h for the CPU engine on two cores (24.3 ms/query measured at
d = 128 on a 7M pool, scaled to d = 1024).

Random fp32 vectors (the cost does not depend on the values), one positive per query, top-100,
exact pessimistic ranks; the pool lives in host memory (28 GB at full size) and streams to the
device chunk by chunk. The timed call is the whole ``evaluate_dense_torch`` (host reads of the
pool, device transfers, GEMMs, counts, top-k), after a warm-up on a small slice.

    python benchmarks/gpu_scale.py [--queries 185925] [--pool 6805462] [--dim 1024]

Writes benchmarks/results/gpu_scale.md (or --out). Needs CUDA (``--device cpu`` for a smoke test
at small sizes).
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    import torch

    from rbench.api import Queries, Ragged
    from rbench.core.atomic import atomic_write_text
    from rbench.engine.metrics import aggregate, per_query
    from rbench.engine.torch_scan import evaluate_dense_torch

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--queries", type=int, default=185_925)
    ap.add_argument("--pool", type=int, default=6_805_462)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--chunk-size", type=int, default=131_072)
    ap.add_argument("--batch-size", type=int, default=16_384)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "gpu_scale.md")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: nothing to measure")
        return 0
    torch.manual_seed(0)
    t0 = time.perf_counter()
    emb = torch.randn(args.pool, args.dim, dtype=torch.float32).numpy()  # multi-threaded fill, host memory
    qv = torch.randn(args.queries, args.dim, dtype=torch.float32).numpy()
    gen_s = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    offs = np.arange(args.queries + 1, dtype=np.int64)
    queries = Queries(ids=np.arange(args.queries).astype(str).astype(object), texts=[""] * args.queries,
                      positives=Ragged(offs, rng.integers(0, args.pool, args.queries)),
                      grades=Ragged(offs.copy(), np.ones(args.queries)))
    kw = dict(topk=100, chunk_size=args.chunk_size, batch_size=args.batch_size, device=args.device)
    n_warm, warm_pool = min(1024, args.queries), min(args.pool, 4 * args.chunk_size)
    w_offs = np.arange(n_warm + 1, dtype=np.int64)
    warm = Queries(ids=queries.ids[:n_warm], texts=[""] * n_warm, positives=Ragged(w_offs, rng.integers(0, warm_pool, n_warm)),
                   grades=Ragged(w_offs.copy(), np.ones(n_warm)))
    evaluate_dense_torch(emb[:warm_pool], qv[:n_warm], warm, **kw)
    if args.device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    res = evaluate_dense_torch(emb, qv, queries, **kw)
    wall = time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated() / 2**30 if args.device == "cuda" else float("nan")
    metrics = aggregate(per_query(res.ranks, queries.grades))
    flops = 2.0 * args.queries * args.pool * args.dim
    dev = torch.cuda.get_device_name(0) if args.device == "cuda" else platform.processor() or "cpu"
    lines = [
        f"# Exact evaluation at Rec-Clothing's scale on one GPU ({dev})", "",
        f"torch {torch.__version__}; `python benchmarks/gpu_scale.py {' '.join(sys.argv[1:])}`".rstrip(), "",
        "| queries | candidates | d | multiply-adds | wall (s) | TFLOP/s (fp32, whole call) | peak GPU memory (GiB) "
        "| host transfer (s) | positives ranked | MRR (random vectors) |",
        "|---|---|---|---|---|---|---|---|---|---|",
        f"| {args.queries:,} | {args.pool:,} | {args.dim} | {flops / 2:.2e} | {wall:.1f} | {flops / wall / 1e12:.1f} "
        f"| {peak:.1f} | {res.timings.get('transfer_s', float('nan')):.1f} | {len(res.ranks.values):,} "
        f"| {metrics.get('RR', float('nan')):.2e} |", "",
        f"Vectors generated in {gen_s:.1f} s (not timed). Chunk {args.chunk_size:,} candidates, batch "
        f"{args.batch_size:,} queries, fp32 (TF32 off), exact pessimistic ranks and top-100.", ""]
    text = "\n".join(lines)
    atomic_write_text(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
