"""Reranking cost on a CUDA GPU, measured: pairs/s of the paper's pairwise rerankers' architectures
(monoBERT = BERT-base, BGE-Reranker-v2-m3 = XLM-R large, RankLLaMA-7B = Llama-2-7B, and the
MiniLM-L6 that ``rerank_cost.py`` times on CPU) at the token lengths of real task pairs, and what
depth 100 / 200 / exhaustive costs per paper task at those rates.

Why random weights: the released checkpoints cannot be fetched here (and 7B weights do not fit
the 64 MiB that travels to a lent GPU machine), so each model is built from its published
configuration with random weights. A transformer's forward pass has no data-dependent control
flow, so its time depends on the architecture, the dtype and the token counts, never on the
weight values: the rates are those of the released models at these lengths.

Two steps, because the tokenizers live on the CPU machine and the GPU lives elsewhere:

1. ``python benchmarks/rerank_cost_gpu.py lengths --out .gpu/lengths.json [--msmarco]`` (CPU):
   tokenizes real (query, candidate) pairs of ml-100k (and msmarco DL19) exactly as the rankers
   do -- ``cross-encoder``'s BERT WordPiece pair encoding (max 512) and ``rankllama``'s
   ``query: q</s>`` / ``document: d</s>`` encoding with SmolLM2's BPE (max 512) -- and saves the
   token count of each pair. XLM-R large is fed the WordPiece counts (its SentencePiece
   tokenizer is not available offline; counts differ by a few percent), Llama-2-7B the SmolLM2
   BPE counts (a Llama-family BPE; Llama-2's own tokenizer is not available offline).
2. ``python benchmarks/rerank_cost_gpu.py measure --lengths .gpu/lengths.json`` (GPU): for each
   architecture and batch size, the pairs are scored in length-sorted batches (as
   ``score_pairs`` does), each batch right-padded to its longest pair with random token ids,
   fp16 for the encoders and bf16 for Llama (the dtypes their cards use on GPU), SDPA attention,
   ``torch.inference_mode``; one warm-up pass, then the median of ``--repeats`` timed passes over
   all pairs (``torch.cuda.synchronize`` around each). Tokenization is not timed (CPU work that
   overlaps the GPU in a real pipeline).

Writes ``benchmarks/results/rerank_cost_gpu.md`` (the device, the command, pairs/s per batch size,
projected cost per paper task at the best batch size, labelled as measured rates x paper sizes).
Without CUDA ``measure`` prints one line and exits 0 (``--device cpu --tiny`` smoke-tests it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


@dataclass(frozen=True)
class Architecture:
    """A reranker's published configuration, as the ``transformers`` config class takes it."""

    label: str
    family: str  # "bert" | "xlm-roberta" | "llama": which config/model class builds it
    lengths: str  # which saved token counts it is fed ("wordpiece" | "bpe")
    dtype: str
    config: dict


ARCHITECTURES = (
    Architecture("MiniLM-L6 cross-encoder (22.7M)", "bert", "wordpiece", "float16",
                 dict(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                      intermediate_size=1536, max_position_embeddings=512)),
    Architecture("monoBERT, BERT-base (110M)", "bert", "wordpiece", "float16",
                 dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                      intermediate_size=3072, max_position_embeddings=512)),
    Architecture("BGE-Reranker-v2-m3, XLM-R large (568M)", "xlm-roberta", "wordpiece", "float16",
                 dict(vocab_size=250002, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                      intermediate_size=4096, max_position_embeddings=8194, pad_token_id=1)),
    Architecture("RankLLaMA-7B, Llama-2-7B", "llama", "bpe", "bfloat16",
                 dict(vocab_size=32000, hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                      num_key_value_heads=32, intermediate_size=11008, max_position_embeddings=4096,
                      pad_token_id=0)),
)
TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)


# -- step 1: token counts of real pairs (CPU machine) ------------------------------------------


