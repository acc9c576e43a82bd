"""MS MARCO (passage ranking) and ESCI (product search): one positive per query, one shared pool.

The paper's rule: "assign one positive sample to each query and construct the negative sample set
for each query by aggregating the negative samples from all queries", then split 8:1:1. Its
Table 2 sizes pin the rest down, and the two tasks need different pools to match them:

- MS MARCO, 24,697 candidates / 3,038 queries. A v1.1 query carries ~8.2 passages (676,193
  passages / 82,326 train queries), and 3,038 x 8.13 = 24,697: the pool is every passage of 3,038
  sampled queries, and 3,038 is the total query count (test = 304). Reading 3,038 as the test
  split (30,380 queries in all) would make the pool ~250k passages, ten times the paper's.
  Defaults: ``n_queries=3038``, ``pool=all``.
- ESCI, 4,000 candidates / 3,999 queries. A US query has ~20 judged products, so "all products of
  the sampled queries" would give ~80k candidates for 3,999 queries (or 4,000 candidates for ~200
  queries). One product per query matches both numbers: the pool is the chosen positive of each
  sampled query, and every other query's positive is a negative. Defaults: ``n_queries=3999``,
  ``pool=positives``.
Either reading is one option away (``--set task.pool=all|positives``, ``task.n_queries=N``; 0 =
every eligible query).

Both pools are built from the queries' positives (``TaskSpec.pool_from_positives``): every
query's negatives are the other queries' candidates, so the train/valid positives that ``fit`` is
handed are much of the pool (ESCI: ~90%) and almost never a test answer. Pushing them last beats
chance with no skill; the ``prior`` floor does exactly that and the tables show it (docs: Tasks,
"Pools built from positives"). ``task.distractors=N`` adds N candidates that are no query's
positive, drawn from the rest of the collection (seeded; ESCI: every US product of the products
file; MS MARCO v1.1: every passage of the QnA files read), so that "not a known positive" stops
being a signal. The paper aggregates only the queries' own candidates ("construct the negative
sample set for each query by aggregating the negative samples from all queries"): the default is
``distractors=0``, the paper's pool; the TSV layout's pool is already the whole collection and
takes none.

Choices written down (both tasks unless said):

1. Eligible queries have >= 1 relevant candidate (MS MARCO ``is_selected == 1``; ESCI label E,
   US locale). They are sorted by id (file order never matters) and ``n_queries`` of them drawn
   without replacement by a generator seeded from (seed, "sample"); the split uses its own
   stream (``rbench.tasks.building.split_labels``: 8:1:1 by query).
2. The positive is the first relevant candidate: MS MARCO the first selected passage in the
   query's list; ESCI the E product with the smallest ``example_id``.
3. A query's other relevant candidates in the pool (its other selected passages / E products)
   are excluded from its ranking by default (``other_relevant=exclude``): they are neither the
   one positive nor honest negatives. ``positive`` makes them extra positives (grade 1),
   ``negative`` leaves them as negatives (the literal reading).
4. MS MARCO v1.1 passages have no ids: identical passage texts are one candidate (id = "p" + 16
   hex of sha1(text)), so no two candidates tie by construction; a query sees a deduplicated
   passage as relevant if any of its copies in its own list is selected. The v1.1 ``test``
   release has no labels and contributes nothing; every QnA file found is read (a query id seen
   twice keeps its first record).
5. ESCI candidate text = ``title``, then ``Brand: <brand>``, then the bullet points (newlines
   -> spaces) cut to ``bullet_chars`` (200) characters at a word boundary; descriptions are left
   out (long, often HTML). Only US rows are read; ``esci_version`` picks all rows (default), the
   ``small_version`` (Task 1) or the ``large_version`` subset. The dataset's own train/test column
   is ignored: the paper re-splits 8:1:1.
6. Official TSV layout (``collection.tsv`` + ``queries.tsv`` + TREC qrels ``qid 0 pid grade``):
   graded relevance is kept; every grade > 0 is a positive with that grade, the pool is the
   whole collection, queries are those with a positive (``n_queries`` samples them; default
   all). A judgement with an unknown qid/pid is an error, except grade <= 0 judgements of a pid
   missing from the collection (a collection cut down to the judged-relevant passages), which
   are counted in ``info`` and skipped.
7. Pool order: the pool is gathered query by query (every passage of each sampled query, or the
   positive of each), and a collection file may be written that way too, so a candidate's place
   would say which query it answers. Every layout's pool is therefore laid out in the hashed
   order of ``rbench.tasks.building`` (module doc, "Pool order"): by sha256 of the candidate id, not
   by query. Candidate ids are the source's own (ESCI ``product_id``, the collection's pid) or,
   for v1.1 passages, a hash of the text (rule 4): none is derived from a query.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from rbench.api import Pool, Ragged, RemoteFile, Source, TaskData, TaskSpec
from rbench.core import paths
from rbench.core.errors import DataError, RBenchError
from rbench.core.settings import DEFAULT_SEED
from rbench.tasks.building import (
    TREC_QRELS,
    QueryTable,
    assemble,
    iter_jsonl,
    iter_lines,
    locate,
    not_present,
    read_qrels,
    seeded_rng,
    split_labels,
)
from rbench.tasks.family import TaskFamily
from rbench.tasks.pools import POSITIVE_SHARE_FLAG, draw_distractors, pool_prior_info

QNA_SUFFIXES = (".parquet", ".jsonl", ".json", ".jsonl.gz", ".json.gz")
ESCI_EXAMPLES = "shopping_queries_dataset_examples.parquet"
ESCI_PRODUCTS = "shopping_queries_dataset_products.parquet"
ESCI_LABELS = {"E", "S", "C", "I"}


@dataclass
class PassageOptions:
    """Options of MS MARCO and ESCI (``--set task.key=value``); defaults reproduce the paper's sizes."""

    n_queries: int | None = None  # None: paper count (msmarco QnA 3038, esci 3999; TSV: all); 0: all
    pool: Literal["auto", "all", "positives"] = "auto"  # auto: msmarco all, esci positives
    other_relevant: Literal["exclude", "positive", "negative"] = "exclude"
    layout: Literal["auto", "qna", "tsv"] = "auto"  # msmarco only: v1.1 QnA files or official TSV
    esci_version: Literal["all", "small", "large"] = "all"  # esci only
    bullet_chars: int = 200  # esci only: bullet-point characters appended to title + brand
    split: Literal["8:1:1", "test"] = "8:1:1"  # "test": every query is a test query (zero-shot eval)
    distractors: int = 0  # candidates added that are no query's positive (seeded); 0: the paper's pool
    exclude_fit_positives: bool = True
    """true: the train/valid positives ``fit`` is handed are left out of every test ranking, and a test
    query whose answer is one of them is dropped and counted (``rbench.tasks.fit_positives``; docs: Data,
    "Pools built from positives"); false: the paper's protocol, where pushing them last gains with no skill"""

    def validate(self) -> None:
        if self.n_queries is not None and self.n_queries < 0:
            raise RBenchError("task.n_queries must be >= 0 (0 = every eligible query)")
        if self.distractors < 0:
            raise RBenchError("task.distractors must be >= 0 (0 = the paper's pool, no distractors)")
        if self.bullet_chars < 0:
            raise RBenchError("task.bullet_chars must be >= 0")

    def fingerprint_text(self) -> str:
        """``repr`` without ``distractors`` when it is 0 (the pool of every record written before the
        option existed keeps its fingerprint: it is the same pool) and without
        ``exclude_fit_positives`` (the family builds the same task either way; the registry
        applies ``rbench.tasks.fit_positives``, which moves the fingerprint where it changes the
        test split)."""
        shown = [f for f in dataclasses.fields(self) if f.name != "exclude_fit_positives"
                 and not (f.name == "distractors" and self.distractors == 0)]
        return f"{type(self).__qualname__}(" + ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in shown) + ")"


