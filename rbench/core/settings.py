"""How a run is carried out: each run setting declared once, with its default, help and check.

The CLI's options (``rbench run --batch-size ...``), ``rbench.evaluate``/``plan_run``, the runner
and the engine all read their defaults from ``RunSettings`` (``DEFAULTS``) and their help text
from the field's metadata (``help_of``), so a default or its explanation is written in one place.
``RunSettings.__post_init__`` validates every value, for the CLI and Python callers alike.
"""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rbench.core.errors import RBenchError, unknown
from rbench.core.measures import parse_measures

OVERWRITE = ("only-missing", "always", "never")
SCANS = ("cpu", "cuda", "torch")  # where an embedding ranker's scores are scanned (rbench.engine.torch_scan)
SCAN_PRECISIONS = ("fp32", "tf32", "bf16")
SEED_LIMIT = 2**32  # --seed is in [0, 2**32): seeds that far apart would give the same splits and samples
MAX_TOPK = 100_000  # --topk's ceiling: checked when options are parsed, before the pool size is known;
# beyond it the (queries, topk) arrays outgrow memory late in a run, and no one reads such a ranking


def _setting(default: Any, help: str) -> Any:
    return dataclasses.field(default=default, metadata={"help": help})


@dataclass(frozen=True, kw_only=True)
class RunSettings:
    """How a run is carried out (numbers, a path, switches): given in ``RunOptions`` and kept as
    they are in the ``RunPlan`` (nothing in them needs resolving)."""

    seed: int = _setting(0, "Seed for sampling, splits and training (0 to 2**32-1).")
    max_queries: int | None = _setting(None, "Evaluate a seeded sample of N test queries.")
    results_dir: Path = _setting(Path("results"), "Where RunRecords are written.")
    batch_size: int = _setting(256, "Queries per scoring batch.")
    chunk_size: int = _setting(65536, "Candidates per scoring chunk.")
    write: bool = _setting(True, "Write a RunRecord.")
    ann: str | None = _setting(None, "Also measure a faiss index (flat|ivf|hnsw|pq) against the exact scan; "
                                     "headline metrics stay exact.")
    ray_shards: int | None = _setting(None, "Score the pool in N Ray tasks (embedding rankers; identical metrics; "
                                            "RAY_ADDRESS for a cluster).")
    topk: int = _setting(100, "Write each query's top N as a gzipped TREC run beside the RunRecord "
                              "(<stem>.<hash>.run.gz; 0: none; at most 100,000).")
    scan: str = _setting("cpu", "Where an embedding ranker's scores are scanned: cpu (rbench's engine, the "
                                "reference), cuda (torch on a GPU), torch (torch on the CPU: the GPU path's "
                                "tested twin). Ranks are exact for the scores each path computes; fp32 GEMMs "
                                "on other hardware differ in the last bits (docs/guides/gpu.md).")
    scan_precision: str = _setting("fp32", "fp32 | tf32 | bf16: the torch scan's GEMM precision; tf32 and bf16 "
                                           "compute other scores, so ties and ranks can move (--scan cuda/torch).")
    overwrite: str = _setting("only-missing", "only-missing: skip a run whose RunRecord exists with the same ranker "
                                              "(version, code, config), data and evaluation protocol (and every "
                                              "--measure asked for); always: run and replace it; never: skip "
                                              "whenever it exists.")
    measures: tuple[str, ...] = _setting((), "Also compute this measure, in ir_measures' syntax (nDCG@10, RR(rel=2)@10, "
                                             "R@1000, P@5, AP, AP@100, Success@1; repeat for several): stored in the "
                                             "RunRecord's metrics beside the defaults; never changes the ranking or "
                                             "the record's identity (docs/reference/measures.md).")

    def __post_init__(self) -> None:
        """Numbers out of range fail here, for the CLI and Python callers alike: a chunk size of 0
        or less would never advance, a sample of 0 queries would silently be a full run."""
        for flag, value, least in (("--seed", self.seed, 0), ("--batch-size", self.batch_size, 1),
                                   ("--chunk-size", self.chunk_size, 1), ("--max-queries", self.max_queries, 1),
                                   ("--ray-shards", self.ray_shards, 1), ("--topk", self.topk, 0)):
            if value is None and flag in ("--max-queries", "--ray-shards"):
                continue
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise RBenchError(f"{flag} must be an integer, got {value!r}")
            if value < least:
                raise RBenchError(f"{flag} must be at least {least}, got {value}"
                                  + (" (leave it out to evaluate every test query)" if flag == "--max-queries" else ""))
            if flag == "--seed" and value >= SEED_LIMIT:  # numpy/torch seeds keep 32 bits: 2**32 apart = one split
                raise RBenchError(f"--seed must be below 2**32 ({SEED_LIMIT:,}), got {value:,}")
        # one parser (rbench.core.measures): kept in ir_measures' canonical spelling, duplicates dropped
        object.__setattr__(self, "measures", tuple(str(m) for m in parse_measures(self.measures or ())))
        if self.overwrite not in OVERWRITE:
            raise unknown("--overwrite strategy", self.overwrite, OVERWRITE)
        if self.scan not in SCANS:
            raise unknown("--scan", self.scan, SCANS)
        if self.scan_precision not in SCAN_PRECISIONS:
            raise unknown("--scan-precision", self.scan_precision, SCAN_PRECISIONS)
        if self.scan == "cpu" and self.scan_precision != "fp32":
            raise RBenchError(f"--scan-precision {self.scan_precision} applies to the torch scan: add --scan cuda "
                              "(or --scan torch)")
        if self.scan != "cpu" and self.ray_shards:
            raise RBenchError(f"--scan {self.scan} and --ray-shards are two ways to scan: pick one")


DEFAULTS = RunSettings()


def help_of(name: str) -> str:
    """The help text of the run setting ``name`` (the CLI's option help)."""
    return str(next(f for f in dataclasses.fields(RunSettings) if f.name == name).metadata["help"])
