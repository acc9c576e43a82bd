"""What the engine's running top-k costs (issue 13: "a running top-100 for every run and nothing
reads it").

The same exact full-rank evaluation (every positive's rank) with the running top-k
(``topk=100``) and without it (``topk=0``, what ``rbench run`` asks for until a run file reads
it), on a synthetic in-memory pool, both in one process. Medians of ``--repeats`` runs each
after one untimed warm-up round, alternating the two settings so that the shared machine's load
hits both alike.

Usage:
    python benchmarks/engine_topk.py                                  # 200k x 1,024, d = 64 and 384
    python benchmarks/engine_topk.py --repeats 5 --dims 64,384 --pool 200000 --queries 1024
Prints a table and writes benchmarks/results/engine_topk.md.
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

from benchmarks.engine_scale import _setup, _Stub  # noqa: E402


def measure(n_pool: int, n_q: int, dim: int, repeats: int, k: int, batch_size: int) -> dict:
    from rbench.engine.scan import scan

    rng = np.random.default_rng(0)
    emb = rng.standard_normal((n_pool, dim), dtype=np.float32)
    q = rng.standard_normal((n_q, dim), dtype=np.float32)
    pool, queries = _setup(n_pool, n_q, emb)
    times: dict[int, list[float]] = {k: [], 0: []}
    ranks = {}
    for i in range(repeats + 1):  # the first round warms up (thread pools, first-touch pages): not timed
        for topk in (k, 0):
            t = time.perf_counter()
            res = scan(_Stub(emb, q), queries, pool, batch_size=batch_size, topk=topk)
            if i:
                times[topk].append(time.perf_counter() - t)
            ranks[topk] = res.ranks.values
    assert np.array_equal(ranks[k], ranks[0]), "the top-k must not change any rank"
    with_k, without = statistics.median(times[k]), statistics.median(times[0])
    return {"dim": dim, "with_s": with_k, "without_s": without, "ratio": with_k / without,
            "with_all": times[k], "without_all": times[0]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pool", type=int, default=200_000)
    ap.add_argument("--queries", type=int, default=1024)
    ap.add_argument("--dims", default="64,384")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--no-torch", action="store_true", help="do not load torch (the engine then selects "
                    "with numpy's argpartition instead of torch.topk)")
    ap.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "engine_topk.md")
    args = ap.parse_args()
    if not args.no_torch:
        import torch  # noqa: F401  (dense rankers load it; the engine then uses torch.topk)

    rows = [measure(args.pool, args.queries, int(d), args.repeats, args.k, args.batch_size)
            for d in args.dims.split(",")]
    head = (f"{args.pool:,} candidates x {args.queries:,} queries, batch {args.batch_size}, "
            f"median of {args.repeats}, {'numpy' if args.no_torch else 'torch'} selection")
    from benchmarks.machine import machine_line  # (CPU, vector ISA, BLAS kernel, threads)

    lines = ["# Engine: running top-k on vs off", "", head, "", machine_line(), "",
             f"| d | with top-{args.k} (s) | without (s) | ratio | all runs with / without (s) |",
             "|---|---|---|---|---|"]
    for r in rows:
        runs = " ".join(f"{t:.2f}" for t in r["with_all"]) + " / " + " ".join(f"{t:.2f}" for t in r["without_all"])
        lines.append(f"| {r['dim']} | {r['with_s']:.2f} | {r['without_s']:.2f} | {r['ratio']:.2f} | {runs} |")
    lines += ["", f"Machine: {platform.platform()}, {platform.processor() or platform.machine()}; "
              "shared with other work, so compare the two columns of one row, not rows across runs.", ""]
    text = "\n".join(lines)
    print(text)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(f"written: {args.output}")


if __name__ == "__main__":
    main()
