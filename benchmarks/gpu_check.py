"""LRanker end to end on a CUDA GPU with a tiny budget: does the paper's GPU configuration (bf16,
gradient checkpointing, LoRA) train, validate, select and rank, and how fast?

Two backbones, each trained for ``--steps`` optimiser steps on ml-100k (one training window per
user, validation MRR every 10 steps on 200 queries, test-time scaling grid width {2} x depth {0, 1}
selected on 200 validation queries):

1. a random Qwen3 built from a config (``tests/lranker_testkit.build_tiny_qwen``, hidden 256,
   4 layers) -- always available, checks the code path;
2. the real backbone (``--model``, default Qwen/Qwen3-0.6B) when its weights can be loaded
   offline (a local directory, or the Hugging Face cache); otherwise skipped with a note.

Reported per backbone: the device, steps/s and the data-wait share of the training loop
(validation evaluations excluded: wait / (wait + compute) from the TrainReport), peak GPU memory
(``torch.cuda.max_memory_allocated``) while fitting and while encoding, per-query latency of
``ranker.encode`` on 200 test queries direct and with test-time scaling (after a warm-up; the
200 go through in one call, so this is the batched cost per query), and the validation MRR curve.

Without CUDA it prints one line and exits 0, so it can be run anywhere.

Usage:
    python benchmarks/gpu_check.py                       # tiny Qwen3 + Qwen/Qwen3-0.6B if cached
    python benchmarks/gpu_check.py --model /path/to/Qwen3-0.6B --steps 20 [--set key=value ...]
Prints a rich table and, on CUDA, writes benchmarks/results/gpu_check.md.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TTS = (2, 1)  # (width, depth) of the "with test-time scaling" latency


def offline_model(name: str) -> tuple[str | None, str]:
    """-> (a loadable local directory / file, note). Never touches the network."""
    from rbench.core.errors import RBenchError
    from rbench_rankers.lranker.model import resolve_model

    try:
        where, gguf = resolve_model(name)
    except RBenchError as exc:
        return None, str(exc)
    path = Path(where)
    if path.exists():
        return str(path / gguf) if gguf else str(path), f"local {path}"
    try:
        from huggingface_hub import snapshot_download

        local = Path(snapshot_download(name, local_files_only=True))
    except Exception as exc:  # not in the cache (or not a hub id)
        return None, f"{name} is not in the Hugging Face cache ({type(exc).__name__}); pass --model /path/to/dir"
    if not any(local.glob("*.safetensors")) and not any(local.glob("*.bin")):
        return None, f"{name}: cached without weights ({local})"
    return str(local), f"hub cache {local}"


def options(model: str, args: argparse.Namespace) -> dict:
    opts = {
        "model": model, "max_steps": args.steps, "epochs": 1, "windows_per_user": 1, "eval_every": args.eval_every,
        "valid_max_queries": args.valid_queries, "tts_widths": [TTS[0]], "tts_depths": [0, TTS[1]],
        "select_max_queries": args.valid_queries,
    }
    if args.device:
        opts["device"] = args.device
    return {**opts, **args.sets}


def check(label: str, model: str, data, args: argparse.Namespace, work: Path) -> dict:
    import numpy as np
    import torch

    from rbench.api import RunContext
    from rbench.rankers import make_ranker

    cuda = torch.cuda.is_available() and (args.device or "cuda").startswith("cuda")
    ranker = make_ranker("lranker", options(model, args),
                         RunContext(cache_dir=work / f"cache-{label}", seed=args.seed, show_progress=False))
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    ranker.fit(data)
    fit_s = time.perf_counter() - t0
    fit_peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else None
    net = ranker._model
    rep = ranker.info["train"]
    loop_s = rep["data_wait_s"] + rep["step_s"]

    vectors = ranker.encode_pool(data.pool)
    rows = np.arange(min(args.test_queries, len(data.test)))
    queries = data.test.take(rows)
    warm = data.test.take(rows[: min(8, len(rows))])
    latency = {}
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    for name, (width, depth) in (("direct", (0, 0)), ("tts", TTS)):
        ranker.encode(warm, data.pool, vectors, width, depth)  # warm-up: kernels, prefix sessions, caches
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = ranker.encode(queries, data.pool, vectors, width, depth)
        if cuda:
            torch.cuda.synchronize()
        latency[name] = 1000 * (time.perf_counter() - t0) / len(rows)
        if not np.isfinite(out).all():
            raise SystemExit(f"{label}: non-finite query embeddings ({name})")
    encode_peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else None
    weights = [p for n, p in net.backbone.named_parameters() if "lora_" not in n]
    base = net.backbone.get_base_model() if hasattr(net.backbone, "get_base_model") else net.backbone
    ckpt = any(getattr(m, "gradient_checkpointing", False) is True for m in base.modules())
    curve = [(p["step"], p["valid_MRR"]) for p in rep["curve"]]
    sel = ranker.info.get("tts", {})
    return {
        "backbone": f"{label} ({sum(p.numel() for p in weights) / 1e6:.1f}M params, hidden {net.info.hidden})",
        "device": str(net.device), "dtype": str(net.info.dtype).replace("torch.", ""),
        "gradient checkpointing": "on" if ckpt else "off",
        "optimiser steps": str(rep["steps"]),
        "steps/s (training loop)": f"{rep['steps'] / loop_s:.2f}" if loop_s else "-",
        "data-wait share": f"{100 * rep['data_wait_s'] / loop_s:.1f}%" if loop_s else "-",
        "fit wall s (encode pool, train, validate, select)": f"{fit_s:.1f}",
        "peak GPU MiB (fit)": f"{fit_peak:,.0f}" if fit_peak is not None else "-",
        "peak GPU MiB (encode)": f"{encode_peak:,.0f}" if encode_peak is not None else "-",
        f"ms/query direct ({len(rows)} test queries)": f"{latency['direct']:.2f}",
        f"ms/query TTS k={TTS[0]} d={TTS[1]}": f"{latency['tts']:.2f}",
        "valid MRR curve (step: MRR)": ", ".join(f"{s}: {m:.4f}" if m is not None else f"{s}: -" for s, m in curve),
        "selected (k, d)": f"({sel.get('width')}, {sel.get('depth')})",
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="Qwen/Qwen3-0.6B", help="real backbone: hub id (offline cache) or path")
    ap.add_argument("--task", default="ml-100k")
    ap.add_argument("--steps", type=int, default=20, help="optimiser steps per backbone")
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--valid-queries", type=int, default=200, help="validation queries per evaluation/selection")
    ap.add_argument("--test-queries", type=int, default=200, help="test queries timed by encode")
    ap.add_argument("--tiny-hidden", type=int, default=256)
    ap.add_argument("--tiny-layers", type=int, default=4)
    ap.add_argument("--tiny-only", action="store_true", help="skip the real backbone")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="extra ranker option key=value")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "gpu_check.md")
    ap.add_argument("--device", default=None, help=argparse.SUPPRESS)  # e.g. cpu: smoke-test the code path
    args = ap.parse_args(argv)
    from rbench.core.config import parse_assignments

    args.sets = parse_assignments(args.sets)

    import torch

    if args.device is None and not torch.cuda.is_available():
        print("gpu_check: no CUDA device (torch.cuda.is_available() is False); nothing to check here.")
        return 0

    from rich.table import Table

    from rbench.core.console import console as make_console
    from rbench.tasks.registry import load_task
    from tests.lranker_testkit import build_tiny_qwen

    console = make_console(markup=True)
    device = args.device or "cuda"
    on_cuda = device.startswith("cuda")
    name = torch.cuda.get_device_name() if on_cuda else (platform.processor() or platform.machine())
    data = load_task(args.task, {}, seed=args.seed)
    results, notes = [], []
    with tempfile.TemporaryDirectory(prefix="rbench-gpu-check-") as tmp:
        work = Path(tmp)
        tiny = build_tiny_qwen(work / "tiny-qwen3", hidden=args.tiny_hidden, layers=args.tiny_layers)
        results.append(check("tiny random Qwen3", str(tiny), data, args, work))
        if args.tiny_only:
            notes.append(f"{args.model}: skipped (--tiny-only)")
        else:
            local, note = offline_model(args.model)
            if local is None:
                notes.append(f"{args.model}: skipped, cannot be loaded offline: {note}")
            else:
                results.append(check(args.model, local, data, args, work))
                notes.append(f"{args.model}: loaded from {note}")

    table = Table(title=f"LRanker GPU check on {args.task}: {name} ({device}), {args.steps} steps")
    table.add_column("")
    for r in results:
        table.add_column(r["backbone"].split(" (")[0], justify="right")
    keys = list(results[0])
    for key in keys:
        table.add_row(key, *[r[key] for r in results])
    console.print(table)
    for n in notes:
        console.print(f"- {n}")

    if on_cuda:
        cols = ["", *[r["backbone"] for r in results]]
        lines = ["| " + " | ".join(cols) + " |", "|---|" + "---:|" * len(results)]
        lines += ["| " + " | ".join([k, *[r[k] for r in results]]) + " |" for k in keys]
        from benchmarks.machine import machine_line  # (CPU, vector ISA, BLAS kernel, threads)

        md = [f"# LRanker GPU check ({args.task}, {name})", "", machine_line(), "",
              f"Command: `python benchmarks/gpu_check.py {' '.join(sys.argv[1:] if argv is None else argv)}`", "",
              f"torch {torch.__version__}, CUDA {torch.version.cuda}. Training: {args.steps} optimiser steps, "
              f"one window per user, validation MRR every {args.eval_every} steps on {args.valid_queries} queries; "
              "steps/s and the data-wait share cover the training loop without the validation evaluations; "
              f"latency = one `encode` call over {args.test_queries} test queries / {args.test_queries}, after a "
              "warm-up.", "", *lines, "", *[f"- {n}" for n in notes], ""]
        from rbench.core.atomic import atomic_write_text

        atomic_write_text(args.out, "\n".join(md))
        console.print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
