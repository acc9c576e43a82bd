"""RunRecords: one JSON file per run, written atomically, plus per-query metrics beside it.

Tables and plots are built only from these files, so every number shown can be traced to a run
and its full effective configuration. A record is written last (after its per-query file) by
temp-file + rename: an interrupted run leaves either the previous record or none, never a
half-written one. The per-query file is named by its content hash, which the record holds
(``per_query_sha256``): a record and a per-query file of different runs never pair up.

Reading checks every field the tables and plots use: a malformed record is a ``DataError``
naming the file (one line, exit 2). A per-query file that is missing, truncated or not the one
the record names is only a note: the record's own metrics stay valid, significance is left out.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import math
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import warnings
import zlib
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

if TYPE_CHECKING:
    import pandas as pd

from rbench.core.atomic import atomic_write_bytes, locked
from rbench.core.config import config_hash
from rbench.core.errors import DataError, RBenchError, write_failure
from rbench.core.hashing import canonical_json
from rbench.core.inputs import read_capped, read_json, size_text
from rbench.core.protocol import PROTOCOL_VERSION
from rbench.core.settings import DEFAULT_SEED
from rbench.core.version import __version__
from rbench.engine.metrics import TIE_RULE
from rbench.tasks.pools import Variant, parse_variant

# The RunRecord file format's version: bumped when a field changes meaning or a reader of the old
# format would misread the new one (adding an optional field does not). A record without the field
# was written before it (schema 0: the same fields); one newer than this reader is refused.
SCHEMA_VERSION = 1
RECORD_SUFFIX = ".json"
PER_QUERY_SUFFIX = ".perquery.csv.gz"
RUN_SUFFIX = ".run.gz"  # the run's top-k as a gzipped TREC run in rbench's own order (rbench.engine.runfile)
TABLE_METRICS = ("nDCG@10", "RR")  # what tables and plots read from every record
# a per-query file holds ~60 bytes a test query: 1 GiB (compressed or not) is ~17M queries
PER_QUERY_MAX_BYTES = 1 << 30


def _canonical(options: dict[str, Any] | None) -> str:
    """Options as one comparable text (sorted JSON); "" for none."""
    return canonical_json(options) if options else ""


@dataclass(frozen=True)
class RowKey:
    """What a leaderboard row is: one ranker configuration (its name and non-default options)."""

    ranker: str
    options: str = ""  # the non-default ranker options as sorted JSON ("" : the defaults)
    rerank: str = ""  # a two-stage run's protocol (rbench.run.rerank): its spec as sorted JSON ("" : none)

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
    seed: int = DEFAULT_SEED
    fingerprint: str = ""  # set (by a leaderboard) where runs of this test set differ in their data

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
        label = f"{self.task_key} ({', '.join(parts)})" if parts else self.task_key
        return f"{label} [data {self.fingerprint[:8]}]" if self.fingerprint else label

    def original(self) -> ColumnKey:
        """The same test set on the task's original pool (a variant's Δ is measured against it),
        whatever its data fingerprint (a variant's pool has a fingerprint of its own)."""
        return replace(self, variant=Variant("original"), fingerprint="")


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
    rbench_version: str = __version__
    protocol: int = PROTOCOL_VERSION  # rbench.core.protocol; a record that lacks it reads as 0 (written before it)
    schema: int = SCHEMA_VERSION  # the file format's version (SCHEMA_VERSION); a record that lacks it reads as 0
    git_commit: str = ""
    created: str = ""
    task_options: dict[str, Any] = field(default_factory=dict)
    run_options: dict[str, Any] = field(default_factory=dict)
    task_info: dict[str, Any] = field(default_factory=dict)
    ranker_info: dict[str, Any] = field(default_factory=dict)
    machine: dict[str, Any] = field(default_factory=dict)
    config_hash: str = ""
    per_query_file: str = ""
    per_query_sha256: str = ""  # of the per-query file's bytes (its name holds the first 12 digits)
    run_file: str = ""  # the top-k as a TREC run (``<stem>.<hash12>.run.gz``; "" : none, --topk 0)
    run_sha256: str = ""
    # a two-stage run (rbench.run.rerank): first_stage, depth, pairs_scored, first_stage_recall@depth,
    # label (``bm25@100``); empty for an ordinary run (and then left out of the JSON)
    rerank: dict[str, Any] = field(default_factory=dict)
    # the process's peak RSS (bytes) at the end of each phase: load, fit, score (ru_maxrss only
    # grows, so a phase's own need shows as the step from the phase before)
    peak_rss_by_phase: dict[str, int] = field(default_factory=dict)
    # per-query metrics as a pandas DataFrame (query_id, one column per measure), when the run
    # was made or read from Python (rbench.evaluate / rbench.load_results); never written to JSON
    per_query: Any = field(default=None, repr=False, compare=False, metadata={"json": False})

    @property
    def label(self) -> str:
        """Row name in tables: the ranker plus its non-default options (short ones spelled out,
        long ones as the config hash); a two-stage run adds its protocol: ``cross-encoder (bm25@100)``."""
        tag = self.rerank.get("label") if isinstance(self.rerank, dict) else None
        return f"{self._plain_label} ({tag})" if tag else self._plain_label

    @property
    def _plain_label(self) -> str:
        if self.ranker.get("label"):  # the ranker named its own configuration when it ran
            return str(self.ranker["label"])
        name = str(self.ranker["name"])
        diff = (self.run_options.get("non_default") or {}).get("ranker") or {}
        if not diff:
            return name
        text = ", ".join(f"{k}={_short(v)}" for k, v in sorted(diff.items()))
        return f"{name} ({text})" if len(text) <= 48 else f"{name}-{self.config_hash}"

    @property
    def row_key(self) -> RowKey:
        diff = self.run_options.get("non_default") or {}
        return RowKey(str(self.ranker["name"]), _canonical(diff.get("ranker")), _canonical(diff.get("rerank")))

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
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.metadata.get("json", True)}
        if not data["rerank"]:  # an ordinary run: its record reads as before
            del data["rerank"]
        where = non_finite(data)
        if where is not None:  # strict JSON has no NaN or Infinity: a record holding one is refused whole
            raise RBenchError(f"the RunRecord would hold a non-finite number at {where}: not written (strict JSON "
                              "has no NaN or Infinity; a ranker option or metric that is not a number?)")
        return json.dumps(data, indent=2, sort_keys=True, default=_json_default, allow_nan=False) + "\n"


