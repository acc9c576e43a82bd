"""What the task loaders share: reading helpers that name file, line and field; the split rule;
THE task fingerprint; one qrels reader; and ``assemble`` (three splits over one pool).

Split rule (``split_labels``, used by every qrels-style task): the queries are taken in a
canonical order (sorted by id, so file order never matters), permuted by a NumPy generator seeded
from (seed, "split"), and the first round(n/10) become test, the next round(n/10) valid, the rest
train (round half up). With strata (routing: one stratum per source task) the rule is applied
inside every stratum, so each stratum is represented in every split.

Pool order (``assemble``'s ``pool_order``): a pool built from the queries (the passages of each
sampled query, one positive per query, a corpus file written query by query) would tell a ranker,
by a candidate's position alone, which query it answers. ``hashed`` (the default) lays the pool
out by ascending sha256 of ``POOL_ORDER_KEY`` + the candidate id (``hashed_order``): independent
of the file order, of the queries and their answers, of any sequence in the ids themselves, and
of the seed (one pool per task and options, whose candidate embeddings are cached once). Every
pool index of the table (positives, exclusions, candidate lists) is remapped with it, and each
per-query candidate list is laid out in pool order, so a column says no more than the id does.
``given`` keeps the family's own order; a family that passes it says why in its protocol notes.

The fingerprint is the identity of a task's data in every RunRecord: a sha256 over the parts in
order, numeric arrays as dtype + bytes, text columns (object arrays, lists, lazy columns) row by
row in blocks, so an Arrow column and an object array of the same texts hash the same.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import re
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from rbench.api import MAX_GRADE, Pool, Queries, Ragged, TaskData, TaskSpec
from rbench.core import paths
from rbench.core.errors import DataError, RBenchError, did_you_mean
from rbench.core.inputs import iter_text_lines, parse_json
from rbench.tasks.text_columns import take_texts

SPLIT_NAMES = ("train", "valid", "test")
MIN_SPLIT_QUERIES = 5  # smallest n for which round(n/10) >= 1: a non-empty valid and test split
_BLOCK = 65_536
POOL_ORDER_KEY = b"rbench pool order v1\x1f"  # changing it reorders every hashed pool (new fingerprints)
PoolOrder = Literal["hashed", "given"]


def parse_json_object(line: str, path: Path, lineno: int) -> dict[str, Any]:
    """One JSON-lines record, or a DataError naming the file and line (``rbench.core.inputs``: within
    its depth and digit limits)."""
    obj = parse_json(line, path, lineno)
    if not isinstance(obj, dict):
        raise DataError(f"expected a JSON object, got {type(obj).__name__}", path, lineno)
    if _SURROGATE_ESCAPE.search(line):  # \ud800-\udfff escapes: a pair is one character, a lone one is no text
        for key, value in obj.items():
            bad = _lone_surrogate(value)
            if bad is not None:
                raise DataError(f"a lone surrogate escape (\\u{ord(bad):04x}) is not Unicode text: write the "
                                "character itself, or its full surrogate pair", path, lineno, str(key))
    return obj


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _lone_surrogate(value: Any) -> str | None:
    """The first lone surrogate in a decoded JSON value (nested lists and objects included)."""
    if isinstance(value, str):
        m = _SURROGATE.search(value)
        return m.group() if m else None
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    for item in items:
        found = _lone_surrogate(item)
        if found is not None:
            return found
    return None


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


def hashed_order(ids: np.ndarray) -> np.ndarray:
    """The permutation that lays ``ids`` out in canonical pool order: ascending sha256 of
    ``POOL_ORDER_KEY`` + the id's UTF-8 bytes (module doc), compared on its first 128 bits (no
    two ids share them in practice). The digests go into one buffer, 16 bytes an id, not one
    Python object each: an 8.8M-passage collection takes ~7 s and 140 MB."""
    keyed = hashlib.sha256(POOL_ORDER_KEY)
    buf = bytearray()
    for x in ids:
        h = keyed.copy()
        h.update(str(x).encode())
        buf += h.digest()[:16]
    halves = np.frombuffer(buf, dtype=">u8").reshape(-1, 2)
    return np.lexsort((halves[:, 1], halves[:, 0])).astype(np.int64)


def _remap_rows(rows: list[np.ndarray], new_index: np.ndarray, sort: bool = False) -> list[np.ndarray]:
    out = [new_index[np.asarray(r, dtype=np.int64)] for r in rows]
    return [np.sort(r) for r in out] if sort else out


def in_hashed_order(pool: Pool, table: QueryTable) -> tuple[Pool, QueryTable]:
    """``pool`` in canonical order (``hashed_order``) and ``table`` with every pool index moved
    with it: positives (grades stay aligned), exclusions (kept ascending) and candidate lists,
    whose columns follow the new pool order, so no column tells the positive from the others."""
    order = hashed_order(pool.ids)
    new_index = np.empty(len(order), dtype=np.int64)
    new_index[order] = np.arange(len(order), dtype=np.int64)
    pool = dataclasses.replace(pool, ids=np.asarray(pool.ids, dtype=object)[order],
                               texts=take_texts(pool.texts, order),
                               domains=pool.domains[order] if pool.domains is not None else None)
    table = dataclasses.replace(
        table, positives=_remap_rows(table.positives, new_index),
        exclude=_remap_rows(table.exclude, new_index, sort=True) if table.exclude is not None else None,
        candidates=np.sort(new_index[table.candidates], axis=1) if table.candidates is not None else None)
    return pool, table


def assemble(spec: TaskSpec, pool: Pool, table: QueryTable, labels: np.ndarray,
             info: dict[str, Any], fingerprint_parts: Sequence[Any] = (),
             pool_order: PoolOrder = "hashed") -> TaskData:
    """TaskData with three splits of ``table`` sharing ``pool``, laid out in ``pool_order``
    (module doc); sets the pool fingerprint, which therefore covers the layout."""
    if pool_order == "hashed":
        pool, table = in_hashed_order(pool, table)
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
    pool.fingerprint = fingerprint(spec.name, pool.ids, pool.texts, test.ids, test.positives.values,
                                    test.grades.values, valid.ids, train.ids,
                                    table.candidates if table.candidates is not None else "",
                                    test.exclude.values if test.exclude is not None else "",
                                    *fingerprint_parts)
    info = {**info, "pool_order": pool_order, "n_candidates": len(pool), "n_train": len(train),
            "n_valid": len(valid), "n_test": len(test)}
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


def iter_lines(path: Path, strict: bool = True) -> Iterator[tuple[int, str]]:
    """(line number, line without its end) of a plain or gzip text file. A corrupt or truncated
    gzip stream and, when ``strict``, bytes that are not UTF-8 are DataErrors naming the file and
    line (and the column): never a bare zlib error, never text silently replaced by U+FFFD. Only
    a regular file is read, a line at most ``rbench.core.inputs.MAX_LINE_BYTES`` long (a FIFO or a
    link to /dev/zero is refused, not waited on or read without end)."""
    yield from iter_text_lines(path, strict)  # one reader of text files (BOM and CRLF handled)


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-empty line; a bad line is a DataError naming it."""
    for lineno, line in iter_lines(path):
        if line.strip():
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
# THE fingerprint
# ------------------------------------------------------------------------------------------


