"""TIGER's cost: training time per epoch, scoring ms/query and peak memory, beside its metrics.

Two parts:

1. **From the RunRecords** (``records/<scenario>/<task>/tiger*.json``, written by
   ``rbench run --ranker tiger --task ml-100k|rec-music --set preset=cpu``): training seconds per
   epoch (training steps only, validation excluded), validation time, scoring ms/query, peak RSS,
   nDCG@10 and MRR, with the pop / bm25 / sasrec rows of the same task for reference.
2. ``--measure``: a micro-measurement in this process — training examples/s of the paper-sized
   and the CPU-preset T5 (batch 256, 82 input tokens = 20 history items x 4 codes + user + EOS,
   random tokens) and exact tree-scoring ms/query over a 1,682-item pool of RQ-KMeans IDs
   (random embeddings), for both sizes.

Usage:
    python benchmarks/tiger_cost.py [--measure] [--results-dir records]
Prints a rich table and writes benchmarks/results/tiger_cost.md. ``--measure`` takes a few
minutes: run it under ``flock /tmp/heavy.lock`` on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TASKS = (("large", "ml-100k"), ("small", "rec-music"))
REFERENCE = ("pop", "bm25", "sasrec")


def _records(results: Path) -> list[dict]:
    rows = []
    for scenario, task in TASKS:
        d = results / scenario / task
        for path in sorted(d.glob("*.json")) if d.exists() else []:
            rec = json.loads(path.read_text())
            name = rec["ranker"]["name"]
            if name != "tiger" and name not in REFERENCE:
                continue
            info = rec.get("ranker_info") or {}
            m = rec["metrics"]
            nd = dict(rec.get("run_options", {}).get("non_default", {}).get("ranker", {}))
            if name == "tiger" and nd.get("preset") == "cpu":  # the preset's own values go unsaid
                from rbench_rankers.tiger import CPU_PRESET

                nd = {k: v for k, v in nd.items() if k == "preset" or CPU_PRESET.get(k) != v}
            rows.append({
                "task": task, "ranker": name + (f" ({', '.join(f'{k}={v}' for k, v in nd.items())})" if nd else ""),
                "nDCG@10": 100 * m["nDCG@10"], "MRR": 100 * m["RR"],
                "epochs": info.get("epochs_run"), "s/epoch": info.get("s_per_epoch"),
                "train_s": info.get("train_s"), "valid_s": info.get("valid_eval_s"),
                "ms/query": rec["timings"].get("per_query_ms"), "peak_MiB": rec["peak_rss_bytes"] / 2**20,
                "scoring": info.get("scoring", "")})
    return rows


def _measure() -> list[dict]:
    import numpy as np
    import torch

    from rbench_rankers.tiger import quantiser as Q
    from rbench_rankers.tiger.model import TreeScorer, Trie, Vocab, build_t5
    from rbench_rankers.tiger.ranker import TigerOptions

    torch.manual_seed(0)
    x = np.random.default_rng(0).standard_normal((1682, 384)).astype(np.float32)
    sids = Q.fit_rq_kmeans(x, 3, 256, 0)
    vocab = Vocab((256, 256, 256, sids.collision_size), 2000)
    trie = Trie.build(vocab.tokens(sids.codes))
    out = []
    for preset in ("paper", "cpu"):
        c = TigerOptions(preset=preset)
        m = build_t5(vocab, c.d_model, c.d_ff, c.num_layers, c.num_decoder_layers, c.num_heads, c.d_kv, c.dropout, 0)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
        ids = torch.randint(2, vocab.size, (256, 82))
        mask, lab = torch.ones_like(ids), torch.randint(2, 770, (256, 4))
        m.train()
        times = []
        for _ in range(4):
            t0 = time.perf_counter()
            loss = m(input_ids=ids, attention_mask=mask, labels=lab).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            times.append(time.perf_counter() - t0)
        m.eval()
        sc = TreeScorer(m)
        q = torch.randint(2, vocab.size, (8, 82))
        with torch.inference_mode():
            best = float("inf")
            for _ in range(2):
                t0 = time.perf_counter()
                cross, bias = sc.encode(q, torch.ones_like(q))
                sc.exact(trie, cross, bias)
                best = min(best, time.perf_counter() - t0)
        out.append({"preset": preset, "params_M": sum(p.numel() for p in m.parameters()) / 1e6,
                    "train_ex_s": 256 / float(np.median(times[1:])), "score_ms_query": 1000 * best / 8,
                    "tree_nodes": [len(t) for t in trie.token]})
    return out


def _shown(path: str) -> str:
    """A results folder as the command would be typed from the repository root."""
    p = Path(path).resolve()
    return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results-dir", default=str(ROOT / "records"))
    ap.add_argument("--measure", action="store_true")
    args = ap.parse_args()
    from rich.table import Table

    from rbench.core.console import console as make_console

    rows = _records(Path(args.results_dir))
    cols = ("task", "ranker", "nDCG@10", "MRR", "epochs", "s/epoch", "train_s", "valid_s", "ms/query", "peak_MiB",
            "scoring")

    def cell(v: object) -> str:
        if v is None or v == "":
            return "–"
        return f"{v:,.2f}" if isinstance(v, float) else str(v)

    table = Table(title="TIGER cost and metrics (RunRecords)")
    for c in cols:
        table.add_column(c)
    for r in rows:
        table.add_row(*(cell(r[c]) for c in cols))
    console = make_console(markup=True)
    console.print(table)
    from benchmarks.machine import machine_line  # (CPU, vector ISA, BLAS kernel, threads)

    md = ["# TIGER: cost and metrics", "", machine_line(), "",
          f"Machine: {platform.machine()}, {platform.processor() or 'cpu'}; RunRecords from `{_shown(args.results_dir)}`.", "",
          "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    md += ["| " + " | ".join(cell(r[c]) for c in cols) + " |" for r in rows]
    if args.measure:
        meas = _measure()
        t2 = Table(title="T5 training throughput and exact scoring (synthetic, this process)")
        for c in ("preset", "params_M", "train_ex_s", "score_ms_query", "tree_nodes"):
            t2.add_column(c)
        for r in meas:
            t2.add_row(r["preset"], f"{r['params_M']:.2f}", f"{r['train_ex_s']:.1f}", f"{r['score_ms_query']:.1f}",
                       str(r["tree_nodes"]))
        console.print(t2)
        md += ["", "| preset | params (M) | training examples/s | exact scoring ms/query | tree nodes per level |",
               "|---|---:|---:|---:|---|"]
        md += [f"| {r['preset']} | {r['params_M']:.2f} | {r['train_ex_s']:.1f} | {r['score_ms_query']:.1f} | "
               f"{r['tree_nodes']} |" for r in meas]
    out = ROOT / "benchmarks" / "results" / "tiger_cost.md"
    out.write_text("\n".join(md) + "\n")
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()