@dataclass(frozen=True)
class Distractors:
    """Where distractors come from: ``universe`` holds the collection's candidates that are no
    query's positive (ids), ``texts_of`` reads texts for some of them; ``what`` names it."""

    universe: np.ndarray
    texts_of: Callable[[np.ndarray], np.ndarray]
    what: str


# ------------------------------------------------------------------------------------------
# file discovery and data_status
# ------------------------------------------------------------------------------------------


def _qna_files(d: Path) -> list[Path]:
    return sorted(p for p in d.iterdir() if p.is_file() and p.name.lower().endswith(QNA_SUFFIXES)
                  and not p.name.startswith("."))


def _one(d: Path, names: Iterable[str], globs: Iterable[str]) -> Path | None:
    for n in names:
        if (d / n).is_file():
            return d / n
    for g in globs:
        hits = sorted(p for p in d.glob(g) if p.is_file())
        if len(hits) > 1:
            raise RBenchError(f"{d}: several files match {g} ({', '.join(p.name for p in hits)}); keep one")
        if hits:
            return hits[0]
    return None


def _tsv_files(d: Path) -> dict[str, Path] | None:
    files = {"collection": _one(d, ["collection.tsv"], []),
             "queries": _one(d, ["queries.tsv"], ["queries*.tsv"]),
             "qrels": _one(d, ["qrels.txt", "qrels.tsv"], ["qrels*.txt", "qrels*.tsv", "*.qrels"])}
    return files if all(files.values()) else None  # type: ignore[return-value]


def _msmarco_dir(spec: TaskSpec, layout: str = "auto") -> tuple[Path, str] | None:
    raw = paths.raw_dir(spec.name)
    if layout in ("auto", "tsv"):
        d = locate(raw, lambda p: _tsv_files(p) is not None)
        if d is not None:
            return d, "tsv"
    if layout in ("auto", "qna"):
        d = locate(raw, lambda p: bool(_qna_files(p)))
        if d is not None:
            return d, "qna"
    return None


def _esci_dir(spec: TaskSpec) -> Path | None:
    return locate(paths.raw_dir(spec.name), lambda p: (p / ESCI_EXAMPLES).is_file() and (p / ESCI_PRODUCTS).is_file())


def msmarco_status(spec: TaskSpec) -> tuple[bool, str]:
    raw = paths.raw_dir(spec.name)
    found = _msmarco_dir(spec)
    if found is None:
        return not_present(spec, raw)
    d, layout = found
    if layout == "tsv":
        files = _tsv_files(d) or {}
        return True, f"official TSV: {', '.join(p.name for p in files.values())} in {d}"
    return True, f"v1.1 QnA: {', '.join(p.name for p in _qna_files(d))} in {d}"


def esci_status(spec: TaskSpec) -> tuple[bool, str]:
    d = _esci_dir(spec)
    if d is None:
        return not_present(spec, paths.raw_dir(spec.name))
    return True, f"ESCI parquet: {ESCI_EXAMPLES}, {ESCI_PRODUCTS} in {d}"


