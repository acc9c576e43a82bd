"""How a run's test queries are scored: one strategy, chosen once by the plan (``choose``).

Why a module of its own: the scoring mode used to be decided in four places (the runner's
``score``, ``execute``, the rerank module and the engine). Here the plan picks one object, and
``execute`` calls its ``score`` whatever it is:

- ``OwnScore``: the engine scans the ranker through its own ``score`` (any ranker);
- ``DenseCPU`` / ``DenseTorch`` / ``DenseRay``: an embedding ranker's candidate and query vectors
  are computed once (``Dense.score``) and scanned by rbench's engine, by torch (``--scan``), or in
  Ray tasks (``--ray-shards``); the ANN side measurement (``--ann``) reads the same matrices;
- ``TwoStage(first, ...)``: ``--rerank-from``: stage 1 is another strategy (or a run file), the
  protocol (exact full-pool ranks) is ``rbench.run.rerank``'s.

The engine below (``rbench.engine``) only scans the scores it is given, exactly.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from rbench.api import RunContext, TaskData
from rbench.core.errors import RBenchError
from rbench.core.settings import DEFAULT_SEED, RunSettings
from rbench.engine.scan import EvalResult, scan
from rbench.engine.scorers import encode_pool, encode_queries, make_scorer, vector_scorer

Progress = Callable[[str, int | None], Callable[[int], None]]


def no_progress(_desc: str, _total: int | None) -> Callable[[int], None]:
    return lambda _n: None


@dataclass
class Scored:
    """What a strategy produced: the engine's result and what the record says beside it."""

    result: EvalResult
    ann: dict[str, Any] | None = None  # the ANN side measurement (``--ann``)
    rerank: dict[str, Any] | None = None  # the record's ``rerank`` entry (a two-stage run)
    dropped: dict[str, np.ndarray] = field(default_factory=dict)  # per-query ``<metric>-dropped``


@dataclass(frozen=True)
class Job:
    """One scoring call: what is known only once the data is loaded and the ranker fitted."""

    name: str  # the ranker's name (progress lines, messages)
    topk: int  # the engine's top-k (the run file's width, ``rbench.engine.runfile.run_width``)
    context: RunContext | None = None  # what a stage-1 ranker is built with
    progress: Progress = no_progress
    measures: tuple[str, ...] = ()  # the record's measures (a two-stage run's stage-1 metrics)

    def label(self, data: TaskData) -> str:
        return f"{self.name} on {data.spec.name}"


@dataclass(frozen=True)
class Scan:
    """The engine's walk over the queries and the pool, as the run settings give it."""

    batch_size: int
    chunk_size: int


class Strategy(Protocol):
    """Scores a fitted ranker on ``data.test`` against ``data.pool``."""

    def score(self, ranker: Any, data: TaskData, job: Job) -> Scored: ...


@dataclass(frozen=True)
class OwnScore:
    """The engine scans the ranker through its own ``score`` (``rbench.engine.scan``)."""

    scan: Scan

    def score(self, ranker: Any, data: TaskData, job: Job) -> Scored:
        test = data.test
        result = scan(ranker, test, data.pool, batch_size=self.scan.batch_size, chunk_size=self.scan.chunk_size,
                      topk=job.topk, progress=job.progress(job.label(data), len(test)))
        return Scored(result)


@dataclass(frozen=True)
class Dense:
    """An embedding ranker: candidate vectors (checked once) and query vectors (encoded once, in
    the engine's batches) are computed here and scanned by the subclass's ``_scan``; the ANN side
    measurement reads the same matrices. Timings: ``index_s`` is the candidate encoding,
    ``score_s`` the query encoding plus the scan."""

    scan: Scan
    ann: str | None = None
    seed: int = DEFAULT_SEED

    def score(self, ranker: Any, data: TaskData, job: Job) -> Scored:
        test = data.test
        self._check(data)
        t0 = time.perf_counter()  # (execute warmed the engine's kernels up before any timer)
        emb = encode_pool(ranker, data.pool)
        index_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        qv = encode_queries(ranker, test, emb.shape[1], self.scan.batch_size,
                            job.progress(f"{job.name}: encoding {len(test):,} queries", len(test)))
        result = self._scan(ranker, emb, qv, data, job, job.progress(job.label(data), len(test)))
        compile_s = result.timings.get("compile_s", 0.0)  # (the scan's own, inside this timer)
        score_s = time.perf_counter() - t0 - compile_s
        result.timings = {"index_s": index_s, "score_s": score_s,
                          "per_query_ms": 1000.0 * score_s / max(len(test), 1), "compile_s": compile_s}
        return Scored(result, ann=self._measure_ann(emb, qv, test) if self.ann else None)

    def _check(self, data: TaskData) -> None:
        """What this scan cannot do with ``data``, refused before any encoding."""

    def _scan(self, ranker: Any, emb: Any, qv: np.ndarray, data: TaskData, job: Job,
              tick: Callable[[int], None]) -> EvalResult:
        raise NotImplementedError

    def _measure_ann(self, emb: Any, qv: np.ndarray, test: Any) -> dict[str, Any]:
        """A faiss index over the candidate vectors, measured on <= 1000 of the test queries."""
        from rbench.engine import ann

        rows = np.arange(len(test))
        if len(rows) > 1000:
            rows = np.sort(np.random.default_rng(self.seed).choice(rows, size=1000, replace=False))
        return ann.measure(emb, qv[rows], [test.positives[int(i)] for i in rows], str(self.ann), seed=self.seed)


