"""Run files that reproduce the record: the exported TREC run lists rbench's own order.

rbench ranks pessimistically (``rbench.engine.metrics.TIE_RULE``): a positive goes after every other
candidate with its score, and tied positives after each other by ascending grade, then by
descending pool index. trec_eval, ir_measures (pytrec_eval) and ranx re-sort a run by score and
break ties their own ways, each differently (trec_eval and pytrec_eval by docno, ranx by its own
sort), so a run file holding the raw, tied scores gives other numbers than the record (BM25 on
rec-music, where most positives score 0: nDCG@10 38.05 in the record, 51.66 by ir_measures,
52.14 by ranx).

So the file leaves no tie to break:

- **Order.** Each query's lines are the head of rbench's full pessimistic order: every positive
  whose rank r is within the file's depth k sits at line r (its rank column is r), and the other
  lines are the non-positives in the engine's order (score descending, ties by ascending pool
  index: within a group of tied scores the non-positives come first, as the tie rule says).
- **Scores.** Strictly decreasing within a query, as float64 (ranx, Python) and as float32:
  trec_eval, and so pytrec_eval and ir_measures, holds a run's scores as C floats, so scores one
  float64 ulp apart are a tie there (measured: 0.0 and -1e-300 tie in pytrec_eval), broken by
  docno. Each line keeps its raw score where its float32 rounding is already below the line
  before; a tied line takes the float32 just below the line before (``np.nextafter`` towards
  -inf in float32: a group of zeros becomes 0.0, -1.4e-45, -2.8e-45, ...). A tie group so large
  (or scores so dense) that its walk would reach the next distinct score pushes that score, and
  what follows it, down just as far: the order never changes. A query whose walk would reach
  float32's -inf (raw scores beyond -3.4e38) is written with scores k, k-1, ..., 1 instead.

Every tool then reads the order the record was computed from, and measures with a cutoff at or
below k (nDCG@10 and R@10 for k >= 10; R@100 and ``RR@100`` for k >= 100) equal the record's
values (``tests/engine/test_runfiles.py``: ir_measures and ranx to 1e-9, ties included). The record's
``RR`` has no cutoff; a file of depth k gives RR@k, so the record also holds ``RR@100``
(``rbench.engine.metrics.RECORD_MEASURES``).

What the file can hold: the engine keeps each query's best candidates by (score descending, pool
index ascending); the non-positives among them are exactly the head of the true non-positive
sequence, and the positives' places are their ranks (``EvalResult.ranks``). Where a tie group
straddles line k, the engine's k best may hold tied positives that rank beyond k and miss tied
non-positives (higher pool indices) that rank before a positive within k. Keeping ``run_width``
candidates (k plus the most positives a query has, at most 2k) instead of k always holds enough
of them; the runner asks the engine for that many and writes k lines. Where a query's kept
candidates fall short (more than k positives; a two-stage run whose rerank depth is below k,
past which positives keep stage-1 ranks whose candidates the run does not keep) its list stops
at the last line known exactly, and a warning counts the queries whose list stops before a
positive ranked within k.
"""

from __future__ import annotations

import gzip
import io
import re
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from rbench.api import Queries, Ragged
from rbench.core.errors import DataError
from rbench.core.inputs import iter_text_lines

if TYPE_CHECKING:
    from rbench.engine.scan import EvalResult

RUN_LINE_BYTES = 1 << 20  # a run line is 'qid Q0 docid rank score tag': a longer one is not a run file's
TREC_ID_RULE = "an id in a TREC run or qrels line is non-empty, without spaces, tabs or line breaks"
_SPACE = re.compile(r"\s")


def is_trec_id(text: str) -> bool:
    """Whether ``text`` can be a field of a whitespace-separated TREC line (``TREC_ID_RULE``)."""
    return bool(text) and _SPACE.search(text) is None


def check_trec_ids(ids: Any, what: str) -> None:
    """Refuse (``DataError``, one line naming the id) an id that a TREC file cannot hold."""
    for text in ids:
        if not is_trec_id(text):
            raise DataError(f"{what} id {text!r} cannot be written to a TREC file ({TREC_ID_RULE}); "
                            "re-import the task with ids that can")


