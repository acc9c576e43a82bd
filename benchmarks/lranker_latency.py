"""LRanker inference latency: direct ranking (E^(0)) vs graph-based test-time scaling (k, d).

The paper (Appendix, "Impact of widths and depths on the computational efficiency") reports its
chosen (k, d) costing 1-8% more than direct ranking. What makes that possible is that the extra
query embeddings share the prompt: with a causal backbone the tokens before ``<|embedding|>`` are
run once per query and only the short suffix runs per partition (``rankers/lranker/prefix.py``).
This benchmark measures, per setting, on the same seeded sample of test queries:

- encode ms/query: every backbone forward pass, clustering and elimination (``ranker.encode``);
  score ms/query: the engine's exact full-pool ranking of the resulting query vectors;
- ratio of the total to direct ranking;
- rows/query and tokens/query through the backbone (counted by a hook: a prefix pass and a suffix
  pass each count one row; tokens are the positions computed, padding excluded);
- parts/query: partitions encoded beyond E^(0) (sum over rounds of the parts actually used);
- extra cost per part: (encode - encode of direct) / encode of direct / parts per query.

Method: one warm-up of direct and of the widest setting (the pool's first clustering, first
forward pass, allocator warm-up; not timed), then ``--repeats`` rounds that visit every setting
in turn (direct, then each (k, d): round-robin, so slow drifts of a shared machine hit all
settings alike); the medians are reported, with the spread (max - min) / median of the encode
times. Cost does not depend on the weights, so the default is an untrained model (``epochs=0``:
LoRA at its initialisation, fresh projector), and width/depth selection is skipped
(``width=0 depth=0``); ``--set`` overrides either.

Usage (heavy: run under the machine-wide lock):
    flock /tmp/rbench-heavy.lock nice -n 19 python benchmarks/lranker_latency.py --set model=smollm2-135m
    flock /tmp/rbench-heavy.lock nice -n 19 python benchmarks/lranker_latency.py --set preset=cpu
Prints a rich table and writes (or updates) this backbone's section of
benchmarks/results/lranker_latency.md.
"""

from __future__ import annotations

import argparse
import platform
import re
import resource
import shlex
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_SETS = {"epochs": 0, "width": 0, "depth": 0}


def peak_rss_mib() -> float:
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib / 1024 if sys.platform != "darwin" else kib / 2**20


class Counter:
    """Rows and token positions through the backbone (forward pre-hook)."""

    def __init__(self, module) -> None:
        self.rows = self.tokens = self.calls = 0
        self.handle = module.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, module, args, kwargs) -> None:
        x = kwargs.get("inputs_embeds")
        if x is None:
            x = kwargs.get("input_ids", args[0] if args else None)
        if x is None:
            return
        att = kwargs.get("attention_mask")
        L = x.shape[1]
        self.calls += 1
        self.rows += int(x.shape[0])
        self.tokens += int(att[:, -L:].sum()) if att is not None else int(x.shape[0] * L)

    def reset(self) -> None:
        self.rows = self.tokens = self.calls = 0


def parts_per_query(trace: list[dict]) -> float:
    if not trace:
        return 0.0
    n = len(trace[0]["kept_sizes"])
    return sum(len(sizes) for r in trace for sizes in r["kept_sizes"]) / max(1, n)


def run_setting(ranker, queries, pool, vec, k: int, d: int, counter: Counter, cache: bool) -> dict:
    from rbench.engine.scan import scan
    from rbench_rankers.lranker.ranker import fixed_scorer

    ranker.cfg.tts_prefix_cache = cache
    ranker.last_trace = []
    counter.reset()
    t0 = time.perf_counter()
    Q = ranker.encode(queries, pool, vec, k, d)
    t1 = time.perf_counter()
    scan(ranker, queries, pool, scorer=fixed_scorer(Q, queries, vec))
    t2 = time.perf_counter()
    n = len(queries)
    return {"enc": 1000 * (t1 - t0) / n, "score": 1000 * (t2 - t1) / n, "rows": counter.rows / n,
            "tokens": counter.tokens / n, "parts": parts_per_query(ranker.last_trace) if k and d else 0.0}