def save_lengths(out: Path, pairs: int, msmarco: bool) -> None:
    from benchmarks.rerank_cost import SMOLLM, real_pairs
    from rbench.core.atomic import atomic_write_text
    from rbench.rankers import ranker_config
    from rbench_rankers.cross_encoder import CrossEncoderRanker
    from rbench_rankers.rankllama import RankLlamaRanker

    ce = CrossEncoderRanker(config=ranker_config(CrossEncoderRanker, {"model": "all-MiniLM-L6-v2", "device": "cpu"}))
    ce.load()
    llama = None
    if SMOLLM.exists():
        llama = RankLlamaRanker(config=ranker_config(RankLlamaRanker, {
            "base": "smollm2-135m", "adapter": "", "device": "cpu", "max_length": "512"}))
        llama.load()
    saved: dict[str, dict[str, list[int]]] = {}
    for task in ["ml-100k"] + (["msmarco"] if msmarco else []):
        qs, docs = real_pairs(task, pairs)
        counts = {"wordpiece": [int(n) for n in ce._batch(qs, docs)["attention_mask"].sum(1)]}
        if llama is not None:
            counts["bpe"] = [int(n) for n in llama.inputs(qs, docs)["attention_mask"].sum(1)]
        saved[task] = counts
        print(task, {k: f"{np.mean(v):.0f} tokens/pair (max {max(v)})" for k, v in counts.items()})
    command = "python benchmarks/rerank_cost_gpu.py " + " ".join(sys.argv[1:])
    atomic_write_text(out, json.dumps({"command": command, "tasks": saved}))
    print(f"wrote {out}")


# -- step 2: pairs/s on the GPU ----------------------------------------------------------------


def build(arch: Architecture, device: str, tiny: bool):
    import torch
    from transformers import (
        BertConfig,
        BertForSequenceClassification,
        LlamaConfig,
        LlamaForSequenceClassification,
        XLMRobertaConfig,
        XLMRobertaForSequenceClassification,
    )

    config_cls, model_cls = {
        "bert": (BertConfig, BertForSequenceClassification),
        "xlm-roberta": (XLMRobertaConfig, XLMRobertaForSequenceClassification),
        "llama": (LlamaConfig, LlamaForSequenceClassification),
    }[arch.family]
    params = {**arch.config, **(TINY if tiny else {})}
    if arch.family == "llama" and tiny:
        params["num_key_value_heads"] = TINY["num_attention_heads"]
    cfg = config_cls(**params, num_labels=1, attn_implementation="sdpa")
    dtype = getattr(torch, arch.dtype)
    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # built directly in its dtype, on the device: no fp32 copy of 7B
    try:
        with torch.device(device):
            model = model_cls(cfg)
    finally:
        torch.set_default_dtype(previous)
    return model.eval()


def batches(lengths: list[int], batch_size: int, vocab: int, pad: int, device: str, seed: int = 0):
    """Length-sorted, right-padded batches of random ids: ``score_pairs``' batching."""
    import torch

    rng = np.random.default_rng(seed)
    order = sorted(lengths, reverse=True)
    out = []
    for a in range(0, len(order), batch_size):
        chunk = order[a : a + batch_size]
        width = chunk[0]
        ids = rng.integers(3, vocab, size=(len(chunk), width))
        mask = np.arange(width)[None, :] < np.array(chunk)[:, None]
        ids[~mask] = pad
        out.append((torch.as_tensor(ids, device=device), torch.as_tensor(mask.astype(np.int64), device=device)))
    return out


def pairs_per_second(model, lengths: list[int], batch_size: int, repeats: int, device: str) -> float:
    import torch

    vocab = model.config.vocab_size
    pad = model.config.pad_token_id or 0
    work = batches(lengths, batch_size, vocab, pad, device)

    def once() -> float:
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.inference_mode():
            for ids, mask in work:
                model(input_ids=ids, attention_mask=mask)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    once()  # warm-up: kernels, allocator
    return len(lengths) / statistics.median(once() for _ in range(repeats))