def non_finite(value: Any, where: str = "") -> str | None:
    """The path (``config.temperature``) of the first NaN or infinity inside a JSON-like value
    (floats, numpy scalars, lists, dicts), or None."""
    if isinstance(value, dict):
        return next((w for k, v in value.items() if (w := non_finite(v, f"{where}.{k}" if where else str(k)))), None)
    if isinstance(value, (list, tuple)):
        return next((w for i, v in enumerate(value) if (w := non_finite(v, f"{where}[{i}]"))), None)
    if isinstance(value, (float, np.floating)) and not math.isfinite(float(value)):
        return where or "the top level"
    return None


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
    root = Path(__file__).resolve().parents[2]
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
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".rbench-write-test-", suffix=".tmp"):
            pass
    except OSError as exc:
        raise RBenchError(f"results directory {directory} is not writable ({write_failure(directory, exc)})") from exc


def require_target(path: Path, option: str, *, folder: bool = False, suffix: str | None = None) -> None:
    """Fail before any work when ``path`` (given as ``option``) cannot be written as asked: a
    file where a folder of its path should be, a folder where the file goes, a name without the
    ``suffix`` its format needs. Each would otherwise fail only when the result is written."""
    path = Path(path)
    if suffix is not None and path.suffix.lower() != suffix:
        raise RBenchError(f"{option} {path}: expected a {suffix} file name (it is written as {suffix[1:].upper()})")
    blocker = next((p for p in (path if folder else path.parent, *path.parents) if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise RBenchError(f"{option} {path}: {blocker} is a file, not a folder")
    if not folder and path.is_dir():
        raise RBenchError(f"{option} {path} is a folder; give a file name")


def per_query_table(query_ids: NDArray[Any], values: dict[str, NDArray[Any]],
                    first_rank: NDArray[Any]) -> pd.DataFrame:
    """Per-query metrics as a DataFrame: query_id, one column per measure (rounded to 1e-10, as
    the per-query file holds them), rank (the best positive's)."""
    import pandas as pd

    df = pd.DataFrame({"query_id": np.asarray(query_ids).astype(str)})
    for name, v in values.items():
        df[name] = np.round(np.asarray(v, dtype=np.float64), 10)
    df["rank"] = first_rank
    return df


def per_query_bytes(query_ids: NDArray[Any], values: dict[str, NDArray[Any]], first_rank: NDArray[Any]) -> bytes:
    """Deterministic gzip'd CSV (mtime 0) so that re-running a run does not churn the repo."""
    raw = per_query_table(query_ids, values, first_rank).to_csv(index=False).encode()
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, filename="") as gz:
        gz.write(raw)
    return buf.getvalue()


def run_tag(record: RunRecord) -> str:
    """The run file's tag column: the record's row label, or (when that holds whitespace, which
    TREC runs cannot) the ranker's name plus the config hash."""
    label = record.label
    if label and not any(c.isspace() for c in label):
        return label
    name = "".join(str(record.ranker["name"]).split()) or "ranker"
    return f"{name}-{record.config_hash}" if record.config_hash else name


def _per_query_files(path: Path, suffix: str = PER_QUERY_SUFFIX) -> list[Path]:
    """The per-query files of record ``path`` present beside it: ``<stem>.<hash12>.perquery.csv.gz``
    and the older, unhashed ``<stem>.perquery.csv.gz`` (``suffix=RUN_SUFFIX``: its run files)."""
    stem = path.name[: -len(RECORD_SUFFIX)]
    pattern = re.compile(re.escape(stem) + r"(\.[0-9a-f]{12})?" + re.escape(suffix))
    try:
        return [p for p in path.parent.iterdir() if pattern.fullmatch(p.name)]
    except OSError:
        return []


def write_run(record: RunRecord, path: Path, per_query: bytes | None, run: bytes | None = None) -> Path:
    """Write a run's per-query file and run file (``run``: ``rbench.engine.runfile.run_file_bytes``), then its record,
    so that the three always match: each file is named by its content hash, which the record
    holds; the record is published last by one rename; only then are the side files that the
    record now at ``path`` does not name removed. An interrupt at any point leaves the previous
    set, or the new one (plus at worst unreferenced files, removed by the next write of this
    record).

    Concurrent writers of the same record (two ``rbench run`` of the same ranker and task) take
    turns: the whole sequence holds an exclusive lock on the record's folder (``atomic.locked``,
    no lock file), so a writer's side files can never be removed between their writing and the
    publication of the record that names them; the last writer wins whole, with its own files.
    A killed writer releases the lock with its process; its side files are swept by the next."""
    path = Path(path)
    stem = path.name[: -len(RECORD_SUFFIX)]
    record.per_query_file, record.per_query_sha256 = "", ""
    record.run_file, record.run_sha256 = "", ""
    record.to_json()  # a record that cannot be written (a NaN) is refused before any of its files is
    path.parent.mkdir(parents=True, exist_ok=True)
    with locked(path.parent):
        if per_query is not None:
            digest = hashlib.sha256(per_query).hexdigest()
            pq = path.with_name(f"{stem}.{digest[:12]}{PER_QUERY_SUFFIX}")
            atomic_write_bytes(pq, per_query)
            record.per_query_file, record.per_query_sha256 = pq.name, digest
        if run is not None:
            digest = hashlib.sha256(run).hexdigest()
            rf = path.with_name(f"{stem}.{digest[:12]}{RUN_SUFFIX}")
            atomic_write_bytes(rf, run)
            record.run_file, record.run_sha256 = rf.name, digest
        atomic_write_bytes(path, record.to_json().encode())
        keep = {record.per_query_file, record.run_file}
        for old in _per_query_files(path) + _per_query_files(path, RUN_SUFFIX):
            if old.name not in keep:
                with contextlib.suppress(OSError):
                    old.unlink()
    return path


_FIELD_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "task": ((str,), "a string"), "scenario": ((str,), "a string"), "variant": ((str,), "a string"),
    "task_fingerprint": ((str,), "a string"), "ranker": ((dict,), "an object"),
    "metrics": ((dict,), "an object"), "seed": ((int,), "an integer"), "n_queries": ((int,), "an integer"),
    "created": ((str,), "a string"), "config_hash": ((str,), "a string"), "protocol": ((int,), "an integer"),
    "schema": ((int,), "an integer"),
    "per_query_file": ((str,), "a string"), "per_query_sha256": ((str,), "a string"),
    "run_file": ((str,), "a string"), "run_sha256": ((str,), "a string"),
    "timings": ((dict,), "an object"), "task_options": ((dict,), "an object"),
    "run_options": ((dict,), "an object"), "task_info": ((dict,), "an object"),
    "ranker_info": ((dict,), "an object"), "machine": ((dict,), "an object"), "rerank": ((dict,), "an object"),
    "peak_rss_by_phase": ((dict,), "an object"),
}