def run_width(depth: int, queries: Queries) -> int:
    """How many best candidates per query the engine keeps for a run file of ``depth`` lines:
    ``depth`` plus the most positives a query has, at most ``2 * depth`` (0: no run file).

    Why that many: a query's list needs the non-positives that precede its positives ranked
    within ``depth``; among the engine's best (ties by lower pool index) at most P are positives,
    so ``depth + P`` of them hold at least ``depth`` non-positives, enough for every line."""
    if depth <= 0:
        return 0
    lengths = queries.positives.lengths()
    return depth + min(int(lengths.max()) if len(lengths) else 0, depth)


@dataclass
class RunLists:
    """Each query's run-file lines: pool indices and raw scores (n_queries, depth), -1 / NaN
    past ``length``; ``short`` marks queries whose list stops before a positive ranked within
    the depth (the engine kept too few of their tied candidates)."""

    index: np.ndarray
    score: np.ndarray
    length: np.ndarray
    short: np.ndarray


def pessimistic_lists(positives: Ragged, ranks: Ragged, topk_index: np.ndarray, topk_score: np.ndarray,
                      depth: int) -> RunLists:
    """The head (``depth`` lines) of each query's pessimistic order, from the engine's best
    candidates (``topk_index``/``topk_score``: pool indices, -1 padded, any order; wider than
    ``depth`` is better, see ``run_width``) and the positives' ranks (aligned with ``positives``).
    A row with fewer candidates than its width holds every candidate the query ranks (or, in a
    two-stage run, its whole reranked list)."""
    idx = np.asarray(topk_index, dtype=np.int64)
    val = np.asarray(topk_score, dtype=np.float64)
    n, width = idx.shape
    valid = idx >= 0
    # the engine's order, made sure of: score descending, ties by ascending pool index, padding last
    order = np.lexsort((np.where(valid, idx, np.iinfo(np.int64).max), np.where(valid, -val, np.inf)), axis=1)
    idx, val = np.take_along_axis(idx, order, axis=1), np.take_along_axis(val, order, axis=1)
    valid = idx >= 0
    full = valid.all(axis=1) if width else np.zeros(n, dtype=bool)
    rows = positives.row_ids()
    pos = np.asarray(positives.values, dtype=np.int64)
    r = np.asarray(ranks.values, dtype=np.int64)
    is_pos, p_score = _positive_scores(idx, val, valid, full, rows, pos, r)
    placed = (r >= 1) & (r <= depth)
    pos_idx = np.full((n, depth), -1, dtype=np.int64)
    pos_val = np.full((n, depth), np.nan)
    pr, pl = rows[placed], r[placed] - 1
    if len(np.unique(pr * depth + pl)) != len(pr):
        raise ValueError("two positives of one query hold the same rank: not the engine's ranks")
    pos_idx[pr, pl], pos_val[pr, pl] = pos[placed], p_score[placed]
    slot_pos = pos_idx >= 0
    # the non-positives in order, packed to the left of each row
    non = valid & ~is_pos
    pack = np.argsort(~non, axis=1, kind="stable")
    np_idx, np_val = np.take_along_axis(idx, pack, axis=1), np.take_along_axis(val, pack, axis=1)
    np_count = non.sum(axis=1)
    np_slot = np.cumsum(~slot_pos, axis=1)  # the line's place in the non-positive sequence (1-based)
    take = np.clip(np_slot - 1, 0, max(width - 1, 0))
    if width:
        line_idx = np.where(slot_pos, pos_idx, np.take_along_axis(np_idx, take, axis=1))
        line_val = np.where(slot_pos, pos_val, np.take_along_axis(np_val, take, axis=1))
    else:
        line_idx, line_val = pos_idx, pos_val
    known = np.where(slot_pos, ~np.isnan(pos_val), np_slot <= np_count[:, None])
    length = np.where(known.all(axis=1), depth, np.argmin(known, axis=1)) if depth else np.zeros(n, np.int64)
    past = np.arange(depth)[None, :] >= length[:, None]
    short = (slot_pos & past).any(axis=1)
    line_idx = np.where(past, -1, line_idx)
    line_val = np.where(past, np.nan, line_val)
    inside = ~past[:, 1:] if depth > 1 else np.zeros((n, 0), dtype=bool)
    if depth > 1 and (line_val[:, 1:] > line_val[:, :-1])[inside].any():
        raise ValueError("the positives' ranks and the kept candidates' scores disagree: not one evaluation's")
    return RunLists(index=line_idx, score=line_val, length=length.astype(np.int64), short=short)