def measure(args: argparse.Namespace) -> int:
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("rerank_cost_gpu: no CUDA device (torch.cuda.is_available() is False); nothing to measure here.")
        return 0
    from rich.table import Table

    from benchmarks.rerank_cost import projection_rows
    from rbench.core.atomic import atomic_write_text
    from rbench.core.console import console as make_console

    lengths_file = json.loads(Path(args.lengths).read_text())
    saved = lengths_file["tasks"]
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    device_name = torch.cuda.get_device_name() if args.device.startswith("cuda") else args.device
    console = make_console(markup=True)
    rows: list[tuple[str, str, float, dict[int, float]]] = []
    best: dict[str, float] = {}

    def report(final: bool) -> None:
        """The md is rewritten after each architecture: a run cut short keeps what it measured."""
        table = Table(title=f"pairs/s on {device_name} (measured; random weights of each architecture)")
        for c in ["architecture", "dtype", "task pairs", "tokens/pair", *[f"bs={b}" for b in sizes]]:
            table.add_column(c, justify="left" if c in ("architecture", "task pairs") else "right")
        dtypes = {a.label: a.dtype for a in ARCHITECTURES}
        for label, task, toks, rates in rows:
            table.add_row(label, dtypes[label], task, f"{toks:.0f}", *[f"{rates[b]:,.0f}" for b in sizes])
        basis = f"{device_name} measured"
        proj = projection_rows([(label, rate, basis) for label, rate in best.items()])
        cmd = "python benchmarks/rerank_cost_gpu.py " + " ".join(sys.argv[1:])
        from benchmarks.machine import machine_line  # (CPU, vector ISA, BLAS kernel, threads)

        md = ["# Reranking cost on a GPU (measured)", "", machine_line(), "",
              f"Device: {device_name}, torch {torch.__version__}"
              + (f", CUDA {torch.version.cuda}" if args.device.startswith("cuda") else "")
              + f". Command: `{cmd}`" + (" (tiny configs: a smoke test, not the architectures)" if args.tiny else "")
              + f". Token counts from `{lengths_file['command']}` (CPU machine).", "",
              "Each architecture is built from its published configuration with random weights (a forward "
              "pass's time does not depend on the weight values) and fed random token ids at the token counts "
              "of real pairs (length-sorted batches, right-padded, as `score_pairs` batches them); median of "
              f"{args.repeats} timed passes after a warm-up; tokenization not timed.", "",
              "| architecture | dtype | task pairs | tokens/pair | " + " | ".join(f"bs={b}" for b in sizes) + " |",
              "|---|---|---|---|" + "---|" * len(sizes)]
        md += [f"| {label} | {dtypes[label]} | {task} | {toks:.0f} | " + " | ".join(f"{r[b]:,.0f}" for b in sizes) + " |"
               for label, task, toks, r in rows]
        md += ["", "## Cost per paper task at the best measured batch size (pairs at the paper's sizes / rate)", "",
               "| reranker | basis | pairs/s | task | queries | candidates | depth 100 | depth 200 | exhaustive |",
               "|---|---|---|---|---|---|---|---|---|"]
        md += ["| " + " | ".join(r) + " |" for r in proj]
        out = Path(args.out)
        atomic_write_text(out, "\n".join(md) + "\n")
        if final:
            console.print(table)
        console.print(f"wrote {out}")

    for arch in ARCHITECTURES:
        tasks = [t for t in saved if arch.lengths in saved[t]]
        if not tasks:
            console.print(f"- {arch.label}: no {arch.lengths} token counts saved; skipped")
            continue
        t0 = time.perf_counter()
        model = build(arch, args.device, args.tiny)
        console.print(f"{arch.label}: built in {time.perf_counter() - t0:.1f} s")
        for task in tasks:
            lengths = saved[task][arch.lengths][: args.pairs]
            rates = {}
            for bs in sizes:
                rates[bs] = pairs_per_second(model, lengths, bs, args.repeats, args.device)
                console.print(f"{arch.label} {task} bs={bs}: {rates[bs]:,.0f} pairs/s")
            rows.append((arch.label, task, float(np.mean(lengths)), rates))
            best[arch.label] = max(best.get(arch.label, 0.0), max(rates.values()))
        del model
        report(final=False)
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()

    report(final=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="step", required=True)
    lengths = sub.add_parser("lengths", help="token counts of real pairs (CPU machine)")
    lengths.add_argument("--out", type=Path, required=True)
    lengths.add_argument("--pairs", type=int, default=512)
    lengths.add_argument("--msmarco", action="store_true", help="also msmarco pairs (needs the prepared task)")
    run = sub.add_parser("measure", help="pairs/s on the GPU")
    run.add_argument("--lengths", type=Path, required=True)
    run.add_argument("--pairs", type=int, default=512, help="pairs timed per task (from the saved counts)")
    run.add_argument("--batch-sizes", default="1,16,64,256")
    run.add_argument("--repeats", type=int, default=3)
    run.add_argument("--device", default="cuda")
    run.add_argument("--tiny", action="store_true", help="tiny configs (smoke test of the code path)")
    run.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "rerank_cost_gpu.md"))
    args = ap.parse_args(argv)
    if args.step == "lengths":
        save_lengths(args.out, args.pairs, args.msmarco)
        return 0
    return measure(args)


if __name__ == "__main__":
    raise SystemExit(main())
