"""One benchmark run, end to end: load task -> variant -> fit -> index -> score -> RunRecord.

The CLI and the Python API both call ``run``; the CLI only adds progress display and printing.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rbench import paths
from rbench.api import RunContext, TaskData
from rbench.config import config_dict, config_hash
from rbench.engine import evaluate
from rbench.errors import RBenchError
from rbench.metrics import MEASURES, aggregate, per_query
from rbench.plugins import load_ranker_class, make_ranker
from rbench.results import (
    RunRecord,
    ensure_writable,
    git_commit,
    machine_info,
    now_iso,
    peak_rss_bytes,
    per_query_bytes,
    record_path,
    write_run,
)
from rbench.tasks.registry import get_task, load_task

TASK_PREFIX = "task."


@dataclass
class RunOptions:
    ranker: str
    task: str
    variant: str = "original"
    sets: dict[str, str] = dataclasses.field(default_factory=dict)
    seed: int = 0
    max_queries: int | None = None
    results_dir: Path = Path("results")
    batch_size: int = 256
    chunk_size: int = 65536
    write: bool = True
    ann: str | None = None  # measure a faiss index (flat|ivf|hnsw|pq) against the exact scan
    ray_shards: int | None = None  # score the pool in N Ray tasks (rbench.distributed); same metrics


@dataclass
class RunOutcome:
    record: RunRecord
    path: Path | None
    per_query: dict[str, np.ndarray]


Progress = Callable[[str, int | None], Callable[[int], None]]


def _no_progress(_desc: str, _total: int | None) -> Callable[[int], None]:
    return lambda _n: None


def split_sets(sets: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """``--set`` keys starting with ``task.`` go to the task, the rest to the ranker."""
    task = {k[len(TASK_PREFIX):]: v for k, v in sets.items() if k.startswith(TASK_PREFIX)}
    ranker = {k: v for k, v in sets.items() if not k.startswith(TASK_PREFIX)}
    return task, ranker


def _non_default(cfg: Any) -> dict[str, Any]:
    if cfg is None:
        return {}
    default = config_dict(type(cfg)())
    return {k: v for k, v in config_dict(cfg).items() if default.get(k) != v}


def subsample(data: TaskData, max_queries: int | None, seed: int) -> TaskData:
    if not max_queries or max_queries >= len(data.test):
        return data
    rows = np.sort(np.random.default_rng(seed).choice(len(data.test), size=max_queries, replace=False))
    return dataclasses.replace(data, test=data.test.take(rows))


def apply_variant(data: TaskData, variant: str, seed: int) -> TaskData:
    if variant in ("", "original"):
        return data
    try:
        from rbench import pools
    except ImportError as exc:  # pragma: no cover - pools ships with rbench
        raise RBenchError(f"variant {variant!r} is not available: {exc}") from exc
    return pools.apply_variant(data, variant, seed)


def run(opts: RunOptions, progress: Progress = _no_progress) -> RunOutcome:
    spec = get_task(opts.task)
    if opts.ann is not None:
        from rbench.ann import BACKENDS
        from rbench.errors import unknown

        if opts.ann not in BACKENDS:
            raise unknown("--ann backend", opts.ann, BACKENDS)
    task_sets, ranker_sets = split_sets(opts.sets)
    cls = load_ranker_class(opts.ranker)
    domains = getattr(cls, "domains", None)
    if domains and spec.domain not in domains:
        raise RBenchError(f"ranker {opts.ranker!r} does not apply to {spec.domain} tasks such as {spec.name!r} "
                          f"(it applies to: {', '.join(domains)})")
    cache = paths.cache_dir()
    ranker = make_ranker(opts.ranker, ranker_sets, RunContext(cache_dir=cache, seed=opts.seed))
    if opts.write:
        ensure_writable(Path(opts.results_dir))

    t0 = time.perf_counter()
    step = progress(f"loading {spec.name}", 1)
    data = load_task(opts.task, task_sets, seed=opts.seed)
    task_opts = _task_options_of(spec, task_sets)
    data = apply_variant(data, opts.variant, opts.seed)
    data = subsample(data, opts.max_queries, opts.seed)
    load_s = time.perf_counter() - t0
    step(1)

    t0 = time.perf_counter()
    step = progress(f"fitting {opts.ranker}", 1)
    ranker.fit(data)
    fit_s = time.perf_counter() - t0
    step(1)

    tick = progress(f"{opts.ranker} on {spec.name}", len(data.test))
    if opts.ray_shards:
        result = _evaluate_on_ray(ranker, data, opts)
        tick(len(data.test))
    else:
        result = evaluate(ranker, data.test, data.pool, batch_size=opts.batch_size,
                          chunk_size=opts.chunk_size, progress=tick)
    values = per_query(result.ranks, data.test.grades, MEASURES)
    ann_info = _measure_ann(ranker, data, opts) if opts.ann else None
    metrics = aggregate(values)

    ranker_cfg = ranker.config
    diff = {"ranker": _non_default(getattr(ranker, "cfg", None)), "task": _non_default(task_opts),
            "max_queries": opts.max_queries, "seed": opts.seed}
    diff = {k: v for k, v in diff.items() if v not in ({}, None, 0)}
    chash = config_hash(diff) if diff else ""
    first_rank = np.minimum.reduceat(result.ranks.values, result.ranks.offsets[:-1])
    record = RunRecord(
        task=spec.name,
        variant=opts.variant or "original",
        scenario=spec.scenario,
        task_fingerprint=data.fingerprint,
        ranker={"name": opts.ranker, "version": getattr(ranker, "version", ""), "config": ranker_cfg,
                **({"label": ranker.label} if isinstance(getattr(ranker, "label", None), str) else {})},
        seed=opts.seed,
        n_queries=len(data.test),
        metrics=metrics,
        timings={"load_s": round(load_s, 4), "fit_s": round(fit_s, 4),
                 "index_s": round(result.timings.get("index_s", 0.0), 4),
                 "score_s": round(result.timings["score_s"], 4),
                 "per_query_ms": round(result.timings["per_query_ms"], 4)},
        peak_rss_bytes=peak_rss_bytes(),
        git_commit=git_commit(),
        created=now_iso(),
        task_options=config_dict(task_opts) if task_opts is not None else {},
        run_options={"max_queries": opts.max_queries, "batch_size": opts.batch_size,
                     "chunk_size": opts.chunk_size, "non_default": diff,
                     **({"ray_shards": opts.ray_shards} if opts.ray_shards else {})},
        task_info={**data.info, "pool_size": len(data.pool), "n_train": len(data.train),
                   "n_valid": len(data.valid), "mean_ranked": float(result.n_ranked.mean())},
        ranker_info={**dict(getattr(ranker, "info", {}) or {}), **({"ann": ann_info} if ann_info else {})},
        machine=machine_info(),
        config_hash=chash,
    )
    path = None
    if opts.write:
        path = record_path(Path(opts.results_dir), spec.scenario, record.task_key, opts.ranker, chash)
        write_run(record, path, per_query_bytes(data.test.ids, values, first_rank))
    return RunOutcome(record=record, path=path, per_query=values)


def _evaluate_on_ray(ranker: Any, data: TaskData, opts: RunOptions) -> Any:
    """Exact evaluation split over ``opts.ray_shards`` Ray tasks (``rbench.distributed``): the
    candidate matrix is handed to the workers as a file (its own memory-mapped ``.npy`` or sharded
    directory; otherwise written once under RBENCH_HOME, which must be shared storage on a
    cluster), the query vectors are computed here once."""
    import tempfile

    from rbench.distributed import evaluate_sharded
    from rbench.engine import is_embedding_ranker
    from rbench.sharded import ShardedArray

    if not is_embedding_ranker(ranker):
        raise RBenchError(f"--ray-shards needs an embedding ranker; {opts.ranker!r} scores with its own score()")
    if data.test.candidates is not None:
        raise RBenchError("--ray-shards splits a shared pool; this task gives each query its own candidate list")
    t0 = time.perf_counter()
    emb = ranker.encode_pool(data.pool)
    index_s = time.perf_counter() - t0
    scratch = paths.cache_dir("ray")
    scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=scratch) as tmp:
        if isinstance(emb, ShardedArray):
            source = str(emb.directory)
        elif isinstance(emb, np.memmap) and emb.filename and emb.offset == np.load(emb.filename, mmap_mode="r").offset \
                and np.load(emb.filename, mmap_mode="r").shape == emb.shape:
            source = str(emb.filename)
        else:
            source = str(Path(tmp) / "pool.npy")
            out = np.lib.format.open_memmap(source, mode="w+", dtype=np.float32, shape=emb.shape)
            for a in range(0, emb.shape[0], 262144):
                out[a : a + 262144] = np.asarray(emb[a : a + 262144], dtype=np.float32)
            out.flush()
            del out
        t0 = time.perf_counter()
        qv = np.concatenate([np.asarray(ranker.encode_queries(b), dtype=np.float32)
                             for _, b in data.test.batches(opts.batch_size)])
        result = evaluate_sharded(source, qv, data.test, opts.ray_shards, batch_size=opts.batch_size,
                                  chunk_size=opts.chunk_size)
    score_s = time.perf_counter() - t0
    result.timings = {"index_s": index_s, "score_s": score_s,
                      "per_query_ms": 1000.0 * score_s / max(len(data.test), 1)}
    return result


def _measure_ann(ranker: Any, data: TaskData, opts: RunOptions) -> dict[str, Any]:
    """Build a faiss index over the ranker's candidate vectors and measure it on <= 1000 queries."""
    from rbench import ann
    from rbench.engine import is_embedding_ranker

    if not is_embedding_ranker(ranker):
        raise RBenchError(f"--ann needs an embedding ranker; {opts.ranker!r} scores with its own score()")
    rows = np.arange(len(data.test))
    if len(rows) > 1000:
        rows = np.sort(np.random.default_rng(opts.seed).choice(rows, size=1000, replace=False))
    sample = data.test.take(rows)
    emb = ranker.encode_pool(data.pool)
    qv = np.asarray(ranker.encode_queries(sample), dtype=np.float32)
    return ann.measure(emb, qv, list(sample.positives), opts.ann, seed=opts.seed)


def _task_options_of(spec: Any, task_sets: dict[str, str]) -> Any:
    from rbench.tasks.registry import task_options

    return task_options(spec, task_sets)
