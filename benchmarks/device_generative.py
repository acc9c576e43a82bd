"""GPU against CPU for the generation layer (rbench_rankers.generative): the in-process
transformers backend on CUDA must answer what it answers on the CPU (greedy text and next-token
log-probabilities of a small random Llama with a real tokenizer, fp32), and RankGPT / PRP /
pointwise through rbench.evaluate must give the same orders on both devices.

    python benchmarks/device_generative.py MODEL_DIR [--out FILE]

Writes a Markdown table (device, check, result). Run by benchmarks/device_check.sh on a GPU
machine; on a machine without CUDA it says so and stops.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path


def main() -> int:
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--out", default="benchmarks/results/device_generative.md")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to compare")
        return 0
    from rbench_rankers.generative.backends import Decoding
    from rbench_rankers.generative.backends.transformers import TransformersBackend

    torch.backends.cuda.matmul.allow_tf32 = False
    chats = [[{"role": "user", "content": f"Rank these passages for query {i}: [1] apples [2] pears [3] plums"}]
             for i in range(6)]
    rows = []
    outs = {}
    for device in ("cpu", "cuda"):
        b = TransformersBackend(args.model, device=device, dtype="float32", batch_size=3)
        t0 = time.perf_counter()
        text = [c.text for c in b.chat(chats, Decoding(max_new_tokens=24))]
        t_chat = time.perf_counter() - t0
        lp = [s.logprobs for s in b.next_token_logprobs(chats, ("A", "B", " Yes", " No"))]
        outs[device] = (text, lp)
        rows.append((device, "chat 6 prompts x 24 tokens (s)", f"{t_chat:.2f}"))
    same_text = sum(a == b for a, b in zip(outs["cpu"][0], outs["cuda"][0]))
    diff = max(abs(a[k] - b[k]) for a, b in zip(outs["cpu"][1], outs["cuda"][1]) for k in a
               if a[k] is not None and b[k] is not None)
    rows.append(("cuda vs cpu", "greedy answers identical", f"{same_text}/6"))
    rows.append(("cuda vs cpu", "max abs Δ logprob of A, B, Yes, No", f"{diff:.2e}"))
    ok = same_text == 6 and math.isfinite(diff) and diff < 1e-3

    # the rankers end to end through the harness, on both devices: the same answers give the same
    # orders, hence the same metrics and per-query ranks
    import os
    import tempfile

    os.environ["RBENCH_HOME"] = tempfile.mkdtemp()
    import rbench
    from rbench_rankers.generative.pointwise import PointwiseLLMRanker
    from rbench_rankers.generative.prp import PRPRanker
    from rbench_rankers.generative.rankgpt import RankGPTRanker
    from tests.rankers.generative.test_rankers import import_tiny_task

    import_tiny_task(Path(tempfile.mkdtemp()), "gen-device", n_test=4, m=6)
    for cls, opts in ((RankGPTRanker, {}), (PRPRanker, {"passes": 2}), (PointwiseLLMRanker, {})):
        recs = {}
        for device in ("cpu", "cuda"):
            t0 = time.perf_counter()
            recs[device] = rbench.evaluate(cls, "gen-device", options={"model": args.model, "device": device,
                                                                       "dtype": "float32", "cache": False, **opts})
            rows.append((device, f"{cls.name}: 4 queries x 6 candidates (s)", f"{time.perf_counter() - t0:.2f}"))
        same = (recs["cpu"].metrics == recs["cuda"].metrics
                and (recs["cpu"].per_query["rank"].to_numpy() == recs["cuda"].per_query["rank"].to_numpy()).all())
        rows.append(("cuda vs cpu", f"{cls.name}: metrics and per-query ranks identical", str(bool(same))))
        ok = ok and bool(same)
    lines = ["| device | check | result |", "|---|---|---|", *[f"| {a} | {b} | {c} |" for a, b, c in rows]]
    name = torch.cuda.get_device_name(0)
    text = f"# Generation backend: CUDA against CPU ({name})\n\n" + "\n".join(lines) + "\n"
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
