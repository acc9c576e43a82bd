"""How a run is carried out: each run setting declared once, with its default, help and check.

The CLI's options (``rbench run --batch-size ...``), ``rbench.evaluate``/``plan_run``, the runner
and the engine all read their defaults from ``RunSettings`` (``DEFAULTS``) and their help text
from the field's metadata (``help_of``), so a default or its explanation is written in one place.
``RunSettings.__post_init__`` validates every value, for the CLI and Python callers alike.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from rbench.core.errors import RBenchError, unknown
from rbench.core.measures import parse_measures
from rbench.core.ranges import AtLeast1, Range, Seed, check_value

OVERWRITE = ("only-missing", "always", "never")
SCANS = ("cpu", "cuda", "torch")  # where an embedding ranker's scores are scanned (rbench.engine.torch_scan)
# bf16/tf32-certified: low-precision GEMMs, ranks certified equal to fp32 reference scores (rbench.engine.certified)
SCAN_PRECISIONS = ("fp32", "tf32", "bf16", "bf16-certified", "tf32-certified")
DEFAULT_SEED = 0  # every seed default of rbench (runs, tasks, rankers' RunContext, compare): one place
SEED_LIMIT = 2**32  # --seed is in [0, 2**32): seeds that far apart would give the same splits and samples
MAX_TOPK = 100_000  # --topk's ceiling: checked when options are parsed, before the pool size is known;
# beyond it the (queries, topk) arrays outgrow memory late in a run, and no one reads such a ranking
MAX_RESAMPLES = 10_000_000  # rbench compare --resamples: p-values resolve 1e-7; each flip costs a pass over
# the queries, so 10**12 (issue 42) would run for days


def _setting(default: Any, help: str) -> Any:
    return dataclasses.field(default=default, metadata={"help": help})


@dataclass(frozen=True, kw_only=True)
class RunSettings:
    """How a run is carried out (numbers, a path, switches): given in ``RunOptions`` and kept as
    they are in the ``RunPlan`` (nothing in them needs resolving)."""

    seed: Seed = _setting(DEFAULT_SEED, "Seed for sampling, splits and training (0 to 2**32-1).")
    # no cap below int64's: a sample at least the test split is a full run (the documented choice)
    max_queries: Annotated[int, Range(1, 2**63 - 1)] | None = _setting(None, "Evaluate a seeded sample of N test queries.")
    results_dir: Path = _setting(Path("results"), "Where RunRecords are written.")
    batch_size: AtLeast1 = _setting(256, "Queries per scoring batch.")
    chunk_size: AtLeast1 = _setting(65536, "Candidates per scoring chunk.")
    write: bool = _setting(True, "Write a RunRecord.")
    ann: str | None = _setting(None, "Also measure a faiss index (flat|ivf|hnsw|pq) against the exact scan; "
                                     "headline metrics stay exact.")
    ray_shards: AtLeast1 | None = _setting(None, "Score the pool in N Ray tasks (embedding rankers; identical metrics; "
                                            "RAY_ADDRESS for a cluster).")
    topk: Annotated[int, Range(0, MAX_TOPK)] = _setting(100, "Write each query's top N as a gzipped TREC run beside the RunRecord "
                              "(<stem>.<hash>.run.gz; 0: none; at most 100,000).")
    scan: str = _setting("cpu", "Where an embedding ranker's scores are scanned: cpu (rbench's engine, the "
                                "reference), cuda (torch on a GPU), torch (torch on the CPU: the GPU path's "
                                "tested twin). Ranks are exact for the scores each path computes; fp32 GEMMs "
                                "on other hardware differ in the last bits (docs/guides/gpu.md).")
    scan_precision: str = _setting("fp32", "fp32 | tf32 | bf16 | bf16-certified | tf32-certified: the torch scan's "
                                           "GEMM precision; tf32 and bf16 compute other scores, so ties and ranks "
                                           "can move; the certified forms re-score in fp32 every candidate within "
                                           "the proven error bound of a threshold, so ranks and top-k equal the "
                                           "fp32 reference scores' (--scan cuda/torch; docs/guides/gpu.md).")
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
        check_flags(self)
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


def check_flags(settings: Any) -> None:
    """Every numeric field of a settings dataclass in the range its annotation declares
    (``rbench.core.ranges``), refused as ``--flag-name must be ...``: the CLI's flags and Python
    callers alike, before anything loads."""
    hints = typing.get_type_hints(type(settings), include_extras=True)
    for f in dataclasses.fields(settings):
        bad = check_value(getattr(settings, f.name), hints[f.name])
        if bad is not None:
            hint = (" (leave it out to evaluate every test query)"
                    if f.name == "max_queries" and getattr(settings, f.name) == 0 else "")
            raise RBenchError(f"--{f.name.replace('_', '-')} {bad}{hint}")


@dataclass(frozen=True, kw_only=True)
class CompareSettings:
    """``rbench compare``'s numbers, each range declared once (checked by ``check_flags``)."""

    seed: Seed = _setting(DEFAULT_SEED, "Seed of the randomization test (0 to 2**32-1).")
    resamples: Annotated[int, Range(1, MAX_RESAMPLES)] = _setting(
        10_000, f"Sign flips of the randomization test (1 to {MAX_RESAMPLES:,}).")
    alpha: Annotated[float, Range(0, 1, lo_open=True, hi_open=True)] = _setting(
        0.05, "Significance level of the corrected p-values (between 0 and 1).")

    def __post_init__(self) -> None:
        check_flags(self)


DEFAULTS = RunSettings()
COMPARE_DEFAULTS = CompareSettings()


def help_of(name: str, settings: type = RunSettings) -> str:
    """The help text of the run setting ``name`` (the CLI's option help)."""
    return str(next(f for f in dataclasses.fields(settings) if f.name == name).metadata["help"])
