"""The evaluation engine: streams query batches x candidate chunks through a ranker.

Memory stays bounded by ``batch_size x chunk_size`` scores, never queries x pool: for each query
batch the engine first obtains the positives' scores, then walks the pool (or the per-query
candidate lists) chunk by chunk, counting for every positive how many candidates score higher
and how many tie, and keeping a running top-k. The positives' final positions follow the
pessimistic tie rule of ``rbench.metrics.TIE_RULE``.

One code path serves both scenarios: a shared pool is a candidate matrix whose rows are all the
same chunk of pool indices; a small-scenario task gives every query its own row.

Rankers that implement ``encode_pool``/``encode_queries`` (``EmbeddingRanker``) are scored here
by a GEMM over candidate chunks; all others through their own ``score``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rbench.api import Pool, Queries, Ragged
from rbench.errors import DataError, RankerOutputError

Scorer = Callable[[Queries, np.ndarray], np.ndarray]


@dataclass
class EvalResult:
    """What one evaluation produced: positives' ranks (aligned with ``queries.positives``),
    the running top-k, the number of ranked candidates per query, and timings."""

    ranks: Ragged
    topk_index: np.ndarray  # (n_queries, k) pool indices, -1 where fewer candidates
    topk_score: np.ndarray
    n_ranked: np.ndarray  # candidates actually ranked per query (after exclusions)
    timings: dict[str, float] = field(default_factory=dict)
    # per positive (aligned with ranks.values): non-positive candidates scoring higher / equal,
    # and positives placed before it; ranks = 1 + higher + equal + pos_before. Kept so that
    # results over disjoint pool shards merge exactly (``merge``).
    higher: np.ndarray | None = None
    equal: np.ndarray | None = None
    pos_before: np.ndarray | None = None


def is_embedding_ranker(ranker: Any) -> bool:
    return callable(getattr(ranker, "encode_pool", None)) and callable(getattr(ranker, "encode_queries", None))


def _topk_rows(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k column positions and scores per row, sorted descending (ties: lower column first)."""
    k = min(k, scores.shape[1])
    if k <= 0:
        return np.zeros((scores.shape[0], 0), np.int64), np.zeros((scores.shape[0], 0), scores.dtype)
    torch = sys.modules.get("torch")  # use torch's multi-threaded topk only when already loaded
    if torch is not None and scores.shape[1] > 4 * k and scores.dtype in (np.float32, np.float64):
        vals, idx = torch.topk(torch.from_numpy(np.ascontiguousarray(scores)), k, dim=1, sorted=False)
        idx, vals = idx.numpy().astype(np.int64), vals.numpy()
        order = np.lexsort((idx, -vals), axis=1)  # descending score, ties by lower column
        return np.take_along_axis(idx, order, axis=1), np.take_along_axis(vals, order, axis=1)
    if k < scores.shape[1]:
        part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    else:
        part = np.broadcast_to(np.arange(scores.shape[1]), scores.shape).copy()
    vals = np.take_along_axis(scores, part, axis=1)
    order = np.lexsort((part, -vals), axis=1)
    return np.take_along_axis(part, order, axis=1), np.take_along_axis(vals, order, axis=1)


def _count(scores: np.ndarray, thresholds: np.ndarray, op: str) -> np.ndarray:
    """Per row, how many scores are > (or ==) the row's threshold (NaN never counts).
    (count_nonzero over a bool matrix is several times faster than sum, and than torch's.)"""
    hit = scores > thresholds if op == ">" else scores == thresholds
    return np.count_nonzero(hit, axis=1)


def _check_shape(scores: np.ndarray, shape: tuple[int, int], ranker_name: str) -> np.ndarray:
    if scores.shape != shape:
        raise RankerOutputError(f"ranker {ranker_name!r} returned scores of shape {scores.shape}, expected {shape}")
    return scores


def _check(scores: Any, shape: tuple[int, int], ranker_name: str, queries: Queries) -> np.ndarray:
    arr = np.asarray(scores)
    if arr.shape != shape:
        raise RankerOutputError(
            f"ranker {ranker_name!r} returned scores of shape {arr.shape}, expected {shape} "
            f"(n_queries, n_candidates)"
        )
    if not np.issubdtype(arr.dtype, np.number):
        raise RankerOutputError(f"ranker {ranker_name!r} returned non-numeric scores ({arr.dtype})")
    if arr.dtype not in (np.float32, np.float64):
        arr = arr.astype(np.float64)
    finite = np.isfinite(arr)
    if not finite.all():
        row = int(np.flatnonzero(~finite.all(axis=1))[0])
        bad = arr[row][~finite[row]][0]
        raise RankerOutputError(
            f"ranker {ranker_name!r} returned a non-finite score ({bad}) for query {queries.ids[row]!r}"
        )
    return arr


