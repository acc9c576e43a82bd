"""RunRecords: one JSON file per run, written atomically, plus per-query metrics beside it.

Tables and plots are built only from these files, so every number shown can be traced to a run
and its full effective configuration. A record is written last (after its per-query file) by
temp-file + rename: an interrupted run leaves either the previous record or none, never a
half-written one.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

import rbench
from rbench.config import config_hash
from rbench.errors import DataError, RBenchError
from rbench.metrics import TIE_RULE
from rbench.pools import Variant, parse_variant

RECORD_SUFFIX = ".json"
PER_QUERY_SUFFIX = ".perquery.csv.gz"


def _canonical(options: dict[str, Any] | None) -> str:
    """Options as one comparable text (sorted JSON); "" for none."""
    return json.dumps(options, sort_keys=True, default=str) if options else ""


@dataclass(frozen=True)
class RowKey:
    """What a leaderboard row is: one ranker configuration (its name and non-default options)."""

    ranker: str
    options: str = ""  # the non-default ranker options as sorted JSON ("" : the defaults)

    @property
    def options_hash(self) -> str:
        """Short hash of the options (the record's config hash when only ranker options differ)."""
        return config_hash({"ranker": json.loads(self.options)}) if self.options else ""


@dataclass(frozen=True)
class ColumnKey:
    """What a leaderboard column is: one test set (task, pool variant, non-default task options,
    test-query sample and seed); runs on different test sets never share a column."""

    task: str
    variant: Variant = Variant("original")
    options: str = ""  # the non-default task options as sorted JSON
    max_queries: int | None = None
    seed: int = 0

    @property
    def task_key(self) -> str:
        return self.task if self.variant.kind == "original" else f"{self.task}~{self.variant.label}"

    @property
    def label(self) -> str:
        parts = [f"{k}={_short(v)}" for k, v in sorted(json.loads(self.options or "{}").items())]
        if self.max_queries:
            parts.append(f"max_queries={self.max_queries}")
        if self.seed:
            parts.append(f"seed={self.seed}")
        return f"{self.task_key} ({', '.join(parts)})" if parts else self.task_key

    def original(self) -> ColumnKey:
        """The same test set on the task's original pool (a variant's Δ is measured against it)."""
        return replace(self, variant=Variant("original"))


def recorded_variant(text: str) -> Variant:
    """A record's variant, parsed (records written before the runner parsed the variant may hold
    the raw text, e.g. ``scaled=1_000``); text that does not parse stays a kind of its own."""
    try:
        return parse_variant(text or "original")
    except RBenchError:
        return Variant(text)


@dataclass
class RunRecord:
    task: str
    variant: str
    scenario: str
    task_fingerprint: str
    ranker: dict[str, Any]  # name, version, config
    seed: int
    n_queries: int
    metrics: dict[str, float]
    timings: dict[str, float]
    peak_rss_bytes: int
    tie_rule: str = TIE_RULE
    rbench_version: str = rbench.__version__
    git_commit: str = ""
    created: str = ""
    task_options: dict[str, Any] = field(default_factory=dict)
    run_options: dict[str, Any] = field(default_factory=dict)
    task_info: dict[str, Any] = field(default_factory=dict)
    ranker_info: dict[str, Any] = field(default_factory=dict)
    machine: dict[str, Any] = field(default_factory=dict)
    config_hash: str = ""
    per_query_file: str = ""

    @property
    def label(self) -> str:
        """Row name in tables: the ranker plus its non-default options (short ones spelled out,
        long ones as the config hash)."""
        if self.ranker.get("label"):  # the ranker named its own configuration when it ran
            return str(self.ranker["label"])
        name = self.ranker["name"]
        diff = (self.run_options.get("non_default") or {}).get("ranker") or {}
        if not diff:
            return name
        text = ", ".join(f"{k}={_short(v)}" for k, v in sorted(diff.items()))
        return f"{name} ({text})" if len(text) <= 48 else f"{name}-{self.config_hash}"

    @property
    def row_key(self) -> RowKey:
        diff = self.run_options.get("non_default") or {}
        return RowKey(str(self.ranker["name"]), _canonical(diff.get("ranker")))

    @property
    def column_key(self) -> ColumnKey:
        diff = self.run_options.get("non_default") or {}
        return ColumnKey(self.task, recorded_variant(self.variant), _canonical(diff.get("task")),
                         diff.get("max_queries") or None, int(diff.get("seed") or 0))

    @property
    def column(self) -> str:
        """Column name in tables: the task (and variant) plus non-default task options, test-set
        sampling and seed — runs on different test sets never share a column."""
        return self.column_key.label

    @property
    def task_key(self) -> str:
        return self.task if self.variant in ("", "original") else f"{self.task}~{self.variant}"

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True, default=_json_default) + "\n"