# ------------------------------------------------------------------------------------------
# the shared protocol: sample queries, pick one positive, build the pool
# ------------------------------------------------------------------------------------------


@dataclass
class Judged:
    """Queries with their judged candidates: ``cands[i]`` are codes into a candidate table, in the
    order that makes the first relevant one the positive; ``relevant[i]`` flags them."""

    qids: np.ndarray  # str (object)
    texts: list[str]
    cands: Ragged  # int64 codes
    relevant: Ragged  # bool


def sample_rows(qids: np.ndarray, eligible: np.ndarray, n: int, seed: int) -> np.ndarray:
    """Eligible rows sorted by id; ``n`` of them (all when n == 0 or fewer exist), seeded."""
    rows = np.flatnonzero(eligible)
    rows = rows[np.argsort(qids[rows].astype(str), kind="stable")]
    if 0 < n < len(rows):
        pick = np.sort(seeded_rng(seed, "sample").choice(len(rows), size=n, replace=False))
        rows = rows[pick]
    return rows


def one_positive_task(spec: TaskSpec, opts: PassageOptions, seed: int, judged: Judged, pool_mode: str,
                      ids_of: Callable[[np.ndarray], np.ndarray],
                      texts_of: Callable[[np.ndarray], np.ndarray], info: dict[str, Any],
                      distractors: Callable[[], Distractors] | None = None) -> TaskData:
    """Rules 2-3 of the module doc on already-sampled queries (rows in canonical order), then
    ``opts.distractors`` candidates drawn from ``distractors()`` (read only when asked for)."""
    n = len(judged.qids)
    if n == 0:
        raise DataError(f"{spec.name}: no query has a relevant candidate (nothing to evaluate)", info.get("source"))
    positive_code = np.empty(n, dtype=np.int64)
    for i in range(n):
        rel = judged.relevant[i]
        positive_code[i] = judged.cands[i][np.argmax(rel)]  # first relevant (all rows have one)
    if pool_mode == "all":
        pool_codes = pd.unique(judged.cands.values)
    else:
        pool_codes = pd.unique(positive_code)
    pool_codes = np.asarray(pool_codes, dtype=np.int64)
    where = np.full(int(judged.cands.values.max()) + 1, -1, dtype=np.int64)
    where[pool_codes] = np.arange(len(pool_codes))

    positives: list[np.ndarray] = []
    exclude: list[np.ndarray] = []
    n_other = 0
    for i in range(n):
        pos = int(where[positive_code[i]])
        others = where[judged.cands[i][judged.relevant[i]]]
        others = np.unique(others[(others >= 0) & (others != pos)])
        n_other += len(others)
        if opts.other_relevant == "positive":
            positives.append(np.concatenate([[pos], others]).astype(np.int64))
            exclude.append(np.zeros(0, dtype=np.int64))
        else:
            positives.append(np.asarray([pos], dtype=np.int64))
            exclude.append(others if opts.other_relevant == "exclude" else np.zeros(0, dtype=np.int64))
    table = QueryTable(ids=judged.qids, texts=judged.texts, positives=positives,
                       grades=[np.ones(len(p), dtype=np.float64) for p in positives],
                       exclude=exclude if opts.other_relevant == "exclude" else None)
    pool_ids = np.asarray(ids_of(pool_codes), dtype=object)
    pool_texts = np.asarray(texts_of(pool_codes), dtype=object)
    extra: dict[str, Any] = {}
    if opts.distractors:
        if distractors is None:
            raise RBenchError(f"{spec.name}: task.distractors needs a collection to draw from; this layout has none")
        source = distractors()
        drawn = draw_distractors(source.universe, pool_ids, opts.distractors, seed, source.what)
        pool_ids = np.concatenate([pool_ids, drawn])
        pool_texts = np.concatenate([pool_texts, np.asarray(source.texts_of(drawn), dtype=object)])
        extra = {"distractors_from": source.what, "distractors_available": int(len(np.unique(source.universe)))}
    pool = Pool(ids=pool_ids, texts=pool_texts, name=spec.name)
    if len(set(pool.ids.tolist())) != len(pool):
        raise DataError(f"{spec.name}: candidate ids are not unique")
    info = {**info, "pool": pool_mode, "other_relevant": opts.other_relevant,
            "n_other_relevant_in_pool": int(n_other), "seed": seed, "pool_from_positives": True,
            "n_distractors": int(opts.distractors), **extra}
    labels = split_labels(n, seed, mode=opts.split)
    data = assemble(spec, pool, table, labels, info, fingerprint_parts=(opts.fingerprint_text(), pool_mode))
    data.info.update(pool_prior_info(data))
    return data


def _resolve_n(opts: PassageOptions, default: int) -> int:
    return default if opts.n_queries is None else opts.n_queries


# ------------------------------------------------------------------------------------------
# MS MARCO v1.1 QnA (parquet / jsonl)
# ------------------------------------------------------------------------------------------


@dataclass
class QnaRecords:
    qids: np.ndarray  # str (object)
    texts: np.ndarray  # str (object)
    offsets: np.ndarray  # int64, passages of query i are [offsets[i], offsets[i+1])
    passages: np.ndarray  # str (object)
    selected: np.ndarray  # bool


