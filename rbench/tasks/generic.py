"""Bring-your-own tasks in the BEIR layout, and the split/assembly helpers every qrels-style
loader (MS MARCO, ESCI, routing) shares.

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
- Without a ``split`` field the evaluated queries are split 8:1:1 (train/valid/test) by
  ``split_labels`` below, seeded by the run seed. An unknown id in qrels or candidates is an
  error naming the file, line and field, never a silently dropped judgement.

Split rule (``split_labels``, used by every task in this package): the queries are taken in a
canonical order (sorted by id, so file order never matters), permuted by a NumPy generator seeded
from (seed, "split"), and the first round(n/10) become test, the next round(n/10) valid, the rest
train (round half up). With strata (routing: one stratum per source task) the rule is applied
inside every stratum, so each stratum is represented in every split.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from rbench import paths
from rbench.api import Pool, Queries, Ragged, TaskData
from rbench.errors import DataError, RBenchError, did_you_mean
from rbench.hashing import file_sha256 as _sha256
from rbench.tasks.spec import SCENARIOS, Source, TaskSpec

LOADER = "rbench.tasks.generic:load_generic"
SPLIT_NAMES = ("train", "valid", "test")
_SPLIT_ALIASES = {"train": 0, "valid": 1, "validation": 1, "dev": 1, "test": 2}
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
MIN_SPLIT_QUERIES = 5  # smallest n for which round(n/10) >= 1: a non-empty valid and test split

# ------------------------------------------------------------------------------------------
# helpers shared by the qrels-style loaders (passages, routing, generic)
# ------------------------------------------------------------------------------------------


def parse_json_object(line: str, path: Path, lineno: int) -> dict[str, Any]:
    """One JSON-lines record, or a DataError naming the file and line."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise DataError(f"not valid JSON ({exc.msg} at column {exc.colno})", path, lineno) from None
    if not isinstance(obj, dict):
        raise DataError(f"expected a JSON object, got {type(obj).__name__}", path, lineno)
    return obj


def seeded_rng(seed: int, purpose: str) -> np.random.Generator:
    """An independent stream per purpose, so sampling more queries never reshuffles the split."""
    return np.random.default_rng(np.random.SeedSequence([int(seed) & 0xFFFFFFFF, zlib.crc32(purpose.encode())]))


def split_labels(n: int, seed: int, strata: np.ndarray | None = None, mode: str = "8:1:1") -> np.ndarray:
    """0 = train, 1 = valid, 2 = test for ``n`` queries given in canonical order (see module doc).

    ``mode="test"`` puts every query in the test split: for small evaluation-only collections
    (e.g. TREC DL 2019's 43 queries) judged with zero-shot rankers, where an 8:1:1 split would leave
    4 test queries."""
    if mode == "test":
        return np.full(n, 2, dtype=np.int8)
    if n < MIN_SPLIT_QUERIES:
        raise DataError(f"only {n} queries with a positive: an 8:1:1 split needs at least {MIN_SPLIT_QUERIES}")
    rng = seeded_rng(seed, "split")
    labels = np.zeros(n, dtype=np.int8)
    groups = [np.arange(n)] if strata is None else \
        [np.flatnonzero(strata == s) for s in sorted(set(np.asarray(strata).tolist()))]
    for group in groups:
        perm = rng.permutation(group)
        k = int(np.floor(len(group) * 0.1 + 0.5))
        labels[perm[:k]] = 2
        labels[perm[k : 2 * k]] = 1
    return labels


def content_hash(*parts: Any) -> str:
    """sha256 over arrays/strings in order (the task fingerprint recorded with every result)."""
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, np.ndarray) and part.dtype != object:
            h.update(str(part.dtype).encode())
            h.update(np.ascontiguousarray(part).tobytes())
        elif isinstance(part, (np.ndarray, list, tuple)):
            for x in part:
                h.update(str(x).encode())
                h.update(b"\x1f")
        else:
            h.update(str(part).encode())
        h.update(b"\x1e")
    return h.hexdigest()


