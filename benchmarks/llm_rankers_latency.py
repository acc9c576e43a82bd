"""Per-query latency of the generative rankers against LRanker on rec-music (20 candidates a query).

Reproduces, as ratios, the LRanker paper's latency table (Appendix, "Latency comparison":
per-query time on Rec-Music with 20 candidates: PRP 38.3 s, IRanker 6.5 s, RankGPT 3.8 s,
LRanker 15 ms). The paper ran 8B-class LLMs on a GPU; here everything runs in one process on
this machine's CPU with the offline SmolLM2-135M-Instruct (Q4_1 GGUF dequantised, fp32), so the
absolute numbers are not comparable: the ordering and the ratios to LRanker are the point.

Method: each ranker is built once (``make_ranker``) and handed as a ready-made object to
``rbench.evaluate(ranker, "rec-music", max_queries=N)``, so its model is loaded once. One
untimed warm-up run on 1 query (model load, first forward passes), then ``--repeats`` timed
runs on the same seeded sample of N test queries (default 20 x 3); reported: the median over
the runs of the ranking's time per query. Every call the engine makes to ``ranker.score`` is
timed and counted here: the call that ranks the N queries' lists is the ranking (for a
generative ranker every model call of the query; for LRanker the query encoding plus the scan
of the pool's vectors, the pool encoded beforehand in ``fit``/``index`` and not timed, as the
paper's inference latency); the engine's consistency re-check (one query's half list scored
again, for a ranker whose scores do not depend on the list: pointwise-llm and LRanker) is
counted apart, in its own columns, not in ms/query or calls/query (issue 41: the first table
counted pointwise's re-check as its calls). Generative rankers run with the response cache off
(``cache=false``) so every call reaches the model; model calls and tokens are the differences
of the ranker's ``info["generation"]`` counters around each ``score`` call.

LRanker runs with the ``preset=cpu`` backbone (all-MiniLM-L6-v2, 22.7M) and the smallest
training budget (``max_steps=40 eval_every=40 n_negatives=5``; a checkpoint of that key is reused
from the cache, else training runs first, outside the timing) and direct ranking E^(0)
(``width=0 depth=0``, no test-time scaling). Training budget does not change inference cost.

PRP-Sliding-10 makes 290 model calls a query on 20 candidates (145 pairs x 2 orders, about 4 min
a query on 2 CPU cores), PRP-Allpair 380 (190 pairs x 2): 20 queries x 3 repeats of either do
not fit a session, so the ``prp`` row is PRP-Sorting top-3 (``variant=sorting top_k=3``, about
35 pairs, 70 calls a query), the cheaper mode of the paper, and says so in its options column;
``prp-sliding`` and ``prp-allpair`` are there to be asked for, with ``--slow-queries`` capping
their N.

Usage (heavy: run under the machine-wide lock):
    flock /tmp/heavy.lock python benchmarks/llm_rankers_latency.py   # 20 queries x 3 repeats
    flock /tmp/heavy.lock python benchmarks/llm_rankers_latency.py --rankers rankgpt,lranker --output X.md
Prints a rich table and writes benchmarks/results/llm_rankers_latency.md after every ranker (a
run cut short keeps its rows).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# The paper's published per-query latencies (LRanker paper, Appendix "Latency comparison" table:
# Rec-Music, 20 candidates per query, 8B-class LLM rankers on a GPU), in ms.
PAPER_MS = {"PRP": 38_300.0, "IRanker": 6_500.0, "RankGPT": 3_800.0, "LRanker": 15.0}

# key -> (registered ranker, options, the paper's row it corresponds to or None, slow)
GENERATIVE = {"backend": "transformers", "model": "smollm2-135m", "cache": False}
LRANKER = {"preset": "cpu", "max_steps": 40, "eval_every": 40, "n_negatives": 5, "width": 0, "depth": 0}
RANKERS: dict[str, tuple[str, dict, str | None, bool]] = {
    "lranker": ("lranker", LRANKER, "LRanker", False),
    "rankgpt": ("rankgpt", GENERATIVE, "RankGPT", False),
    "iranker": ("iranker", GENERATIVE, "IRanker", False),
    "iranker-direct": ("iranker", {**GENERATIVE, "variant": "direct"}, None, False),
    "pointwise-llm": ("pointwise-llm", GENERATIVE, None, False),
    "prp": ("prp", {**GENERATIVE, "variant": "sorting", "top_k": 3}, "PRP", False),
    "prp-sliding": ("prp", {**GENERATIVE, "variant": "sliding"}, "PRP", True),
    "prp-allpair": ("prp", {**GENERATIVE, "variant": "allpair"}, None, True),
}
DEFAULT_RANKERS = ("lranker", "rankgpt", "iranker", "pointwise-llm", "prp")
TASK = "rec-music"


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


COUNTERS = ("calls", "tokens_in", "tokens_out")


def gen_counts(ranker: Any) -> dict[str, float]:
    """The generative ranker's cumulative counters (zeros for a ranker without them)."""
    g = (getattr(ranker, "info", None) or {}).get("generation") or {}
    return {k: float(g.get(k, 0) or 0) for k in COUNTERS}


