"""One LRanker training step and the pool/query encoding at the paper's backbone size, on a GPU.

The paper trains Qwen3-0.6B with LoRA (r=32, alpha=64) in bf16 with gradient checkpointing, batch
20, query prompts up to 512 tokens and candidates up to 256, 127 sampled negatives. Qwen3-0.6B's
weights cannot be fetched on the lent GPU machines (no network), so this builds a Qwen3 from
Qwen3-0.6B's published config (hidden 1024, 28 layers, 16 query / 8 key-value heads of 128, FFN
3072, vocabulary 151,936) with random weights -- the arithmetic and memory of a step do not depend
on the weights -- and runs LRanker's own model code (``rbench_rankers.lranker.model``: LoRA on
attention and feed-forward, the soft prompt at ``<|embedding|>``, InfoNCE over the step's
positives and negatives, AdamW) on full-length inputs.

Three step configurations (``--configs``), each timed over ``--steps`` optimiser steps after two
warm-up steps (CUDA-synchronised medians):

- ``padded``: every prompt at 512 tokens and every candidate at 256 (the lengths' maxima), one
  padded batch per side: the cost before issue 44.
- ``real``: the lengths the data has, about 256 tokens per prompt and 32 per candidate (issue 44;
  drawn per row, uniform over [0.75, 1.25] x ``--query-tokens`` / ``--cand-tokens``, seeded), still
  padded to each side's longest row.
- ``real-bucketed``: the same rows with ``length_buckets`` groups (``--buckets``, default 4): each
  group padded to its own longest row, identical candidate rows (``--dup-share`` of them repeat
  another's text) encoded once.

``gradient_checkpointing=auto`` (the default) decides per step from the step's padded tokens
(``model.activation_bytes`` against half the card's memory); the table says what it chose. Reported
per configuration: real tokens/step (attention-mask ones) and the tokens the backbone computed
(padding included), s/step, MFU (model FLOPs 6 N T + attention over the real tokens, without
checkpointing's recompute, over the card's dense bf16 peak; GPU only), peak memory and the
PROJECTED time of the two Rec-Movie schedules: one window per user (4,530 steps: 302 steps/epoch x
15 epochs, what the paper's 52 minutes on one A6000 implies: 0.69 s/step) and every sliding
window (736,575 steps: 52 minutes would need 4.2 ms/step). Then the encoding throughput of
candidates (256 tokens) and query prompts (512 tokens) in eval mode. Writes
``benchmarks/results/gpu_step.md`` when it ran on CUDA (or ``--out``).

    python benchmarks/gpu_step.py [--steps 8] [--device cuda]
    python benchmarks/gpu_step.py --device cpu --hidden 64 --layers 2 --steps 2 --encode-items 64   # code-path check

``--tokens-of TASK [--set k=v ...]`` measures no step: it builds ``--steps`` training steps of a real
task exactly as training does (``train.StepBuilder``, the ranker's tokenizer and options) and
prints, per step, the real tokens, the tokens of the padded step and of the real-length step
(``length_buckets=--buckets``: groups and shared duplicates): what the data's lengths save, on
any machine, without the GPU's timing.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

QWEN3_06B = {"vocab_size": 151936, "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
             "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
             "max_position_embeddings": 40960, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
             "tie_word_embeddings": True}
# dense bf16 tensor-core peaks (FLOP/s, no sparsity) by device-name fragment: MFU's denominator
BF16_PEAK = {"H200": 989e12, "H100 PCIe": 756e12, "H100": 989e12, "A100": 312e12, "A6000": 155e12,
             "L40S": 362e12, "A10": 125e12}
STEPS_ONE_WINDOW = 4_530  # Rec-Movie, windows_per_user=1: 302 steps/epoch x 15 (lranker_paper_scale.md)
STEPS_ALL_WINDOWS = 736_575  # Rec-Movie, every sliding window: 49,105 steps/epoch x 15
PAPER_MINUTES = 52  # the paper's Table (computation cost): LRanker trains on Rec-Movie in 52 min, one A6000


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


def step_rows(args: argparse.Namespace, config: str, n_cand: int) -> tuple[list[int], list[int], list[int]]:
    """Token counts of the step's prompts' query words and candidates, and each candidate's text id
    (repeats share one)."""
    import numpy as np

    rng = np.random.default_rng(0)
    if config == "padded":
        return [4 * args.query_len] * args.batch, [2 * args.cand_len] * n_cand, list(range(n_cand))
    q = rng.integers(int(0.75 * args.query_tokens), int(1.25 * args.query_tokens) + 1, args.batch)
    c = rng.integers(int(0.75 * args.cand_tokens), int(1.25 * args.cand_tokens) + 1, n_cand)
    ids = list(range(n_cand))
    for i in rng.choice(np.arange(1, n_cand), int(args.dup_share * n_cand), replace=False):
        ids[i] = int(rng.integers(0, i))  # this candidate repeats an earlier one's text
        c[i] = c[ids[i]]
    return [int(x) for x in q], [int(x) for x in c], ids


def step_inputs(model: Any, args: argparse.Namespace, config: str) -> tuple[Any, Any]:
    """The step's tokenised prompts and candidates for ``config`` (see the module docstring)."""
    import numpy as np

    n_cand = args.batch + args.negatives
    q_len, c_len, ids = step_rows(args, config, n_cand)
    def words(seed: int, n: int) -> str:  # distinct rows: words of the tokenizer's vocabulary, w0 .. w119
        return " ".join(f"w{x}" for x in np.random.default_rng(seed).integers(0, 120, n))

    texts = [words(10_000 + b, n) for b, n in enumerate(q_len)]
    prompts = ["Task: Recommendation. <|embedding|> Query: " + t for t in texts]
    cands = [words(k, c_len[k]) for k in ids]
    return (model.tokens.queries(prompts, texts, with_placeholder=True).to(model.device),
            model.tokens.candidates(cands).to(model.device))