def _qna_from_rows(rows: list[tuple[str, str, list[str], list[bool]]]) -> QnaRecords:
    lengths = np.asarray([len(r[2]) for r in rows], dtype=np.int64)
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return QnaRecords(
        qids=np.asarray([r[0] for r in rows], dtype=object),
        texts=np.asarray([r[1] for r in rows], dtype=object),
        offsets=offsets,
        passages=np.asarray([t for r in rows for t in r[2]], dtype=object),
        selected=np.asarray([s for r in rows for s in r[3]], dtype=bool),
    )


def _passages_of(value: Any, path: Path, where: dict[str, Any]) -> tuple[list[str], list[bool]]:
    """``passages`` as HF's dict of lists or the original list of dicts -> (texts, selected)."""
    if isinstance(value, dict):
        texts, sel = value.get("passage_text"), value.get("is_selected")
        if not isinstance(texts, list) or not isinstance(sel, list):
            raise DataError("expected lists 'passage_text' and 'is_selected'", path, field="passages", **where)
        if len(texts) != len(sel):
            raise DataError(f"{len(texts)} passage_text values but {len(sel)} is_selected values", path,
                            field="passages.is_selected", **where)
    elif isinstance(value, list):
        texts, sel = [], []
        for p in value:
            if not isinstance(p, dict) or "passage_text" not in p or "is_selected" not in p:
                raise DataError("each passage needs 'passage_text' and 'is_selected'", path,
                                field="passages", **where)
            texts.append(p["passage_text"])
            sel.append(p["is_selected"])
    else:
        raise DataError(f"expected passages as an object of lists or a list of objects, got "
                        f"{type(value).__name__}", path, field="passages", **where)
    for t in texts:
        if not isinstance(t, str):
            raise DataError(f"expected passage texts to be strings, got {type(t).__name__}", path,
                            field="passages.passage_text", **where)
    out_sel = []
    for s in sel:
        if isinstance(s, str) or s not in (0, 1):
            raise DataError(f"expected is_selected values 0 or 1, got {s!r}", path,
                            field="passages.is_selected", **where)
        out_sel.append(bool(s))
    return list(texts), out_sel


def _query_fields(obj: dict[str, Any], path: Path, where: dict[str, Any]) -> tuple[str, str]:
    qid, text = obj.get("query_id"), obj.get("query")
    if qid is None or isinstance(qid, bool) or not isinstance(qid, (int, str)) or str(qid) == "":
        raise DataError(f"expected a query id, got {qid!r}", path, field="query_id", **where)
    if not isinstance(text, str) or not text.strip():
        raise DataError(f"expected a non-empty query string, got {text!r}", path, field="query", **where)
    return str(qid), text


def read_qna_jsonl(path: Path) -> QnaRecords:
    rows = []
    for lineno, obj in iter_jsonl(path):
        where = {"line": lineno}
        qid, text = _query_fields(obj, path, where)
        if "passages" not in obj:
            raise DataError("missing", path, lineno, "passages")
        ptexts, sel = _passages_of(obj["passages"], path, where)
        rows.append((qid, text, ptexts, sel))
    return _qna_from_rows(rows)