@dataclass
class ScoreCall:
    """One ``ranker.score`` call the engine made: how many query rows, its seconds and counters."""

    rows: int
    seconds: float
    counts: dict[str, float]


def time_score_calls(ranker: Any) -> list[ScoreCall]:
    """Wrap the ranker's query-time call on the instance, so every call the engine makes is timed
    and counted: ``score`` for a generative ranker, ``encode_queries`` for an embedding ranker
    (LRanker: the engine then scans the N x 20 inner products, well under a millisecond, which only
    the engine's per_query_ms column includes). The ranking call and the consistency re-check are
    told apart by their rows afterwards."""
    log: list[ScoreCall] = []
    method = "score" if callable(getattr(ranker, "score", None)) else "encode_queries"
    inner = getattr(ranker, method)

    def timed(queries: Any, *rest: Any) -> Any:
        before = gen_counts(ranker)
        t0 = time.perf_counter()
        out = inner(queries, *rest)
        seconds = time.perf_counter() - t0
        after = gen_counts(ranker)
        log.append(ScoreCall(len(queries), seconds, {k: after[k] - before[k] for k in COUNTERS}))
        return out

    setattr(ranker, method, timed)
    return log


def measure(key: str, args, console) -> dict:
    import rbench
    from rbench.api import RunContext
    from rbench.core import paths
    from rbench.rankers import make_ranker

    name, options, paper, slow = RANKERS[key]
    n = min(args.queries, args.slow_queries) if slow and args.slow_queries else args.queries
    ranker = make_ranker(name, dict(options), RunContext(cache_dir=paths.cache_dir(), seed=args.seed,
                                                         show_progress=False))
    t0 = time.perf_counter()
    rec = rbench.evaluate(ranker, TASK, max_queries=1, seed=args.seed)  # warm-up (and LRanker's fit), untimed
    warm_s = time.perf_counter() - t0
    log = time_score_calls(ranker)
    times, engine_times, recheck_s = [], [], []
    ranking: list[ScoreCall] = []
    recheck: list[ScoreCall] = []
    for rep in range(args.repeats):
        del log[:]
        rec = rbench.evaluate(ranker, TASK, max_queries=n, seed=args.seed)
        # the engine scores the batch of N lists (one batch: N <= its 256), then re-checks
        rank_calls, checks = log[:1], log[1:]
        if not rank_calls or rank_calls[0].rows != n:
            raise SystemExit(f"{key}: expected a first score call of {n} queries, got {[c.rows for c in log]}")
        ranking += rank_calls
        recheck += checks
        times.append(1000.0 * sum(c.seconds for c in rank_calls) / n)
        engine_times.append(float(rec.timings["per_query_ms"]))
        recheck_s.append(sum(c.seconds for c in checks))
        console.log(f"{key}: repeat {rep + 1}/{args.repeats}: {times[-1]:,.1f} ms/query ranking, "
                    f"{recheck_s[-1]:,.2f} s re-check ({n} queries)")
    runs = args.repeats
    per_q = {k: sum(c.counts[k] for c in ranking) / (n * runs) for k in COUNTERS}
    re_per_run = {k: sum(c.counts[k] for c in recheck) / runs for k in COUNTERS}
    close = getattr(ranker, "close", None)
    if callable(close):
        close()
    sets = "" if key == "lranker" else " ".join(f"{k}={v}" for k, v in options.items() if k not in GENERATIVE)
    return {"key": key, "ranker": name, "sets": sets, "load": os.getloadavg()[1], "paper": paper, "n": n, "ms": statistics.median(times),
            "runs": times, "engine_ms": statistics.median(engine_times), "warm_s": warm_s,
            "generative": key != "lranker", **per_q,
            "recheck_s": statistics.median(recheck_s), "recheck_calls": re_per_run["calls"],
            "mrr": float(rec.metrics.get("MRR", rec.metrics.get("RR", float("nan"))))}


def fmt_ms(ms: float) -> str:
    return f"{ms / 1000:,.2f} s" if ms >= 1000 else f"{ms:,.1f} ms"


