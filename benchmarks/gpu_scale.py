"""Exact evaluation at Rec-Clothing's scale on one GPU: the torch scan (``--scan cuda``,
``rbench.engine.torch_scan``) over the paper's largest test set, 185,925 queries x 6,805,462
candidates, at the LLM backbone's width d = 1024 (Qwen3-0.6B's hidden size): about 1.3e15
multiply-adds, estimated at ~10 h for the CPU engine on two cores (24.3 ms/query measured at
d = 128 on a 7M pool, scaled to d = 1024).

Random fp32 vectors (the cost does not depend on the values) with ``--twins`` pool rows copied
from positives (exact ties a low-precision scan must certify), one positive per query, top-100,
exact pessimistic ranks; the pool lives in host memory (28 GB at full size) and streams to the
device chunk by chunk. Each precision of ``--precisions`` is timed as one whole
``scan_dense_torch`` call (host reads, transfers, GEMMs, counts, top-k, the certified
re-scoring), after a warm-up on a small slice. Then, on ``--check-queries`` sampled queries, the
CPU engine over the fp32 reference scores (``torch_scan.reference_scorer``, computed on the
device) is the judge: every certified precision must give its ranks, counts, top-k indices and
top-k scores bit for bit (the script exits 1 otherwise); the plain precisions' differences from it
are counted (fp32 GEMMs sum in another order: near-ties within fp32 rounding may order otherwise).

    python benchmarks/gpu_scale.py [--queries 185925] [--pool 6805462] [--dim 1024] \\
        [--precisions fp32,bf16-certified,tf32-certified] [--check-queries 16]
    python benchmarks/gpu_scale.py --device cpu --queries 300 --pool 20000 --dim 64 \\
        --chunk-size 4096 --batch-size 128 --out /tmp/gpu_scale_cpu.md   # code-path check

Writes benchmarks/results/gpu_scale_certified.md on CUDA (or --out), naming the card. A run with
fewer queries than the full 185,925 also prints the full-scale time PROJECTED linearly in queries
(the pool is streamed once per run either way, the GEMM and the scan scale with queries).
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
FULL_QUERIES = 185_925


def make_data(args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray, Any, float]:
    """Pool and query vectors, one positive per query, ``--twins`` pool rows equal to positives."""
    import torch

    from rbench.api import Queries, Ragged

    torch.manual_seed(0)
    t0 = time.perf_counter()
    emb = torch.randn(args.pool, args.dim, dtype=torch.float32).numpy()  # multi-threaded fill
    qv = torch.randn(args.queries, args.dim, dtype=torch.float32).numpy()
    rng = np.random.default_rng(0)
    pos = rng.integers(0, args.pool, args.queries)
    if args.signal:  # the positive leans toward its query: it ranks high, as a trained model's does
        torch.from_numpy(emb).index_add_(0, torch.from_numpy(pos), torch.from_numpy(qv), alpha=args.signal)
    n_twins = min(args.twins, args.pool // 2)
    emb[rng.integers(0, args.pool, n_twins)] = emb[pos[rng.integers(0, args.queries, n_twins)]]
    offs = np.arange(args.queries + 1, dtype=np.int64)
    queries = Queries(ids=np.arange(args.queries).astype(str).astype(object), texts=[""] * args.queries,
                      positives=Ragged(offs, pos), grades=Ragged(offs.copy(), np.ones(args.queries)))
    return emb, qv, queries, time.perf_counter() - t0


def timed(emb: np.ndarray, qv: np.ndarray, queries: Any, precision: str, args: argparse.Namespace) -> tuple[Any, float, float]:
    """(result, wall seconds, peak GPU GiB) of one whole evaluation, after a warm-up on a slice."""
    import torch

    from rbench.api import Queries, Ragged
    from rbench.engine.torch_scan import scan_dense_torch

    kw = dict(topk=100, chunk_size=args.chunk_size, batch_size=args.batch_size, device=args.device,
              precision=precision)
    n_warm, warm_pool = min(1024, len(qv)), min(len(emb), 4 * args.chunk_size)
    w_offs = np.arange(n_warm + 1, dtype=np.int64)
    warm = Queries(ids=queries.ids[:n_warm], texts=[""] * n_warm,
                   positives=Ragged(w_offs, np.random.default_rng(1).integers(0, warm_pool, n_warm)),
                   grades=Ragged(w_offs.copy(), np.ones(n_warm)))
    scan_dense_torch(emb[:warm_pool], qv[:n_warm], warm, **kw)
    cuda = args.device == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    res = scan_dense_torch(emb, qv, queries, **kw)
    wall = time.perf_counter() - t0
    return res, wall, torch.cuda.max_memory_allocated() / 2**30 if cuda else float("nan")


def reference_check(emb: np.ndarray, qv: np.ndarray, queries: Any, results: dict[str, Any],
                    args: argparse.Namespace) -> tuple[dict[str, tuple[int, int]], float]:
    """{precision: (sampled queries whose ranks, counts or top-k indices differ from the fp32
    reference, those whose top-k scores differ)}."""
    from rbench.engine.scan import scan
    from rbench.engine.torch_scan import reference_scorer
    from tests.helpers import make_pool

    rows = np.sort(np.random.default_rng(2).choice(len(qv), min(args.check_queries, len(qv)), replace=False))
    sample = queries.take(rows)
    t0 = time.perf_counter()
    ref = scan(None, sample, make_pool(len(emb)), scorer=reference_scorer(emb, qv[rows], sample, args.device),
               topk=100, batch_size=len(rows), chunk_size=65_536)
    ref_s = time.perf_counter() - t0
    diff = {}
    for name, res in results.items():
        bad = ((res.ranks.values[rows] != ref.ranks.values) | (res.higher[rows] != ref.higher)
               | (res.equal[rows] != ref.equal) | (res.topk_index[rows] != ref.topk_index).any(axis=1))
        diff[name] = (int(bad.sum()), int((res.topk_score[rows] != ref.topk_score).any(axis=1).sum()))
    return diff, ref_s


def table(args: argparse.Namespace, runs: dict[str, tuple[Any, float, float]], diff: dict[str, tuple[int, int]], ref_s: float,
          gen_s: float) -> str:
    """The Markdown report: one row per precision, the card named in the title."""
    import torch

    dev = torch.cuda.get_device_name(0) if args.device == "cuda" else f"CPU {platform.processor() or platform.machine()}"
    macs = float(args.queries) * args.pool * args.dim
    scale = FULL_QUERIES / args.queries
    from benchmarks.machine import machine_line  # (CPU, vector ISA, BLAS kernel, threads)

    lines = [f"# Exact evaluation at Rec-Clothing's scale, fp32 and certified low precision ({dev})", "", machine_line(), "",
             f"torch {torch.__version__}; `python benchmarks/gpu_scale.py {' '.join(sys.argv[1:])}`".rstrip(), "",
             f"{args.queries:,} queries x {args.pool:,} candidates x d={args.dim} ({macs:.2e} multiply-adds), "
             f"positives += {args.signal} x query, {args.twins:,} pool rows copied from positives, top-100 and exact ranks; chunk {args.chunk_size:,}, "
             f"batch {args.batch_size:,}.", "",
             "| precision | wall (s) | TFLOP/s (whole call) | PROJECTION full 185,925 queries (s) | peak GPU memory (GiB) "
             "| entries re-scored in fp32 | queries whose rank differs from fp32 | "
             f"of {args.check_queries} sampled queries: ranks or top-k differ from the fp32 reference "
             "| top-k scores differ |",
             "|---|---|---|---|---|---|---|---|---|"]
    base = runs.get("fp32")
    for name, (res, wall, peak) in runs.items():
        moved = int((res.ranks.values != base[0].ranks.values).sum()) if base is not None else -1
        lines.append(f"| {name} | {wall:.1f} | {2 * macs / wall / 1e12:.1f} | {wall * scale:.0f} | {peak:.1f} "
                     f"| {int(res.timings.get('rescored', 0)):,} | {moved if moved >= 0 else 'n/a'} | {diff[name][0]} "
                     f"| {diff[name][1]} |")
    lines += ["", f"Vectors generated in {gen_s:.1f} s, the reference on the sample in {ref_s:.1f} s (neither timed "
              "above). Certified rows must show 0 sampled differences (the script fails otherwise); a plain fp32 "
              "row's are its GEMM's summation order: last-bit score differences, and near-ties ordered otherwise.", ""]
    return "\n".join(lines)


def main() -> int:
    import torch

    from rbench.core.atomic import atomic_write_text

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--queries", type=int, default=FULL_QUERIES)
    ap.add_argument("--pool", type=int, default=6_805_462)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--twins", type=int, default=1000, help="pool rows copied from positives' vectors (exact ties)")
    ap.add_argument("--signal", type=float, default=0.1,
                    help="positive vector += signal x its query's (0.1: positives near the top 0.1%%; 0: random "
                         "positives, the certified scans' worst case: a positive mid-distribution has the most "
                         "candidates within the bound of its score)")
    ap.add_argument("--chunk-size", type=int, default=131_072)
    ap.add_argument("--batch-size", type=int, default=16_384)
    ap.add_argument("--precisions", default="fp32,bf16-certified,tf32-certified")
    ap.add_argument("--check-queries", type=int, default=16, help="queries checked against the fp32 reference")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", type=Path, default=None, help="default on CUDA: benchmarks/results/gpu_scale_certified.md")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: nothing to measure (--device cpu for a code-path check)")
        return 0
    emb, qv, queries, gen_s = make_data(args)
    runs = {}
    for name in args.precisions.split(","):
        runs[name] = timed(emb, qv, queries, name, args)
        print(f"{name}: {runs[name][1]:.1f} s", flush=True)
    diff, ref_s = reference_check(emb, qv, queries, {k: v[0] for k, v in runs.items()}, args)
    text = table(args, runs, diff, ref_s, gen_s)
    out = args.out or (ROOT / "benchmarks" / "results" / "gpu_scale_certified.md" if args.device == "cuda" else None)
    if out is not None:
        atomic_write_text(out, text)
    print(text)
    failed = [k for k in runs if k.endswith("-certified") and any(diff[k])]
    if failed:
        print(f"FAILED: {', '.join(failed)} differ from the fp32 reference on sampled queries")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