@dataclass
class QueryTable:
    """All evaluated queries of a task before the split (rows in canonical order)."""

    ids: np.ndarray  # str (object)
    texts: list[str]
    positives: list[np.ndarray]  # pool indices per query
    grades: list[np.ndarray]  # float, aligned with positives, > 0
    exclude: list[np.ndarray] | None = None  # pool indices removed from that query's ranking
    candidates: np.ndarray | None = None  # (n, m) pool indices, small scenario

    def __len__(self) -> int:
        return len(self.ids)


def assemble(spec: TaskSpec, pool: Pool, table: QueryTable, labels: np.ndarray,
             info: dict[str, Any], fingerprint_parts: Sequence[Any] = ()) -> TaskData:
    """TaskData with three splits of ``table`` sharing ``pool``; sets the pool fingerprint."""
    exclude = table.exclude
    if exclude is not None and not any(len(x) for x in exclude):
        exclude = None

    def take(split: int) -> Queries:
        rows = np.flatnonzero(labels == split)
        texts = [table.texts[i] for i in rows]
        return Queries(
            ids=np.asarray(table.ids[rows], dtype=object),
            texts=texts,
            prompts=[spec.render_prompt(t) for t in texts],
            positives=Ragged.from_rows([table.positives[i] for i in rows]),
            grades=Ragged.from_rows([table.grades[i] for i in rows], dtype=np.float64),
            exclude=Ragged.from_rows([exclude[i] for i in rows]) if exclude is not None else None,
            candidates=table.candidates[rows] if table.candidates is not None else None,
        )

    train, valid, test = take(0), take(1), take(2)
    pool.fingerprint = content_hash(spec.name, pool.ids, pool.texts, test.ids, test.positives.values,
                                    test.grades.values, valid.ids, train.ids,
                                    table.candidates if table.candidates is not None else "",
                                    test.exclude.values if test.exclude is not None else "",
                                    *fingerprint_parts)
    info = {**info, "n_candidates": len(pool), "n_train": len(train), "n_valid": len(valid),
            "n_test": len(test)}
    return TaskData(spec=spec, pool=pool, train=train, valid=valid, test=test, info=info)


def locate(raw: Path, complete: Callable[[Path], bool]) -> Path | None:
    """The folder holding a task's files: ``raw`` itself or exactly one of its subfolders."""
    if not raw.is_dir():
        return None
    if complete(raw):
        return raw
    found = [d for d in sorted(raw.iterdir()) if d.is_dir() and complete(d)]
    if len(found) > 1:
        raise RBenchError(f"{raw} holds the task's files in several subfolders "
                          f"({', '.join(d.name for d in found)}); keep one")
    return found[0] if found else None


def not_present(spec: TaskSpec, raw: Path, note: str = "") -> tuple[bool, str]:
    where = f" ({note})" if note else ""
    return False, f"not present: {spec.how_to_get}{where} [looked in {raw}]"


def guarded_status(fn: Callable[[TaskSpec], tuple[bool, str]]) -> Callable[[TaskSpec], tuple[bool, str]]:
    """A data_status that reports an ambiguous folder instead of raising (``rbench tasks`` lists
    every task and must not stop at one bad folder); loading still raises the full error."""

    def status(spec: TaskSpec) -> tuple[bool, str]:
        try:
            return fn(spec)
        except RBenchError as exc:
            return not_present(spec, paths.raw_dir(spec.name), str(exc))

    status.__doc__ = fn.__doc__
    return status


