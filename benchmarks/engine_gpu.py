"""The torch evaluation path (``rbench.engine.torch_scan``) against the CPU engine.

For each size (queries x candidates x d, synthetic standard-normal vectors, one positive a
query, a top-``--k``), in one process: the CPU engine (``scan`` with the dense scorer, its
numba GEMM and fused scan), the torch path on the CPU, and, when CUDA is available, the torch
path on the GPU in fp32, tf32 and bf16. Each setting is run once untimed (warm-up: numba's
compile, CUDA's context and cuBLAS handles) and then ``--repeats`` times; the table gives the
median wall time of a whole call (pool host -> device transfers included), queries/s, the
speed-up over the CPU engine measured in the same process, how many positives' ranks differ
from the engine's (exact count; fp32 on another GEMM differs only on near-ties, tf32/bf16
compute other scores) and the share of top-k indices that agree.

Usage:
    python benchmarks/engine_gpu.py                                    # GPU sizes (below)
    python benchmarks/engine_gpu.py --sizes 200x20000x64,200x50000x128 --repeats 3   # CPU-only sized
Sizes are QUERIESxCANDIDATESxD, comma-separated. Prints a rich table and writes
benchmarks/results/engine_gpu.md after every size (a run cut short keeps what it measured).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GPU_SIZES = "1000x100000x128,1000x1000000x128,1000x100000x1024,1000x1000000x1024"


def _vector_scorer():
    from rbench.engine.scorers import vector_scorer

    return vector_scorer


def _setup(n_q: int, n_pool: int, dim: int):
    from rbench.api import Pool, Queries, Ragged

    rng = np.random.default_rng(0)
    emb = rng.standard_normal((n_pool, dim), dtype=np.float32)
    qv = rng.standard_normal((n_q, dim), dtype=np.float32)
    pool = Pool(ids=np.arange(n_pool).astype(str).astype(object), texts=_NoTexts(n_pool), name="synthetic",
                fingerprint=f"synthetic-{n_pool}")
    offs = np.arange(n_q + 1, dtype=np.int64)
    queries = Queries(ids=np.array([f"q{i}" for i in range(n_q)], dtype=object), texts=[""] * n_q,
                      positives=Ragged(offs, rng.integers(0, n_pool, n_q)), grades=Ragged(offs.copy(), np.ones(n_q)))
    return emb, qv, pool, queries


class _NoTexts:
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        return ""


def _timed(fn, repeats: int):
    fn()  # warm-up
    times, res = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        res = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), times, res


_PEAK: dict[str, float] = {}


def gemm_peak(precision: str) -> float:
    """The device's dense GEMM rate in this process (FLOP/s): the median of 5 timed 8192^3
    products after a warm-up, in the precision the scan uses (fp32 with TF32 off, TF32, bf16
    operands with fp32 output as the scan computes them). The reference of the "share of GEMM
    peak" column: measured here, not a spec sheet's number."""
    if precision in _PEAK:
        return _PEAK[precision]
    import torch

    n = 8192
    a, b = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    if precision == "bf16":
        a, b = a.bfloat16(), b.bfloat16()
    try:
        times = []
        for i in range(6):
            torch.cuda.synchronize()
            t = time.perf_counter()
            torch.mm(a, b)
            torch.cuda.synchronize()
            if i:
                times.append(time.perf_counter() - t)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
    _PEAK[precision] = 2.0 * n**3 / statistics.median(times)
    return _PEAK[precision]


def measure(n_q: int, n_pool: int, dim: int, args, cuda: bool, progress) -> list[dict]:
    from rbench.engine.scan import scan
    from rbench.engine.torch_scan import scan_dense_torch

    emb, qv, pool, queries = _setup(n_q, n_pool, dim)
    vector_scorer = _vector_scorer()
    size = f"{n_q:,} x {n_pool:,}, d = {dim}"

    def engine():
        return scan(None, queries, pool, scorer=vector_scorer(emb, qv, queries, pool_checked=True),
                    topk=args.k, batch_size=args.batch_size, chunk_size=args.chunk_size)

    settings = [("CPU engine (numba)", engine)]
    if n_q * n_pool * dim <= args.torch_cpu_max:
        settings.append(("torch CPU fp32", lambda: scan_dense_torch(
            emb, qv, queries, topk=args.k, device="cpu", batch_size=args.batch_size, chunk_size=args.chunk_size)))
    if cuda:
        for precision in ("fp32", "tf32", "bf16"):
            settings.append((f"torch CUDA {precision}", lambda p=precision: scan_dense_torch(
                emb, qv, queries, topk=args.k, device="cuda", precision=p, batch_size=args.gpu_batch_size,
                chunk_size=args.chunk_size)))
    rows, ref = [], None
    for label, fn in settings:
        progress(f"{size}: {label}")
        med, times, res = _timed(fn, args.repeats)
        if ref is None:
            ref, ref_s = res, med
        rows.append({"size": size, "setting": label, "median_s": med, "runs": times, "qps": n_q / med,
                     "speedup": ref_s / med,
                     "rank_diff": int(np.count_nonzero(res.ranks.values != ref.ranks.values)),
                     "n_pos": len(ref.ranks.values),
                     "topk_agree": float(np.mean(res.topk_index == ref.topk_index)) if args.k else 1.0,
                     "transfer_s": res.timings.get("transfer_s"),
                     # the scan's GEMM work over the whole call's time, against the measured GEMM rate
                     "peak_share": (2.0 * n_q * n_pool * dim / med / gemm_peak(label.rsplit(" ", 1)[1])
                                    if label.startswith("torch CUDA") else None)})
    return rows


