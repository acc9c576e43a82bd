"""Bring-your-own tasks in the BEIR layout (the ``imported`` task family).

Import (``import_task``, ``import_beir_folder``) validates the user's files completely before
anything is copied, so a task that imports always loads; the copy lives in
``RBENCH_HOME/imported/<name>/`` with a ``task.json`` holding its TaskSpec fields, and
``imported_specs()`` lists those for the registry.

Input formats (exactly BEIR's, plus one optional file):

- ``corpus.jsonl``: one object per line, ``{"_id": str, "title": str (optional), "text": str}``.
- ``queries.jsonl``: ``{"_id": str, "text": str}``, optionally ``"split"`` in train / valid
  (also ``validation``, ``dev``) / test. If any query has it, every query must.
- ``qrels.tsv``: header ``query-id<TAB>corpus-id<TAB>score``, then one judgement per line.
- ``candidates.jsonl`` (small scenario only): ``{"query_id": str, "candidates": [corpus ids]}``,
  every list of the same length and containing the query's positives.
``.gz`` versions of each are read transparently.

A BEIR folder (``rbench data import NAME --beir DIR``, ``import_beir_folder``) is the layout
BEIR's own downloads unpack to: ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/{train,dev,test}.tsv``
(any of the three; ``test`` is required). A query's split is the qrels file it is judged in
(``dev`` = valid); a query with positives in two of them is refused, naming both files; a
``split`` field in ``queries.jsonl`` is not read. ``--ir-datasets ID`` and ``--hf REPO[:CONFIG]``
(``rbench.tasks.sources``) write such a folder from the ``ir_datasets`` and ``datasets`` packages
and import it.

Zero-shot collections: a task whose train split is empty (a BEIR folder with only
``qrels/test.tsv``, an explicit ``split`` field that is ``test`` everywhere, or any imported task
run with ``--set task.split=test``) is evaluated zero-shot: every query with a positive is a test
query. Rankers that learn nothing run on it (bm25, dense, the random and pop floors); a ranker
that needs training data is refused by the runner before anything is loaded, naming
``--variant from-TASK`` (``TaskFamily.test_only``, ``BaseRanker.needs_training``).

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
- Pools built from positives: a corpus of which at least ``POSITIVE_SHARE_FLAG`` (10%) is some
  query's positive (a collection cut down to its judged documents) is imported with
  ``pool_from_positives`` set in its ``task.json`` (``TaskSpec.pool_from_positives``): pushing the
  train/valid positives last then beats chance with no skill, and the ``prior`` floor belongs in
  its tables. Each load records the shares in ``info`` (``rbench.tasks.pools.pool_prior_info``).
- Three files without a ``split`` field: the evaluated queries are split 8:1:1 (train/valid/test)
  by ``rbench.tasks.building.split_labels``, seeded by the run seed (``rbench data import`` says
  so, and that ``--set task.split=test`` evaluates every query). A BEIR folder is never split
  this way. An unknown id in qrels or candidates is an error naming the file, line and field,
  never a silently dropped judgement.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import numpy as np

from rbench.api import SCENARIOS, Pool, Source, TaskData, TaskSpec
from rbench.core import paths
from rbench.core.atomic import atomic_dir, remove_stale
from rbench.core.errors import DataError, RBenchError
from rbench.core.hashing import file_sha256 as _sha256
from rbench.core.inputs import read_json, require_regular
from rbench.core.settings import DEFAULT_SEED
from rbench.engine.runfile import TREC_ID_RULE, is_trec_id
from rbench.tasks.building import (
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
from rbench.tasks.pools import POSITIVE_SHARE_FLAG, pool_prior_info

_SPLIT_ALIASES = {"train": 0, "valid": 1, "validation": 1, "dev": 1, "test": 2}
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
# a BEIR folder's qrels files (qrels/<name>.tsv) and the split each one's queries go to
QRELS_SPLITS = {"train": 0, "dev": 1, "test": 2}


@dataclass
class ImportedOptions:
    """Options of an imported task (``--set task.key=value``)."""

    # auto: the import's own split (its qrels files, its split field, else 8:1:1 seeded);
    # test: every query with a positive is a test query (zero-shot evaluation, as msmarco's task.split=test)
    split: Literal["auto", "test"] = "auto"
    exclude_fit_positives: bool = True
    """a corpus built from positives (``pool_from_positives``): true leaves the train/valid positives ``fit``
    is handed out of every test ranking (``rbench.tasks.fit_positives``); false: the old protocol"""


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
    split_rule: str = ""  # where query_splits came from: "explicit" (split field), "qrels files"


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


def read_queries(path: Path, split_field: bool = True) -> tuple[list[str], list[str], list[int] | None]:
    """Ids, texts and (``split_field``: read the optional ``split`` field) explicit splits."""
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
        if split_field and "split" in obj:
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


def read_beir(corpus: Path, queries: Path, qrels: Path | dict[int, Path],
              candidates: Path | None = None) -> BeirData:
    """Read and cross-check the files. ``qrels``: one file (splits from the ``split`` field, else
    8:1:1), or split (0/1/2) -> file, a BEIR folder's ``qrels/{train,dev,test}.tsv`` (a query's
    split is the file that judges it; the ``split`` field is not read)."""
    by_split = qrels if isinstance(qrels, dict) else None
    qrels_files: list[Path] = list(by_split.values()) if by_split is not None else [Path(str(qrels))]
    for p in [corpus, queries, *qrels_files] + ([candidates] if candidates else []):
        require_regular(p)  # every file before the first is read: a missing qrels fails fast
    doc_ids, doc_texts = read_corpus(corpus)
    qids, qtexts, qsplits = read_queries(queries, split_field=by_split is None)
    doc_index = {d: i for i, d in enumerate(doc_ids)}
    query_index = {q: i for i, q in enumerate(qids)}
    rule = "explicit" if qsplits is not None else ""
    if by_split is None:
        judged = read_qrels(qrels_files[0], query_index, doc_index)
        positives, n = {qids[i]: v for i, v in judged.positives.items()}, judged.n_judgements
    else:
        positives, n = {}, 0
        where: dict[str, Path] = {}
        qsplits, rule = [2] * len(qids), "qrels files"  # a query no file judges is not evaluated
        for split, path in sorted(by_split.items()):
            judged = read_qrels(path, query_index, doc_index)
            n += judged.n_judgements
            for i, v in sorted(judged.positives.items()):
                if qids[i] in where:
                    raise DataError(f"query {qids[i]!r} has positives in both {where[qids[i]]} and {path}: "
                                    "a query belongs to one split (one qrels file)", path, None, "query-id")
                where[qids[i]] = path
                positives[qids[i]], qsplits[i] = v, split
    if not positives:
        raise DataError("no judgement with score > 0: nothing to evaluate", qrels_files[-1])
    cands = read_candidates(candidates, query_index, doc_index, positives) if candidates else None
    return BeirData(doc_ids, doc_texts, qids, qtexts, qsplits, positives, n, cands, rule)


def _regular_or_gz(path: Path) -> Path | None:
    """``path`` or ``path.gz``, whichever exists (None: neither); both is ambiguous."""
    gz = path.with_name(path.name + ".gz")
    if path.exists() and gz.exists():
        raise DataError(f"both {path.name} and {gz.name} are there: keep one", path.parent)
    return path if path.exists() else gz if gz.exists() else None


def beir_folder_files(folder: Path | str) -> dict[str, Path]:
    """The files of a BEIR folder (module doc) as import kinds: ``corpus``, ``queries`` and
    ``qrels-train`` / ``qrels-dev`` / ``qrels-test``; a missing or unexpected file is one line."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise RBenchError(f"--beir {folder}: not a folder (expected corpus.jsonl, queries.jsonl and "
                          "qrels/test.tsv inside)")
    out: dict[str, Path] = {}
    for kind in ("corpus", "queries"):
        found = _regular_or_gz(folder / f"{kind}.jsonl")
        if found is None:
            raise DataError("missing: a BEIR folder holds corpus.jsonl, queries.jsonl and qrels/test.tsv",
                            folder / f"{kind}.jsonl")
        out[kind] = found
    qdir = folder / "qrels"
    if qdir.is_dir():
        for p in sorted(qdir.iterdir()):
            stem = p.name[:-3] if p.name.endswith(".gz") else p.name
            if p.name.startswith(".") or not stem.endswith(".tsv"):
                continue
            if stem[:-4] not in QRELS_SPLITS:
                raise DataError(f"not a BEIR qrels split: expected {', '.join(f'{s}.tsv' for s in QRELS_SPLITS)} "
                                "(dev is the validation split)", p)
    for split in QRELS_SPLITS:
        found = _regular_or_gz(qdir / f"{split}.tsv")
        if found is not None:
            out[f"qrels-{split}"] = found
    if "qrels-test" not in out:
        raise DataError("missing: a BEIR folder needs qrels/test.tsv (the evaluated split; train.tsv and "
                        "dev.tsv are optional)", qdir / "test.tsv")
    return out


