"""Reranking cost: pairs/s of the pairwise rerankers on CPU, and what depth 100 / 200 / exhaustive
would cost per paper task at the paper's sizes.

Measured (CPU, fp32, this machine): ``cross-encoder`` with the offline all-MiniLM-L6-v2 weights
(a BERT, 6 layers, 384-d; the cost of a MiniLM-L6 MS MARCO cross-encoder) and ``rankllama`` on
the offline SmolLM2-135M GGUF (Llama architecture, 30 layers, 576-d; a tiny random Llama when the
GGUF is absent), on real (query, candidate) pairs of ml-100k (and msmarco with ``--msmarco`` when
prepared), at batch sizes 1-64.

Projected (labelled so): the cost of every paper task at depth 100, 200 and exhaustive from the
best measured CPU rate; RankLLaMA-7B on CPU by scaling the SmolLM2 rate by the parameter ratio
(7B / 135M: compute-bound decoders scale ~linearly with parameters); RankLLaMA-7B on an H100 from
issue 15's figure (8-10 ms/pair: 100 pairs/s). No GPU number here is measured: the GPU rates
are measured by ``benchmarks/rerank_cost_gpu.py`` on a CUDA machine.

Usage:
    nice -n 19 python benchmarks/rerank_cost.py [--pairs 128] [--batch-sizes 1,4,16,64] [--msmarco]
Prints a rich table and writes benchmarks/results/rerank_cost.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SMOLLM = Path("~/.cache/rbench-models/SmolLM2-135M-Instruct.Q4_1.gguf").expanduser()
H100_RANKLLAMA_7B = 100.0  # pairs/s, issue 15 (8-10 ms/pair on an H100): projected, not measured


def real_pairs(task_name: str, n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """``n`` (query text, candidate text) pairs of a task's test split: positives and random items."""
    from rbench.tasks.registry import load_task

    task = load_task(task_name)
    rng = np.random.default_rng(seed)
    q = rng.integers(0, len(task.test), n)
    pos = [task.test.positives[int(i)] for i in q]
    cand = [int(p[0]) if j % 2 == 0 and len(p) else int(rng.integers(0, len(task.pool))) for j, p in enumerate(pos)]
    return [str(task.test.texts[int(i)]) for i in q], task.pool.text_batch(np.array(cand))


def tiny_llama(dest: Path) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForSequenceClassification

    from tests.lranker_testkit import _word_tokenizer

    _, tok = _word_tokenizer(["[PAD]", "[UNK]", "<s>", "</s>"], bos_token="<s>", eos_token="</s>")
    tok.save_pretrained(dest)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, num_labels=1)
    torch.manual_seed(0)
    LlamaForSequenceClassification(cfg).save_pretrained(dest)
    return dest


def measure(ranker, qs, docs, batch_sizes, min_pairs) -> tuple[dict[int, float], float]:
    """pairs/s per batch size (one warm-up batch first), and mean tokens per pair."""
    ranker.load()
    out = {}
    for bs in batch_sizes:
        ranker.cfg.batch_size = bs
        n = min(len(qs), max(min_pairs, 2 * bs))
        ranker.score_pairs(qs[:bs], docs[:bs])  # warm-up
        t0 = time.perf_counter()
        ranker.score_pairs(qs[:n], docs[:n])
        out[bs] = n / (time.perf_counter() - t0)
    enc = ranker.inputs(qs, docs) if hasattr(ranker, "inputs") else ranker._batch(qs, docs)
    return out, float(enc["attention_mask"].sum()) / len(qs)