def _devices() -> tuple[str, str | None]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import os

    cpu = f"{cpu} ({os.cpu_count()} logical CPUs)"
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return cpu, gpu


def _share(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.0f}%"


def write(rows: list[dict], args, cpu: str, gpu: str | None) -> str:
    import torch

    head = (f"CPU: {cpu}; GPU: {gpu or 'none (CUDA unavailable)'}; torch {torch.__version__}"
            + (f", CUDA {torch.version.cuda}" if gpu else "") + f"; numpy {np.__version__}")
    from benchmarks.machine import machine_line  # (CPU, vector ISA, BLAS kernel, threads)

    lines = ["# Torch evaluation path vs the CPU engine", "", head, "", machine_line(), "",
             f"Top-{args.k}, one positive a query, engine batch {args.batch_size}, torch CUDA batch "
             f"{args.gpu_batch_size}, chunk {args.chunk_size:,}; median of {args.repeats} after one warm-up; "
             "wall time of a whole call (the pool's host -> device transfer included). Speed-up: the CPU "
             "engine's median / the setting's, same process. Ranks differing: positives whose rank is not the "
             "CPU engine's (fp32: near-ties summed in another order; tf32/bf16: other scores).", "",
             "Share of GEMM peak (CUDA rows): the scan's 2·Q·N·d FLOPs over the whole call's time, divided by "
             "this device's dense GEMM rate measured in the same process (8192^3, same precision).", "",
             "| size | setting | median (s) | queries/s | speed-up vs CPU engine | share of GEMM peak | ranks differing | "
             "top-k indices agreeing | all runs (s) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        runs = " ".join(f"{t:.3f}" for t in r["runs"])
        lines.append(f"| {r['size']} | {r['setting']} | {r['median_s']:.3f} | {r['qps']:,.0f} | "
                     f"{r['speedup']:.2f}x | {_share(r.get('peak_share'))} | {r['rank_diff']:,} / {r['n_pos']:,} | "
                     f"{100 * r['topk_agree']:.3f}% | "
                     f"{runs} |")
    lines += ["", f"Command: `python benchmarks/engine_gpu.py {' '.join(sys.argv[1:])}`".rstrip(), ""]
    text = "\n".join(lines)
    from rbench.core.atomic import atomic_write_text  # the one atomic writer

    args.output.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.output, text)
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default=None, help=f"QUERIESxCANDIDATESxD,... (default with CUDA: {GPU_SIZES}; "
                    "without: 200x20000x64,200x20000x256)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--batch-size", type=int, default=1024, help="the CPU engine's and torch CPU's query batch")
    ap.add_argument("--gpu-batch-size", type=int, default=1024)
    ap.add_argument("--chunk-size", type=int, default=65536)
    ap.add_argument("--torch-cpu-max", type=float, default=2e10,
                    help="run torch on the CPU only where queries x candidates x d is at most this")
    ap.add_argument("--no-cuda", action="store_true")
    ap.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "engine_gpu.md")
    args = ap.parse_args()

    import torch
    from rich.console import Console
    from rich.table import Table

    console = Console()
    cuda = torch.cuda.is_available() and not args.no_cuda
    sizes = args.sizes or (GPU_SIZES if cuda else "200x20000x64,200x20000x256")
    cpu, gpu = _devices()
    gpu = gpu if cuda else None
    rows: list[dict] = []
    for spec in sizes.split(","):
        n_q, n_pool, dim = (int(x) for x in spec.lower().split("x"))
        rows += measure(n_q, n_pool, dim, args, cuda, lambda what: console.log(what))
        write(rows, args, cpu, gpu)
    table = Table(title=f"torch path vs CPU engine (CPU: {cpu}; GPU: {gpu or 'none'})")
    for col in ("size", "setting", "median (s)", "queries/s", "speed-up", "GEMM peak", "ranks differing",
                "top-k agree"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["size"], r["setting"], f"{r['median_s']:.3f}", f"{r['qps']:,.0f}", f"{r['speedup']:.2f}x",
                      _share(r.get("peak_share")), f"{r['rank_diff']:,} / {r['n_pos']:,}", f"{100 * r['topk_agree']:.3f}%")
    console.print(table)
    console.print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