def _qrels_by_split(files: dict[str, Path]) -> dict[int, Path]:
    return {QRELS_SPLITS[k[len("qrels-"):]]: p for k, p in files.items() if k.startswith("qrels-")}


# ------------------------------------------------------------------------------------------
# import and registry listing
# ------------------------------------------------------------------------------------------

_FILES = {"corpus": "corpus.jsonl", "queries": "queries.jsonl", "qrels": "qrels.tsv",
          "candidates": "candidates.jsonl", **{f"qrels-{s}": f"qrels.{s}.tsv" for s in QRELS_SPLITS}}


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
    sources = {"corpus": Path(corpus), "queries": Path(queries), "qrels": Path(qrels)}
    return _import(name, sources, scenario, candidates, how=f"rbench data import {name} (re-import the BEIR files)",
                   title=title, description=description, license=license, overwrite=overwrite, reserved=reserved)


def import_beir_folder(name: str, folder: Path | str, scenario: str = "large",
                       candidates: Path | str | None = None, *, origin: str | None = None,
                       how_flag: str | None = None, title: str | None = None, description: str = "", license: str = "user-provided",
                       overwrite: bool = False, reserved: Collection[str] = (), move: bool = False) -> Path:
    """``import_task`` for a BEIR folder (module doc): splits from ``qrels/{train,dev,test}.tsv``.
    ``origin`` says where the folder came from (``ir_datasets:ID``, ``hf:REPO``; default: the
    folder), ``how_flag`` the import option that fetches it again; ``move``: the files are moved, not copied (a folder ``rbench.tasks.sources`` wrote)."""
    sources = beir_folder_files(folder)
    how = f"rbench data import {name} {how_flag or f'--beir {folder}'}"
    return _import(name, sources, scenario, candidates, how=how, origin=origin, title=title,
                   description=description, license=license, overwrite=overwrite, reserved=reserved, move=move)