def read_qna_parquet(path: Path) -> QnaRecords:
    """Column-wise read of HF's v1.1 parquet (``passages`` = struct of lists), or list of structs."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowException) as exc:
        raise DataError(f"not a readable parquet file: {exc}", path) from None
    for col in ("query_id", "query", "passages"):
        if col not in schema.names:
            raise DataError(f"missing column; columns are {', '.join(schema.names)}", path, field=col)
    tbl = pq.read_table(path, columns=["query_id", "query", "passages"])
    qid_col = tbl.column("query_id").to_pylist()
    text_col = tbl.column("query").to_pylist()
    for i, (qid, text) in enumerate(zip(qid_col, text_col)):
        if qid is None or str(qid) == "":
            raise DataError(f"row {i + 1}: missing query id", path, field="query_id")
        if not isinstance(text, str) or not text.strip():
            raise DataError(f"row {i + 1}: expected a non-empty query string, got {text!r}", path, field="query")
    passages = tbl.column("passages").combine_chunks()
    ptype = passages.type
    if pa.types.is_struct(ptype):
        names = [ptype.field(i).name for i in range(ptype.num_fields)]
        for f in ("is_selected", "passage_text"):
            if f not in names:
                raise DataError(f"passages has no {f!r} field (fields: {', '.join(names)})", path,
                                field=f"passages.{f}")
        fields = dict(zip(names, passages.flatten()))
        sel_list, txt_list = fields["is_selected"], fields["passage_text"]
        sel_len = pc.fill_null(pc.list_value_length(sel_list), 0).to_numpy()
        txt_len = pc.fill_null(pc.list_value_length(txt_list), 0).to_numpy()
        bad = np.flatnonzero(sel_len != txt_len)
        if len(bad):
            raise DataError(f"row {bad[0] + 1}: {txt_len[bad[0]]} passage texts but {sel_len[bad[0]]} "
                            f"is_selected values", path, field="passages.is_selected")
        sel_values, txt_values, lengths = sel_list.flatten(), txt_list.flatten(), txt_len
    elif pa.types.is_list(ptype) or pa.types.is_large_list(ptype):
        flat = passages.flatten()
        names = [flat.type.field(i).name for i in range(flat.type.num_fields)] if pa.types.is_struct(flat.type) else []
        for f in ("is_selected", "passage_text"):
            if f not in names:
                raise DataError(f"passages has no {f!r} field", path, field=f"passages.{f}")
        fields = dict(zip(names, flat.flatten()))
        sel_values, txt_values = fields["is_selected"], fields["passage_text"]
        lengths = pc.fill_null(pc.list_value_length(passages), 0).to_numpy()
    else:
        raise DataError(f"unexpected type {ptype} (expected struct of lists)", path, field="passages")
    sel = np.asarray(pc.fill_null(sel_values, 0).to_numpy(zero_copy_only=False))
    if len(sel) and not np.isin(sel, (0, 1)).all():
        k = int(np.flatnonzero(~np.isin(sel, (0, 1)))[0])
        row = int(np.searchsorted(np.cumsum(lengths), k, side="right")) + 1
        raise DataError(f"row {row}: expected is_selected values 0 or 1, got {sel[k]!r}", path,
                        field="passages.is_selected")
    texts = txt_values.to_numpy(zero_copy_only=False).astype(object)
    texts[pd.isna(texts)] = ""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return QnaRecords(qids=np.asarray([str(q) for q in qid_col], dtype=object),
                      texts=np.asarray(text_col, dtype=object), offsets=offsets, passages=texts,
                      selected=sel.astype(bool))


def read_qna(files: list[Path]) -> tuple[QnaRecords, int]:
    """All QnA files concatenated; a query id seen again keeps its first record."""
    parts = [read_qna_parquet(p) if p.name.lower().endswith(".parquet") else read_qna_jsonl(p) for p in files]
    qids = np.concatenate([p.qids for p in parts])
    texts = np.concatenate([p.texts for p in parts])
    passages = np.concatenate([p.passages for p in parts])
    selected = np.concatenate([p.selected for p in parts])
    lengths = np.concatenate([np.diff(p.offsets) for p in parts])
    keep = ~pd.Index(qids).duplicated(keep="first")
    rows = np.flatnonzero(keep)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    sub = Ragged(offsets, np.arange(len(passages))).take(rows)
    return QnaRecords(qids=qids[rows], texts=texts[rows], offsets=sub.offsets, passages=passages[sub.values],
                      selected=selected[sub.values]), int((~keep).sum())


def passage_id(text: str) -> str:
    return "p" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


def load_msmarco_qna(spec: TaskSpec, opts: PassageOptions, seed: int, d: Path) -> TaskData:
    files = _qna_files(d)
    rec, n_dup = read_qna(files)
    row_of = np.repeat(np.arange(len(rec.qids)), np.diff(rec.offsets))
    n_sel = np.bincount(row_of, weights=rec.selected.astype(np.float64), minlength=len(rec.qids))
    rows = sample_rows(rec.qids, n_sel > 0, _resolve_n(opts, spec.paper_queries or 0), seed)
    sub = Ragged(rec.offsets, np.arange(len(rec.passages))).take(rows)
    texts = rec.passages[sub.values]
    codes, uniques = pd.factorize(pd.Series(texts, dtype=object).str.strip())
    uniques = np.asarray(uniques, dtype=object)
    judged = Judged(qids=rec.qids[rows], texts=[str(t) for t in rec.texts[rows]],
                    cands=Ragged(sub.offsets, codes.astype(np.int64)),
                    relevant=Ragged(sub.offsets, rec.selected[sub.values]))
    info = {"source": str(d), "layout": "msmarco v1.1 QnA", "files": [p.name for p in files],
            "n_queries_read": len(rec.qids), "n_eligible": int((n_sel > 0).sum()),
            "n_duplicate_query_ids_skipped": n_dup, "n_sampled": len(rows),
            "n_passages_sampled": len(texts), "n_identical_passages_merged": len(texts) - len(uniques)}
    pool_mode = "all" if opts.pool == "auto" else opts.pool

    def distractors() -> Distractors:
        """Every passage of the files read (all queries, sampled or not) never selected for any."""
        every = pd.Series(rec.passages, dtype=object).str.strip()
        texts = pd.unique(every[~every.isin(set(every[rec.selected])) & (every != "")])
        by_id = {passage_id(t): t for t in texts}
        return Distractors(np.asarray(list(by_id), dtype=object),
                           lambda ids: np.asarray([by_id[i] for i in ids], dtype=object),
                           f"the passages of {', '.join(p.name for p in files)} that no query selected")

    return one_positive_task(spec, opts, seed, judged, pool_mode,
                             ids_of=lambda c: np.asarray([passage_id(t) for t in uniques[c]], dtype=object),
                             texts_of=lambda c: uniques[c], info=info, distractors=distractors)


# ------------------------------------------------------------------------------------------
# MS MARCO official TSV layout (collection.tsv, queries.tsv, TREC qrels)
# ------------------------------------------------------------------------------------------


def read_id_text_tsv(path: Path, id_name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``id<TAB>text`` per line -> (ids, texts, line numbers); duplicates and bad lines are errors."""
    ids: list[str] = []
    texts: list[str] = []
    lines: list[int] = []
    for lineno, line in iter_lines(path):
        if not line.strip():
            continue
        key, tab, text = line.partition("\t")
        if not tab:
            raise DataError(f"expected {id_name}<TAB>text (no tab on this line)", path, lineno, "text")
        key = key.strip()
        if not key:
            raise DataError("empty id", path, lineno, id_name)
        ids.append(key)
        texts.append(text)
        lines.append(lineno)
    if not ids:
        raise DataError("no rows", path)
    arr = np.asarray(ids, dtype=object)
    dup = pd.Index(arr).duplicated(keep="first")
    if dup.any():
        k = int(np.flatnonzero(dup)[0])
        first = lines[int(np.flatnonzero(arr == arr[k])[0])]
        raise DataError(f"duplicate id {arr[k]!r} (first on line {first})", path, lines[k], id_name)
    return arr, np.asarray(texts, dtype=object), np.asarray(lines, dtype=np.int64)


