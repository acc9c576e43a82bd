"""The engine's exact dense scan against the fastest GEMM on this machine (issue 44).

rbench's evaluation of Q queries x P candidates (every positive's exact rank + top-k, the default
BLAS-tile path) against, on the same arrays: torch's ``mm`` alone (MKL), numpy's GEMM alone with
OpenBLAS on its right kernel (``OPENBLAS_CORETYPE``: SkylakeX with AVX-512, Haswell with AVX2,
``machine.openblas_coretype``; read when OpenBLAS loads: a worker
subprocess, driven round by round from here, so both see the same machine state), faiss
``IndexFlatIP`` top-k if installed, and rbench's previous path (its own GEMM fused with the
scan, ``RBENCH_GEMM=own``). Each GEMM alone writes batch x pool blocks into one buffer touched
before the timing (its best case). Rounds alternate the order; the ratio is taken within a round
against the round's fastest GEMM, and the median over rounds is reported.

Usage (heavy: run under the machine-wide lock):
    flock /tmp/heavy.lock python benchmarks/engine_vs_blas.py --dim 128,1024 --threads 1,2 --rounds 7
Writes benchmarks/results/engine_vs_blas.md (the machine line: CPU, ISA, BLAS kernels, threads).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# as rbench.engine.blas_tiles does when it loads torch itself: torch's OpenMP threads sleep after
# each call instead of spinning on the cores the scan needs (read when torch loads)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import rbench  # noqa: E402,F401,I001  (before numpy: it sets OpenBLAS's thread spin, as the CLI runs)
import numpy as np  # noqa: E402

from benchmarks.engine_scale import _setup, _Stub  # noqa: E402
from benchmarks.machine import load_now, machine_line, openblas_coretype  # noqa: E402

BATCH = 1024  # the engine's query batch (scan's batch_size here)
_SETTLE_S = 0.3  # OpenMP / OpenBLAS threads spin for a while after a call: pause before each timing


def arrays(n_q: int, n_pool: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """The benchmark's query and candidate vectors (the same in the worker)."""
    rng = np.random.default_rng(dim)
    return rng.standard_normal((n_q, dim), dtype=np.float32), rng.standard_normal((n_pool, dim), dtype=np.float32)


def bare_gemm(mm, q: np.ndarray, emb: np.ndarray, out: np.ndarray) -> float:
    """Seconds for every query batch x the whole pool through mm(q_batch, emb, out_block)."""
    t0 = time.perf_counter()
    for a in range(0, len(q), BATCH):
        qq = q[a : a + BATCH]
        mm(qq, emb, out[: len(qq) * len(emb)].reshape(len(qq), len(emb)))
    return time.perf_counter() - t0


def worker(n_q: int, n_pool: int, dim: int) -> None:
    """The numpy GEMM worker (its OpenBLAS kernel chosen by the environment): one timing per
    'go' line on stdin, printed as a number; its machine line first."""
    q, emb = arrays(n_q, n_pool, dim)
    out = np.ones(BATCH * n_pool, dtype=np.float32)  # (pages touched)
    print(json.dumps({"machine": machine_line()}), flush=True)
    for line in sys.stdin:
        if line.strip() != "go":
            break
        time.sleep(_SETTLE_S)
        print(bare_gemm(lambda a, e, o: np.matmul(a, e.T, out=o), q, emb, out), flush=True)


