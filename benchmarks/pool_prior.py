"""The pool prior on pools built from positives (issue 40): what "push every train/valid
positive to the bottom" gets with no skill, what the ``prior`` floor gets, and what distractors
(``task.distractors=N``) leave of it.

ESCI's default pool is the chosen positive of each sampled query; the train/valid positives that
``fit`` is handed are ~90% of it and almost never a test answer. MS MARCO ``pool=all`` (every
judged passage of the sampled queries) has the same structure, weaker (~1 in 8 candidates is a
positive). This script writes files in the real formats (ESCI's two parquet files, MS MARCO v1.1
QnA JSON lines) into a throw-away ``RBENCH_HOME`` and scores, on each:

- ``random`` (chance) and ``prior`` (the floor: train/valid positives last, else random);
- ``pushdown``: a plugin a cheating author could write (never reads a label it is not handed:
  ``fit`` gets train/valid positives by contract), its train/valid positives at the bottom and
  every other candidate by a per-query hash; the ``prior`` floor must equal it, so a ranker that
  only does this is marked ``▽``;
- ``bm25`` and ``bm25 + pushdown`` (the same filter added to a real ranker).

Each configuration runs under both protocols (``--protocols``): ``excluded``, the default since
``rbench.tasks.fit_positives`` (the train/valid positives left out of every test ranking, a test
query whose answer is one of them dropped and counted), where ``bm25 + pushdown`` must equal
``bm25``; and ``kept`` (``task.exclude_fit_positives=false``, the paper's protocol), where the
filter gains with no skill.

Generated data, so texts carry a weak signal only (an E product shares one word with its query).

Usage:
    python benchmarks/pool_prior.py                                   # ESCI 600 queries, MS MARCO 3,038
    python benchmarks/pool_prior.py --esci-queries 600 --distractors 0 5000
Prints one table and writes benchmarks/results/pool_prior.md (this run on top).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import shlex
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np

WORDS = [f"w{i}" for i in range(5000)]


def write_esci(d: Path, n_queries: int, n_products: int, seed: int) -> None:
    """ESCI's two parquet files: each query judges 5-20 products of ``n_products`` (E, S, C, I), at
    least one E; the products file lists every product (the collection distractors come from)."""
    import pandas as pd

    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    eid = 0
    for q in range(n_queries):
        qwords = rng.sample(WORDS, 3)
        judged = rng.sample(range(n_products), rng.randint(5, 20))
        labels = [rng.choice("ESCI") for _ in judged]
        if "E" not in labels:
            labels[0] = "E"
        for p, label in zip(judged, labels):
            rows.append({"example_id": eid, "query": " ".join(qwords), "query_id": q, "product_id": f"B{p:07d}",
                         "product_locale": "us", "esci_label": label, "small_version": 1, "large_version": 1,
                         "split": "train", "_word": qwords[0] if label == "E" else rng.choice(WORDS)})
            eid += 1
    ex = pd.DataFrame(rows)
    word = dict(zip(ex["product_id"], ex["_word"]))
    ex.drop(columns="_word").to_parquet(d / "shopping_queries_dataset_examples.parquet", index=False)
    products = pd.DataFrame({"product_id": [f"B{p:07d}" for p in range(n_products)]})
    products["product_title"] = [" ".join([word.get(pid, rng.choice(WORDS)), *rng.sample(WORDS, 4)])
                                 for pid in products["product_id"]]
    products["product_description"] = ""
    products["product_bullet_point"] = ""
    products["product_brand"] = None
    products["product_color"] = ""
    products["product_locale"] = "us"
    products.to_parquet(d / "shopping_queries_dataset_products.parquet", index=False)


def write_qna(d: Path, n_queries: int, seed: int) -> None:
    """MS MARCO v1.1 QnA lines: 8 passages a query (one selected), passages never shared, plus as
    many queries again that the default sample (3,038) may leave out: the rest of the collection."""
    rng = random.Random(seed)
    with open(d / "ms_marco_v1.1_train.jsonl", "w", encoding="utf-8") as fh:
        for q in range(n_queries):
            qwords = rng.sample(WORDS, 3)
            k = 8
            sel = [0] * k
            sel[rng.randrange(k)] = 1
            texts = [" ".join([qwords[0] if s else rng.choice(WORDS), *rng.sample(WORDS, 6), f"n{q}x{j}"])
                     for j, s in enumerate(sel)]
            fh.write(json.dumps({"query_id": q, "query": " ".join(qwords), "query_type": "DESCRIPTION",
                                 "answers": ["a"], "passages": [{"is_selected": s, "passage_text": t, "url": ""}
                                                                for s, t in zip(sel, texts)]}) + "\n")


class PushDown:
    """The cheat of issue 40's table: train/valid positives (handed to ``fit``) at the bottom,
    everything else by a per-query hash; or, on top of a real ranker, that ranker's own scores
    (ties and all), so that where the known positives are excluded it ranks exactly as the ranker."""

    name = "pushdown"
    version = "1"
    config: dict[str, Any] = {}

    def __init__(self, base: Any | None = None) -> None:
        self.base = base

    def fit(self, task: Any) -> None:
        ids = task.fit_pool.ids
        self.seen = {str(ids[i]) for split in (task.train, task.valid) for i in split.positives.values}
        if self.base is not None:
            self.base.fit(task)

    def index(self, pool: Any) -> None:
        self.down = np.array([str(i) in self.seen for i in pool.ids], dtype=bool)
        self.ids = np.array([zlib.crc32(str(i).encode()) for i in pool.ids], dtype=np.uint64)
        if self.base is not None:
            self.base.index(pool)

    def score(self, queries: Any, candidates: np.ndarray) -> np.ndarray:
        cand = candidates if candidates.ndim == 2 else np.broadcast_to(candidates, (len(queries), len(candidates)))
        qh = np.array([zlib.crc32(str(q).encode()) for q in queries.ids], dtype=np.uint64)
        with np.errstate(over="ignore"):
            h = ((qh[:, None] * np.uint64(0x9E3779B97F4A7C15)) ^ self.ids[cand]) * np.uint64(0xBF58476D1CE4E5B9)
        own = (h >> np.uint64(11)).astype(np.float64) / float(1 << 53)
        if self.base is not None:  # the base's own scores (its ties too), the known positives below all
            b = np.asarray(self.base.score(queries, candidates), dtype=np.float64)
            return np.where(self.down[cand], b - 1e6, b)  # bm25 scores stay far below 1e6
        return np.where(self.down[cand], own - 2.0, own)


class BM25PushDown(PushDown):
    """The same filter on top of bm25's scores (its own record row)."""

    name = "bm25-pushdown"