def _pad(r: Ragged, fill: float | int, dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    """Ragged -> dense (n, max_len) + validity mask."""
    n, width = len(r), int(r.lengths().max()) if len(r) else 0
    out = np.full((n, max(width, 1)), fill, dtype=dtype)
    mask = np.zeros((n, max(width, 1)), dtype=bool)
    cols = np.arange(len(r.values)) - np.repeat(r.offsets[:-1], r.lengths())
    out[r.row_ids(), cols] = r.values
    mask[r.row_ids(), cols] = True
    return out, mask


def validate_queries(queries: Queries, pool: Pool) -> None:
    """Positives must be unique pool indices, present in their candidate list if there is one."""
    n = len(pool)
    lengths = queries.positives.lengths()
    if (lengths == 0).any():
        qid = queries.ids[int(np.flatnonzero(lengths == 0)[0])]
        raise DataError(f"query {qid!r} has no positive (every evaluated query needs one)")
    vals = queries.positives.values
    if len(vals) and (vals.min() < 0 or vals.max() >= n):
        raise DataError(f"a positive index is outside the pool of {n} candidates")
    if (queries.grades.values <= 0).any():
        raise DataError("positive grades must be > 0")
    if queries.candidates is not None:
        cand = queries.candidates
        if cand.min() < 0 or cand.max() >= n:
            raise DataError("a per-query candidate index is outside the pool")
        pos, mask = _pad(queries.positives, -1, np.int64)
        hits = (cand[:, :, None] == pos[:, None, :]).sum(axis=1)
        bad = np.flatnonzero(((hits != 1) & mask).any(axis=1))
        if len(bad):
            raise DataError(f"query {queries.ids[bad[0]]!r}: each positive must appear exactly once in "
                            f"its candidate list")


class _Chunks:
    """Candidate chunks of one query batch: (B, C) pool indices, or one shared 1-D range."""

    def __init__(self, queries: Queries, pool_range: tuple[int, int], chunk_size: int) -> None:
        self.per_query = queries.candidates
        self.pool_range, self.chunk_size = pool_range, chunk_size

    def __iter__(self):
        if self.per_query is not None:
            m = self.per_query.shape[1]
            for a in range(0, m, self.chunk_size):
                yield a, self.per_query[:, a : a + self.chunk_size]
        else:
            lo, hi = self.pool_range
            for a in range(lo, hi, self.chunk_size):
                yield a, np.arange(a, min(a + self.chunk_size, hi), dtype=np.int64)


def make_scorer(ranker: Any, pool: Pool) -> tuple[Scorer, dict[str, float]]:
    """Index the pool and return ``score(batch, candidates)`` for the engine's loop.

    The dense scorer is marked ``fresh_output``: it returns newly allocated float32 arrays that
    the engine may modify in place (a plugin's ``score`` may return views of its own caches,
    which are copied first)."""
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    if is_embedding_ranker(ranker):
        emb = ranker.encode_pool(pool)
        if emb.ndim != 2 or emb.shape[0] != len(pool):
            raise RankerOutputError(f"ranker {ranker.name!r}: encode_pool returned shape {emb.shape}, "
                                    f"expected ({len(pool)}, d)")
        for a in range(0, emb.shape[0], 262144):  # once per pool, chunked (may be memory-mapped)
            block = np.asarray(emb[a : a + 262144])
            if not np.isfinite(block).all():
                row = a + int(np.flatnonzero(~np.isfinite(block).all(axis=1))[0])
                raise RankerOutputError(f"ranker {ranker.name!r}: candidate vector {row} "
                                        f"({pool.ids[row]!r}) is not finite")
        timings["index_s"] = time.perf_counter() - t0
        cache: dict[str, Any] = {}

        def score(batch: Queries, cand: np.ndarray) -> np.ndarray:
            if cache.get("batch") is not batch:  # hold the batch: an id() could be reused
                q = np.asarray(ranker.encode_queries(batch))
                if q.ndim != 2 or q.shape[0] != len(batch) or q.shape[1] != emb.shape[1]:
                    raise RankerOutputError(f"ranker {ranker.name!r}: encode_queries returned shape "
                                            f"{q.shape}, expected ({len(batch)}, {emb.shape[1]})")
                if not np.isfinite(q).all():
                    row = int(np.flatnonzero(~np.isfinite(q).all(axis=1))[0])
                    raise RankerOutputError(f"ranker {ranker.name!r} returned a non-finite query vector "
                                            f"for query {batch.ids[row]!r}")
                cache["batch"], cache["q"] = batch, q.astype(np.float32, copy=False)
            q = cache["q"]
            if cand.ndim == 1:
                if len(cand) and cand[-1] - cand[0] + 1 == len(cand):  # contiguous: a view, no copy
                    block = emb[cand[0] : cand[-1] + 1]
                else:
                    block = emb[cand]
                return q @ np.asarray(block, dtype=np.float32).T
            return np.einsum("bd,bmd->bm", q, np.asarray(emb[cand], dtype=np.float32))

        score.fresh_output = True  # type: ignore[attr-defined]
        score.finite_inputs = True  # type: ignore[attr-defined]
        return score, timings
    ranker.index(pool)
    timings["index_s"] = time.perf_counter() - t0
    return ranker.score, timings


def evaluate(
    ranker: Any,
    queries: Queries,
    pool: Pool,
    *,
    batch_size: int = 256,
    chunk_size: int = 65536,
    topk: int = 100,
    progress: Callable[[int], None] | None = None,
    scorer: Scorer | None = None,
    pool_range: tuple[int, int] | None = None,
) -> EvalResult:
    """Rank ``pool`` (or each query's candidate list) for every query; exact positive ranks.

    ``pool_range=(a, b)`` scans only candidates a..b-1 of a shared pool (one shard); the
    positives are still scored and compared wherever they live, so shard results ``merge``
    into exactly the single-process result.
    """
    validate_queries(queries, pool)
    if pool_range is not None and queries.candidates is not None:
        raise ValueError("pool_range applies to shared pools, not per-query candidate lists")
    pool_range = pool_range or (0, len(pool))
    timings: dict[str, float] = {}
    if scorer is None:
        scorer, timings = make_scorer(ranker, pool)
    name = getattr(ranker, "name", type(ranker).__name__)
    fresh = bool(getattr(scorer, "fresh_output", False))
    n = len(queries)
    n_pos = len(queries.positives.values)
    higher_vals = np.zeros(n_pos, dtype=np.int64)
    equal_vals = np.zeros(n_pos, dtype=np.int64)
    before_vals = np.zeros(n_pos, dtype=np.int64)
    top_idx = np.full((n, topk), -1, dtype=np.int64)
    top_val = np.full((n, topk), -np.inf, dtype=np.float64)
    n_ranked = np.zeros(n, dtype=np.int64)
    t_score = time.perf_counter()
    for rows, batch in queries.batches(batch_size):
        B = len(rows)
        pos, pos_ok = _pad(batch.positives, 0, np.int64)
        grade, _ = _pad(batch.grades, 0.0, np.float64)
        # positives' scores: small lists are scored whole (listwise rankers see the real list)
        if batch.candidates is not None and batch.candidates.shape[1] <= chunk_size:
            full = _check(scorer(batch, batch.candidates), batch.candidates.shape, name, batch)
            col = np.argmax(batch.candidates[:, :, None] == pos[:, None, :], axis=1)
            sp = np.take_along_axis(full, col, axis=1)
        else:
            full = None
            sp = _check(scorer(batch, pos), pos.shape, name, batch)
        higher = np.zeros(pos.shape, dtype=np.int64)
        equal = np.zeros(pos.shape, dtype=np.int64)
        excl = batch.exclude
        for a, cand in _Chunks(batch, pool_range, chunk_size):
            if batch.candidates is not None and batch.candidates.shape[1] <= chunk_size:
                s = full  # already scored above
            else:
                shape = cand.shape if cand.ndim == 2 else (B, len(cand))
                raw = scorer(batch, cand)
                # the dense scorer checks its inputs are finite, so its products are; others are scanned
                s = _check(raw, shape, name, batch) if not getattr(scorer, "finite_inputs", False) \
                    else _check_shape(raw, shape, name)
            if not fresh or s is full:
                s = s.copy()  # never modify a ranker's own arrays
            C = s.shape[1]
            spc = sp.astype(s.dtype, copy=False)  # compare in the scores' own precision
            # exclusions -> -inf (never higher, never tied, never in top-k)
            if excl is not None and len(excl.values):
                er, ev = excl.row_ids(), excl.values
                if cand.ndim == 1:
                    inside = (ev >= a) & (ev < a + C)
                    s[er[inside], ev[inside] - a] = -np.inf
                else:
                    for r in np.unique(er):
                        s[r, np.isin(cand[r], excl[r])] = -np.inf
            excluded_here = excl is not None and len(excl.values) > 0
            n_ranked[rows] += np.isfinite(s).sum(axis=1) if excluded_here else s.shape[1]
            # running top-k
            ci, cv = _topk_rows(s, topk)
            gi = cand[ci] if cand.ndim == 1 else np.take_along_axis(cand, ci, axis=1)
            merged_i = np.concatenate([top_idx[rows], gi], axis=1)
            merged_v = np.concatenate([top_val[rows], cv], axis=1)
            mi, mv = _topk_rows(merged_v, topk)
            top_idx[rows] = np.take_along_axis(merged_i, mi, axis=1)
            top_val[rows] = mv
            # positives are compared among themselves below; mask them out of the chunk
            cmp = s
            if cand.ndim == 1:
                inside = pos_ok & (pos >= a) & (pos < a + C)
                rr, cc = np.nonzero(inside)
                cmp[rr, pos[rr, cc] - a] = np.nan
            else:
                hit = (cand[:, :, None] == pos[:, None, :]) & pos_ok[:, None, :]
                cmp[hit.any(axis=2)] = np.nan
            if pos.shape[1] <= 8:
                for j in range(pos.shape[1]):
                    t = spc[:, j : j + 1]
                    higher[:, j] += _count(cmp, t, ">")
                    equal[:, j] += _count(cmp, t, "==")
            else:  # many graded positives: sort once, binary-search each positive
                srt = np.sort(np.where(np.isnan(cmp), -np.inf, cmp), axis=1)
                for i in range(B):
                    lo = np.searchsorted(srt[i], spc[i], side="left")
                    hi = np.searchsorted(srt[i], spc[i], side="right")
                    higher[i] += C - hi
                    equal[i] += hi - lo
            if batch.candidates is not None and batch.candidates.shape[1] <= chunk_size:
                break
        # order among positives: higher score first; ties pessimistically by ascending grade,
        # then by descending pool index (deterministic)
        ok = pos_ok[:, :, None] & pos_ok[:, None, :]
        s_i, s_j = sp[:, :, None], sp[:, None, :]
        before = (s_j > s_i) | (
            (s_j == s_i) & ((grade[:, None, :] < grade[:, :, None])
                            | ((grade[:, None, :] == grade[:, :, None]) & (pos[:, None, :] > pos[:, :, None])))
        )
        pos_before = (before & ok).sum(axis=2)
        flat = batch_slice(queries.positives, rows)
        higher_vals[flat], equal_vals[flat], before_vals[flat] = higher[pos_ok], equal[pos_ok], pos_before[pos_ok]
        if progress is not None:
            progress(B)
    timings["score_s"] = time.perf_counter() - t_score
    timings["per_query_ms"] = 1000.0 * timings["score_s"] / max(n, 1)
    top_idx[~np.isfinite(top_val)] = -1
    return EvalResult(
        ranks=Ragged(queries.positives.offsets.copy(), 1 + higher_vals + equal_vals + before_vals),
        topk_index=top_idx,
        topk_score=top_val,
        n_ranked=n_ranked,
        timings=timings,
        higher=higher_vals,
        equal=equal_vals,
        pos_before=before_vals,
    )


def merge(parts: list[EvalResult]) -> EvalResult:
    """Combine results over disjoint pool shards into the result over their union (exact)."""
    if not parts:
        raise ValueError("nothing to merge")
    first = parts[0]
    higher = np.sum([p.higher for p in parts], axis=0)
    equal = np.sum([p.equal for p in parts], axis=0)
    k = first.topk_index.shape[1]
    idx = np.concatenate([p.topk_index for p in parts], axis=1)
    val = np.concatenate([p.topk_score for p in parts], axis=1)
    val = np.where(idx < 0, -np.inf, val)
    # ties between shards: lower pool index first, as within one scan
    order = np.lexsort((np.where(idx < 0, np.iinfo(np.int64).max, idx), -val), axis=1)[:, :k]
    top_idx, top_val = np.take_along_axis(idx, order, axis=1), np.take_along_axis(val, order, axis=1)
    timings = {key: float(sum(p.timings.get(key, 0.0) for p in parts)) for key in first.timings}
    return EvalResult(
        ranks=Ragged(first.ranks.offsets.copy(), 1 + higher + equal + first.pos_before),
        topk_index=top_idx, topk_score=top_val,
        n_ranked=np.sum([p.n_ranked for p in parts], axis=0), timings=timings,
        higher=higher, equal=equal, pos_before=first.pos_before.copy(),
    )


def batch_slice(r: Ragged, rows: np.ndarray) -> slice:
    """The flat-value slice of consecutive ``rows`` of ``r``."""
    return slice(int(r.offsets[rows[0]]), int(r.offsets[rows[-1] + 1]))
