"""What the engine's consistency check costs (issue 28: under 2% of evaluation time).

``rbench.engine.scan.scan(..., verify=True)`` scores a ranker's own ``score()`` over whole rows and
then re-scores about one query in a hundred of each batch on a shuffled, label-independent sample
of its candidates (``engine._verify``); the scores must be identical. ``verify=False`` skips the
check. This benchmark times both on the same fitted ranker, in the same process:

1. ml-100k (embedded task), full test split against its shared pool, built-in ``bm25`` and ``pop``;
2. the engine benchmark's size (``benchmarks/engine_scale.py``): 3,000 queries x 25,000 candidates
   at d = 128, with a plain ``score()`` ranker (vectors in, inner products out; not an
   EmbeddingRanker, so the check runs);
3. the same arrays as an EmbeddingRanker (the engine's own dense GEMM): never checked (its scores
   are the engine's arithmetic, not ranker code), so its check costs 0 by construction.

Each row: one warm-up evaluation each way (numba's compile or cache load, first pages), then
``--rounds`` rounds timing verify=True and verify=False back to back, alternating which goes
first, after a short pause (threads left spinning by the previous call). Reported: the medians
of ``timings['score_s']`` on and off, the median of the per-round ratio on/off (paired: the
machine's speed drifts over minutes), and the median over the verify=True runs of
``timings['verify_s'] / timings['score_s']`` (the check's own share, the goal's number: < 2%).
The ranks of both runs must be equal.

Usage:
    python benchmarks/consistency_cost.py                          # the three rows, 7 rounds
    python benchmarks/consistency_cost.py --rounds 15 --queries 3000 --candidates 25000
    python benchmarks/consistency_cost.py --skip-ml100k            # the synthetic rows only
Prints a rich table and writes benchmarks/results/consistency_cost.md (this run on top, earlier
runs kept below).
"""

from __future__ import annotations

import argparse
import datetime
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import rbench  # noqa: E402,F401,I001  (before numpy: it sets OpenBLAS's thread spin, as the CLI runs)
import numpy as np  # noqa: E402

_SETTLE_S = 0.1  # pause before each timing (threads left spinning by the previous call)


# ------------------------------------------------------------------------------ synthetic rankers


class VectorScoreRanker:
    """A plain ``score()`` ranker over fixed vectors: scores are query . candidate inner products.

    The consistency check compares two calls' scores bit for bit, so a candidate's score must not
    depend on the call's shape (a float32 BLAS GEMM sums in an order that follows its blocking
    and the call's size). Here the vectors are float32 multiples of 2^-10 within (-4, 4) (see
    ``synthetic_arrays``): every product is a multiple of 2^-20 below 16 in magnitude, so a sum
    of up to 2^12 of them needs under 53 bits and the float64 GEMM computes it exactly, in any
    order; its cast to float32 is then one rounding of an exact value: the same in every call."""

    name, version, config = "vector-score", "0", {}

    def __init__(self, emb: np.ndarray, q: np.ndarray) -> None:
        self.emb64 = emb.astype(np.float64)  # (N, d) C-contiguous: a contiguous run is a view
        self.q64 = q.astype(np.float64)
        self.row_of = {f"q{i}": i for i in range(len(q))}

    def fit(self, task: Any) -> None:
        return None

    def index(self, pool: Any) -> None:
        return None

    def score(self, queries: Any, candidates: np.ndarray) -> np.ndarray:
        qv = self.q64[[self.row_of[str(i)] for i in queries.ids]]
        cand = np.asarray(candidates)
        if cand.ndim == 1:
            c = self.emb64[cand[0] : cand[-1] + 1] if len(cand) and cand[-1] - cand[0] + 1 == len(cand) \
                and np.all(np.diff(cand) == 1) else self.emb64[cand]
            return (qv @ c.T).astype(np.float32)
        return np.einsum("bd,bmd->bm", qv, self.emb64[cand]).astype(np.float32)


class VectorEmbeddingRanker:
    """The same vectors as an EmbeddingRanker: the engine scores them by its own dense GEMM."""

    name, version, config = "vector-embedding", "0", {}

    def __init__(self, emb: np.ndarray, q: np.ndarray) -> None:
        self.emb, self.q = emb, q
        self.row_of = {f"q{i}": i for i in range(len(q))}

    def fit(self, task: Any) -> None:
        return None

    def encode_pool(self, pool: Any) -> np.ndarray:
        return self.emb

    def encode_queries(self, queries: Any) -> np.ndarray:
        return self.q[[self.row_of[str(i)] for i in queries.ids]]