def _check_name(name: str, reserved: Collection[str]) -> None:
    if not _NAME_RE.match(name):
        raise RBenchError(f"task name {name!r}: use lowercase letters, digits, '.', '_' or '-' "
                          f"(at most 64, starting with a letter or digit)")
    if name in reserved:
        raise RBenchError(f"task name {name!r} is a built-in task; choose another name")


def check_import(name: str, scenario: str, candidates: object, overwrite: bool,
                 reserved: Collection[str] = ()) -> None:
    """What an import refuses before any file is read (a fetch of ``--ir-datasets``/``--hf`` too)."""
    _check_name(name, reserved)
    if scenario not in SCENARIOS:
        raise RBenchError(f"scenario {scenario!r}: expected one of {', '.join(SCENARIOS)}")
    if scenario == "small" and candidates is None:
        raise RBenchError("the small scenario needs candidates.jsonl (each query's own candidate list)")
    if scenario != "small" and candidates is not None:
        raise RBenchError(f"candidates.jsonl is only used by the small scenario (got scenario {scenario!r})")
    target = imported_root() / name
    if target.exists() and not overwrite:
        raise RBenchError(f"task {name!r} is already imported at {target} (overwrite to replace it)")


def _import(name: str, sources: dict[str, Path], scenario: str, candidates: Path | str | None, *, how: str,
            origin: str | None = None, title: str | None, description: str, license: str, overwrite: bool,
            reserved: Collection[str], move: bool = False) -> Path:
    check_import(name, scenario, candidates, overwrite, reserved)
    if candidates is not None:
        sources["candidates"] = Path(candidates)
    by_split = _qrels_by_split(sources)
    data = read_beir(sources["corpus"], sources["queries"], by_split or sources["qrels"], sources.get("candidates"))
    rows = _evaluated_rows(data)
    _split(data, rows, by_split.get(2, sources["queries"]), 0)  # a task that imports must load

    root = imported_root()
    target = root / name
    if target.exists() and not overwrite:  # checked again: imported meanwhile
        raise RBenchError(f"task {name!r} is already imported at {target} (overwrite to replace it)")
    remove_stale(root)  # hidden copies of killed imports (a live import's are younger: kept)
    splits = None
    if data.query_splits is not None:
        labels = [data.query_splits[i] for i in rows]
        splits = {s: labels.count(k) for k, s in enumerate(("train", "valid", "test"))}
    with atomic_dir(target) as tmp:
        files: dict[str, dict[str, str]] = {}
        for kind, src in sources.items():
            dest_name = _FILES[kind] + (".gz" if src.name.endswith(".gz") else "")
            shown = origin if origin else str(src.resolve())
            if move and kind != "candidates":
                os.replace(src, tmp / dest_name)
            else:
                shutil.copyfile(src, tmp / dest_name)
            files[kind] = {"file": dest_name, "sha256": _sha256(tmp / dest_name), "from": shown}
        n_eval = len(data.qrels)
        if data.split_rule == "qrels files":
            protocol = "split by qrels file (train/dev/test)"
        elif data.split_rule:
            protocol = "explicit split field"
        else:
            protocol = "8:1:1 seeded split by query"
        if splits is not None and splits["train"] == 0:
            protocol += "; test split only: evaluated zero-shot"
        layout = f"{origin} collection" if origin else "BEIR-layout task"
        share = positive_share(data)
        spec = {
            "name": name,
            "title": title or name,
            "scenario": scenario,
            "domain": "generic",
            "description": description or f"Imported {layout} ({len(data.doc_ids)} documents, "
                                           f"{n_eval} queries with a positive).",
            "paper_candidates": None,
            "paper_queries": None,
            "sources": [{"name": kind, "url": info["from"], "license": license, "sha256": info["sha256"]}
                        for kind, info in files.items()],
            "license": license,
            "how_to_get": how,
            "protocol": "imported BEIR task: positives = qrels score > 0 (graded); " + protocol,
            "tags": ["imported"],
            # a corpus that is mostly positives (one cut down to the judged documents) is a pool built
            # from positives: the ``prior`` floor belongs in its tables (rbench.tasks.pools)
            "pool_from_positives": share >= POSITIVE_SHARE_FLAG, "pool_positive_share": round(share, 6),
            "files": files,
            "counts": {"documents": len(data.doc_ids), "queries": len(data.query_ids),
                       "queries_with_positives": n_eval, "judgements": data.n_judgements},
            **({"splits": splits} if splits is not None else {}),
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
    needed = ("corpus", "queries", "qrels-test" if "qrels-test" in files else "qrels")
    missing = [k for k in needed if k not in files or not files[k].is_file()]
    if spec.scenario == "small" and ("candidates" not in files or not files["candidates"].is_file()):
        missing.append("candidates")
    if missing:
        return not_present(spec, d, f"missing {', '.join(missing)}")
    return True, f"imported: {', '.join(sorted(p.name for p in files.values()))} in {d}"


def _evaluated_rows(data: BeirData) -> list[int]:
    """The queries that have a positive, in canonical (id) order."""
    order = sorted(range(len(data.query_ids)), key=lambda i: data.query_ids[i])
    return [i for i in order if data.query_ids[i] in data.qrels]


def _split(data: BeirData, rows: list[int], where: Path, seed: int,
           mode: str = "auto") -> tuple[np.ndarray, str]:
    """The split labels of the evaluated queries and the rule that gave them (``mode="test"``:
    every query a test query). A split that leaves no test query is a DataError (checked at
    import too, so an import always loads); an empty train split is a zero-shot collection."""
    if mode == "test":
        return split_labels(len(rows), seed, mode="test"), "test (task.split=test)"
    if data.query_splits is not None:
        labels = np.asarray([data.query_splits[i] for i in rows], dtype=np.int8)
        if not (labels == 2).any():
            if data.split_rule == "qrels files":
                raise DataError("no judgement with score > 0: the test split has no query to evaluate", where)
            raise DataError("the explicit split has no test query with a positive", where, None, "split")
        return labels, data.split_rule
    try:
        return split_labels(len(rows), seed), f"8:1:1 seeded (seed {seed})"
    except DataError as exc:
        raise DataError(f"{exc.reason}, or give every query a 'split' field (test everywhere: a zero-shot "
                        "collection)", where) from None


def load_imported(spec: TaskSpec, options: Any = None, seed: int = DEFAULT_SEED) -> TaskData:
    d, files = _task_files(spec)
    if not files:
        raise DataError("no readable task.json: re-import the task", d / "task.json")
    by_split = _qrels_by_split(files)
    data = read_beir(files["corpus"], files["queries"], by_split or files["qrels"], files.get("candidates"))
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
    mode = options.split if isinstance(options, ImportedOptions) else "auto"
    labels, split_rule = _split(data, rows, by_split.get(2, files["queries"]), seed, mode)
    info = {"source": str(d), "n_documents": len(pool), "n_queries_total": len(data.query_ids),
            "n_queries_without_positive": len(data.query_ids) - len(rows), "split": split_rule}
    task = assemble(spec, pool, table, labels, info, fingerprint_parts=(split_rule,))
    shares = pool_prior_info(task)  # computed, so a task imported before the flag existed says it too
    task.info.update(shares, pool_from_positives=shares["pool_positive_share"] >= POSITIVE_SHARE_FLAG)
    return task


def positive_share(data: BeirData) -> float:
    """The share of the corpus that is some query's positive (score > 0)."""
    docs = {d for judged in data.qrels.values() for d, _ in judged}
    return len(docs) / max(len(data.doc_ids), 1)


def import_splits(spec: TaskSpec) -> dict[str, int] | None:
    """The imported task's queries with a positive per split (train/valid/test), as its import
    recorded them; None for an 8:1:1 seeded split (or an unreadable task.json)."""
    try:
        raw = _task_json(imported_root() / spec.name / "task.json").get("splits")
    except DataError:
        return None
    return raw if isinstance(raw, dict) else None


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

    def options_type(self, spec: TaskSpec) -> type:
        return ImportedOptions

    def test_only(self, spec: TaskSpec, options: Any) -> bool:
        if isinstance(options, ImportedOptions) and options.split == "test":
            return True
        splits = import_splits(spec)
        return splits is not None and not splits.get("train")

    def load(self, spec: TaskSpec, options: Any, seed: int) -> TaskData:
        return load_imported(spec, options, seed)


FAMILY = ImportedFamily()