def model_flops(model: Any, qb: Any, cb: Any, n_layer_params: int) -> float:
    """Model FLOPs of one training step over the real tokens: 6 N T (forward and backward of the
    transformer's weights, N without the embedding) plus attention's 12 L d_attn sum(len^2) (causal:
    half of it, counted whole as is usual)."""
    cfg = model.backbone.config
    layers = int(cfg.num_hidden_layers)
    d_attn = int(getattr(cfg, "num_attention_heads", 1)) * int(getattr(cfg, "head_dim", cfg.hidden_size // cfg.num_attention_heads))
    lens = [int(x) for b in (qb, cb) for x in b.attention_mask.sum(1)]
    return 6.0 * n_layer_params * sum(lens) + 12.0 * layers * d_attn * sum(x * x for x in lens)


def time_config(model: Any, opt: Any, args: argparse.Namespace, config: str) -> dict[str, Any]:
    """Median s/step and what the steps computed, for one configuration."""
    import torch
    import torch.nn.functional as F

    dev = model.device
    cuda = dev.type == "cuda"
    buckets = args.buckets if config == "real-bucketed" else 1
    model.cfg = dataclasses.replace(model.cfg, length_buckets=buckets)
    qb, cb = step_inputs(model, args, config)
    slots = torch.randn(args.batch, model.cfg.n_clusters, model.info.hidden)
    target = torch.arange(args.batch, device=dev)
    computed = {"tokens": 0}
    forward = type(model).hidden_states

    def counted(self: Any, batch: Any, soft: Any) -> Any:
        computed["tokens"] += int(batch.input_ids.numel())
        return forward(self, batch, soft)

    model.hidden_states = counted.__get__(model)
    model.train()
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    times, decided = [], None
    for i in range(2 + args.steps):
        if cuda:
            torch.cuda.synchronize()
        t = time.perf_counter()
        computed["tokens"] = 0
        decided = model.fit_checkpointing(qb, cb)
        hq = model.query_tokens_embeddings(qb, model.project(slots), buckets)
        hc = model.candidate_tokens_embeddings(cb, buckets)
        loss = F.cross_entropy((hq.float() @ hc.float().T) * model.scale, target)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.trainable_parameters(), model.cfg.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        if i >= 2:
            times.append(time.perf_counter() - t)
    del model.hidden_states
    real = int(qb.attention_mask.sum() + cb.attention_mask.sum())
    return {"config": config, "s": statistics.median(times), "min": min(times), "max": max(times),
            "real_tokens": real, "computed_tokens": computed["tokens"], "qb": qb, "cb": cb, "buckets": buckets,
            "checkpointing": model.cfg.gradient_checkpointing if decided is None else ("on" if decided else "off"),
            "peak": torch.cuda.max_memory_allocated() / 2**30 if cuda else float("nan")}


def encoding_rates(model: Any, args: argparse.Namespace) -> tuple[float, float]:
    """Eval-mode encoding: candidates (256 tokens) and query prompts (512 tokens) per second."""
    import torch

    dev = model.device
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    model.eval()
    texts = ["w3 " * (2 * args.cand_len)] * args.encode_items
    model.candidate_embeddings(texts[: model.cfg.encode_batch_size], adapted=True)  # warm-up
    sync()
    t = time.perf_counter()
    for a in range(0, len(texts), 256):
        model.candidate_embeddings(texts[a:a + 256], adapted=True)
    sync()
    cand_per_s = len(texts) / (time.perf_counter() - t)
    words = "w1 " * (4 * args.query_len)
    prompt = "Task: Recommendation. <|embedding|> Query: " + words
    n_q = max(64, args.encode_items // 8)
    with torch.no_grad():
        t = time.perf_counter()
        for a in range(0, n_q, 64):
            b = min(64, n_q - a)
            qe = model.tokens.queries([prompt] * b, [words] * b, with_placeholder=True).to(dev)
            model.query_tokens_embeddings(qe, model.project(torch.randn(b, model.cfg.n_clusters, model.info.hidden)))
        sync()
    return cand_per_s, n_q / (time.perf_counter() - t)


def peak_flops(name: str) -> float | None:
    """The card's dense bf16 peak from its name (None: unknown, or a CPU)."""
    return next((v for k, v in BF16_PEAK.items() if k in name), None)


def report(args: argparse.Namespace, name: str, info: dict[str, Any], runs: list[dict[str, Any]],
           rates: tuple[float, float]) -> str:
    """The Markdown table (measured rows, and PROJECTION rows computed from them)."""
    import torch

    peak = peak_flops(name)
    rows = [("model", info["model"])]
    for r in runs:
        c, mfu = r["config"], (f"{r['flops'] / r['s'] / peak:.1%}" if peak else "n/a (no GPU peak known)")
        q, k = r["qb"].input_ids.shape, r["cb"].input_ids.shape
        rows += [(f"**{c}** step shapes", f"{q[0]} prompts (padded to {q[1]} tokens), {k[0]} candidates (padded to "
                                          f"{k[1]}); length_buckets={r['buckets']}; checkpointing {r['checkpointing']}"),
                 (f"{c}: tokens/step, real / computed", f"{r['real_tokens']:,} / {r['computed_tokens']:,}"),
                 (f"{c}: s/step (median of {args.steps})", f"{r['s']:.3f} (min {r['min']:.3f}, max {r['max']:.3f})"),
                 (f"{c}: MFU (bf16 dense peak)", mfu),
                 (f"{c}: peak memory, training", f"{r['peak']:.1f} GiB"),
                 (f"{c}: PROJECTION one window per user ({STEPS_ONE_WINDOW:,} steps)",
                  f"{STEPS_ONE_WINDOW * r['s'] / 60:,.1f} min of steps (paper: {PAPER_MINUTES} min on one A6000)"),
                 (f"{c}: PROJECTION every sliding window ({STEPS_ALL_WINDOWS:,} steps)",
                  f"{STEPS_ALL_WINDOWS * r['s'] / 3600:,.1f} h of steps")]
    rows += [("candidate encoding (eval, 256 tokens, batches of 256)", f"{rates[0]:,.0f} items/s"),
             ("query encoding (eval, 512-token prompts, batches of 64)", f"{rates[1]:,.0f} queries/s"),
             ("PROJECTION Rec-Clothing pool encoding (6,805,462 items, 256 tokens)", f"{6_805_462 / rates[0] / 60:,.1f} min"),
             ("model build (random init, saved)", f"{info['build_s']:.1f} s")]
    lines = [f"# LRanker at Qwen3-0.6B's shape on {name}", "",
             f"Command: `python benchmarks/gpu_step.py {' '.join(sys.argv[1:])}`".rstrip() +
             f" ({dt.date.today().isoformat()}); torch {torch.__version__}. Random weights (no network on the GPU "
             "machine); rows marked PROJECTION are arithmetic on the measured s/step (no data wait, no "
             "validation), not measurements. The paper's 52 minutes match the one-window-per-user schedule "
             f"(0.69 s/step); every sliding window in 52 minutes would need {PAPER_MINUTES * 60 / STEPS_ALL_WINDOWS * 1000:.1f} "
             "ms/step.", "", "| measure | value |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows]
    return "\n".join(lines) + "\n"


def task_tokens(args: argparse.Namespace) -> int:
    """``--tokens-of``: real / padded / real-length tokens of a task's first training steps."""
    import numpy as np
    import torch

    from rbench.api import RunContext
    from rbench.core import paths
    from rbench.core.config import parse_assignments
    from rbench.rankers import make_ranker
    from rbench.tasks.registry import load_task
    from rbench_rankers.lranker.model import length_groups
    from rbench_rankers.lranker.train import StepBuilder, epoch_batches

    sets = parse_assignments(args.sets)
    data = load_task(args.tokens_of, {}, seed=0)
    ranker = make_ranker("lranker", sets, RunContext(cache_dir=paths.cache_dir(), seed=0))
    cfg, model = ranker.cfg, ranker._ensure_model()
    rows = np.random.default_rng(0).permutation(len(data.train))
    builder = StepBuilder(cfg, data.train, model.tokens, data.fit_pool.texts, len(data.fit_pool), None, 0)
    builder.for_epoch(0, epoch_batches(rows, cfg.batch_size)[: args.steps])
    tot = np.zeros(3)
    for i in range(len(builder)):
        step = builder[i]
        real = padded = ours = 0
        for b, dedupe in ((step.queries, False), (step.cand_tokens, True)):
            lengths = b.attention_mask.sum(1)
            if dedupe:  # identical rows run once
                key = torch.cat([b.input_ids, b.attention_mask, b.pool_mask.long()], dim=1)
                inverse = torch.unique(key, dim=0, return_inverse=True)[1]
                lengths_u = torch.zeros(int(inverse.max()) + 1, dtype=lengths.dtype).scatter(0, inverse, lengths)
            else:
                lengths_u = lengths
            groups = length_groups(lengths_u, args.buckets, int(b.input_ids.shape[1]))
            real += int(lengths.sum())
            padded += int(b.input_ids.numel())
            ours += (len(lengths_u) * int(b.input_ids.shape[1]) if groups is None
                     else sum(len(g) * int(lengths_u[g].max()) for g in groups))
        tot += (real, padded, ours)
        print(f"step {i}: real {real:,}, padded step {padded:,}, real-length step {ours:,} tokens")
    print(f"{args.tokens_of}, {len(builder)} steps, {' '.join(f'--set {k}={v}' for k, v in sets.items())}: "
          f"mean real {tot[0] / len(builder):,.0f}, padded {tot[1] / len(builder):,.0f}, real-length "
          f"(length_buckets={args.buckets}) {tot[2] / len(builder):,.0f} tokens/step "
          f"({tot[2] / tot[1]:.2f}x the padded step's)")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=8, help="timed optimiser steps per configuration (after 2 warm-up)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--configs", default="padded,real,real-bucketed")
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--negatives", type=int, default=127)
    ap.add_argument("--query-len", type=int, default=512, help="max_length: the prompts' cap")
    ap.add_argument("--cand-len", type=int, default=256, help="candidate_max_length")
    ap.add_argument("--query-tokens", type=int, default=256, help="real configs: mean prompt length (tokens)")
    ap.add_argument("--cand-tokens", type=int, default=32, help="real configs: mean candidate length (tokens)")
    ap.add_argument("--dup-share", type=float, default=0.05, help="real configs: share of candidates repeating a text")
    ap.add_argument("--buckets", type=int, default=4)
    ap.add_argument("--checkpointing", default="auto", choices=["auto", "on", "off"])
    ap.add_argument("--hidden", type=int, default=0, help="smaller model for a CPU check (0: Qwen3-0.6B's)")
    ap.add_argument("--layers", type=int, default=0)
    ap.add_argument("--encode-items", type=int, default=2048)
    ap.add_argument("--out", type=Path, default=None, help="default on CUDA: benchmarks/results/gpu_step.md")
    ap.add_argument("--tokens-of", default=None, help="a task: count its training steps' tokens (no timing)")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="--tokens-of: ranker option key=value")
    args = ap.parse_args()
    if args.tokens_of:
        return task_tokens(args)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_step: no CUDA device; run with --device cpu --hidden 64 --layers 2 for a code-path check")
        return 0
    from rbench_rankers.lranker.config import LRankerConfig
    from rbench_rankers.lranker.model import LRankerModel, load_backbone

    work = Path(tempfile.mkdtemp(prefix="gpu-step-"))
    t0 = time.perf_counter()
    n_params = build(work, args.hidden or None, args.layers or None)
    build_s = time.perf_counter() - t0
    cfg = LRankerConfig(model=str(work), device=args.device, batch_size=args.batch, n_negatives=args.negatives,
                        max_length=args.query_len, candidate_max_length=args.cand_len,
                        gradient_checkpointing=args.checkpointing)
    model = LRankerModel(cfg, load_backbone(cfg))
    model.attach_projector(model.info.hidden)  # slots are base embeddings e(c) of the hidden size
    model.make_trainable()
    model.to(model.device)
    opt = torch.optim.AdamW(model.trainable_parameters(), lr=cfg.lr)
    emb = model.backbone.get_input_embeddings().weight.numel()
    layer_params = sum(p.numel() for n, p in model.backbone.named_parameters() if "lora_" not in n) - emb
    runs = []
    for config in args.configs.split(","):
        r = time_config(model, opt, args, config)
        r["flops"] = model_flops(model, r["qb"], r["cb"], layer_params)
        runs.append(r)
        print(f"{config}: {r['s']:.3f} s/step, {r['real_tokens']:,} real / {r['computed_tokens']:,} computed tokens",
              flush=True)
    rates = encoding_rates(model, args)
    dev = torch.device(args.device)
    name = torch.cuda.get_device_name() if dev.type == "cuda" else f"CPU {platform.processor() or platform.machine()}"
    info = {"model": f"random Qwen3 of {'Qwen3-0.6B' if not (args.hidden or args.layers) else 'a reduced'} shape "
                     f"({n_params / 1e6:,.0f}M parameters), LoRA r={cfg.lora_r}, {model.info.dtype}",
            "build_s": build_s}
    text = report(args, name, info, runs, rates)
    print(text)
    out = args.out or (ROOT / "benchmarks" / "results" / "gpu_step.md" if dev.type == "cuda" else None)
    if out is not None:
        out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