def update_md(path: Path, title: str, section: list[str], header: list[str]) -> None:
    """Replace (or append) the ``## title`` section of ``path``, keep the others."""
    text = path.read_text() if path.exists() else ""
    sections: list[tuple[str, str]] = []
    for block in re.split(r"(?m)^(?=## )", text):
        if block.startswith("## "):
            sections.append((block.splitlines()[0][3:].strip(), block.rstrip() + "\n"))
    body = "\n".join(section).rstrip() + "\n"
    for i, (t, _) in enumerate(sections):
        if t == title:
            sections[i] = (title, f"## {title}\n\n{body}")
            break
    else:
        sections.append((title, f"## {title}\n\n{body}"))
    out = "\n".join(header).rstrip() + "\n\n" + "\n".join(b for _, b in sections)
    from rbench.core.atomic import atomic_write_text

    atomic_write_text(path, out)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="ml-100k")
    ap.add_argument("--queries", type=int, default=100, help="test queries timed (seeded sample)")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="ranker option key=value")
    ap.add_argument("--widths", default="2,4")
    ap.add_argument("--depths", default="1,2")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-cache-rows", action="store_true",
                    help="also time every setting with tts_prefix_cache=false (causal backbones)")
    ap.add_argument("--label", default="", help="appended to this run's section title in the results file")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "lranker_latency.md")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error("--repeats must be >= 1")

    import torch
    from rich.table import Table

    from rbench.api import RunContext
    from rbench.core import paths
    from rbench.core.config import parse_assignments
    from rbench.core.console import console as make_console
    from rbench.rankers import make_ranker
    from rbench.tasks.registry import load_task
    from rbench_rankers.lranker.prefix import supports_prefix_cache

    console = make_console(markup=True)
    sets = {**DEFAULT_SETS, **parse_assignments(args.sets)}
    widths = [int(x) for x in args.widths.split(",") if x.strip()]
    depths = [int(x) for x in args.depths.split(",") if x.strip()]
    data = load_task(args.task, {}, seed=args.seed)
    ranker = make_ranker("lranker", sets, RunContext(cache_dir=paths.cache_dir(), seed=args.seed))
    t0 = time.perf_counter()
    ranker.fit(data)
    fit_s = time.perf_counter() - t0
    rows = np.sort(np.random.default_rng(args.seed).choice(len(data.test), min(args.queries, len(data.test)),
                                                            replace=False))
    test = data.test.take(rows)
    vec = ranker.encode_pool(data.pool)
    model = ranker._model
    causal = supports_prefix_cache(model)
    cache_on = bool(ranker.cfg.tts_prefix_cache) and causal
    settings = [(0, 0, cache_on)] + [(k, d, cache_on) for k in widths for d in depths if k > 0 and d > 0]
    if args.no_cache_rows and cache_on:
        settings += [(k, d, False) for k, d, _ in settings]
    counter = Counter(model.backbone)

    # warm-up: the pool's clustering, the first forward passes (not timed)
    warm = test.take(np.arange(min(8, len(test))))
    t0 = time.perf_counter()
    run_setting(ranker, warm, data.pool, vec, 0, 0, counter, cache_on)
    if len(settings) > 1:
        run_setting(ranker, warm, data.pool, vec, max(widths), max(depths), counter, cache_on)
    warm_s = time.perf_counter() - t0

    samples: dict[tuple, list[dict]] = {s: [] for s in settings}
    for rep in range(args.repeats):
        for s in settings:
            samples[s].append(run_setting(ranker, test, data.pool, vec, s[0], s[1], counter, s[2]))
        console.print(f"repeat {rep + 1}/{args.repeats} done")
    ranker.cfg.tts_prefix_cache = cache_on
    counter.handle.remove()

    med = {s: {key: float(np.median([x[key] for x in xs])) for key in xs[0]} for s, xs in samples.items()}
    spread = {s: (max(x["enc"] for x in xs) - min(x["enc"] for x in xs)) / med[s]["enc"] for s, xs in samples.items()}
    direct = med[(0, 0, cache_on)]
    direct_nc = med.get((0, 0, False), direct)

    backbone = f"{ranker.cfg.model} ({model.info.kind}, {model.info.dtype}, hidden {model.info.hidden})"
    title = f"{args.task}, {Path(str(ranker.cfg.model)).name}" + (f", {args.label}" if args.label else "")
    table = Table(title=f"LRanker latency on {args.task}: {len(test)} test queries, pool {len(data.pool):,}, "
                        f"backbone {backbone}, median of {args.repeats}")
    cols = ["k", "d", "prefix cache", "encode ms/q", "score ms/q", "total ms/q", "vs direct", "rows/q",
            "tokens/q", "parts/q", "extra per part", "spread"]
    for col in cols:
        table.add_column(col, justify="right")
    lines = ["| " + " | ".join(cols) + " |", "|" + "---:|" * len(cols)]
    for s in settings:
        r = med[s]
        base = direct if s[2] == cache_on else direct_nc
        extra = (r["enc"] - base["enc"]) / base["enc"] / r["parts"] if r["parts"] else None
        cells = [str(s[0]), str(s[1]), ("on" if s[2] else "off") if causal else "n/a (encoder)",
                 f"{r['enc']:.1f}", f"{r['score']:.2f}", f"{r['enc'] + r['score']:.1f}",
                 f"{(r['enc'] + r['score']) / (direct['enc'] + direct['score']):.2f}x",
                 f"{r['rows']:.1f}", f"{r['tokens']:.0f}", f"{r['parts']:.1f}",
                 f"{extra:.3f}" if extra is not None else "-", f"{100 * spread[s]:.0f}%"]
        table.add_row(*cells)
        lines.append("| " + " | ".join(cells) + " |")
    console.print(table)
    ks = [(s, med[s]) for s in settings if s[2] == cache_on and med[s]["parts"]]
    worst = max(((r["enc"] - direct["enc"]) / direct["enc"] / r["parts"] for _, r in ks), default=float("nan"))
    summary = [
        f"- extra cost per partition, worst setting: {worst:.3f} of a direct pass"
        + (" (goal <= 0.2 with the prefix cache)" if cache_on else ""),
        f"- model: {'untrained (epochs=0)' if int(sets.get('epochs', 1)) == 0 else 'trained'}; "
        f"K = {ranker.cfg.n_clusters} clusters, kept-subset floor {ranker.cfg.tts_min_part_factor} x K, "
        f"max_length {ranker.cfg.max_length}, encode_batch_size {ranker.cfg.encode_batch_size}, "
        f"LoRA {'on' if model.has_lora else 'off'}",
        f"- fit {fit_s:.1f} s (candidate encoding when not cached); warm-up {warm_s:.1f} s (not timed)",
        f"- peak RSS {peak_rss_mib():,.0f} MiB; {platform.machine()}, {torch.get_num_threads()} torch threads, "
        f"{time.strftime('%Y-%m-%d')}",
    ]
    for s in summary:
        console.print(s)
    command = "flock /tmp/rbench-heavy.lock nice -n 19 python benchmarks/lranker_latency.py " + shlex.join(argv)
    section = [f"Command: `{command.strip()}`", "",
               f"{len(test)} test queries (seed {args.seed}), pool {len(data.pool):,}; backbone {backbone}; "
               f"median of {args.repeats} interleaved repeats after a warm-up.", "",
               *lines, "", *summary]
    header = ["# LRanker latency: direct ranking vs graph-based test-time scaling", "",
              "Written by `benchmarks/lranker_latency.py` (see its docstring for the method). Per query: "
              "encode = all backbone passes, clustering and elimination; score = the engine's exact "
              "full-pool ranking; rows/tokens = sequences and token positions through the backbone (a "
              "cached prefix and a suffix pass count one row each); parts = partition embeddings beyond "
              "E^(0); extra per part = (encode - direct encode) / direct encode / parts; spread = (max - "
              "min) / median of the encode times over the repeats. Untrained model (`epochs=0`): cost "
              "does not depend on the weights. CPU timings on a shared 2-core machine are noisy; the "
              "row/token counts are exact."]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    update_md(args.out, title, section, header)
    console.print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