def open_text(path: Path) -> io.TextIOBase:
    """Text reader for plain or gzip files (utf-8, undecodable bytes replaced)."""
    if str(path).endswith(".gz"):
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")  # noqa: SIM115


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-empty line; a bad line is a DataError naming it."""
    with open_text(path) as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            yield lineno, parse_json_object(line, path, lineno)


def id_field(obj: dict[str, Any], key: str, path: Path, lineno: int) -> str:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, (str, int)) or str(value) == "":
        got = "missing" if key not in obj else f"got {value!r}"
        raise DataError(f"expected a non-empty string id ({got})", path, lineno, key)
    return str(value)


def text_field(obj: dict[str, Any], key: str, path: Path, lineno: int, required: bool = True) -> str:
    if key not in obj or obj[key] is None:
        if required:
            raise DataError("missing (expected a string)", path, lineno, key)
        return ""
    value = obj[key]
    if not isinstance(value, str):
        raise DataError(f"expected a string, got {type(value).__name__}", path, lineno, key)
    return value


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


def read_corpus(path: Path) -> tuple[np.ndarray, np.ndarray]:
    ids: list[str] = []
    texts: list[str] = []
    first: dict[str, int] = {}
    for lineno, obj in iter_jsonl(path):
        doc_id = id_field(obj, "_id", path, lineno)
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
        qid = id_field(obj, "_id", path, lineno)
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


def read_qrels(path: Path, query_index: dict[str, int], doc_index: dict[str, int]
               ) -> tuple[dict[str, list[tuple[int, float]]], int]:
    """BEIR qrels.tsv -> positives per query; every id is checked against the other files."""
    out: dict[str, list[tuple[int, float]]] = {}
    seen: dict[tuple[str, str], int] = {}
    n = 0
    with open_text(path) as fh:
        header = fh.readline().rstrip("\r\n")
        if [h.strip() for h in header.split("\t")] != ["query-id", "corpus-id", "score"]:
            raise DataError(f"expected the header 'query-id<TAB>corpus-id<TAB>score', got {header!r}", path, 1)
        for lineno, line in enumerate(fh, start=2):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            parts = line.split("\t")
            if len(parts) != 3:
                field = ("query-id", "corpus-id", "score")[min(len(parts), 2)]
                raise DataError(f"expected 3 tab-separated fields, got {len(parts)}", path, lineno, field)
            qid, did, raw = (p.strip() for p in parts)
            if qid not in query_index:
                raise DataError(f"unknown query id {qid!r} (not in queries.jsonl)"
                                f"{did_you_mean(qid, list(query_index)[:5000])}", path, lineno, "query-id")
            if did not in doc_index:
                raise DataError(f"unknown corpus id {did!r} (not in corpus.jsonl)", path, lineno, "corpus-id")
            try:
                score = float(raw)
            except ValueError:
                raise DataError(f"expected a number, got {raw!r}", path, lineno, "score") from None
            if not np.isfinite(score):
                raise DataError(f"expected a finite number, got {raw!r}", path, lineno, "score")
            if (qid, did) in seen:
                raise DataError(f"duplicate judgement (first on line {seen[(qid, did)]})", path, lineno, "corpus-id")
            seen[(qid, did)] = lineno
            n += 1
            if score > 0:
                out.setdefault(qid, []).append((doc_index[did], score))
    if n == 0:
        raise DataError("no judgements", path)
    return out, n


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
        if not Path(p).is_file():
            raise DataError("file not found", p)
    doc_ids, doc_texts = read_corpus(corpus)
    qids, qtexts, qsplits = read_queries(queries)
    doc_index = {d: i for i, d in enumerate(doc_ids)}
    query_index = {q: i for i, q in enumerate(qids)}
    positives, n = read_qrels(qrels, query_index, doc_index)
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


def _builtin_names() -> set[str]:
    from rbench.tasks.registry import TASKS  # late: the registry imports this module lazily

    return set(TASKS)




def import_task(name: str, corpus: Path | str, queries: Path | str, qrels: Path | str,
                scenario: str = "large", candidates: Path | str | None = None, *,
                title: str | None = None, description: str = "", license: str = "user-provided",
                overwrite: bool = False) -> Path:
    """Validate BEIR-layout files and copy them to ``RBENCH_HOME/imported/<name>/``.

    Everything is parsed and cross-checked first; the copy appears atomically (a finished folder
    renamed into place), so a failed import leaves nothing behind.
    """
    if not _NAME_RE.match(name):
        raise RBenchError(f"task name {name!r}: use lowercase letters, digits, '.', '_' or '-' "
                          f"(at most 64, starting with a letter or digit)")
    builtin = _builtin_names()
    if name in builtin:
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

    root = imported_root()
    target = root / name
    if target.exists() and not overwrite:
        raise RBenchError(f"task {name!r} is already imported at {target} (overwrite to replace it)")
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".tmp-{name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
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
            "loader": LOADER,
            "how_to_get": f"rbench data import {name} (re-import the BEIR files)",
            "protocol": "rbench.tasks.generic: positives = qrels score > 0 (graded); "
                        + ("explicit split field" if data.query_splits else "8:1:1 seeded split by query"),
            "tags": ["imported"],
            "files": files,
            "counts": {"documents": len(data.doc_ids), "queries": len(data.query_ids),
                       "queries_with_positives": n_eval, "judgements": data.n_judgements},
            "imported_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        (tmp / "task.json").write_text(json.dumps(spec, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        if target.exists():
            old = root / f".old-{name}-{os.getpid()}"
            os.replace(target, old)
            os.replace(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


_SPEC_FIELDS = {f.name for f in dataclasses.fields(TaskSpec)}


def spec_from_json(path: Path) -> TaskSpec:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise DataError(f"unreadable task.json: {exc}", path) from None
    fields = {k: v for k, v in raw.items() if k in _SPEC_FIELDS}
    try:
        fields["sources"] = tuple(Source(**s) for s in fields.get("sources", []))
        fields["tags"] = tuple(fields.get("tags", ()))
        return TaskSpec(**fields)
    except TypeError as exc:
        raise DataError(f"task.json does not describe a task: {exc}", path) from None


def imported_specs(strict: bool = False) -> dict[str, TaskSpec]:
    """name -> TaskSpec for every imported task. A broken folder is skipped (so it never breaks
    other commands) unless ``strict``; built-in names are never shadowed."""
    root = imported_root()
    if not root.is_dir():
        return {}
    builtin = _builtin_names()
    out: dict[str, TaskSpec] = {}
    for d in sorted(root.iterdir()):
        if not d.is_dir() or d.name.startswith(".") or d.name in builtin:
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
        raw = json.loads((d / "task.json").read_text(encoding="utf-8"))
        files = {kind: d / info["file"] for kind, info in raw["files"].items()}
    except (OSError, json.JSONDecodeError, KeyError, TypeError):
        files = {}
    return d, files


def data_status(spec: TaskSpec) -> tuple[bool, str]:
    d, files = _task_files(spec)
    missing = [k for k in ("corpus", "queries", "qrels") if k not in files or not files[k].is_file()]
    if spec.scenario == "small" and ("candidates" not in files or not files["candidates"].is_file()):
        missing.append("candidates")
    if missing:
        return not_present(spec, d, f"missing {', '.join(missing)}")
    return True, f"imported: {', '.join(sorted(p.name for p in files.values()))} in {d}"


def load_generic(spec: TaskSpec, options: Any = None, seed: int = 0) -> TaskData:
    d, files = _task_files(spec)
    if not files:
        raise DataError("no readable task.json: re-import the task", d / "task.json")
    data = read_beir(files["corpus"], files["queries"], files["qrels"], files.get("candidates"))
    if spec.scenario == "small" and data.candidates is None:
        raise DataError("the small scenario needs candidates.jsonl", d)
    pool = Pool(ids=data.doc_ids, texts=data.doc_texts, name=spec.name)
    order = sorted(range(len(data.query_ids)), key=lambda i: data.query_ids[i])
    rows = [i for i in order if data.query_ids[i] in data.qrels]
    ids = np.asarray([data.query_ids[i] for i in rows], dtype=object)
    pos = [data.qrels[q] for q in ids]
    table = QueryTable(
        ids=ids,
        texts=[data.query_texts[i] for i in rows],
        positives=[np.asarray([d for d, _ in p], dtype=np.int64) for p in pos],
        grades=[np.asarray([s for _, s in p], dtype=np.float64) for p in pos],
        candidates=np.stack([data.candidates[q] for q in ids]) if data.candidates is not None else None,
    )
    if data.query_splits is not None:
        labels = np.asarray([data.query_splits[i] for i in rows], dtype=np.int8)
        empty = [SPLIT_NAMES[s] for s in (0, 2) if not (labels == s).any()]
        if empty:
            raise DataError(f"the explicit split has no {' or '.join(empty)} query with a positive",
                            files["queries"], None, "split")
        split_rule = "explicit"
    else:
        labels = split_labels(len(table), seed)
        split_rule = f"8:1:1 seeded (seed {seed})"
    info = {"source": str(d), "n_documents": len(pool), "n_queries_total": len(data.query_ids),
            "n_queries_without_positive": len(data.query_ids) - len(rows), "split": split_rule}
    return assemble(spec, pool, table, labels, info, fingerprint_parts=(split_rule,))