def human(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def projection_rows(rates: list[tuple[str, float, str]]) -> list[tuple[str, ...]]:
    """Per paper task and (reranker, pairs/s, basis): the cost of depth 100, 200 and exhaustive at
    the paper's sizes (queries x min(depth, candidates) pairs / rate)."""
    from rbench.tasks.registry import TASKS

    rows = []
    for name, spec in TASKS.items():
        if not spec.paper_queries or not spec.paper_candidates:
            continue
        nq, nc = spec.paper_queries, spec.paper_candidates
        for label, rate, basis in rates:
            cells = [human(nq * min(d, nc) / rate) for d in (100, 200)] + [human(nq * nc / rate)]
            rows.append((label, basis, f"{rate:.3g}", name, f"{nq:,}", f"{nc:,}", *cells))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=128, help="real pairs per task (timed pairs per batch size)")
    ap.add_argument("--min-pairs", type=int, default=32, help="pairs timed per batch size at least")
    ap.add_argument("--batch-sizes", default="1,4,16,64")
    ap.add_argument("--msmarco", action="store_true", help="also time msmarco pairs (needs the prepared task)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    import tempfile

    import torch
    from rich.table import Table

    from rbench.core.console import console as make_console
    from rbench.rankers import ranker_config
    from rbench_rankers.cross_encoder import CrossEncoderRanker
    from rbench_rankers.rankllama import RankLlamaRanker
    torch.set_num_threads(args.threads)
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    tasks = ["ml-100k"] + (["msmarco"] if args.msmarco else [])
    pairs = {}
    for t in tasks:
        try:
            pairs[t] = real_pairs(t, args.pairs)
        except Exception as exc:  # a task not prepared here
            print(f"skipping {t}: {type(exc).__name__}: {exc}")
    tmp = Path(tempfile.mkdtemp(prefix="rerank-cost-"))
    if SMOLLM.exists():
        llama_label, llama_base = "rankllama (SmolLM2-135M GGUF, random head)", "smollm2-135m"
    else:
        llama_label, llama_base = "rankllama (tiny random Llama 2x64)", str(tiny_llama(tmp / "llama"))
    models = [
        ("cross-encoder (all-MiniLM-L6-v2 weights)",
         CrossEncoderRanker(config=ranker_config(CrossEncoderRanker, {"model": "all-MiniLM-L6-v2", "device": "cpu"}))),
        (llama_label, RankLlamaRanker(config=ranker_config(RankLlamaRanker, {
            "base": llama_base, "adapter": "", "device": "cpu", "max_length": "512"}))),
    ]
    rows, best = [], {}
    for label, ranker in models:
        for t, (qs, docs) in pairs.items():
            rates, toks = measure(ranker, qs, docs, batch_sizes, args.min_pairs)
            rows.append((label, t, toks, rates))
            best[label] = max(best.get(label, 0.0), max(rates.values()))

    con = make_console(markup=True)
    tab = Table(title=f"pairs/s on CPU ({args.threads} threads, fp32), measured")
    for c in ["reranker", "task pairs", "tokens/pair", *[f"bs={b}" for b in batch_sizes]]:
        tab.add_column(c, justify="right" if c != "reranker" else "left")
    for label, t, toks, rates in rows:
        tab.add_row(label, t, f"{toks:.0f}", *[f"{rates[b]:.1f}" for b in batch_sizes])
    con.print(tab)

    smol = next((v for k, v in best.items() if "SmolLM2" in k), None)
    rates = [(k, v, "CPU measured") for k, v in best.items()]
    if smol:
        rates.append(("RankLLaMA-7B", smol * 135e6 / 6.74e9, "CPU projected (SmolLM2 rate x 135M/6.74B)"))
    rates.append(("RankLLaMA-7B", H100_RANKLLAMA_7B, "H100 projected (issue 15: ~10 ms/pair)"))
    proj = Table(title="projected cost per paper task (paper sizes; pairs / rate)")
    for c in ["reranker", "basis", "pairs/s", "task", "queries", "candidates", "depth 100", "depth 200", "exhaustive"]:
        proj.add_column(c)
    prow = projection_rows(rates)
    for r in prow:
        proj.add_row(*r)
    con.print(proj)

    from benchmarks.machine import machine_line  # (CPU, vector ISA, BLAS kernel, threads)

    md = ["# Reranking cost", "", machine_line(), "",
          f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs visible, "
          f"torch {torch.__version__}, {args.threads} threads, fp32. Command: "
          f"`nice -n 19 python benchmarks/rerank_cost.py {' '.join(sys.argv[1:])}`.", "",
          "## pairs/s on CPU (measured, real pairs)", "",
          "| reranker | task pairs | tokens/pair | " + " | ".join(f"bs={b}" for b in batch_sizes) + " |",
          "|---|---|---|" + "---|" * len(batch_sizes)]
    for label, t, toks, r in rows:
        md.append(f"| {label} | {t} | {toks:.0f} | " + " | ".join(f"{r[b]:.1f}" for b in batch_sizes) + " |")
    md += ["", "## Projected cost per paper task (pairs at the paper's sizes / the rate; **projected**)", "",
           "Depth d costs queries x min(d, candidates) pairs; exhaustive queries x candidates. "
           "CPU rows use the best measured batch size; the RankLLaMA-7B rows are projections "
           "(parameter-ratio scaling on CPU, issue 15's H100 figure), not measurements.", "",
           "| reranker | basis | pairs/s | task | queries | candidates | depth 100 | depth 200 | exhaustive |",
           "|---|---|---|---|---|---|---|---|---|"]
    md += ["| " + " | ".join(r) + " |" for r in prow]
    from rbench.core.atomic import atomic_write_text

    out = ROOT / "benchmarks" / "results" / "rerank_cost.md"
    atomic_write_text(out, "\n".join(md) + "\n")
    con.print(f"wrote {out}")


if __name__ == "__main__":
    main()
