"""Where LRanker's CPU memory goes in training, and what bounds it.

The CPU preset (all-MiniLM-L6-v2, fully fine-tuned, batch 32, query prompts of 256 tokens, 160
candidates of 48 tokens per step) peaks at ~6-7 GiB of RSS in ``fit`` (RunRecord
``peak_rss_by_phase``). This script measures one training step -- forward, backward, AdamW step --
in a fresh process per setting, so each peak is that setting's alone:

- ``after load``: Python, torch, the backbone (and its pretrained copy for full fine-tuning is not
  loaded here: e(c) is encoded once, before training);
- ``step peak``: the process's peak RSS (``ru_maxrss``) after one step; the difference to ``after
  load`` is the step's activations, gradients and optimizer state;
- the same for half the batch, half the query length, and ``gradient_checkpointing=on``
  (activations recomputed in backward instead of kept).

The inputs are synthetic token batches of the exact shapes a CPU-preset step has (their values
do not change memory). Writes ``benchmarks/results/lranker_memory.md``.

    python benchmarks/lranker_memory.py
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SETTINGS: list[tuple[str, dict[str, object]]] = [
    ("CPU preset (batch 32, query 256 tokens)", {}),
    ("batch_size=16", {"batch_size": 16}),
    ("max_length=128", {"max_length": 128}),
    ("gradient_checkpointing=on", {"gradient_checkpointing": "on"}),
    ("gradient_checkpointing=on, batch_size=16", {"gradient_checkpointing": "on", "batch_size": 16}),
]


def _rss_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def child(options: dict[str, object]) -> dict[str, float]:
    """One training step of the CPU preset with ``options`` on top; RSS before and after."""
    import torch
    import torch.nn.functional as F

    from rbench_rankers.lranker.config import LRankerConfig
    from rbench_rankers.lranker.model import LRankerModel, load_backbone
    from rbench_rankers.lranker.train import keep_freed_memory

    torch.manual_seed(0)
    keep_freed_memory()  # what train() does: RSS then holds the high-water mark of the step
    cfg = LRankerConfig(preset="cpu", global_info=False, **options)  # type: ignore[arg-type]
    model = LRankerModel(cfg, load_backbone(cfg))
    model.make_trainable()
    opt = torch.optim.AdamW(model.trainable_parameters(), lr=cfg.lr)
    loaded = _rss_mib()
    n_cand = cfg.batch_size + cfg.n_negatives
    qb = model.tokens.queries(["word " * 600] * cfg.batch_size, ["word " * 600] * cfg.batch_size,
                              with_placeholder=False)
    cb = model.tokens.candidates(["word " * 200] * n_cand)
    model.train()
    seconds = []
    for _ in range(2):  # the second step is timed (the first pays one-off allocations)
        t0 = time.perf_counter()
        hq = model.query_tokens_embeddings(qb, None)
        hc = model.candidate_tokens_embeddings(cb)
        loss = F.cross_entropy((hq.float() @ hc.float().T) * model.scale, torch.arange(cfg.batch_size))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        seconds.append(time.perf_counter() - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"after_load_mib": loaded, "step_peak_mib": peak, "query_tokens": int(qb.input_ids.shape[1]),
            "candidate_tokens": int(cb.input_ids.shape[1]), "candidates": n_cand, "batch": cfg.batch_size,
            "step_s": seconds[-1]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "lranker_memory.md"))
    args = ap.parse_args()
    if args.child is not None:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    rows = []
    for label, options in SETTINGS:
        proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(options)],
                              capture_output=True, text=True)
        if proc.returncode:
            print(proc.stderr[-3000:], file=sys.stderr)
            return 1
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        rows.append((label, r))
        print(label, r, flush=True)
    base = rows[0][1]["step_peak_mib"] - rows[0][1]["after_load_mib"]
    lines = ["# LRanker: peak memory of one CPU training step", "",
             f"Command: `python benchmarks/lranker_memory.py` ({dt.date.today().isoformat()}, all-MiniLM-L6-v2, "
             "fp32, one process per row)", "",
             "| setting | shapes (queries x tokens, candidates x tokens) | RSS after load | step peak RSS | "
             "step's own | vs preset | step time |", "|---|---|---:|---:|---:|---:|---:|"]
    for label, r in rows:
        own = r["step_peak_mib"] - r["after_load_mib"]
        lines.append(f"| {label} | {r['batch']} x {r['query_tokens']}, {r['candidates']} x {r['candidate_tokens']} | "
                     f"{r['after_load_mib']:,.0f} MiB | {r['step_peak_mib']:,.0f} MiB | {own:,.0f} MiB | "
                     f"{own / base:.2f}x | {r['step_s']:.1f} s |")
    lines += ["", "\"Step's own\" is the step peak minus the RSS after loading: activations kept for backward, "
              "gradients and AdamW's two moments. Step time: the second of two steps, one sample on 2 shared cores (indicative only). See docs/guides/lranker.md (\"Memory\")."]
    Path(args.out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