def _is_text_column(part: Any) -> bool:
    if isinstance(part, np.ndarray):
        return part.dtype == object or part.dtype.kind == "U"
    return isinstance(part, (list, tuple)) or callable(getattr(part, "to_arrow", None))


def _hash_texts(h: Any, col: Any) -> None:
    h.update(b"object")
    for start in range(0, len(col), _BLOCK):
        chunk = col[start : start + _BLOCK]
        if start:
            h.update(b"\x1f")
        h.update("\x1f".join(map(str, chunk)).encode())


def fingerprint(*parts: Any) -> str:
    """sha256 over ``parts`` in order (see module doc): the task fingerprint of every result."""
    h = hashlib.sha256()
    for part in parts:
        if _is_text_column(part):
            _hash_texts(h, part)
        elif isinstance(part, np.ndarray):
            h.update(str(part.dtype).encode())
            h.update(np.ascontiguousarray(part).tobytes())
        else:
            h.update(str(part).encode())
        h.update(b"\x1e")
    return h.hexdigest()


# ------------------------------------------------------------------------------------------
# the one qrels reader
# ------------------------------------------------------------------------------------------


GRADE_RULE = ("grades are integers, as trec_eval and ir_measures read them (1.0 is 1); scale fractional "
              "grades to integers before importing")