def _positive_scores(idx: np.ndarray, val: np.ndarray, valid: np.ndarray, full: np.ndarray, rows: np.ndarray,
                     pos: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which kept candidates are positives, and each positive's score: from the kept candidates,
    or (a full row that lacks it) the lowest kept score, which it ties with: a lower one would
    rank it past the width (NaN: unknown)."""
    n, width = idx.shape
    span = int(max(idx.max(initial=0), pos.max(initial=0))) + 1
    key = np.where(valid, np.arange(n)[:, None] * span + idx, -1)
    pos_key = rows * span + pos
    is_pos = valid & np.isin(key, pos_key)
    flat_keys, flat_vals = key[valid], val[valid]
    srt = np.argsort(flat_keys, kind="stable")
    at = np.minimum(np.searchsorted(flat_keys[srt], pos_key), max(len(srt) - 1, 0))
    found = len(srt) > 0
    kept = np.zeros(len(pos), dtype=bool) if not found else flat_keys[srt][at] == pos_key
    p_score = np.full(len(pos), np.nan)
    if found:
        p_score[kept] = flat_vals[srt][at][kept]
    lowest = val[:, width - 1] if width else np.full(n, np.nan)
    tied = ~kept & full[rows] & (r <= width)
    p_score[tied] = lowest[rows[tied]]
    return is_pos, p_score


def _order_key(v: np.ndarray) -> np.ndarray:
    """float32 -> int64 keys in the same order, one apart between neighbouring float32s (-0.0 and
    0.0 share key 0: tools read them as one score)."""
    bits = np.ascontiguousarray(v, dtype=np.float32).view(np.int32).astype(np.int64)
    return np.where(bits < 0, -(bits & 0x7FFFFFFF), bits)


def _from_key(k: np.ndarray) -> np.ndarray:
    """The float32 values of ``_order_key`` keys, as float64 (exactly)."""
    bits = np.where(k < 0, (-k) | 0x80000000, k).astype(np.uint32)
    return bits.view(np.float32).astype(np.float64)


def strictly_decreasing(scores: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Each row's first ``length`` scores (non-increasing) made strictly decreasing as float32
    values too, since trec_eval (and pytrec_eval, ir_measures' engine) holds a run's scores as C
    floats: two scores one float64 ulp apart are a tie there, broken by docno. In float32 order,
    line i gets min(raw_i, the float32 just below line i-1): a tie walks down one float32 ulp a
    line (a group of zeros: 0.0, -1.4e-45, -2.8e-45, ...), and a distinct score keeps its raw
    float64 value wherever its float32 rounding is below the line before (else it, like a tie, is
    written as the float32 just below). The written values then decrease strictly both as float64
    (ranx, Python) and as float32 (trec_eval): rounding never reorders. A row whose walk would
    reach the float32 -inf (raw scores beyond -3.4e38) gets ``length, length-1, ..., 1``. Past
    ``length``: NaN."""
    n, depth = scores.shape
    line = np.arange(depth, dtype=np.int64)
    length = np.asarray(length, dtype=np.int64)
    inside = line[None, :] < length[:, None]
    raw = np.where(inside, scores, 0.0)
    with np.errstate(over="ignore"):  # beyond the float32 range: +-inf, walked like any other
        key = _order_key(raw.astype(np.float32))
    # out_i = min(key_i, out_{i-1} - 1)  <=>  out_i + i = min over j <= i of (key_j + j)
    out = np.minimum.accumulate(key + line, axis=1) - line if depth else key
    lowest = int(_order_key(np.array([-np.finfo(np.float32).max]))[0])
    absurd = ((out < lowest) & inside).any(axis=1)
    out = np.where(absurd[:, None], 0, out)
    result = np.where(out == key, raw, _from_key(out))
    if absurd.any():
        result[absurd] = (length[absurd, None] - line[None, :]).astype(np.float64)
    return np.where(inside, result, np.nan)


def run_file_bytes(queries: Queries, pool_ids: Any, result: EvalResult, depth: int, tag: str) -> bytes:
    """The run file of one evaluation: ``depth`` lines per query (fewer where the query ranks
    fewer candidates) in rbench's pessimistic order with strictly decreasing scores (module doc),
    ``qid Q0 docid rank score tag``, gzipped deterministically (mtime 0, level 6). ``result``
    should hold ``run_width(depth, queries)`` best candidates per query; its ranks are aligned
    with ``queries.positives``. An id a TREC line cannot hold is a ``DataError`` naming it."""
    lists = pessimistic_lists(queries.positives, result.ranks, result.topk_index, result.topk_score, depth)
    if lists.short.any():
        warnings.warn(f"the run file lists {int(lists.short.sum()):,} queries only down to the line before a "
                      f"positive ranked within {depth}: the candidates before it were not kept (a query with "
                      f"more positives than {depth}, or a two-stage run's depth below the run file's)",
                      stacklevel=2)
    scores = strictly_decreasing(lists.score, lists.length)
    rows, lines = np.nonzero(lists.index >= 0)  # row-major: each query's lines in order
    qids = np.asarray(queries.ids)[rows].astype(str)
    written = lists.index[rows, lines]
    used, inverse = np.unique(written, return_inverse=True)
    docs = np.asarray(pool_ids)[used].astype(str)
    check_trec_ids(np.unique(qids).tolist(), "query")
    check_trec_ids(docs.tolist(), "document")
    text = "".join(f"{q} Q0 {d} {rank} {v!r} {tag}\n" for q, d, rank, v in
                   zip(qids.tolist(), docs[inverse].tolist(), (lines + 1).tolist(),
                       scores[rows, lines].tolist()))
    buf = io.BytesIO()  # level 6: a quarter of level 9's time (zlib was 2/3 of the writing), 1.4% larger
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=6, mtime=0, filename="") as gz:
        gz.write(text.encode())
    return buf.getvalue()