def _short(v: Any) -> str:
    text = str(v)
    if "/" in text and len(text) > 24:  # a local model path: its last meaningful component
        parts = [p for p in text.rstrip("/").split("/") if p]
        generic = {"model", "models", "snapshot", "snapshots", "main", "weights", "checkpoint"}
        named = [p for p in parts if p.lower() not in generic]
        text = named[-1] if named else parts[-1]
    return text


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    return str(obj)


def git_commit() -> str:
    root = Path(__file__).resolve().parents[1]
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                             timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return sha + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def peak_rss_bytes() -> int:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)


def machine_info() -> dict[str, Any]:
    info = {"platform": platform.platform(), "python": platform.python_version(),
            "cpu_count": os.cpu_count(), "processor": platform.machine()}
    torch = sys.modules.get("torch")
    if torch is not None:
        info["torch"] = torch.__version__
        info["device"] = "cuda" if torch.cuda.is_available() else "cpu"
    return info


def now_iso() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def record_path(results_dir: Path, scenario: str, task_key: str, ranker: str, config_hash: str) -> Path:
    stem = f"{ranker}-{config_hash}" if config_hash else ranker
    safe_key = task_key.replace(":", "-")  # scaled:N -> scaled-N (portable directory names)
    return Path(results_dir) / scenario / safe_key / f"{stem}{RECORD_SUFFIX}"


def ensure_writable(directory: Path) -> None:
    """Fail before any work if results cannot be written there."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".rbench-write-test-")
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise RBenchError(f"results directory {directory} is not writable ({exc.strerror or exc})") from exc


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def per_query_bytes(query_ids: np.ndarray, values: dict[str, np.ndarray], first_rank: np.ndarray) -> bytes:
    """Deterministic gzip'd CSV (mtime 0) so that re-running a run does not churn the repo."""
    import pandas as pd

    df = pd.DataFrame({"query_id": np.asarray(query_ids).astype(str)})
    for name, v in values.items():
        df[name] = np.round(np.asarray(v, dtype=np.float64), 10)
    df["rank"] = first_rank
    raw = df.to_csv(index=False).encode()
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, filename="") as gz:
        gz.write(raw)
    return buf.getvalue()


def write_run(record: RunRecord, path: Path, per_query: bytes | None) -> Path:
    if per_query is not None:
        pq = path.with_name(path.name[: -len(RECORD_SUFFIX)] + PER_QUERY_SUFFIX)
        atomic_write_bytes(pq, per_query)
        record.per_query_file = pq.name
    atomic_write_bytes(path, record.to_json().encode())
    return path


def read_record(path: Path) -> RunRecord:
    try:
        data = json.loads(Path(path).read_text())
    except json.JSONDecodeError as exc:
        raise DataError(f"not valid JSON ({exc.msg})", path, exc.lineno) from exc
    known = set(RunRecord.__dataclass_fields__)
    missing = [k for k in ("task", "scenario", "ranker", "metrics") if k not in data]
    if missing:
        raise DataError(f"not a RunRecord (missing {', '.join(missing)})", path)
    return RunRecord(**{k: v for k, v in data.items() if k in known})


def load_records(results_dir: Path, scenario: str | None = None) -> list[tuple[Path, RunRecord]]:
    base = Path(results_dir)
    root = base / scenario if scenario else base
    if not root.exists():
        return []
    return [(p, read_record(p)) for p in sorted(root.rglob(f"*{RECORD_SUFFIX}")) if not p.name.startswith(".")]


def read_per_query(record_file: Path, record: RunRecord):
    """Per-query metrics of a record as a DataFrame (None when the file is absent)."""
    import pandas as pd

    if not record.per_query_file:
        return None
    pq = Path(record_file).with_name(record.per_query_file)
    return pd.read_csv(pq) if pq.exists() else None