class Worker:
    """The numpy-GEMM subprocess with OpenBLAS forced to this CPU's widest kernel and the round's
    thread count."""

    def __init__(self, n_q: int, n_pool: int, dim: int, threads: int) -> None:
        env = {**os.environ, "OPENBLAS_NUM_THREADS": str(threads)}
        kernel = openblas_coretype()
        if kernel:
            env["OPENBLAS_CORETYPE"] = kernel
        self.proc = subprocess.Popen([sys.executable, __file__, "--worker", f"{n_q},{n_pool},{dim}"], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.machine = json.loads(self._line())["machine"]

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the numpy GEMM worker died")
        return line

    def time(self) -> float:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        return float(self._line())

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


def _set_threads(n: int) -> None:
    """n threads for numba (the engine's scan), torch (MKL), faiss and this process's OpenBLAS."""
    import numba
    import torch
    from threadpoolctl import threadpool_limits

    numba.set_num_threads(n)
    torch.set_num_threads(n)
    threadpool_limits(n)
    try:
        import faiss

        faiss.omp_set_num_threads(n)
    except ImportError:
        pass


def _road() -> str:
    """The dense road ``RBENCH_GEMM=auto`` takes here (``rbench.engine.fused``)."""
    from rbench.engine import blas_tiles, fused

    if fused.tile_gemm():
        return f"BLAS tiles ({blas_tiles.backend()})"
    return "rbench's own GEMM fused with the scan"


def measure(n_q: int, n_pool: int, dim: int, threads: int, rounds: int, topk: int) -> dict:
    """One configuration: every contender timed once a round (order rotating), medians."""
    import torch

    from rbench.engine.scan import scan

    _set_threads(threads)
    q, emb = arrays(n_q, n_pool, dim)
    pool, queries = _setup(n_pool, n_q, emb)
    stub = _Stub(emb, q)
    out = np.ones(BATCH * n_pool, dtype=np.float32)
    tq, te, tout = torch.from_numpy(q), torch.from_numpy(emb), torch.from_numpy(out)

    def torch_mm() -> float:
        t0 = time.perf_counter()
        for a in range(0, n_q, BATCH):
            b = min(BATCH, n_q - a)
            torch.mm(tq[a : a + b], te.T, out=tout[: b * n_pool].view(b, n_pool))
        return time.perf_counter() - t0

    def engine(mode: str, k: int = topk):
        if mode != "auto":  # (auto: RBENCH_GEMM unset, the road the engine takes on this CPU)
            os.environ["RBENCH_GEMM"] = mode
        try:
            t0 = time.perf_counter()
            res = scan(stub, queries, pool, batch_size=BATCH, topk=k)
            return time.perf_counter() - t0, res
        finally:
            os.environ.pop("RBENCH_GEMM", None)

    contenders = {"engine": lambda: engine("auto")[0], "engine_ranks": lambda: engine("auto", 0)[0],
                  "engine_tile": lambda: engine("tile")[0], "engine_own": lambda: engine("own")[0],
                  "torch_mm": torch_mm}
    try:
        import faiss

        def faiss_search() -> float:
            index = faiss.IndexFlatIP(dim)
            index.add(emb)
            t0 = time.perf_counter()
            index.search(q, topk)
            return time.perf_counter() - t0

        contenders["faiss"] = faiss_search
    except ImportError:
        pass
    (_, tile_res), (_, own_res), _, _ = engine("tile"), engine("own"), engine("auto", 0), engine("auto")  # warm-up
    identical = all(np.array_equal(getattr(tile_res, f), getattr(own_res, f))
                    for f in ("higher", "equal", "n_ranked", "topk_index", "topk_score"))
    work = Worker(n_q, n_pool, dim, threads)
    contenders["numpy_blas"] = work.time
    work.time()
    times: dict[str, list[float]] = {k: [] for k in contenders}
    names = list(contenders)
    for r in range(rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            gc.collect()  # (a full collection inside one contender's timing would be charged to it)
            time.sleep(_SETTLE_S)
            times[name].append(contenders[name]())
    work.close()
    t = {k: np.array(v) for k, v in times.items()}
    fastest = np.minimum(t["torch_mm"], t["numpy_blas"])  # per round: the fastest GEMM
    ratio = t["engine"] / fastest
    return {"dim": dim, "threads": threads, "queries": n_q, "pool": n_pool, "topk": topk, "rounds": rounds,
            **{f"{k}_s": float(np.median(v)) for k, v in t.items()},
            "ratio": float(np.median(ratio)), "ratio_q": [float(np.percentile(ratio, 25)), float(np.percentile(ratio, 75))],
            "ranks_ratio": float(np.median(t["engine_ranks"] / fastest)),
            "own_ratio": float(np.median(t["engine_own"] / fastest)),
            "tile_ratio": float(np.median(t["engine_tile"] / fastest)), "road": _road(),
            "faiss_ratio": float(np.median(t["engine"] / t["faiss"])) if "faiss" in t else None,
            "identical": identical, "worker_machine": work.machine}


def report(rows: list[dict], command: str, load: str) -> str:
    """The results file's markdown."""
    cols = ["queries x pool x dim", "threads", "rbench (default road) s", "torch mm alone s", "numpy GEMM alone "
            f"({openblas_coretype() or 'detected'}) s", "rbench / fastest GEMM (goal <= 1.15)", "its quartiles",
            "BLAS tiles / fastest", "own GEMM fused / fastest", "default road, ranks only (top-0) / fastest", "faiss s",
            "rbench / faiss", "tiles identical to own"]
    lines = ["# rbench's exact scan vs the fastest GEMM", "", f"Command: `{command}`", "",
             machine_line(), "", f"numpy worker: {rows[0]['worker_machine']}", "",
             f"Load (`uptime`) at the start: {load}", "",
             "Each row: top-" + str(rows[0]["topk"]) + " and every positive's exact rank; GEMMs alone write "
             "1,024-query blocks into a buffer touched before timing; the ratio is the median over rounds "
             "of rbench / min(torch mm, numpy) within the round; \"ranks only\": the same scan with top-0 (every "
             "positive's exact rank alone); each timing after a full `gc.collect()`. The default road "
             f"(`RBENCH_GEMM=auto`) on this CPU: **{rows[0]['road']}**.", "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        faiss_s = f"{r['faiss_s']:.3f}" if r.get("faiss_s") else "-"
        faiss_r = f"{r['faiss_ratio']:.2f}" if r.get("faiss_ratio") else "-"
        lines.append(f"| {r['queries']} x {r['pool']} x {r['dim']} | {r['threads']} | {r['engine_s']:.3f} | "
                     f"{r['torch_mm_s']:.3f} | {r['numpy_blas_s']:.3f} | **{r['ratio']:.2f}** | "
                     f"{r['ratio_q'][0]:.2f}-{r['ratio_q'][1]:.2f} | {r['tile_ratio']:.2f} | {r['own_ratio']:.2f} | "
                     f"{r['ranks_ratio']:.2f} | "
                     f"{faiss_s} | {faiss_r} | {r['identical']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=3000)
    ap.add_argument("--pool", type=int, default=25000)
    ap.add_argument("--dim", default="128,1024")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--topk", type=int, default=100)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "engine_vs_blas.md"))
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(*map(int, args.worker.split(",")))
        return
    load = load_now()
    rows = []
    for dim in map(int, args.dim.split(",")):
        for threads in map(int, args.threads.split(",")):
            rows.append(measure(args.queries, args.pool, dim, threads, args.rounds, args.topk))
            print(json.dumps(rows[-1]), flush=True)
    text = report(rows, "python " + " ".join(sys.argv), load)
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