def run_task(task: str, task_options: dict[str, Any], seed: int,
             results: Path) -> list[tuple[str, float, float, dict[str, Any], str]]:
    """Every ranker on one task configuration, records written to ``results``; each row with its
    ``▽`` mark as the leaderboard sets it (against the floors of its column)."""
    import rbench
    from rbench.api import RunContext
    from rbench.tasks.registry import load, resolve
    from rbench_rankers.bm25 import BM25Ranker

    t = resolve(task)
    info = load(t, t.options({k: str(v) for k, v in task_options.items()}), seed=seed).info
    out, cells = [], []
    for name, ranker in (("random", "random"), ("prior", "prior"), ("pushdown", PushDown()), ("bm25", "bm25"),
                         ("bm25 + pushdown", BM25PushDown(BM25Ranker(context=RunContext(
                             cache_dir=Path(os.environ["RBENCH_HOME"]) / "bench-cache", seed=seed))))):
        rec = rbench.evaluate(ranker, task, task_options=task_options, seed=seed, results_dir=results,
                              overwrite="always")
        cells.append((rec.row_key, rec.column_key))
        out.append((name, rec.metrics["RR"], rec.metrics["nDCG@10"], info))
    from rbench.results.leaderboard import build

    below = build(results, "large").below_floors()
    return [(*row, "▽" if cell in below else "") for row, cell in zip(out, cells)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--esci-queries", type=int, default=600)
    ap.add_argument("--esci-products", type=int, default=200_000)
    ap.add_argument("--msmarco-queries", type=int, default=6000, help="queries in the QnA file (3,038 sampled)")
    ap.add_argument("--distractors", type=int, nargs="+", default=[0, 5000])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--protocols", nargs="+", choices=("excluded", "kept"), default=["excluded", "kept"],
                    help="excluded: task.exclude_fit_positives=true (the default); kept: =false")
    ap.add_argument("--out", default="benchmarks/results/pool_prior.md")
    args = ap.parse_args(argv)
    home = Path(tempfile.mkdtemp(prefix="rbench-pool-prior-"))
    os.environ["RBENCH_HOME"] = str(home)
    for name in ("esci", "msmarco"):
        (home / "raw" / name).mkdir(parents=True)
    write_esci(home / "raw" / "esci", args.esci_queries, args.esci_products, args.seed)
    write_qna(home / "raw" / "msmarco", args.msmarco_queries, args.seed)
    runs = [("esci", {"n_queries": args.esci_queries, "distractors": n}) for n in args.distractors]
    runs += [("msmarco", {"distractors": n}) for n in args.distractors]
    lines = ["| task | options | protocol | test queries (dropped) | pool | fit-positive share | ranker | MRR | "
             "nDCG@10 | ▽ |", "|---|---|---|---|---|---|---|---|---|---|"]
    for task, base in runs:
        for protocol in args.protocols:
            opts = {**base, "exclude_fit_positives": protocol == "excluded"}
            for name, rr, ndcg, info, mark in run_task(task, opts, args.seed, home / "results"):
                shown = ", ".join(f"{k}={v}" for k, v in base.items())
                lines.append(f"| {task} | {shown} | {protocol} | {info['n_test']} "
                             f"({info.get('fit_positive_targets_dropped', 0)}) | {info['n_candidates']:,} | "
                             f"{info['pool_fit_positive_share']:.3f} | {name} | {rr:.4f} | {ndcg:.4f} | {mark} |")
                print(lines[-1], flush=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    cmd = "python benchmarks/pool_prior.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    block = "\n".join([f"## {stamp}", "", f"`{cmd.strip()}` (generated ESCI / MS MARCO v1.1 files, seed "
                       f"{args.seed}; MRR and nDCG@10 as fractions; ▽: the leaderboard's mark, does not beat "
                       "the column's floors)", "", *lines, ""])
    out = Path(args.out)
    old = out.read_text(encoding="utf-8").split("\n", 2)[2] if out.is_file() else ""
    out.write_text("# Pool prior (benchmarks/pool_prior.py)\n\n" + block + "\n" + old, encoding="utf-8")
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