def build_rows(rows: list[dict]) -> list[list[str]]:
    lr = next((r["ms"] for r in rows if r["key"] == "lranker"), None)
    out = []
    for r in rows:
        paper = PAPER_MS.get(r["paper"]) if r["paper"] else None
        out.append([
            r["key"] + (f" ({r['sets']})" if r["sets"] else ""), str(r["n"]), fmt_ms(r["ms"]),
            " ".join(f"{t:,.0f}" for t in r["runs"]),
            f"{r['calls']:,.1f}" if r["generative"] else "-",
            f"{r['tokens_in']:,.0f}" if r["generative"] else "-",
            f"{r['tokens_out']:,.0f}" if r["generative"] else "-",
            (f"{r['recheck_s']:,.2f} s, {r['recheck_calls']:,.0f} calls" if r["generative"]
             else f"{r['recheck_s'] * 1000:,.1f} ms") if r["recheck_s"] else "none (set-dependent)",
            fmt_ms(r["engine_ms"]),
            f"{r['ms'] / lr:,.0f}x" if lr else "n/a (lranker not measured)",
            f"{r['paper']}: {fmt_ms(paper)}" if paper else "-",
            f"{paper / PAPER_MS['LRanker']:,.0f}x" if paper else "-",
            f"{r['load']:.2f}",
        ])
    return out


COLS = ["ranker (options)", "queries", "ms/query (median)", "runs (ms/query)", "model calls/query",
        "tokens in/query", "tokens out/query", "engine re-check per run (apart)", "engine per_query_ms (with re-check)",
        "vs LRanker (here)", "paper ms/query", "paper vs LRanker", "load avg (5 min) at end"]


def write(rows: list[dict], args, head: str) -> str:
    from benchmarks.machine import machine_line  # (CPU, vector ISA, BLAS kernel, threads)

    lines = ["# Generative rankers vs LRanker: per-query latency on rec-music (20 candidates)", "", head, "",
             machine_line(), "",
             f"Median of {args.repeats} timed run(s) after a 1-query warm-up, per ranker, one process; "
             "ms/query = the time of the `ranker.score` call (LRanker: `encode_queries`) that ranks the N lists of `rbench.evaluate`, / N "
             "(every model call of a query; LRanker: query encoding plus scan, pool encoded beforehand). "
             "The engine's consistency re-check (one query's half list scored again, for rankers whose "
             "scores do not depend on the list: pointwise-llm, LRanker) is counted apart, per run, and "
             "is in the engine's per_query_ms only. Calls and tokens per query from the ranker's "
             "`info[\"generation\"]` counters around the ranking call. "
             "All values measured, none extrapolated. Paper: LRanker paper, Appendix \"Latency comparison\" "
             "(8B-class LLMs on a GPU; absolute numbers not comparable, compare the order and the ratios).", "",
             "| " + " | ".join(COLS) + " |", "|" + "---|" * len(COLS)]
    lines += ["| " + " | ".join(c) + " |" for c in build_rows(rows)]
    lines += ["", f"Command: `python benchmarks/llm_rankers_latency.py {' '.join(sys.argv[1:])}`".rstrip(), ""]
    text = "\n".join(lines)
    from rbench.core.atomic import atomic_write_text  # the one atomic writer

    args.output.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.output, text)
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rankers", default=",".join(DEFAULT_RANKERS), help=f"comma-separated, of: {', '.join(RANKERS)}")
    ap.add_argument("--queries", type=int, default=20, help="test queries timed (seeded sample)")
    ap.add_argument("--slow-queries", type=int, default=0,
                    help="cap on the queries timed for prp-sliding and prp-allpair (0: --queries)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "llm_rankers_latency.md")
    args = ap.parse_args()
    keys = [k.strip() for k in args.rankers.split(",") if k.strip()]
    unknown = [k for k in keys if k not in RANKERS]
    if unknown:
        ap.error(f"unknown ranker(s) {', '.join(unknown)}: choose from {', '.join(RANKERS)}")
    if args.queries < 1 or args.repeats < 1 or args.slow_queries < 0:
        ap.error("--queries and --repeats must be >= 1, --slow-queries >= 0")
    if args.queries > 256:
        ap.error("--queries must be <= 256 (the engine's batch): the ranking is timed as one score call")

    import torch
    from rich.console import Console
    from rich.table import Table

    console = Console(width=200)
    head = (f"CPU: {cpu_name()} ({platform.machine()}), torch {torch.__version__} with "
            f"{torch.get_num_threads()} threads; generative model: SmolLM2-135M-Instruct (Q4_1 GGUF "
            "dequantised, fp32 on CPU, transformers backend, greedy, response cache off); LRanker: "
            "all-MiniLM-L6-v2 fp32 on CPU, direct ranking E^(0) (--set "
            + " ".join(f"{k}={v}" for k, v in LRANKER.items()) + "), a batch of N queries encoded together.")
    rows: list[dict] = []
    for key in keys:
        rows.append(measure(key, args, console))
        write(rows, args, head)
    table = Table(title=f"per-query latency on {TASK} (20 candidates); {head}")
    for col in COLS:
        table.add_column(col)
    for r in build_rows(rows):
        table.add_row(*r)
    console.print(table)
    console.print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
