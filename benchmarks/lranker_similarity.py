"""Does Eq. 10's raw inner product at tau = 0.15 saturate the InfoNCE softmax on an LLM backbone?

The paper scores h_q . h_c / tau with tau = 0.15 (Eq. 10). An LLM's pooled last hidden states are
not unit vectors, so the logits' spread per query -- and with it how peaked the softmax over a
step's candidates is -- depends on the backbone's hidden-state norms. This script measures it on a
real pretrained LLM (SmolLM2-135M-Instruct, from the offline GGUF) with real task texts, before any
training (the state the first step sees):

- the norms of h_q (the task's query prompts, pooled as LRanker pools them) and of h_c;
- per query, over the positive and ``--negatives`` sampled candidates: the logit span
  (max - min), the softmax's largest probability and its effective support (exp of its entropy),
  and the InfoNCE loss with its gradient's share left on the non-argmax candidates;
- for ``similarity=dot`` at tau 0.15 (the paper) and ``similarity=cosine`` at tau 0.05 (the CPU
  preset's start; learnable), side by side.

A softmax whose largest probability is ~1 for nearly every query passes gradient to one candidate
per query (the argmax), so the contrastive signal over the other candidates vanishes: that is what
"saturates" means here. Writes ``benchmarks/results/lranker_similarity.md``.

    python benchmarks/lranker_similarity.py [--task rec-music] [--queries 64] [--negatives 127]
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
GGUF = Path("~/.cache/rbench-models/SmolLM2-135M-Instruct.Q4_1.gguf").expanduser()


def stats(hq: np.ndarray, hc: np.ndarray, pos: np.ndarray, tau: float, rng: np.random.Generator,
          negatives: int) -> dict[str, float]:
    """Softmax statistics over each query's positive plus ``negatives`` random other candidates."""
    spans, top, support, loss, off_argmax = [], [], [], [], []
    for i in range(len(hq)):
        others = np.setdiff1d(np.arange(len(hc)), [pos[i]])
        cand = np.concatenate([[pos[i]], rng.choice(others, size=min(negatives, len(others)), replace=False)])
        z = (hc[cand] @ hq[i]).astype(np.float64) / tau
        spans.append(float(z.max() - z.min()))
        p = np.exp(z - z.max())
        p /= p.sum()
        top.append(float(p.max()))
        ent = -float(np.sum(p[p > 0] * np.log(p[p > 0])))
        support.append(float(np.exp(ent)))
        loss.append(float(-np.log(max(p[0], 1e-300))))
        # d loss / d z = p - onehot(positive): the gradient's mass on candidates other than the argmax
        g = p.copy()
        g[0] -= 1.0
        off_argmax.append(float(np.abs(np.delete(g, int(np.argmax(z)))).sum() / max(np.abs(g).sum(), 1e-300)))
    q = lambda v, x: float(np.quantile(v, x))  # noqa: E731
    return {"span_median": q(spans, 0.5), "span_p90": q(spans, 0.9), "top_p_median": q(top, 0.5),
            "share_top_p_over_0.99": float(np.mean(np.asarray(top) > 0.99)), "support_median": q(support, 0.5),
            "loss_median": q(loss, 0.5), "grad_off_argmax_median": q(off_argmax, 0.5)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="rec-music")
    ap.add_argument("--queries", type=int, default=64)
    ap.add_argument("--negatives", type=int, default=127, help="sampled negatives per query (paper: 127)")
    ap.add_argument("--model", default=str(GGUF), help="backbone: a GGUF file or a local model folder")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "lranker_similarity.md"))
    args = ap.parse_args()
    if not Path(args.model).exists():
        print(f"lranker_similarity: backbone {args.model} not found (scripts/offline-models.sh lays out the "
              "SmolLM2 GGUF)", file=sys.stderr)
        return 2
    import torch

    import rbench
    from rbench_rankers.lranker.config import LRankerConfig
    from rbench_rankers.lranker.model import LRankerModel, load_backbone

    torch.manual_seed(0)
    torch.set_num_threads(2)
    data = rbench.load_task(args.task)
    test = data.test
    rng = np.random.default_rng(0)
    rows = np.sort(rng.choice(len(test), size=min(args.queries, len(test)), replace=False))
    prompts = [str((test.prompts if test.prompts is not None else test.texts)[int(r)]) for r in rows]
    texts = [str(test.texts[int(r)]) for r in rows]
    pool_texts = [str(t) for t in data.pool.texts]
    t0 = time.perf_counter()
    cfg = LRankerConfig(model=args.model, similarity="dot", global_info=False, dtype="float32", device="cpu")
    model = LRankerModel(cfg, load_backbone(cfg))
    model.eval()
    with torch.no_grad():
        hq = np.concatenate([model.query_embeddings(prompts[a:a + 8], texts[a:a + 8], None).float().numpy()
                             for a in range(0, len(prompts), 8)])
    # the candidates: each query's first positive plus the rest of the pool (sampled per query)
    pos_ids = np.array([int(data.test.positives[int(r)][0]) for r in rows]) if test.positives is not None else None
    if pos_ids is None:
        raise SystemExit("the task's test split has no positives")
    need = np.unique(np.concatenate([pos_ids, rng.choice(len(pool_texts), size=min(2048, len(pool_texts)),
                                                        replace=False)]))
    hc_need = np.concatenate([model.candidate_embeddings([pool_texts[i] for i in need[a:a + 32]])
                              for a in range(0, len(need), 32)])
    remap = {int(c): j for j, c in enumerate(need)}
    pos = np.array([remap[int(c)] for c in pos_ids])
    encode_s = time.perf_counter() - t0
    nq, nc = np.linalg.norm(hq, axis=1), np.linalg.norm(hc_need, axis=1)
    unit = lambda m: m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)  # noqa: E731
    dot = stats(hq, hc_need, pos, 0.15, np.random.default_rng(1), args.negatives)
    cos = stats(unit(hq), unit(hc_need), pos, 0.05, np.random.default_rng(1), args.negatives)
    name = Path(args.model).name
    lines = [
        "# Eq. 10 on an LLM backbone: does dot / 0.15 saturate the softmax?", "",
        f"Command: `python benchmarks/lranker_similarity.py --task {args.task} --queries {args.queries} "
        f"--negatives {args.negatives}` ({dt.date.today().isoformat()}, CPU, fp32)", "",
        f"Backbone `{name}` (pretrained, before any training; projector off), {len(rows)} test queries of "
        f"`{args.task}` (their prompts pooled as LRanker pools them), each scored against its positive and "
        f"{args.negatives} candidates drawn from {len(need):,} encoded pool items; encoding took {encode_s:.0f} s.", "",
        f"Norms: |h_q| median {np.median(nq):.1f} (min {nq.min():.1f}, max {nq.max():.1f}); "
        f"|h_c| median {np.median(nc):.1f} (min {nc.min():.1f}, max {nc.max():.1f}).", "",
        "| per query (median unless said) | dot, tau 0.15 (paper) | cosine, tau 0.05 |", "|---|---:|---:|",
    ]
    labels = {"span_median": "logit span max - min", "span_p90": "logit span, 90th percentile",
              "top_p_median": "largest softmax probability", "share_top_p_over_0.99": "share of queries with top p > 0.99",
              "support_median": "effective support exp(entropy), candidates", "loss_median": "InfoNCE loss",
              "grad_off_argmax_median": "gradient mass off the argmax candidate"}
    for k, lab in labels.items():
        lines.append(f"| {lab} | {dot[k]:,.3f} | {cos[k]:,.3f} |")
    lines += ["", "A largest probability near 1 with an effective support near 1 means the softmax is saturated: "
              "the loss gradient reaches almost only the top-scored candidate. Read with docs/guides/lranker.md "
              "(\"similarity\")."]
    Path(args.out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
