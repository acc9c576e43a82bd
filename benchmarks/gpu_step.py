"""One LRanker training step and the pool/query encoding at the paper's backbone size, on a GPU.

The paper trains Qwen3-0.6B with LoRA (r=32, alpha=64) in bf16 with gradient checkpointing, batch
20, query prompts up to 512 tokens and candidates up to 256, 127 sampled negatives. Qwen3-0.6B's
weights cannot be fetched on the lent GPU machines (no network), so this builds a Qwen3 from
Qwen3-0.6B's published config (hidden 1024, 28 layers, 16 query / 8 key-value heads of 128, FFN
3072, vocabulary 151,936) with random weights -- the arithmetic and memory of a step do not depend
on the weights -- and runs LRanker's own model code (``rbench_rankers.lranker.model``: LoRA on
attention and feed-forward, the soft prompt at ``<|embedding|>``, InfoNCE over the step's
positives and negatives, AdamW) on full-length inputs.

Reported: median seconds per optimiser step (after warm-up steps, CUDA-synchronised), the
projection of the paper's schedule from it (labelled PROJECTION), peak GPU memory, and the encoding
throughput of candidates (256 tokens) and query prompts (512 tokens) in eval mode. Writes
``benchmarks/results/gpu_step.md`` when it ran on CUDA.

    python benchmarks/gpu_step.py [--steps 8] [--device cuda]
    python benchmarks/gpu_step.py --device cpu --hidden 64 --layers 2 --steps 2   # code-path check
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

QWEN3_06B = {"vocab_size": 151936, "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
             "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
             "max_position_embeddings": 40960, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
             "tie_word_embeddings": True}


def build(dest: Path, hidden: int | None, layers: int | None) -> int:
    """A random Qwen3 of Qwen3-0.6B's shape (or smaller, for a CPU check) with a word tokenizer."""
    import torch
    from transformers import Qwen3Config, Qwen3Model

    from tests.lranker_testkit import _word_tokenizer

    _, tok = _word_tokenizer(["[PAD]", "[UNK]", "<|endoftext|>"], pad_token="[PAD]", eos_token="<|endoftext|>")
    tok.save_pretrained(dest)
    shape = dict(QWEN3_06B)
    if hidden:
        shape.update(hidden_size=hidden, intermediate_size=3 * hidden, head_dim=max(8, hidden // 16))
    if layers:
        shape["num_hidden_layers"] = layers
    torch.manual_seed(0)
    model = Qwen3Model(Qwen3Config(**shape)).to(torch.bfloat16)
    model.save_pretrained(dest)
    return sum(p.numel() for p in model.parameters())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=8, help="timed optimiser steps (after 2 warm-up steps)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--negatives", type=int, default=127)
    ap.add_argument("--query-len", type=int, default=512)
    ap.add_argument("--cand-len", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=0, help="smaller model for a CPU check (0: Qwen3-0.6B's)")
    ap.add_argument("--layers", type=int, default=0)
    ap.add_argument("--encode-items", type=int, default=2048)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "gpu_step.md")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F

    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_step: no CUDA device; run with --device cpu --hidden 64 --layers 2 for a code-path check")
        return 0
    from rbench_rankers.lranker.config import LRankerConfig
    from rbench_rankers.lranker.model import LRankerModel, load_backbone

    dev = torch.device(args.device)
    work = Path(tempfile.mkdtemp(prefix="gpu-step-"))
    t0 = time.perf_counter()
    n_params = build(work, args.hidden or None, args.layers or None)
    build_s = time.perf_counter() - t0
    cfg = LRankerConfig(model=str(work), device=args.device, batch_size=args.batch, n_negatives=args.negatives,
                        max_length=args.query_len, candidate_max_length=args.cand_len)
    model = LRankerModel(cfg, load_backbone(cfg))
    model.attach_projector(model.info.hidden)  # slots are base embeddings e(c) of the hidden size
    model.make_trainable()
    model.to(dev)
    opt = torch.optim.AdamW(model.trainable_parameters(), lr=cfg.lr)
    words = "w1 " * (4 * args.query_len)
    prompt = "Task: Recommendation. <|embedding|> Query: " + words
    n_cand = args.batch + args.negatives
    qb = model.tokens.queries([prompt] * args.batch, [words] * args.batch, with_placeholder=True).to(dev)
    cb = model.tokens.candidates(["w2 " * (2 * args.cand_len)] * n_cand).to(dev)
    slots = torch.randn(args.batch, cfg.n_clusters, model.info.hidden)
    target = torch.arange(args.batch, device=dev)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize()

    model.train()
    times = []
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for i in range(2 + args.steps):
        sync()
        t = time.perf_counter()
        soft = model.project(slots)
        hq = model.query_tokens_embeddings(qb, soft)
        hc = model.candidate_tokens_embeddings(cb)
        loss = F.cross_entropy((hq.float() @ hc.float().T) * model.scale, target)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.trainable_parameters(), cfg.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        if i >= 2:
            times.append(time.perf_counter() - t)
    peak_train = torch.cuda.max_memory_allocated() / 2**30 if dev.type == "cuda" else float("nan")
    step_s = statistics.median(times)
    model.eval()
    texts = ["w3 " * (2 * args.cand_len)] * args.encode_items
    model.candidate_embeddings(texts[: cfg.encode_batch_size], adapted=True)  # warm-up
    sync()
    t = time.perf_counter()
    for a in range(0, len(texts), 256):
        model.candidate_embeddings(texts[a:a + 256], adapted=True)
    sync()
    cand_per_s = len(texts) / (time.perf_counter() - t)
    n_q = max(64, args.encode_items // 8)
    with torch.no_grad():
        t = time.perf_counter()
        for a in range(0, n_q, 64):
            b = min(64, n_q - a)
            qe = model.tokens.queries([prompt] * b, [words] * b, with_placeholder=True).to(dev)
            model.query_tokens_embeddings(qe, model.project(torch.randn(b, cfg.n_clusters, model.info.hidden)))
        sync()
        q_per_s = n_q / (time.perf_counter() - t)
    name = torch.cuda.get_device_name() if dev.type == "cuda" else platform.processor() or "cpu"
    steps_paper = 736_575  # Rec-Movie, all sliding windows, 15 epochs of batch 20 (lranker_paper_scale.md)
    steps_one = 4_530  # windows_per_user=1
    rows = [
        ("model", f"random Qwen3 of Qwen3-0.6B's shape ({n_params / 1e6:,.0f}M parameters), LoRA r={cfg.lora_r}, "
                  f"{model.info.dtype}, gradient checkpointing {cfg.gradient_checkpointing}"),
        ("step shapes", f"{args.batch} query prompts x {qb.input_ids.shape[1]} tokens, {n_cand} candidates x "
                        f"{cb.input_ids.shape[1]} tokens"),
        (f"s/step (median of {args.steps}, after 2 warm-up)", f"{step_s:.3f} (min {min(times):.3f}, max {max(times):.3f})"),
        ("peak GPU memory, training", f"{peak_train:.1f} GiB"),
        ("candidate encoding (eval, 256 tokens, batches of 256)", f"{cand_per_s:,.0f} items/s"),
        ("query encoding (eval, 512-token prompts, batches of 64)", f"{q_per_s:,.0f} queries/s"),
        ("PROJECTION paper schedule (Rec-Movie, all windows, 736,575 steps)",
         f"{steps_paper * step_s / 3600:,.1f} h of steps at this s/step (no data wait, no validation)"),
        ("PROJECTION windows_per_user=1 (4,530 steps)", f"{steps_one * step_s / 60:,.1f} min of steps"),
        ("PROJECTION Rec-Clothing pool encoding (6,805,462 items)", f"{6_805_462 / cand_per_s / 60:,.1f} min"),
        ("model build (random init, saved)", f"{build_s:.1f} s"),
    ]
    lines = [f"# LRanker at Qwen3-0.6B's shape on {name}", "",
             f"Command: `python benchmarks/gpu_step.py --steps {args.steps}` ({dt.date.today().isoformat()}); "
             f"torch {torch.__version__}. Random weights (no network on the GPU machine); rows marked "
             "PROJECTION are arithmetic on the measured s/step, not measurements.", "",
             "| measure | value |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    if dev.type == "cuda":
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