def load_msmarco_tsv(spec: TaskSpec, opts: PassageOptions, seed: int, d: Path) -> TaskData:
    if opts.pool != "auto" or opts.other_relevant != "exclude" or opts.distractors:
        raise RBenchError("task.pool, task.other_relevant and task.distractors apply to the v1.1 QnA layout and "
                          "ESCI; the TSV layout ranks the whole collection with every graded positive")
    files = _tsv_files(d)
    assert files is not None
    pids, ptexts, _ = read_id_text_tsv(files["collection"], "pid")
    qids, qtexts, _ = read_id_text_tsv(files["queries"], "qid")
    judged = read_qrels(files["qrels"], {q: i for i, q in enumerate(qids)}, {p: i for i, p in enumerate(pids)},
                        TREC_QRELS)
    qrels, n_judged, n_skipped = judged.positives, judged.n_judgements, judged.n_skipped
    eligible = np.zeros(len(qids), dtype=bool)
    eligible[list(qrels)] = True
    rows = sample_rows(qids, eligible, _resolve_n(opts, 0), seed)
    pos = [qrels[int(r)] for r in rows]
    table = QueryTable(ids=qids[rows], texts=[str(qtexts[r]) for r in rows],
                       positives=[np.asarray([p for p, _ in x], dtype=np.int64) for x in pos],
                       grades=[np.asarray([g for _, g in x], dtype=np.float64) for x in pos])
    pool = Pool(ids=pids, texts=ptexts, name=spec.name)
    info = {"source": str(d), "layout": "official TSV", "files": [p.name for p in files.values()],
            "n_queries_read": len(qids), "n_eligible": int(eligible.sum()), "n_sampled": len(rows),
            "n_judgements": n_judged, "n_judgements_skipped_unknown_pid": n_skipped, "seed": seed,
            "grades": {str(int(g)): int(c) for g, c in zip(*np.unique(np.concatenate(table.grades),
                                                                      return_counts=True))}}
    data = assemble(spec, pool, table, split_labels(len(rows), seed, mode=opts.split), info,
                    fingerprint_parts=(opts.fingerprint_text(),))
    # the whole collection is the pool: built from positives only where it is mostly positives (a
    # collection cut down to the judged passages, as TREC DL19's 4,103)
    shares = pool_prior_info(data)
    data.info.update(shares, pool_from_positives=shares["pool_positive_share"] >= POSITIVE_SHARE_FLAG)
    return data


def load_msmarco(spec: TaskSpec, options: PassageOptions | None, seed: int = DEFAULT_SEED) -> TaskData:
    opts = options or PassageOptions()
    found = _msmarco_dir(spec, opts.layout)
    if found is None:
        raise DataError(f"{spec.name}: no {'' if opts.layout == 'auto' else opts.layout + ' '}input files "
                        f"in {paths.raw_dir(spec.name)}; {spec.how_to_get}")
    d, layout = found
    return load_msmarco_tsv(spec, opts, seed, d) if layout == "tsv" else load_msmarco_qna(spec, opts, seed, d)


# ------------------------------------------------------------------------------------------
# ESCI (Amazon Shopping Queries)
# ------------------------------------------------------------------------------------------

_EXAMPLE_COLUMNS = ("example_id", "query", "query_id", "product_id", "product_locale", "esci_label")
_PRODUCT_COLUMNS = ("product_id", "product_title", "product_bullet_point", "product_brand", "product_locale")