@dataclass(frozen=True)
class DenseCPU(Dense):
    """rbench's engine over the vectors (the reference scan)."""

    def _scan(self, ranker: Any, emb: Any, qv: np.ndarray, data: TaskData, job: Job,
              tick: Callable[[int], None]) -> EvalResult:
        test = data.test
        return scan(ranker, test, data.pool, batch_size=self.scan.batch_size, chunk_size=self.scan.chunk_size,
                    topk=job.topk, progress=tick,
                    scorer=vector_scorer(emb, qv, test, ranker.name, pool_checked=True))


@dataclass(frozen=True)
class DenseTorch(Dense):
    """torch on a GPU (``device="cuda"``), or on the CPU as its tested twin (``rbench.engine.torch_scan``)."""

    device: str = "cuda"
    precision: str = "fp32"

    def _scan(self, ranker: Any, emb: Any, qv: np.ndarray, data: TaskData, job: Job,
              tick: Callable[[int], None]) -> EvalResult:
        from rbench.engine.torch_scan import scan_dense_torch

        result = scan_dense_torch(emb, qv, data.test, topk=job.topk, chunk_size=self.scan.chunk_size,
                                  batch_size=self.scan.batch_size, device=self.device,
                                  precision=self.precision, name=ranker.name)
        tick(len(data.test))
        return result


@dataclass(frozen=True)
class DenseRay(Dense):
    """``shards`` Ray tasks over a shared pool (``rbench.engine.distributed``; bit-identical)."""

    shards: int = 1

    def _check(self, data: TaskData) -> None:
        if data.test.candidates is not None:
            raise RBenchError("--ray-shards splits a shared pool; this task gives each query its own candidate list")

    def _scan(self, ranker: Any, emb: Any, qv: np.ndarray, data: TaskData, job: Job,
              tick: Callable[[int], None]) -> EvalResult:
        result = _on_ray(emb, qv, data.test, self.shards, self.scan, job.topk)
        tick(len(data.test))
        return result


def _on_ray(emb: Any, qv: np.ndarray, test: Any, shards: int, walk: Scan, topk: int) -> EvalResult:
    """The candidate matrix goes to the workers as a file (its own memory-mapped ``.npy`` or
    sharded directory; otherwise written once under RBENCH_HOME, which must be shared storage on a
    cluster), the query vectors as an array."""
    import tempfile
    from pathlib import Path

    from rbench.core import paths
    from rbench.engine.distributed import scan_sharded
    from rbench.engine.sharded import ShardedArray

    scratch = paths.harness_dir("ray")
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
        return scan_sharded(source, qv, test, shards, topk=topk, batch_size=walk.batch_size,
                            chunk_size=walk.chunk_size)


def single(settings: RunSettings, embedding: bool, name: str) -> Strategy:
    """The one-stage strategy of a ranker (``embedding``: it has ``encode_pool``/``encode_queries``)
    under the run settings (``RunSettings``: batch, chunk, ``scan``, ``ray_shards``, ``ann``, seed)."""
    scan = Scan(settings.batch_size, settings.chunk_size)
    if not embedding:
        for wanted, flag in ((settings.ray_shards, "--ray-shards"), (settings.ann, "--ann"),
                             (settings.scan != "cpu", "--scan")):
            if wanted:
                raise RBenchError(f"{flag} needs an embedding ranker; {name!r} scores with its own score()")
        return OwnScore(scan)
    if settings.ray_shards:
        return DenseRay(scan, settings.ann, settings.seed, shards=settings.ray_shards)
    if settings.scan != "cpu":
        return DenseTorch(scan, settings.ann, settings.seed, device="cuda" if settings.scan == "cuda" else "cpu",
                          precision=settings.scan_precision)
    return DenseCPU(scan, settings.ann, settings.seed)


def _time_text(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def pair_budget_check(data: TaskData, job: Job, scorer: Any, budget: int, force: bool) -> int:
    """The pairs an exhaustive rerank scores; above ``budget`` refused with a time estimate from a
    warm-up batch, unless ``force``."""
    test, pool = data.test, data.pool
    width = test.candidates.shape[1] if test.candidates is not None else len(pool)
    pairs = len(test) * width
    if pairs <= budget:
        return pairs
    few = test.take(np.arange(min(8, len(test))))
    cand = few.candidates if few.candidates is not None else np.arange(min(len(pool), 512), dtype=np.int64)
    warm = few.candidates.size if few.candidates is not None else len(few) * len(cand)
    t0 = time.perf_counter()
    scorer(few, cand)
    rate = warm / max(time.perf_counter() - t0, 1e-9)
    text = (f"exhaustive reranking with {job.name!r} scores {pairs:,} pairs: about "
            f"{_time_text(pairs / rate)} ({rate:,.0f} pairs/s on a warm-up of {warm:,} pairs)")
    if not force:
        raise RBenchError(f"{text}, above the budget of {budget:,} pairs: pass --force "
                          f"to run it, or rerank a shortlist with --rerank-depth N")
    warnings.warn(f"{text} (--force)", stacklevel=3)
    return pairs


def exhaustive(ranker: Any, data: TaskData, job: Job, walk: Scan, budget: int, force: bool) -> tuple[EvalResult, int]:
    """``--rerank-depth all``: the ranker scores every pair (within the pair budget, or forced)."""
    scorer, timings = make_scorer(ranker, data.pool)
    pairs = pair_budget_check(data, job, scorer, budget, force)
    result = scan(ranker, data.test, data.pool, batch_size=walk.batch_size, chunk_size=walk.chunk_size,
                  topk=job.topk, scorer=scorer,
                  progress=job.progress(f"{job.label(data)} (all pairs)", len(data.test)))
    result.timings["index_s"] = timings.get("index_s", 0.0)
    return result, pairs