# --------------------------------------------------------------------------------------------
# reading: the one reader of TREC run files (``--rerank-from run:PATH``, ``-r run:PATH``, ``rbench verify``)
# --------------------------------------------------------------------------------------------


def read_run(path: Any, query_ids: Any, pool_ids: Any, candidates: np.ndarray | None = None,
             exclude: Ragged | None = None) -> list[dict[int, float]]:
    """Each query's listed candidates (pool index -> score) from the TREC run file ``path``
    (``qid Q0 docid rank score tag``, gzipped or plain), aligned with ``query_ids``. Lines of
    queries not in ``query_ids`` are skipped (a run of more queries than a sample evaluates);
    a query's documents in ``exclude`` are dropped. Why one reader: the rerank stage 1, the run-file ranker
    and ``rbench verify`` must read the same file the same way. Bad input is a ``DataError``
    naming the file and line: not 6 fields, a document not in the pool (or not among the
    query's ``candidates``), a score that is not a finite number, a document twice for a query;
    a file that lists none of the queries is refused too."""
    row_of = {str(q): i for i, q in enumerate(query_ids)}
    doc_of = {str(d): i for i, d in enumerate(pool_ids)}
    n = len(row_of)
    allowed = None if candidates is None else [set(map(int, r)) for r in candidates]
    excluded = [set()] * n if exclude is None else [set(map(int, e)) for e in exclude]
    per: list[dict[int, float]] = [{} for _ in range(n)]
    listed = False  # a line for one of the queries
    try:  # the one reader of text inputs: gzip or plain, BOM and CRLF handled, lines capped
        for lineno, line in iter_text_lines(path, limit=RUN_LINE_BYTES):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 6:
                raise DataError(f"expected 6 fields 'qid Q0 docid rank score tag', found {len(parts)}", path, lineno)
            qid, _, doc, _, score, _ = parts
            if doc not in doc_of:
                raise DataError(f"document {doc!r} is not in the task's pool", path, lineno)
            try:
                value = float(score)
            except ValueError:
                raise DataError(f"score {score!r} is not a number", path, lineno) from None
            if not np.isfinite(value):
                raise DataError(f"score {score!r} is not finite", path, lineno)
            i = row_of.get(qid)
            if i is None:  # a query not evaluated here (e.g. --max-queries)
                continue
            listed = True
            d = doc_of[doc]
            if allowed is not None and d not in allowed[i]:
                raise DataError(f"document {doc!r} is not among query {qid!r}'s candidates", path, lineno)
            if d in per[i]:
                raise DataError(f"document {doc!r} appears twice for query {qid!r}", path, lineno)
            if d not in excluded[i]:
                per[i][d] = value
    except (UnicodeDecodeError, EOFError, gzip.BadGzipFile, OSError) as exc:
        raise DataError(f"cannot read the run file ({type(exc).__name__}: {exc})", path) from exc
    if not listed:
        raise DataError(f"lists none of the {n:,} test queries evaluated (empty, or another task's "
                        f"run file?): expected lines 'qid Q0 docid rank score tag' for them", path)
    return per