def _check_record(data: Any, path: Path) -> None:
    """Refuse, naming the file and the field, a record the tables and plots could not read."""
    if not isinstance(data, dict):
        raise DataError(f"not a RunRecord (a JSON {type(data).__name__}, not an object)", path)
    missing = [k for k in ("task", "scenario", "ranker", "metrics") if k not in data]
    if missing:
        raise DataError(f"not a RunRecord (missing {', '.join(missing)})", path)
    for key, (types, what) in _FIELD_TYPES.items():
        value = data.get(key)
        if key in data and (not isinstance(value, types) or isinstance(value, bool)):
            raise DataError(f"should be {what}, not {json.dumps(value, default=str)[:40]}", path, field=key)
    if not isinstance(data["ranker"].get("name"), str) or not data["ranker"]["name"]:
        raise DataError("the ranker has no name", path, field="ranker")
    if not isinstance(data.get("run_options", {}).get("non_default") or {}, dict):
        raise DataError("should be an object", path, field="run_options.non_default")
    metrics = data["metrics"]
    lacking = [m for m in TABLE_METRICS if m not in metrics]
    if lacking:
        raise DataError(f"no {', '.join(map(repr, lacking))} metric (it has {', '.join(map(repr, metrics)) or 'none'}; "
                        f"written by rbench {data.get('rbench_version', '?')}?): re-run it", path, field="metrics")
    for name, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise DataError(f"metric {name!r} should be a number, not {json.dumps(value, default=str)[:40]}",
                            path, field="metrics")
        if value < 0 or value > 1:  # means of per-query values in [0, 1] (NaN is shown as n/a)
            raise DataError(f"metric {name!r} should be between 0 and 1, not {value!r}", path, field="metrics")
    if data.get("schema", 0) > SCHEMA_VERSION:
        raise DataError(f"written in RunRecord schema {data['schema']} (by rbench {data.get('rbench_version', '?')}); "
                        f"this rbench reads schemas up to {SCHEMA_VERSION}: upgrade rbench", path, field="schema")
    if "n_queries" in data and data["n_queries"] < 1:
        raise DataError(f"should be at least 1, not {data['n_queries']}", path, field="n_queries")


