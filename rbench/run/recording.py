"""A run's RunRecord: its identity and path (computed once, ``RecordSlot``), its fields
(``make_record``) and its files (``write``).

Why a module of its own: the record's identity decides which file a run writes and whether an
existing one is kept; computed in one place it cannot disagree with itself (it used to be
computed four times and its path built three times inside the runner).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rbench.api import RunContext, TaskData
from rbench.core.config import config_dict, config_hash, non_default, plain_config
from rbench.core.errors import RBenchError
from rbench.core.hashing import source_digest
from rbench.engine.metrics import RECORD_MEASURES, aggregate
from rbench.engine.runfile import run_file_bytes
from rbench.rankers import default_config
from rbench.results.record import (
    RunRecord,
    git_commit,
    machine_info,
    now_iso,
    peak_rss_bytes,
    per_query_bytes,
    per_query_table,
    record_path,
    run_tag,
    write_run,
)
from rbench.run.plan import RunPlan
from rbench.run.strategies import Scored


def record_measures(extra: tuple[str, ...]) -> tuple[str, ...]:
    """What a RunRecord's metrics hold: the paper's defaults (``RECORD_MEASURES``, always, first,
    so a default record's bytes do not depend on what else was asked for) and then each requested
    measure (canonical names, ``RunSettings.measures``) that is not one of them."""
    return RECORD_MEASURES + tuple(m for m in extra if m not in RECORD_MEASURES)


def task_key(task: str, variant: Any) -> str:
    """The task and variant as a RunRecord names them (``RunRecord.task_key``)."""
    return task if variant.label in ("", "original") else f"{task}~{variant.label}"


def options_dict(options: Any) -> dict[str, Any]:
    return config_dict(options) if options is not None else {}


@dataclass(frozen=True)
class RecordSlot:
    """The run's identity (its options that differ from the defaults), the hash that names its
    file and the file's path: made once (``of``), moved only by the test sample (``sampled``)."""

    diff: dict[str, Any]
    chash: str
    path: Path

    @classmethod
    def of(cls, plan: RunPlan, diff: dict[str, Any]) -> RecordSlot:
        chash = config_hash(diff) if diff else ""
        spec = plan.spec
        return cls(diff, chash, record_path(plan.results_dir, spec.scenario, task_key(spec.name, plan.variant),
                                            plan.ranker, chash))

    def sampled(self, plan: RunPlan, max_queries: int | None) -> RecordSlot:
        """The slot once the sample is known: a sample as large as the test split is a full run."""
        if self.diff.get("max_queries") == max_queries:
            return self
        diff = {k: v for k, v in {**self.diff, "max_queries": max_queries}.items() if v not in ({}, None, 0)}
        return RecordSlot.of(plan, diff)

    def require_file(self) -> None:
        """Refuse, before the work, a path that cannot be a file: a folder (or anything but a
        regular file) standing where the record goes would fail only at the final rename."""
        if self.path.exists() and not self.path.is_file():
            kind = "a folder" if self.path.is_dir() else "not a regular file"
            raise RBenchError(f"the RunRecord {self.path} is {kind}: move it away (a record is a file)")


def _default_config(plan: RunPlan, context: RunContext) -> dict[str, Any]:
    """What a default-built ranker of the plan's class reports (a ready-made object whose class
    cannot be built without arguments has no defaults to compare with: all of its config counts)."""
    try:
        return default_config(plan.ranker_cls, context)
    except Exception:
        if plan.ranker_obj is None:
            raise
        return {}


def identity(plan: RunPlan, ranker: Any, context: RunContext) -> dict[str, Any]:
    """The run's identity: its options that differ from the defaults, read from the protocol's
    ``config`` (any plugin has one), compared with what a default-built ranker reports; the task
    options, sample, seed and rerank spec likewise. Its hash names the RunRecord file."""
    task_opts = options_dict(plan.task_options)
    diff = {"ranker": non_default(plain_config(ranker.config), plain_config(_default_config(plan, context))),
            "task": non_default(task_opts, options_dict(type(plan.task_options)()) if task_opts else {}),
            "max_queries": plan.max_queries, "seed": plan.seed,
            # the torch scan's scores are not the engine's bits: its record never stands for the CPU one
            "scan": f"{plan.scan}/{plan.scan_precision}" if plan.scan != "cpu" else None}
    if plan.rerank is not None:  # a rerank run never shares a plain run's row or file
        from rbench.core.hashing import file_sha256
        from rbench.run.rerank import identity as rerank_identity

        rf = plan.rerank.run_file
        diff["rerank"] = rerank_identity(plan.rerank, context, file_sha256(rf) if rf is not None else "")
    return {k: v for k, v in diff.items() if v not in ({}, None, 0)}


@dataclass(frozen=True)
class Measured:
    """What the run measured beside the scores: its timings (seconds) and peak memory by phase."""

    load_s: float
    fit_s: float
    compile_s: float
    rss: dict[str, int]
    max_queries: int | None


def make_record(plan: RunPlan, ranker: Any, data: TaskData, scored: Scored, values: dict[str, np.ndarray],
                slot: RecordSlot, measured: Measured) -> RunRecord:
    """The RunRecord of a scored run (its per-query table attached)."""
    result, spec = scored.result, plan.spec
    first_rank = np.minimum.reduceat(result.ranks.values, result.ranks.offsets[:-1])
    t = result.timings
    record = RunRecord(
        task=spec.name, variant=plan.variant.label, scenario=spec.scenario, task_fingerprint=data.fingerprint,
        ranker={"name": plan.ranker, "version": getattr(ranker, "version", ""), "config": ranker.config,
                "source_sha256": source_digest(type(ranker)),
                **({"source": plan.ranker_source} if plan.ranker_source != "entry-point" else {}),
                **({"label": ranker.label} if isinstance(getattr(ranker, "label", None), str) else {})},
        seed=plan.seed, n_queries=len(data.test), metrics={**aggregate(values), **aggregate(scored.dropped)},
        timings={"load_s": round(measured.load_s, 4), "fit_s": round(measured.fit_s, 4),
                 "index_s": round(t.get("index_s", 0.0), 4), "score_s": round(t["score_s"], 4),
                 "per_query_ms": round(t["per_query_ms"], 4),
                 "compile_s": round(measured.compile_s + t.get("compile_s", 0.0), 4)},
        peak_rss_bytes=peak_rss_bytes(), peak_rss_by_phase=measured.rss, git_commit=git_commit(), created=now_iso(),
        task_options=options_dict(plan.task_options),
        run_options=_run_options(plan, slot, measured.max_queries),
        task_info={**data.info, "pool_size": len(data.pool), "n_train": len(data.train),
                   "n_valid": len(data.valid), "mean_ranked": float(result.n_ranked.mean())},
        ranker_info={**dict(getattr(ranker, "info", {}) or {}), **({"ann": scored.ann} if scored.ann else {})},
        machine=machine_info(), config_hash=slot.chash, rerank=scored.rerank or {},
    )
    record.per_query = per_query_table(data.test.ids, values, first_rank)
    return record


def _run_options(plan: RunPlan, slot: RecordSlot, max_queries: int | None) -> dict[str, Any]:
    return {"max_queries": max_queries, "batch_size": plan.batch_size, "chunk_size": plan.chunk_size,
            "non_default": slot.diff,
            **({"ray_shards": plan.ray_shards} if plan.ray_shards else {}),
            **({"scan": plan.scan, "scan_precision": plan.scan_precision} if plan.scan != "cpu" else {}),
            **({"world_size": plan.world.size} if plan.world.size > 1 else {})}


def write(plan: RunPlan, record: RunRecord, slot: RecordSlot, data: TaskData, scored: Scored,
          values: dict[str, np.ndarray]) -> Path:
    """The record, its per-query file and (``--topk`` > 0) its gzipped TREC run file."""
    result = scored.result
    first_rank = np.minimum.reduceat(result.ranks.values, result.ranks.offsets[:-1])
    run_file = None
    if plan.topk > 0:
        try:
            run_file = run_file_bytes(data.test, data.pool.ids, result, plan.topk, run_tag(record))
        except RBenchError as exc:  # an id a TREC line cannot hold (a task imported before ids were checked)
            warnings.warn(f"no run file: {exc}", stacklevel=2)
    write_run(record, slot.path, per_query_bytes(data.test.ids, values, first_rank), run_file)
    return slot.path