def synthetic_arrays(n_q: int, n_pool: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Standard normal vectors rounded to multiples of 2^-10 and clipped to (-4, 4), float32."""
    rng = np.random.default_rng(0)

    def make(n: int) -> np.ndarray:
        x = rng.standard_normal((n, dim), dtype=np.float32)
        return np.clip(np.round(x * 1024.0), -4095, 4095).astype(np.float32) / np.float32(1024.0)

    return make(n_pool), make(n_q)


def synthetic_task(n_q: int, n_pool: int) -> tuple[Any, Any]:
    """A shared pool of ``n_pool`` candidates and ``n_q`` queries with one random positive each
    (engine_scale's setup: the same task as the engine benchmark)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from engine_scale import _setup

    return _setup(n_pool, n_q, None)


def self_test(ranker: VectorScoreRanker, queries: Any, n_pool: int) -> int:
    """More than ``_verify`` samples: 64 queries' scores over the whole pool in one call against
    2,000 shuffled candidates of each scored in calls of their own (one query, two queries, the
    engine's 3-query shape); they must be equal bit for bit. Returns the scores compared."""
    rng = np.random.default_rng(7)
    rows = np.sort(rng.choice(len(queries), size=min(64, len(queries)), replace=False))
    sub = queries.take(rows)
    full = ranker.score(sub, np.arange(n_pool))
    n = 0
    for size in (1, 2, 3):
        for a in range(0, len(rows), size):
            part = queries.take(rows[a : a + size])
            cols = rng.choice(n_pool, size=min(n_pool, 2000), replace=False)
            got = ranker.score(part, cols)
            want = full[a : a + size][:, cols]
            if not np.array_equal(got, want):
                bad = np.argwhere(got != want)[0]
                raise SystemExit(f"self-test: query row {rows[a + bad[0]]} candidate {cols[bad[1]]}: "
                                 f"{want[tuple(bad)]!r} in one call, {got[tuple(bad)]!r} in another")
            n += got.size
    return n


# ------------------------------------------------------------------------------ the A/B


def ab(ranker: Any, queries: Any, pool: Any, rounds: int, topk: int) -> dict:
    """verify=True vs verify=False on one ranker: a warm-up each way, then ``rounds`` rounds,
    each timing both back to back, alternating which runs first."""
    from rbench.engine.scan import scan

    def run(verify: bool) -> tuple[Any, float]:
        time.sleep(_SETTLE_S)
        t0 = time.perf_counter()
        res = scan(ranker, queries, pool, topk=topk, verify=verify)
        return res, time.perf_counter() - t0

    warm = {v: run(v)[0] for v in (True, False)}  # warm-up (numba's compile or cache load, pages)
    compile_s = max(r.timings.get("compile_s", 0.0) for r in warm.values())
    t: dict[str, list[float]] = {"on": [], "off": [], "on_wall": [], "off_wall": [], "verify": []}
    same = True
    checked = "verify_s" in warm[True].timings
    for i in range(rounds):
        order = (True, False) if i % 2 == 0 else (False, True)
        got = {}
        for v in order:
            res, wall = run(v)
            key = "on" if v else "off"
            t[key].append(res.timings["score_s"])
            t[key + "_wall"].append(wall)
            if v:
                t["verify"].append(res.timings.get("verify_s", 0.0))
            got[v] = res
        same = same and bool(np.array_equal(got[True].ranks.values, got[False].ranks.values)
                             and np.array_equal(got[True].topk_index, got[False].topk_index))
    arr = {k: np.array(v) for k, v in t.items()}
    share = arr["verify"] / arr["on"]
    return {"checked": checked, "on_s": float(np.median(arr["on"])), "off_s": float(np.median(arr["off"])),
            "ratio": float(np.median(arr["on"] / arr["off"])),
            "ratio_q": (float(np.percentile(arr["on"] / arr["off"], 25)),
                        float(np.percentile(arr["on"] / arr["off"], 75))),
            "verify_s": float(np.median(arr["verify"])), "share": float(np.median(share)),
            "share_max": float(share.max()),
            "wall_on_s": float(np.median(arr["on_wall"])), "wall_off_s": float(np.median(arr["off_wall"])),
            "wall_share": float(np.median(arr["verify"] / arr["on_wall"])),
            "same": same, "compile_s": compile_s, "rounds": rounds}


def breakdown(ranker: Any, queries: Any, pool: Any, topk: int) -> dict:
    """Where the check's time goes, from one more (untimed) verify=True evaluation: how many
    checks (batches) and queries it re-scored, and how much of ``verify_s`` the ranker's own
    ``score()`` took inside ``_verify`` (the rest is the engine's: sampling, ``take``, the
    label-free view, the comparison). Instruments by wrapping, never by copying engine code."""
    from rbench.engine import scan as engine

    state = {"inside": False, "score_s": 0.0, "calls": 0, "queries": 0, "candidates": 0}
    orig_verify, orig_score = engine._verify, ranker.score

    def score(q: Any, cand: np.ndarray) -> np.ndarray:
        if not state["inside"]:
            return orig_score(q, cand)
        t0 = time.perf_counter()
        out = orig_score(q, cand)
        state["score_s"] += time.perf_counter() - t0
        state["calls"] += 1
        state["queries"] += len(q)
        state["candidates"] += int(np.asarray(cand).size if np.ndim(cand) == 2 else len(q) * len(cand))
        return out

    def verify(*a: Any, **k: Any) -> None:
        state["inside"] = True
        try:
            orig_verify(*a, **k)
        finally:
            state["inside"] = False

    ranker.score, engine._verify = score, verify  # (an instance attribute: the scorer looks it up per call)
    try:
        time.sleep(_SETTLE_S)
        res = engine.scan(ranker, queries, pool, topk=topk, verify=True)
    finally:
        engine._verify = orig_verify
        del ranker.score
    v = res.timings.get("verify_s", 0.0)
    return {"verify_s": v, "ranker_s": state["score_s"], "engine_s": v - state["score_s"],
            "checks": state["calls"], "queries": state["queries"], "n_queries": len(queries),
            "candidates": state["candidates"]}


def ml100k_rows(rounds: int, topk: int) -> list[tuple[str, dict]]:
    from rbench.api import RunContext
    from rbench.core import paths
    from rbench.public import load_task
    from rbench.rankers import resolve_ranker

    data = load_task("ml-100k")
    out = []
    for name in ("bm25", "pop"):
        context = RunContext(cache_dir=paths.cache_dir(), seed=0, show_progress=False)
        ranker = resolve_ranker(name).cls(config=None, context=context)
        ranker.fit(data.for_fit())
        label = f"ml-100k {name} ({len(data.test):,} q x {len(data.pool):,} shared pool)"
        r = ab(ranker, data.test, data.pool, rounds, topk)
        r["split"] = breakdown(ranker, data.test, data.pool, topk)
        out.append((label, r))
    return out


def synthetic_rows(n_q: int, n_pool: int, dim: int, rounds: int, topk: int) -> tuple[list[tuple[str, dict]], int]:
    emb, q = synthetic_arrays(n_q, n_pool, dim)
    pool, queries = synthetic_task(n_q, n_pool)
    plain = VectorScoreRanker(emb, q)
    compared = self_test(plain, queries, n_pool)
    size = f"{n_q:,} q x {n_pool:,} x {dim}"
    r = ab(plain, queries, pool, rounds, topk)
    r["split"] = breakdown(plain, queries, pool, topk)
    rows = [(f"score() ranker, {size} (float64 GEMM, exact)", r)]
    del plain
    rows.append((f"EmbeddingRanker, {size} (engine's dense GEMM)",
                 ab(VectorEmbeddingRanker(emb, q), queries, pool, rounds, topk)))
    return rows, compared


# ------------------------------------------------------------------------------ report


COLS = ("row", "score_s on (median)", "score_s off (median)", "on / off (paired median)", "its quartiles",
        "verify_s (median)", "verify_s / score_s (median; goal < 2%)", "max", "verify_s / scan wall",
        "same ranks", "goal")


def cells(label: str, r: dict) -> list[str]:
    if not r["checked"]:
        verify, share, share_max, wall, goal = "-", "not checked (engine's own scores)", "-", "-", "0 by construction"
    else:
        verify = f"{1e3 * r['verify_s']:.2f} ms"
        share, share_max, wall = f"{100 * r['share']:.2f}%", f"{100 * r['share_max']:.2f}%", \
            f"{100 * r['wall_share']:.2f}%"
        goal = "ok" if r["share"] < 0.02 else "OVER"
    return [label, f"{r['on_s']:.4f}", f"{r['off_s']:.4f}", f"{r['ratio']:.3f}",
            f"{r['ratio_q'][0]:.3f}-{r['ratio_q'][1]:.3f}", verify, share, share_max, wall,
            "yes" if r["same"] else "NO", goal]


SPLIT_COLS = ("row", "checks (batches)", "queries re-scored", "candidates re-scored", "verify_s",
              "ranker's score() in it", "engine's own (sampling, take, view, compare)", "per check")


def split_cells(label: str, r: dict) -> list[str] | None:
    b = r.get("split")
    if not b:
        return None
    n = max(1, b["checks"])
    return [label, str(b["checks"]), f"{b['queries']} of {b['n_queries']:,} ({100 * b['queries'] / b['n_queries']:.2f}%)",
            f"{b['candidates']:,}", f"{1e3 * b['verify_s']:.2f} ms",
            f"{1e3 * b['ranker_s']:.2f} ms ({100 * b['ranker_s'] / max(b['verify_s'], 1e-12):.0f}%)",
            f"{1e3 * b['engine_s']:.2f} ms ({100 * b['engine_s'] / max(b['verify_s'], 1e-12):.0f}%)",
            f"{1e3 * b['verify_s'] / n:.2f} ms"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=7, help="timed rounds after the warm-up")
    ap.add_argument("--queries", type=int, default=3000, help="synthetic rows: queries")
    ap.add_argument("--candidates", type=int, default=25000, help="synthetic rows: shared pool size")
    ap.add_argument("--dim", type=int, default=128, help="synthetic rows: vector dim")
    ap.add_argument("--topk", type=int, default=100)
    ap.add_argument("--skip-ml100k", action="store_true")
    ap.add_argument("--skip-synthetic", action="store_true")
    args = ap.parse_args()
    from rich.table import Table

    from rbench.core.console import console as make_console

    console = make_console(markup=True)
    rows: list[tuple[str, dict]] = []
    compared = 0
    if not args.skip_ml100k:
        rows += ml100k_rows(args.rounds, args.topk)
    if not args.skip_synthetic:
        syn, compared = synthetic_rows(args.queries, args.candidates, args.dim, args.rounds, args.topk)
        rows += syn

    title = (f"Consistency check cost: scan(verify=True) vs verify=False, topk={args.topk}, medians of "
             f"{args.rounds} alternating rounds after a warm-up")
    t = Table(title=title)
    for c in COLS:
        t.add_column(c, justify="left" if c == "row" else "right")
    for label, r in rows:
        t.add_row(*cells(label, r))
    console.print(t)
    split = [c for label, r in rows if (c := split_cells(label, r)) is not None]
    t2 = Table(title="Where the check's time goes (one more verify=True evaluation, instrumented)")
    for c in SPLIT_COLS:
        t2.add_column(c, justify="left" if c == "row" else "right")
    for c in split:
        t2.add_row(*c)
    console.print(t2)
    if compared:
        console.print(f"self-test: {compared:,} scores of the score() ranker re-scored in other calls, "
                      "all equal bit for bit")

    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    cmd = "python benchmarks/consistency_cost.py" + ("" if len(sys.argv) == 1 else " " + shlex.join(sys.argv[1:]))
    md = [f"## Run {stamp}", "", f"Command: `{cmd}`", "",
          f"Machine: {os.cpu_count()} cores; numpy {np.__version__}. topk={args.topk}; "
          f"{args.rounds} rounds after a warm-up each way, verify=True and verify=False back to back, "
          "alternating which runs first.", "",
          "| " + " | ".join(COLS) + " |", "|" + "---|" * len(COLS)]
    md += ["| " + " | ".join(cells(label, r)) + " |" for label, r in rows]
    md += ["", "Where the check's time goes (one more verify=True evaluation, instrumented by wrapping "
           "`engine._verify` and the ranker's `score`):", "",
           "| " + " | ".join(SPLIT_COLS) + " |", "|" + "---|" * len(SPLIT_COLS)]
    md += ["| " + " | ".join(c) + " |" for c in split]
    md.append("")
    if compared:
        md += [f"Self-test of the score() ranker: {compared:,} scores re-scored in calls of 1-3 queries x "
               "2,000 shuffled candidates equal the whole-pool call's bit for bit.", ""]
    console.print("compile_s (warm-up): " + ", ".join(f"{r['compile_s']:.2f}" for _, r in rows))

    out = ROOT / "benchmarks" / "results" / "consistency_cost.md"
    from benchmarks.machine import machine_line  # (CPU, vector ISA, BLAS kernel, threads)

    header = ["# Consistency check cost", "", machine_line(), "",
              "`scan(..., verify=True)` against `verify=False` on the same fitted ranker "
              "(benchmarks/consistency_cost.py; goal, issue 28: the check's share of evaluation time "
              "< 2%). Columns: *score_s* is `EvalResult.timings['score_s']` (the scoring loop, check "
              "included); *on / off* the median of each round's ratio; *verify_s / score_s* the check's "
              "own time (`timings['verify_s']`) over score_s in the verify=True runs, median (and max) "
              "over rounds; *verify_s / scan wall* the same over the whole `scan` call (index "
              "and warm-up included). EmbeddingRankers are scored by the engine's own GEMM and never "
              "checked.", "", ""]
    earlier = ""
    if out.exists():
        text = out.read_text()
        cut = text.find("## Run ")
        earlier = text[cut:] if cut >= 0 else ""
    text = "\n".join(header + md) + "\n"
    if earlier:
        text += "\n" + earlier
    from rbench.core.atomic import atomic_write_text

    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, text)
    console.print(f"written: {out}")


if __name__ == "__main__":
    main()
