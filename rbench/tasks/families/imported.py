"""Bring-your-own tasks in the BEIR layout (the ``imported`` task family).

Import (``import_task``) validates the user's files completely before anything is copied, so a
task that imports always loads; the copy lives in ``RBENCH_HOME/imported/<name>/`` with a
``task.json`` holding its TaskSpec fields, and ``imported_specs()`` lists those for the registry.

Input formats (exactly BEIR's, plus one optional file):

- ``corpus.jsonl``: one object per line, ``{"_id": str, "title": str (optional), "text": str}``.
- ``queries.jsonl``: ``{"_id": str, "text": str}``, optionally ``"split"`` in train / valid
  (also ``validation``, ``dev``) / test. If any query has it, every query must.
- ``qrels.tsv``: header ``query-id<TAB>corpus-id<TAB>score``, then one judgement per line.
- ``candidates.jsonl`` (small scenario only): ``{"query_id": str, "candidates": [corpus ids]}``,
  every list of the same length and containing the query's positives.
``.gz`` versions of each are read transparently.

Choices written down:

- Candidate text = ``title + " " + text`` when there is a title (what BEIR's dense evaluation
  feeds encoders), else ``text``.
- Positives are the judgements with score > 0, their score kept as the graded-relevance gain;
  score <= 0 judgements are read, validated and otherwise ignored. Queries without a positive are
  not evaluated (they are counted in ``TaskData.info``).
- Pool order: the corpus is read in file order, and a corpus is often written query by query
  (each query's judged documents together), so a document's place would say which query it
  answers. The pool is laid out in the hashed order of ``rbench.tasks.building`` (module doc, "Pool
  order": by sha256 of the corpus id), and each ``candidates.jsonl`` list in that pool order, so
  neither a candidate's position nor its column in a list tells which query it answers or
  whether it is the positive (a list file that puts the positive first is common). Corpus ids
  are the user's own: an id spelled after its query ("q12_p3") would still tell, and is the
  data's to avoid.
- Without a ``split`` field the evaluated queries are split 8:1:1 (train/valid/test) by
  ``rbench.tasks.building.split_labels``, seeded by the run seed. An unknown id in qrels or candidates is an
  error naming the file, line and field, never a silently dropped judgement.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from rbench.api import SCENARIOS, Pool, Source, TaskData, TaskSpec
from rbench.core import paths
from rbench.core.atomic import atomic_dir, remove_stale
from rbench.core.errors import DataError, RBenchError
from rbench.core.hashing import file_sha256 as _sha256
from rbench.core.inputs import read_json, require_regular
from rbench.engine.runfile import TREC_ID_RULE, is_trec_id
from rbench.tasks.building import (
    SPLIT_NAMES,
    QueryTable,
    assemble,
    id_field,
    iter_jsonl,
    not_present,
    read_qrels,
    split_labels,
    text_field,
)
from rbench.tasks.family import TaskFamily

_SPLIT_ALIASES = {"train": 0, "valid": 1, "validation": 1, "dev": 1, "test": 2}
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")

# ------------------------------------------------------------------------------------------
# reading the BEIR files
# ------------------------------------------------------------------------------------------


# ------------------------------------------------------------------------------------------
# BEIR reading and validation
# ------------------------------------------------------------------------------------------


@dataclass
class BeirData:
    """The parsed and cross-checked contents of one bring-your-own task."""

    doc_ids: np.ndarray
    doc_texts: np.ndarray
    query_ids: list[str]
    query_texts: list[str]
    query_splits: list[int] | None  # explicit split per query (0/1/2) or None
    qrels: dict[str, list[tuple[int, float]]]  # query id -> [(doc index, score > 0)]
    n_judgements: int
    candidates: dict[str, np.ndarray] | None  # query id -> doc indices (small scenario)


def _trec_id(value: str, path: Path, lineno: int) -> str:
    """A corpus or query id as TREC run and qrels lines can hold it (``rbench.engine.runfile.TREC_ID_RULE``:
    the run file and ``rbench data qrels`` write them), refused at import otherwise."""
    if not is_trec_id(value):
        raise DataError(f"id {value!r} cannot be written to TREC run and qrels files ({TREC_ID_RULE})",
                        path, lineno, "_id")
    return value


def read_corpus(path: Path) -> tuple[np.ndarray, np.ndarray]:
    ids: list[str] = []
    texts: list[str] = []
    first: dict[str, int] = {}
    for lineno, obj in iter_jsonl(path):
        doc_id = _trec_id(id_field(obj, "_id", path, lineno), path, lineno)
        text = text_field(obj, "text", path, lineno)
        title = text_field(obj, "title", path, lineno, required=False).strip()
        if doc_id in first:
            raise DataError(f"duplicate id {doc_id!r} (first on line {first[doc_id]})", path, lineno, "_id")
        first[doc_id] = lineno
        ids.append(doc_id)
        texts.append(f"{title} {text}" if title else text)
    if not ids:
        raise DataError("no documents", path)
    return np.asarray(ids, dtype=object), np.asarray(texts, dtype=object)


def read_queries(path: Path) -> tuple[list[str], list[str], list[int] | None]:
    ids: list[str] = []
    texts: list[str] = []
    splits: list[int | None] = []
    first: dict[str, int] = {}
    for lineno, obj in iter_jsonl(path):
        qid = _trec_id(id_field(obj, "_id", path, lineno), path, lineno)
        if qid in first:
            raise DataError(f"duplicate id {qid!r} (first on line {first[qid]})", path, lineno, "_id")
        first[qid] = lineno
        ids.append(qid)
        texts.append(text_field(obj, "text", path, lineno))
        if "split" in obj:
            raw = obj["split"]
            if not isinstance(raw, str) or raw.lower() not in _SPLIT_ALIASES:
                raise DataError(f"expected one of train, valid, test (got {raw!r})", path, lineno, "split")
            splits.append(_SPLIT_ALIASES[raw.lower()])
        else:
            splits.append(None)
        if (splits[-1] is None) != (splits[0] is None):
            raise DataError("some queries have a 'split' field and others not: give it to all or none",
                            path, lineno, "split")
    if not ids:
        raise DataError("no queries", path)
    return ids, texts, (None if splits[0] is None else [int(s) for s in splits])  # type: ignore[misc]


def read_candidates(path: Path, query_index: dict[str, int], doc_index: dict[str, int],
                    qrels: dict[str, list[tuple[int, float]]]) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    first: dict[str, int] = {}
    width: tuple[int, int] | None = None  # (m, line)
    for lineno, obj in iter_jsonl(path):
        qid = id_field(obj, "query_id", path, lineno)
        if qid not in query_index:
            raise DataError(f"unknown query id {qid!r} (not in queries.jsonl)", path, lineno, "query_id")
        if qid in first:
            raise DataError(f"duplicate query id {qid!r} (first on line {first[qid]})", path, lineno, "query_id")
        first[qid] = lineno
        cands = obj.get("candidates")
        if not isinstance(cands, list) or not cands:
            raise DataError("expected a non-empty list of corpus ids", path, lineno, "candidates")
        idx = []
        for c in cands:
            if isinstance(c, bool) or not isinstance(c, (str, int)) or str(c) not in doc_index:
                raise DataError(f"unknown corpus id {c!r} (not in corpus.jsonl)", path, lineno, "candidates")
            idx.append(doc_index[str(c)])
        if len(set(idx)) != len(idx):
            raise DataError("a corpus id is listed twice", path, lineno, "candidates")
        if width is None:
            width = (len(idx), lineno)
        elif len(idx) != width[0]:
            raise DataError(f"{len(idx)} candidates but line {width[1]} has {width[0]}: every query of the "
                            f"small scenario needs the same number", path, lineno, "candidates")
        missing = {d for d, _ in qrels.get(qid, [])} - set(idx)
        if missing:
            raise DataError(f"the positive {missing.pop()!r} of query {qid!r} is not among its candidates",
                            path, lineno, "candidates")
        out[qid] = np.asarray(idx, dtype=np.int64)
    lacking = [q for q in qrels if q not in out]
    if lacking:
        raise DataError(f"no candidate list for query {lacking[0]!r} ({len(lacking)} queries with positives "
                        f"lack one)", path, None, "query_id")
    return out


def read_beir(corpus: Path, queries: Path, qrels: Path, candidates: Path | None = None) -> BeirData:
    for p in (corpus, queries, qrels) + ((candidates,) if candidates else ()):
        require_regular(p)  # every file before the first is read: a missing qrels fails fast
    doc_ids, doc_texts = read_corpus(corpus)
    qids, qtexts, qsplits = read_queries(queries)
    doc_index = {d: i for i, d in enumerate(doc_ids)}
    query_index = {q: i for i, q in enumerate(qids)}
    judged = read_qrels(qrels, query_index, doc_index)
    positives, n = {qids[i]: v for i, v in judged.positives.items()}, judged.n_judgements
    if not positives:
        raise DataError("no judgement with score > 0: nothing to evaluate", qrels)
    cands = read_candidates(candidates, query_index, doc_index, positives) if candidates else None
    return BeirData(doc_ids, doc_texts, qids, qtexts, qsplits, positives, n, cands)


# ------------------------------------------------------------------------------------------
# import and registry listing
# ------------------------------------------------------------------------------------------

_FILES = {"corpus": "corpus.jsonl", "queries": "queries.jsonl", "qrels": "qrels.tsv",
          "candidates": "candidates.jsonl"}


def imported_root() -> Path:
    return paths.home() / "imported"


def import_task(name: str, corpus: Path | str, queries: Path | str, qrels: Path | str,
                scenario: str = "large", candidates: Path | str | None = None, *,
                title: str | None = None, description: str = "", license: str = "user-provided",
                overwrite: bool = False, reserved: Collection[str] = ()) -> Path:
    """Validate BEIR-layout files and copy them to ``RBENCH_HOME/imported/<name>/``.

    Everything is parsed and cross-checked first; the copy appears atomically (a finished folder
    renamed into place), so a failed import leaves nothing behind. ``reserved`` are names that
    may not be taken (the registry passes the built-in tasks).
    """
    if not _NAME_RE.match(name):
        raise RBenchError(f"task name {name!r}: use lowercase letters, digits, '.', '_' or '-' "
                          f"(at most 64, starting with a letter or digit)")
    if name in reserved:
        raise RBenchError(f"task name {name!r} is a built-in task; choose another name")
    if scenario not in SCENARIOS:
        raise RBenchError(f"scenario {scenario!r}: expected one of {', '.join(SCENARIOS)}")
    if scenario == "small" and candidates is None:
        raise RBenchError("the small scenario needs candidates.jsonl (each query's own candidate list)")
    if scenario != "small" and candidates is not None:
        raise RBenchError(f"candidates.jsonl is only used by the small scenario (got scenario {scenario!r})")
    sources = {"corpus": Path(corpus), "queries": Path(queries), "qrels": Path(qrels)}
    if candidates is not None:
        sources["candidates"] = Path(candidates)
    data = read_beir(sources["corpus"], sources["queries"], sources["qrels"], sources.get("candidates"))
    _split(data, _evaluated_rows(data), sources["queries"], 0)  # a task that imports must load

    root = imported_root()
    target = root / name
    if target.exists() and not overwrite:
        raise RBenchError(f"task {name!r} is already imported at {target} (overwrite to replace it)")
    remove_stale(root)  # hidden copies of killed imports (a live import's are younger: kept)
    with atomic_dir(target) as tmp:
        files: dict[str, dict[str, str]] = {}
        for kind, src in sources.items():
            dest_name = _FILES[kind] + (".gz" if src.name.endswith(".gz") else "")
            shutil.copyfile(src, tmp / dest_name)
            files[kind] = {"file": dest_name, "sha256": _sha256(tmp / dest_name), "from": str(src.resolve())}
        n_eval = len(data.qrels)
        spec = {
            "name": name,
            "title": title or name,
            "scenario": scenario,
            "domain": "generic",
            "description": description or f"Imported BEIR-layout task ({len(data.doc_ids)} documents, "
                                           f"{n_eval} queries with a positive).",
            "paper_candidates": None,
            "paper_queries": None,
            "sources": [{"name": kind, "url": info["from"], "license": license, "sha256": info["sha256"]}
                        for kind, info in files.items()],
            "license": license,
            "how_to_get": f"rbench data import {name} (re-import the BEIR files)",
            "protocol": "imported BEIR task: positives = qrels score > 0 (graded); "
                        + ("explicit split field" if data.query_splits else "8:1:1 seeded split by query"),
            "tags": ["imported"],
            "files": files,
            "counts": {"documents": len(data.doc_ids), "queries": len(data.query_ids),
                       "queries_with_positives": n_eval, "judgements": data.n_judgements},
            "imported_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        (tmp / "task.json").write_text(json.dumps(spec, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return target


_SPEC_FIELDS = {f.name for f in dataclasses.fields(TaskSpec)}


def _task_json(path: Path) -> dict[str, Any]:
    """An imported task's ``task.json`` as an object (``rbench.core.inputs.read_json``: a regular
    file within the size, depth and digit limits), or a DataError naming it."""
    try:
        raw = read_json(path, "a task.json")
    except DataError as exc:
        raise DataError(f"unreadable task.json: {exc.reason}", path) from None
    if not isinstance(raw, dict):
        raise DataError(f"task.json does not describe a task (a JSON {type(raw).__name__}, not an object)", path)
    return raw


def spec_from_json(path: Path) -> TaskSpec:
    raw = _task_json(path)
    fields = {k: v for k, v in raw.items() if k in _SPEC_FIELDS}
    try:
        fields["sources"] = tuple(Source(**s) for s in fields.get("sources", []))
        fields["tags"] = tuple(fields.get("tags", ()))
        return TaskSpec(**fields)
    except TypeError as exc:
        raise DataError(f"task.json does not describe a task: {exc}", path) from None


def imported_specs(strict: bool = False) -> dict[str, TaskSpec]:
    """name -> TaskSpec for every imported task. A broken folder is skipped (so it never breaks
    other commands) unless ``strict``. The registry keeps built-in names from being shadowed."""
    root = imported_root()
    if not root.is_dir():
        return {}
    out: dict[str, TaskSpec] = {}
    for d in sorted(root.iterdir()):
        if not d.is_dir() or d.name.startswith("."):
            continue
        try:
            spec = spec_from_json(d / "task.json")
        except DataError:
            if strict:
                raise
            continue
        if spec.name != d.name:
            if strict:
                raise DataError(f"task.json names {spec.name!r} but lives in {d.name!r}", d / "task.json")
            continue
        out[spec.name] = spec
    return out


def _task_files(spec: TaskSpec) -> tuple[Path, dict[str, Path]]:
    d = imported_root() / spec.name
    try:
        raw = _task_json(d / "task.json")
        files = {kind: d / info["file"] for kind, info in raw["files"].items()}
    except (DataError, KeyError, TypeError, AttributeError):
        files = {}
    return d, files


def imported_status(spec: TaskSpec) -> tuple[bool, str]:
    d, files = _task_files(spec)
    missing = [k for k in ("corpus", "queries", "qrels") if k not in files or not files[k].is_file()]
    if spec.scenario == "small" and ("candidates" not in files or not files["candidates"].is_file()):
        missing.append("candidates")
    if missing:
        return not_present(spec, d, f"missing {', '.join(missing)}")
    return True, f"imported: {', '.join(sorted(p.name for p in files.values()))} in {d}"


def _evaluated_rows(data: BeirData) -> list[int]:
    """The queries that have a positive, in canonical (id) order."""
    order = sorted(range(len(data.query_ids)), key=lambda i: data.query_ids[i])
    return [i for i in order if data.query_ids[i] in data.qrels]


def _split(data: BeirData, rows: list[int], queries: Path, seed: int) -> tuple[np.ndarray, str]:
    """The split labels of the evaluated queries and the rule that gave them; a split that leaves
    no train or test query is a DataError (checked at import too, so an import always loads)."""
    if data.query_splits is not None:
        labels = np.asarray([data.query_splits[i] for i in rows], dtype=np.int8)
        empty = [SPLIT_NAMES[s] for s in (0, 2) if not (labels == s).any()]
        if empty:
            raise DataError(f"the explicit split has no {' or '.join(empty)} query with a positive",
                            queries, None, "split")
        return labels, "explicit"
    try:
        return split_labels(len(rows), seed), f"8:1:1 seeded (seed {seed})"
    except DataError as exc:
        raise DataError(f"{exc.reason}, or give every query a 'split' field", queries) from None


def load_imported(spec: TaskSpec, options: Any = None, seed: int = 0) -> TaskData:
    d, files = _task_files(spec)
    if not files:
        raise DataError("no readable task.json: re-import the task", d / "task.json")
    data = read_beir(files["corpus"], files["queries"], files["qrels"], files.get("candidates"))
    if spec.scenario == "small" and data.candidates is None:
        raise DataError("the small scenario needs candidates.jsonl", d)
    pool = Pool(ids=data.doc_ids, texts=data.doc_texts, name=spec.name)
    rows = _evaluated_rows(data)
    ids = np.asarray([data.query_ids[i] for i in rows], dtype=object)
    pos = [data.qrels[q] for q in ids]
    table = QueryTable(
        ids=ids,
        texts=[data.query_texts[i] for i in rows],
        positives=[np.asarray([d for d, _ in p], dtype=np.int64) for p in pos],
        grades=[np.asarray([s for _, s in p], dtype=np.float64) for p in pos],
        candidates=np.stack([data.candidates[q] for q in ids]) if data.candidates is not None else None,
    )
    labels, split_rule = _split(data, rows, files["queries"], seed)
    info = {"source": str(d), "n_documents": len(pool), "n_queries_total": len(data.query_ids),
            "n_queries_without_positive": len(data.query_ids) - len(rows), "split": split_rule}
    return assemble(spec, pool, table, labels, info, fingerprint_parts=(split_rule,))


class ImportedFamily(TaskFamily):
    """Tasks a user imported with ``rbench data import``: their specs are read from the
    ``task.json`` files on disk (data only, never code), their files from the imported folder."""

    name = "imported"
    doc = __doc__ or ""
    links_from = False

    def specs(self) -> tuple[TaskSpec, ...]:
        return tuple(imported_specs().values())

    def inputs(self, spec: TaskSpec) -> list[Path]:
        return [imported_root() / spec.name]

    def check(self, spec: TaskSpec) -> tuple[bool, str]:
        return imported_status(spec)

    def load(self, spec: TaskSpec, options: Any, seed: int) -> TaskData:
        return load_imported(spec, options, seed)


FAMILY = ImportedFamily()