@dataclass(frozen=True)
class QrelsFormat:
    """How one qrels dialect is spelled; the reader and its error messages follow it."""

    fields: tuple[str, str, str]  # names of the query, document and grade fields (for messages)
    header: str | None  # the required first line, or None
    separator: str | None  # None: any whitespace
    integer_grades: bool
    queries_file: str  # where query ids come from (for messages)
    docs_file: str
    query_word: str = "query id"
    doc_word: str = "corpus id"
    skip_unknown_unjudged_docs: bool = False  # TREC files judge documents outside the collection


BEIR_QRELS = QrelsFormat(("query-id", "corpus-id", "score"), "query-id\tcorpus-id\tscore", "\t", False,
                         "queries.jsonl", "corpus.jsonl")
TREC_QRELS = QrelsFormat(("qid", "pid", "grade"), None, None, True, "the queries file", "collection.tsv",
                         query_word="qid", doc_word="pid", skip_unknown_unjudged_docs=True)


@dataclass
class Qrels:
    positives: dict[int, list[tuple[int, float]]]  # query row -> [(document row, grade > 0)]
    n_judgements: int
    n_skipped: int  # judgements of unknown documents with grade <= 0 (TREC only)


def read_qrels(path: Path, query_index: dict[str, int], doc_index: dict[str, int],
               fmt: QrelsFormat = BEIR_QRELS) -> Qrels:
    """Judgements -> positives per query; every id is checked against the other files, every bad
    line is a DataError naming the file, line and field."""
    qf, df, gf = fmt.fields
    names = (qf, df, gf) if fmt.header is not None else (qf, "iteration", df, gf)
    out: dict[int, list[tuple[int, float]]] = {}
    seen: dict[tuple[str, str], int] = {}
    n = skipped = 0
    for lineno, line in iter_lines(path):
        if lineno == 1 and fmt.header is not None:
            if [h.strip() for h in line.split(fmt.separator)] != fmt.header.split("\t"):
                raise DataError(f"expected the header {fmt.header.replace(chr(9), '<TAB>')!r}, got {line!r}",
                                path, 1)
            continue
        if not line.strip():
            continue
        parts = line.split(fmt.separator)
        if len(parts) != len(names):
            how = "tab-separated" if fmt.separator == "\t" else "whitespace-separated"
            hint = "" if fmt.header is not None else " (qid 0 pid grade)"
            raise DataError(f"expected {len(names)} {how} fields{hint}, got {len(parts)}", path, lineno,
                            names[min(len(parts), len(names) - 1)])
        qid, did, raw = (p.strip() for p in (parts[0], parts[-2], parts[-1]))
        if fmt.integer_grades:
            try:
                grade = float(int(raw))
            except ValueError:
                raise DataError(f"expected an integer grade, got {raw!r}", path, lineno, gf) from None
        if qid not in query_index:
            raise DataError(f"unknown {fmt.query_word} {qid!r} (not in {fmt.queries_file})"
                            f"{did_you_mean(qid, list(query_index)[:5000])}", path, lineno, qf)
        if did not in doc_index:
            if fmt.skip_unknown_unjudged_docs and grade <= 0:
                skipped += 1
                continue
            raise DataError(f"unknown {fmt.doc_word} {did!r} (not in {fmt.docs_file})", path, lineno, df)
        if not fmt.integer_grades:
            try:
                grade = float(raw)
            except ValueError:
                raise DataError(f"expected a number, got {raw!r}", path, lineno, gf) from None
            if not np.isfinite(grade):
                raise DataError(f"expected a finite number, got {raw!r}", path, lineno, gf)
            if not grade.is_integer():  # GRADE_RULE: what trec_eval and ir_measures read, so exports keep it
                raise DataError(f"expected an integer grade, got {raw!r} ({GRADE_RULE})", path, lineno, gf)
        if abs(grade) > MAX_GRADE:
            raise DataError(f"grade {raw} is outside +-{MAX_GRADE:g}: nDCG sums grades as gains and cannot "
                            "hold it", path, lineno, gf)
        if (qid, did) in seen:
            raise DataError(f"duplicate judgement (first on line {seen[(qid, did)]})", path, lineno, df)
        seen[(qid, did)] = lineno
        n += 1
        if grade > 0:
            out.setdefault(query_index[qid], []).append((doc_index[did], grade))
    if n == 0:
        raise DataError("no judgements", path)
    return Qrels(out, n, skipped)