def read_record(path: Path) -> RunRecord:
    """A RunRecord from its file; ``DataError`` (naming the file) when it is not one. Read by
    ``rbench.core.inputs.read_json``: a FIFO or a link to a device under ``*.json`` in a results
    folder, a file over its size limit or JSON over its depth or digit limits is one line, never
    a hang, memory run out or an internal error (``rbench table``, the runner's existing-record
    check)."""
    data = read_json(path, "a RunRecord")
    _check_record(data, path)
    known = set(RunRecord.__dataclass_fields__)
    return RunRecord(**{"protocol": 0, "schema": 0, **{k: v for k, v in data.items() if k in known}})


def require_results_dir(results_dir: Path) -> Path:
    """``results_dir`` as a folder that exists: a mistyped one is an error, never an empty table."""
    from rbench.core.errors import did_you_mean

    base = Path(results_dir)
    if not base.is_dir():
        parent = base.parent if str(base.parent) else Path(".")
        try:
            near = [p.name for p in parent.iterdir() if p.is_dir()] if parent.is_dir() else []
        except OSError:
            near = []
        what = "is a file, not a folder" if base.exists() else "does not exist"
        raise RBenchError(f"results directory {base} {what}{did_you_mean(base.name, near)}")
    return base


def load_records(results_dir: Path, scenario: str | None = None) -> list[tuple[Path, RunRecord]]:
    base = Path(results_dir)
    root = base / scenario if scenario else base
    if not root.exists():
        return []
    return [(p, read_record(p)) for p in sorted(root.rglob(f"*{RECORD_SUFFIX}")) if not p.name.startswith(".")]


def read_per_query(record_file: Path, record: RunRecord) -> pd.DataFrame | None:
    """Per-query metrics of a record as a DataFrame; None (with a note naming the file when the
    record names one) when there is none, or it is missing, unreadable or not the file the
    record was written with (``per_query_sha256``)."""
    import pandas as pd

    if not record.per_query_file:
        return None
    pq = Path(record_file).with_name(record.per_query_file)
    try:  # a regular file only (a FIFO would block), at most PER_QUERY_MAX_BYTES of it
        raw = read_capped(pq, PER_QUERY_MAX_BYTES)
    except DataError as exc:
        return _per_query_note(pq, f"cannot be read ({exc.reason})")
    if record.per_query_sha256 and hashlib.sha256(raw).hexdigest() != record.per_query_sha256:
        return _per_query_note(pq, f"is not the file {Path(record_file).name} was written with (its sha256 differs)")
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(raw)) as gz:
            text = gz.read(PER_QUERY_MAX_BYTES + 1)  # a gzip bomb stops at the cap
        if len(text) > PER_QUERY_MAX_BYTES:
            return _per_query_note(pq, f"holds more than {size_text(PER_QUERY_MAX_BYTES)} of text")
        frame = pd.read_csv(io.BytesIO(text))
    except (EOFError, OSError, zlib.error, UnicodeDecodeError, ValueError, pd.errors.ParserError) as exc:
        return _per_query_note(pq, f"is truncated or corrupt ({type(exc).__name__}: {' '.join(str(exc).split())})")
    if "query_id" not in frame.columns:
        return _per_query_note(pq, "has no query_id column")
    return frame


def _per_query_note(pq: Path, why: str) -> pd.DataFrame | None:
    """The note a reader gets for a per-query file it cannot use; None: no frame."""
    warnings.warn(f"{pq} {why}: its run gets no significance test", stacklevel=3)
    return None


def finite(value: Any) -> bool:
    """Whether a metric value is a finite number (a record may hold NaN)."""
    return isinstance(value, (int, float)) and math.isfinite(value)
