"""rbench's own GEMM and its fusion with the scan, kernels alone, against numpy's (OpenBLAS) GEMM.

One 1,024-query batch x 25,000 candidates per dim, every output written into buffers touched
before the timing. Each round times, back to back: numpy's GEMM, rbench's GEMM (``fused.gemm``,
the candidates packed once beforehand), the fused GEMM + scan with rank counts only (top-0) and
with a top-100 (``fused.gemm_scan``). Ratios to numpy's GEMM are taken within a round, then the
median over rounds. Also printed: how many of rbench's scores equal numpy's bit for bit, and the
largest difference.

Usage:
    python benchmarks/gemm_kernel.py                     # dims 64,128,256,384,512,1024,2048,4096, 15 rounds
    python benchmarks/gemm_kernel.py --dims 128 --rounds 21
Prints a rich table and writes benchmarks/results/gemm_kernel.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import rbench  # noqa: E402,F401,I001  (before numpy: it sets OpenBLAS's thread spin, as the CLI runs)
import numpy as np  # noqa: E402

from rbench.engine import fused  # noqa: E402

_SETTLE_S = 0.05  # pause before each timing (threads left spinning by the previous call)


def measure(dim: int, n_q: int, n_pool: int, rounds: int) -> dict:
    rng = np.random.default_rng(0)
    emb = rng.standard_normal((n_pool, dim), dtype=np.float32)
    q = rng.standard_normal((n_q, dim), dtype=np.float32)
    pos = rng.integers(0, n_pool, (n_q, 1))
    thr = np.einsum("bd,bd->b", q, emb[pos[:, 0]])[:, None].astype(np.float32)
    no_off, no_col = np.zeros(n_q + 1, dtype=np.int64), np.zeros(0, dtype=np.int64)
    packed = fused.pack(emb)
    out = np.zeros((n_q, n_pool), dtype=np.float32)
    tops = {k: fused.TopK(n_q, k) for k in (0, 100)}

    def fused_scan(k: int) -> None:
        top = fused.TopK(n_q, k, tops[k])
        higher, equal = np.zeros((n_q, 1), dtype=np.int64), np.zeros((n_q, 1), dtype=np.int64)
        fused.gemm_scan(q, packed, n_pool, 0, thr, pos, no_off, no_col, False, higher, equal,
                        np.zeros(n_q, dtype=np.int64), top, more=False)

    fns = {"numpy": lambda: np.matmul(q, emb.T, out=out), "own": lambda: fused.gemm(q, packed, out),
           "top0": lambda: fused_scan(0), "top100": lambda: fused_scan(100)}
    for fn in fns.values():  # warm-up (numba's compile or cache load, pages)
        fn()
    ref = q @ emb.T
    mine = fused.gemm(q, packed, np.empty_like(out))
    t: dict[str, list[float]] = {key: [] for key in fns}
    for _ in range(rounds):
        for key, fn in fns.items():
            time.sleep(_SETTLE_S)
            t0 = time.perf_counter()
            fn()
            t[key].append(time.perf_counter() - t0)
    arr = {key: np.array(v) for key, v in t.items()}
    return {"dim": dim, **{f"{key}_ms": 1e3 * float(np.median(v)) for key, v in arr.items()},
            **{f"{key}_ratio": float(np.median(arr[key] / arr["numpy"])) for key in ("own", "top0", "top100")},
            "bit_equal": float((ref == mine).mean()), "max_diff": float(np.abs(ref - mine).max())}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dims", default="64,128,256,384,512,1024,2048,4096")
    ap.add_argument("--queries", type=int, default=1024)
    ap.add_argument("--pool", type=int, default=25000)
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    if not fused.own_gemm(128):
        sys.exit("rbench's GEMM needs numba (and RBENCH_GEMM unset or not 'blas')")
    from rich.table import Table

    from rbench.core.atomic import atomic_write_text
    from rbench.core.console import console as make_console

    cols = ("dim", "numpy GEMM ms", "rbench GEMM ms", "rbench / numpy", "fused top-0 ms", "top-0 / numpy",
            "fused top-100 ms", "top-100 / numpy", "scores bit-equal to numpy", "max |diff|")
    table = Table(title=f"Kernels alone: {args.queries} queries x {args.pool} candidates, medians of "
                  f"{args.rounds} interleaved rounds (ratios paired within a round)")
    for c in cols:
        table.add_column(c, justify="right")
    from benchmarks.machine import machine_line  # (CPU, vector ISA, BLAS kernel, threads)

    md = ["# rbench's GEMM kernel", "", f"Command: `python benchmarks/gemm_kernel.py {' '.join(sys.argv[1:])}`",
          machine_line(), "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for dim in [int(d) for d in args.dims.split(",") if d]:
        r = measure(dim, args.queries, args.pool, args.rounds)
        row = [str(dim), f"{r['numpy_ms']:.1f}", f"{r['own_ms']:.1f}", f"{r['own_ratio']:.2f}", f"{r['top0_ms']:.1f}",
               f"{r['top0_ratio']:.2f}", f"{r['top100_ms']:.1f}", f"{r['top100_ratio']:.2f}",
               f"{r['bit_equal']:.3f}", f"{r['max_diff']:.1e}"]
        table.add_row(*row)
        md.append("| " + " | ".join(row) + " |")
    make_console(markup=True).print(table)
    out = ROOT / "benchmarks" / "results" / "gemm_kernel.md"
    atomic_write_text(out, "\n".join(md) + "\n")
    print(f"written: {out}")


if __name__ == "__main__":
    main()