def _parquet_columns(path: Path, needed: Iterable[str]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        names = pq.read_schema(path).names
    except (OSError, pa.ArrowException) as exc:
        raise DataError(f"not a readable parquet file: {exc}", path) from None
    for col in needed:
        if col not in names:
            raise DataError(f"missing column; columns are {', '.join(names)}", path, field=col)


def _first_bad(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def read_esci_examples(path: Path, version: str) -> pd.DataFrame:
    cols = list(_EXAMPLE_COLUMNS) + ([f"{version}_version"] if version != "all" else [])
    _parquet_columns(path, cols)
    df = pd.read_parquet(path, columns=cols)
    for col in ("query", "product_id", "product_locale", "esci_label", "query_id", "example_id"):
        bad = df[col].isna().to_numpy()
        if bad.any():
            raise DataError(f"row {_first_bad(bad) + 1}: missing value", path, field=col)
    labels = df["esci_label"].astype(str).to_numpy()
    bad = ~np.isin(labels, list(ESCI_LABELS))
    if bad.any():
        k = _first_bad(bad)
        raise DataError(f"row {k + 1}: expected one of E, S, C, I, got {labels[k]!r}", path, field="esci_label")
    df = df[df["product_locale"].astype(str).str.lower() == "us"]
    if version != "all":
        df = df[df[f"{version}_version"].astype(int) == 1]
    df = df.assign(query_id=df["query_id"].astype(str), product_id=df["product_id"].astype(str))
    dup = df.duplicated(["query_id", "product_id"]).to_numpy()
    if dup.any():
        row = df.index[_first_bad(dup)]
        raise DataError(f"row {row + 1}: product {df['product_id'].iloc[_first_bad(dup)]!r} judged twice for "
                        f"query {df['query_id'].iloc[_first_bad(dup)]!r}", path, field="product_id")
    return df


def product_text(title: Any, brand: Any, bullets: Any, bullet_chars: int, product_id: str) -> str:
    def clean(x: Any) -> str:
        return "" if x is None or (isinstance(x, float) and np.isnan(x)) else " ".join(str(x).split())

    parts = [clean(title)]
    if clean(brand):
        parts.append(f"Brand: {clean(brand)}")
    text_b = clean(bullets)
    if bullet_chars and text_b:
        if len(text_b) > bullet_chars:
            cut = text_b[:bullet_chars]
            text_b = cut[: cut.rfind(" ")] if " " in cut else cut
        parts.append(text_b)
    text = ". ".join(p for p in parts if p)
    return text or f"product {product_id}"


def read_esci_product_ids(path: Path) -> np.ndarray:
    """Every US product id of the products file (the collection distractors are drawn from)."""
    import pyarrow.parquet as pq

    _parquet_columns(path, ("product_id", "product_locale"))
    tbl = pq.read_table(path, columns=["product_id"], filters=[("product_locale", "in", ["us", "US"])])
    return np.asarray(pd.unique(tbl.column("product_id").to_pandas().astype(str)), dtype=object)


def read_esci_products(path: Path, ids: np.ndarray, bullet_chars: int) -> np.ndarray:
    """Texts for ``ids`` (US rows), in that order; a product without a row is an error."""
    import pyarrow.parquet as pq

    _parquet_columns(path, _PRODUCT_COLUMNS)
    tbl = pq.read_table(path, columns=list(_PRODUCT_COLUMNS),
                        filters=[("product_locale", "in", ["us", "US"]), ("product_id", "in", list(ids))])
    df = tbl.to_pandas().drop_duplicates("product_id", keep="first").set_index("product_id")
    missing = [p for p in ids if p not in df.index]
    if missing:
        raise DataError(f"no US product row for product_id {missing[0]!r} ({len(missing)} missing)", path,
                        field="product_id")
    df = df.loc[list(ids)]
    return np.asarray([product_text(t, b, bp, bullet_chars, pid) for pid, t, b, bp in
                       zip(ids, df["product_title"], df["product_brand"], df["product_bullet_point"])],
                      dtype=object)


def load_esci(spec: TaskSpec, options: PassageOptions | None, seed: int = DEFAULT_SEED) -> TaskData:
    opts = options or PassageOptions()
    if opts.layout != "auto":
        raise RBenchError("task.layout applies to msmarco only")
    d = _esci_dir(spec)
    if d is None:
        raise DataError(f"{spec.name}: {ESCI_EXAMPLES} and {ESCI_PRODUCTS} not found in "
                        f"{paths.raw_dir(spec.name)}; {spec.how_to_get}")
    df = read_esci_examples(d / ESCI_EXAMPLES, opts.esci_version)
    if df.empty:
        raise DataError(f"no US examples (esci_version={opts.esci_version})", d / ESCI_EXAMPLES)
    qcodes, qids = pd.factorize(df["query_id"], sort=True)
    example_id = pd.to_numeric(df["example_id"]).to_numpy()
    order = np.lexsort((example_id, qcodes))  # per query, by example_id: first E = smallest id
    qcodes = qcodes[order]
    pcodes, pids = pd.factorize(df["product_id"].to_numpy()[order])
    is_e = (df["esci_label"].astype(str).to_numpy() == "E")[order]
    offsets = np.zeros(len(qids) + 1, dtype=np.int64)
    np.cumsum(np.bincount(qcodes, minlength=len(qids)), out=offsets[1:])
    qtext = df["query"].astype(str).to_numpy()[order][offsets[:-1]]
    n_e = np.bincount(qcodes, weights=is_e.astype(np.float64), minlength=len(qids))
    qids = np.asarray(qids, dtype=object)
    rows = sample_rows(qids, n_e > 0, _resolve_n(opts, spec.paper_queries or 0), seed)
    cands = Ragged(offsets, pcodes.astype(np.int64)).take(rows)
    rel = Ragged(offsets, is_e).take(rows)
    judged = Judged(qids=qids[rows], texts=[str(t) for t in qtext[rows]], cands=cands, relevant=rel)
    pids = np.asarray(pids, dtype=object)
    info = {"source": str(d), "locale": "us", "esci_version": opts.esci_version,
            "n_queries_read": len(qids), "n_eligible": int((n_e > 0).sum()), "n_sampled": len(rows),
            "bullet_chars": opts.bullet_chars}
    pool_mode = "positives" if opts.pool == "auto" else opts.pool

    def distractors() -> Distractors:
        """Every US product of the products file that is no query's E product (any query read)."""
        positive = set(df["product_id"].to_numpy()[df["esci_label"].astype(str).to_numpy() == "E"])
        us = read_esci_product_ids(d / ESCI_PRODUCTS)
        return Distractors(us[~pd.Index(us).isin(positive)],
                           lambda ids: read_esci_products(d / ESCI_PRODUCTS, ids, opts.bullet_chars),
                           f"the US products of {ESCI_PRODUCTS} that are no query's E product")

    return one_positive_task(spec, opts, seed, judged, pool_mode, ids_of=lambda c: pids[c],
                             texts_of=lambda c: read_esci_products(d / ESCI_PRODUCTS, pids[c], opts.bullet_chars),
                             info=info, distractors=distractors)


# ------------------------------------------------------------------------------------------
# the tasks
# ------------------------------------------------------------------------------------------

_ESCI_COMMIT = "7e0e3073f5ca36c0b5ff79e847cf99a74597645d"
_ESCI = f"https://github.com/amazon-science/esci-data/raw/{_ESCI_COMMIT}/shopping_queries_dataset"
_ESCI_MAIN = "https://github.com/amazon-science/esci-data/raw/main/shopping_queries_dataset"

# MS MARCO v1.1 as the Hugging Face dataset ``microsoft/ms_marco`` serves it (one parquet file per
# split; the ``test`` split has no labels and is not fetched). Hugging Face pins a file by the
# revision in its URL; no revision sha can be looked up from this offline build machine, so the
# URL names ``MSMARCO_REVISION`` (one constant to pin) and the first sha256 seen is recorded and
# refuses a silent change afterwards (``rbench.tasks.sources``), as for the Amazon files.
MSMARCO_REVISION = "main"
_MSMARCO_HF = f"https://huggingface.co/datasets/microsoft/ms_marco/resolve/{MSMARCO_REVISION}/v1.1"
MSMARCO_FILES = tuple(
    RemoteFile(f"ms_marco_v1.1_{split}.parquet", (f"{_MSMARCO_HF}/{split}-00000-of-00001.parquet",),
               note=f"MS MARCO v1.1 QnA {split} split (Hugging Face parquet); no published checksum")
    for split in ("train", "validation"))

MSMARCO_SPEC = TaskSpec(
    name="msmarco",
    title="MS MARCO",
    scenario="large",
    domain="passage",
    description="Passage ranking: one positive per query, the pool is all passages of the sampled "
    "queries (every query's negatives are every other query's candidates).",
    paper_candidates=24697,
    paper_queries=3038,
    sources=(Source("MS MARCO v1.1 QnA / passage ranking", "https://microsoft.github.io/msmarco/",
                    "MS MARCO terms: non-commercial research", files=MSMARCO_FILES),),
    license="MS MARCO terms (non-commercial research)",
    how_to_get="rbench data download msmarco, or rbench data prepare msmarco --from DIR (v1.1 parquet/jsonl, "
    "or collection.tsv + queries.tsv + qrels)",
    paper_row=5,
    donates=("mixed", "shift", "scaled"),
    pool_from_positives=True,
)

ESCI_SPEC = TaskSpec(
    name="esci",
    title="ESCI",
    scenario="large",
    domain="product",
    description="Product search on Amazon Shopping Queries (US); label E is the positive; the pool is "
    "the products of the sampled queries.",
    paper_candidates=4000,
    paper_queries=3999,
    sources=(Source("Amazon Shopping Queries Dataset", "https://github.com/amazon-science/esci-data", "Apache-2.0",
                    files=(RemoteFile(ESCI_EXAMPLES, (f"{_ESCI}/{ESCI_EXAMPLES}", f"{_ESCI_MAIN}/{ESCI_EXAMPLES}"),
                                      sha256="4a735b693b4a424a6fc67f5be6e4c811495c488bbf66d02a602d308b2744263a",
                                      size=51286808, note="ESCI examples (Git LFS object, sha256 from its pointer)"),
                           RemoteFile(ESCI_PRODUCTS, (f"{_ESCI}/{ESCI_PRODUCTS}", f"{_ESCI_MAIN}/{ESCI_PRODUCTS}"),
                                      sha256="25124442d064d64b26f74082d6fa09438d679efc0c183cf28d19064a2b65a265",
                                      size=1108857465,
                                      note="ESCI products (Git LFS object, sha256 from its pointer)"))),),
    license="Apache-2.0",
    how_to_get="rbench data download esci, or --from DIR (shopping_queries_dataset_examples.parquet + "
    "shopping_queries_dataset_products.parquet)",
    paper_row=6,
    donates=("mixed", "shift", "scaled"),
    pool_from_positives=True,
)


class MsMarcoFamily(TaskFamily):
    """MS MARCO: v1.1 QnA files or the official TSV collection (see the module doc)."""

    name = "msmarco"
    doc = __doc__ or ""

    def specs(self) -> tuple[TaskSpec, ...]:
        return (MSMARCO_SPEC,)

    def options_type(self, spec: TaskSpec) -> type:
        return PassageOptions

    def test_only(self, spec: TaskSpec, options: Any) -> bool:
        return isinstance(options, PassageOptions) and options.split == "test"

    def check(self, spec: TaskSpec) -> tuple[bool, str]:
        return msmarco_status(spec)

    def load(self, spec: TaskSpec, options: Any, seed: int) -> TaskData:
        return load_msmarco(spec, options, seed)


class EsciFamily(MsMarcoFamily):
    """ESCI: the Shopping Queries parquet files (see the module doc)."""

    name = "esci"

    def specs(self) -> tuple[TaskSpec, ...]:
        return (ESCI_SPEC,)

    def check(self, spec: TaskSpec) -> tuple[bool, str]:
        return esci_status(spec)

    def load(self, spec: TaskSpec, options: Any, seed: int) -> TaskData:
        return load_esci(spec, options, seed)


MSMARCO = MsMarcoFamily()
ESCI = EsciFamily()
