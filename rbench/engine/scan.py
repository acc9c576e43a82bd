"""The engine's exact scan (``scan``): streams query batches x candidate chunks through a ranker
and gives each query's top-k and every positive's exact rank (it computes no measure and writes
no record: ``rbench.evaluate`` is the user's whole run around it).

Memory stays bounded by ``batch_size x chunk_size`` scores, never queries x pool: for each query
batch the engine first obtains the positives' scores, then walks the pool (or the per-query
candidate lists) chunk by chunk, counting for every positive how many candidates score higher
and how many tie, and, when asked (``topk`` > 0), keeping a running top-k (``_RunningTopK``:
about one comparison pass per chunk; ``topk=0`` costs nothing). The positives' final positions
follow the pessimistic tie rule of ``rbench.engine.metrics.TIE_RULE``.

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

from rbench.api import MAX_GRADE, Pool, Queries, Ragged
from rbench.core.errors import DataError, RankerOutputError, RBenchError
from rbench.core.settings import DEFAULTS
from rbench.engine import fused, owned
from rbench.engine.scorers import ScoreFn, Scorer, as_scorer, make_scorer


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


def _topk_rows(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k column positions and scores per row, sorted descending (ties: lower column first)."""
    idx, vals = _topk_unsorted(scores, k)
    return _sort_topk(idx, vals)


def _topk_unsorted(scores: np.ndarray, k: int, keys: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Top-k column positions and scores per row, in no particular order (the engine sorts once,
    at the end, instead of after every chunk).

    Which of several candidates tied at the k-th score make the cut is decided, not left to the
    selection algorithm: the lowest ``keys`` (pool indices; default the column) win, so a scan
    split into shards keeps exactly the single scan's top-k. One extra element is selected to see
    whether a row has such a tie; only those rows (rare) are resolved by a full pass."""
    n_rows, n_cols = scores.shape
    k = min(k, n_cols)
    if k <= 0:
        return np.zeros((n_rows, 0), np.int64), np.zeros((n_rows, 0), scores.dtype)
    if k == n_cols:
        idx = np.broadcast_to(np.arange(n_cols), scores.shape).copy()
        return idx, scores.copy()
    torch = sys.modules.get("torch")  # use torch's multi-threaded topk only when already loaded
    # (its per-call cost only pays off on many rows: the engine's row blocks are small)
    if torch is not None and n_rows >= 256 and n_cols > 4 * k and scores.dtype in (np.float32, np.float64):
        vals, idx = torch.topk(torch.from_numpy(np.ascontiguousarray(scores)), k + 1, dim=1, sorted=False)
        idx, vals = idx.numpy().astype(np.int64, copy=False), vals.numpy()
    else:
        idx = np.argpartition(-scores, k, axis=1)[:, : k + 1]
        vals = np.take_along_axis(scores, idx, axis=1)
    rows = np.arange(n_rows)
    drop = np.argmin(vals, axis=1)  # the (k+1)-th best
    keep = np.ones(vals.shape, dtype=bool)
    keep[rows, drop] = False
    dropped = vals[rows, drop]
    idx, vals = idx[keep].reshape(n_rows, k), vals[keep].reshape(n_rows, k)
    for r in np.flatnonzero(dropped == vals.min(axis=1)):  # a tie straddles the cut
        row, t = scores[r], dropped[r]
        above = np.flatnonzero(row > t)
        tied = np.flatnonzero(row == t)
        key = tied if keys is None else (keys if keys.ndim == 1 else keys[r])[tied]
        chosen = np.concatenate([above, tied[np.argsort(key, kind="stable")[: k - len(above)]]])
        idx[r], vals[r] = chosen, row[chosen]
    return idx, vals


def _sort_topk(idx: np.ndarray, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Order rows by descending score; ties by lower index (-1 padding last)."""
    order = np.lexsort((np.where(idx < 0, np.iinfo(np.int64).max, idx), -vals), axis=1)
    return np.take_along_axis(idx, order, axis=1), np.take_along_axis(vals, order, axis=1)


def _sparse_nonzero(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.nonzero`` of a sparse, C-contiguous 2-D bool matrix, about 8x faster: the bytes are
    scanned eight at a time (as uint64 words) and only the non-zero words are expanded."""
    n_rows, n_cols = mask.shape
    if n_cols % 8 or not mask.flags.c_contiguous:
        return np.nonzero(mask)
    flat = mask.reshape(-1)
    words = np.flatnonzero(flat.view(np.uint64))
    if not len(words):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    pos = (words[:, None] * 8 + np.arange(8))
    pos = pos[flat[pos]]
    return pos // n_cols, pos % n_cols


class _RunningTopK:
    """The running top-k of one query batch over its candidate chunks (unsorted until the end).

    Once every row holds k candidates, a chunk is first compared with each row's k-th best score
    so far and only the candidates that can still enter are merged: on a shared pool chunks come
    in ascending pool index, so a candidate tied with the k-th best never enters (the lower index
    wins, as in one selection over everything); on per-query lists ties are kept and resolved by
    pool index. A scan then costs about one comparison pass per chunk after the first, instead of
    a selection over every candidate. ``k == 0`` keeps nothing and costs nothing."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.idx: np.ndarray | None = None  # (B, <=k) pool indices
        self.val: np.ndarray | None = None
        self._buf: np.ndarray | None = None

    def add(self, s: np.ndarray, cand: np.ndarray) -> None:
        if self.k <= 0:
            return
        if self.idx is None or self.idx.shape[1] < self.k:
            head = max(4096, 16 * self.k)
            if self.idx is None and s.shape[1] > 2 * head and s.shape[0] < 256:  # (torch.topk: many rows)
                # a wide first chunk: select among its first columns, then filter the rest against
                # that k-th best (a comparison pass) instead of selecting over every column
                self._select(s[:, :head], cand[..., :head])
                self.add(s[:, head:], cand[..., head:])
            else:
                self._select(s, cand)
            return
        kth = self.val.min(axis=1)[:, None]
        if self._buf is None or self._buf.shape != s.shape:
            self._buf = np.empty(s.shape, dtype=bool)
        hit = (np.greater if cand.ndim == 1 else np.greater_equal)(s, kth, out=self._buf)  # C-contiguous
        n_hit = int(np.count_nonzero(hit))
        if n_hit == 0:
            return
        if n_hit > s.size // 16:  # most candidates still compete (e.g. scores rising with the index)
            self._select(s, cand)
            return
        rows, cols = _sparse_nonzero(hit)  # grouped by row
        counts = np.bincount(rows, minlength=s.shape[0])
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        slot = np.arange(len(rows)) - starts[rows]
        width = int(counts.max())
        new_i = np.full((s.shape[0], width), -1, dtype=np.int64)
        new_v = np.full((s.shape[0], width), -np.inf, dtype=self.val.dtype)
        new_i[rows, slot] = cand[cols] if cand.ndim == 1 else cand[rows, cols]
        new_v[rows, slot] = s[rows, cols]
        t = np.flatnonzero(counts)
        self.idx[t], self.val[t] = self._merged(self.idx[t], self.val[t], new_i[t], new_v[t])

    def _select(self, s: np.ndarray, cand: np.ndarray) -> None:
        ci, cv = _topk_unsorted(s, self.k, keys=None if cand.ndim == 1 else cand)
        gi = cand[ci] if cand.ndim == 1 else np.take_along_axis(cand, ci, axis=1)
        if self.idx is None:
            self.idx, self.val = gi, cv
        else:
            self.idx, self.val = self._merged(self.idx, self.val, gi, cv)

    def _merged(self, idx: np.ndarray, val: np.ndarray, gi: np.ndarray,
                gv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        merged_i = np.concatenate([idx, gi], axis=1)
        mi, mv = _topk_unsorted(np.concatenate([val, gv.astype(val.dtype, copy=False)], axis=1), self.k,
                                keys=merged_i)
        return np.take_along_axis(merged_i, mi, axis=1), mv


def _count(scores: np.ndarray, thresholds: np.ndarray, op: str, out: np.ndarray | None = None) -> np.ndarray:
    """Per row, how many scores are > (or ==) the row's threshold (NaN never counts).
    (count_nonzero over a bool matrix is several times faster than sum, and than torch's; ``out``
    is a reused bool buffer: fresh pages cost more than the comparison on these machines.)"""
    if out is None or out.shape != scores.shape:
        out = np.empty(scores.shape, dtype=bool)
    (np.greater if op == ">" else np.equal)(scores, thresholds, out=out)
    return np.count_nonzero(out, axis=1)


_TILE_BYTES = 1 << 22  # row blocks of the scores this size (fp64 worth): they stay in cache between passes


def _count_block(s: np.ndarray, spc: np.ndarray, higher: np.ndarray, equal: np.ndarray, n_pos: int,
                 bufs: dict[tuple[int, int], np.ndarray]) -> None:
    """Add to ``higher``/``equal`` (views) how many of each row's scores are >/== each positive's
    score (masked positives are NaN: they never count)."""
    C = s.shape[1]
    if n_pos <= 8:
        buf = bufs.get(s.shape)
        if buf is None:
            buf = bufs[s.shape] = np.empty(s.shape, dtype=bool)
        for j in range(n_pos):
            t = spc[:, j : j + 1]
            higher[:, j] += _count(s, t, ">", buf)
            equal[:, j] += _count(s, t, "==", buf)
    else:  # many graded positives: sort once, binary-search each positive
        srt = np.sort(np.where(np.isnan(s), -np.inf, s), axis=1)
        for i in range(s.shape[0]):
            lo = np.searchsorted(srt[i], spc[i], side="left")
            hi = np.searchsorted(srt[i], spc[i], side="right")
            higher[i] += C - hi
            equal[i] += hi - lo


def _exclusions_in(excl: Ragged | None, a: int, n_cols: int) -> tuple[np.ndarray, np.ndarray]:
    """The batch's exclusions inside the shared-pool chunk of pool indices a .. a+n_cols-1, as
    (rows, chunk columns), rows ascending."""
    if excl is None or not len(excl.values):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    er, ev = excl.row_ids(), np.asarray(excl.values, dtype=np.int64)
    inside = (ev >= a) & (ev < a + n_cols)
    return er[inside], ev[inside] - a


def _check_shape(scores: np.ndarray, shape: tuple[int, int], ranker_name: str) -> np.ndarray:
    if scores.shape != shape:
        raise RankerOutputError(f"ranker {ranker_name!r} returned scores of shape {scores.shape}, expected {shape}")
    return scores


def _check(scores: Any, shape: tuple[int, int], ranker_name: str, queries: Queries,
           harness: bool = False) -> np.ndarray:
    """The scores a ranker's call returned, as the engine's own float array: copied first
    (``rbench.engine.owned``: an ndarray subclass's code never runs, and the ranker cannot edit
    what the engine keeps or see what it writes), then checked: real dtype, shape, finiteness.
    ``harness``: the engine's own dense scores (``Scorer.harness_scores``), already its arrays:
    checked, not copied."""
    expected = f"a {shape} array (n_queries, n_candidates)"
    arr = owned.real(np.asarray(scores), ranker_name, "score", expected) if harness else \
        owned.plain_copy(scores, ranker_name, "score", expected)
    if arr.shape != shape:
        raise RankerOutputError(
            f"ranker {ranker_name!r} returned scores of shape {arr.shape}, expected {shape} "
            f"(n_queries, n_candidates)"
        )
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
    if n and width and len(r.values) == n * width:  # rows all as long: a reshape
        return r.values.astype(dtype).reshape(n, width), np.ones((n, width), dtype=bool)
    out = np.full((n, max(width, 1)), fill, dtype=dtype)
    mask = np.zeros((n, max(width, 1)), dtype=bool)
    cols = np.arange(len(r.values)) - np.repeat(r.offsets[:-1], r.lengths())
    out[r.row_ids(), cols] = r.values
    mask[r.row_ids(), cols] = True
    return out, mask


def validate_queries(queries: Queries, pool: Pool, require_positive: bool = True) -> None:
    """Positives must be unique pool indices, present in their candidate list if there is one."""
    n = len(pool)
    lengths = queries.positives.lengths()
    if require_positive and (lengths == 0).any():
        qid = queries.ids[int(np.flatnonzero(lengths == 0)[0])]
        raise DataError(f"query {qid!r} has no positive (every evaluated query needs one)")
    vals = queries.positives.values
    if len(vals) and (vals.min() < 0 or vals.max() >= n):
        raise DataError(f"a positive index is outside the pool of {n} candidates")
    grades = queries.grades.values
    if len(grades) and not (np.isfinite(grades).all() and grades.min() > 0 and grades.max() <= MAX_GRADE):
        k = int(np.flatnonzero(~(np.isfinite(grades) & (grades > 0) & (grades <= MAX_GRADE)))[0])
        qid = queries.ids[int(np.searchsorted(queries.positives.offsets, k, side="right") - 1)]
        raise DataError(f"query {qid!r}: positive grade {grades[k]!r} is not in (0, {MAX_GRADE:g}] "
                        "(nDCG sums grades as gains; larger ones overflow it)")
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
            # chunk edges sit on absolute multiples of chunk_size, whatever the range: a shard
            # whose range starts on that grid makes exactly the GEMM calls a whole-pool scan makes
            # for the same candidates, so their float scores (and ties) are bit-identical
            lo, hi = self.pool_range
            a = lo
            while a < hi:
                b = min(hi, (a // self.chunk_size + 1) * self.chunk_size)
                yield a, np.arange(a, b, dtype=np.int64)
                a = b


def scan(
    ranker: Any,
    queries: Queries,
    pool: Pool,
    *,
    batch_size: int = DEFAULTS.batch_size,
    chunk_size: int = DEFAULTS.chunk_size,
    topk: int = DEFAULTS.topk,
    progress: Callable[[int], None] | None = None,
    scorer: Scorer | ScoreFn | None = None,
    pool_range: tuple[int, int] | None = None,
    unlabelled_rows: bool = False,
    verify: bool = True,
) -> EvalResult:
    """Rank ``pool`` (or each query's candidate list) for every query; exact positive ranks.

    ``pool_range=(a, b)`` scans only candidates a..b-1 of a shared pool (one shard); the
    positives are still scored and compared wherever they live, so shard results ``merge``
    into exactly the single-process result (the engine's own dense scores only: see below).
    ``topk``: how many best candidates per query to keep (``EvalResult.topk_index``); 0 keeps none
    and skips that work (``rbench run`` asks for none). ``unlabelled_rows``: queries without a
    positive are ranked too (their top-k is kept; the two-stage path's lists without one).
    ``verify=False`` skips the consistency check (``benchmarks/consistency_cost.py`` measures its
    cost against it; the CLI and the Python API always check).

    Scores made by ranker code (its own ``score``; everything but the engine's dense scorer) are
    never asked for the positives alone: each query's whole candidate list (or the whole pool)
    is scored in the same calls whatever the labels, and the positives' scores are read from
    those calls (``_whole_rows``). A ranker that declares ``set_dependent`` gets each batch's
    whole list in one call; any other is spot-checked (``_verify``): a label-independent sample
    of candidates scored again, in another order and company, must get the same scores.
    """
    validate_queries(queries, pool, require_positive=not unlabelled_rows)
    if pool_range is not None and queries.candidates is not None:
        raise ValueError("pool_range applies to shared pools, not per-query candidate lists")
    sc = _Scan.start(ranker, queries, pool, scorer, pool_range or (0, len(pool)), batch_size, chunk_size,
                     topk, verify)
    t_score, compiled = time.perf_counter(), fused.compile_seconds()
    for rows, batch in queries.batches(sc.batch_size):
        _score_batch(sc, rows, batch)
        if progress is not None:
            progress(len(rows))
    return sc.result(time.perf_counter() - t_score, fused.compile_seconds() - compiled)


@dataclass
class _Scan:
    """One evaluation: its fixed inputs (the scorer, the walk, which kernels) and its outputs,
    filled batch by batch (per positive: ``higher``/``equal``/``before``; per query: the top-k and
    the ranked count)."""

    scorer: Scorer
    queries: Queries
    pool: Pool
    pool_range: tuple[int, int]
    batch_size: int
    chunk_size: int
    topk: int
    name: str
    verify: bool
    fused_scan: bool
    own_scorer: bool
    timings: dict[str, float]
    higher: np.ndarray
    equal: np.ndarray
    before: np.ndarray
    top_idx: np.ndarray
    top_val: np.ndarray
    n_ranked: np.ndarray
    hit_bufs: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)
    spare_top: Any = None  # the fused scan's top-k buffers, reused batch to batch
    verify_s: float = 0.0

    @property
    def whole(self) -> bool:
        return not self.scorer.harness_scores  # ranker code's scores: whole rows (see ``scan``)

    @property
    def gemm_operands(self) -> Any:
        return self.scorer.gemm_operands if self.fused_scan else None

    @classmethod
    def start(cls, ranker: Any, queries: Queries, pool: Pool, scorer: Scorer | ScoreFn | None,
              pool_range: tuple[int, int], batch_size: int, chunk_size: int, topk: int, verify: bool) -> _Scan:
        timings: dict[str, float] = {}
        own_scorer = scorer is None  # made here: its memory is released at the end
        if scorer is None:
            scorer, made = make_scorer(ranker, pool)
            timings.update(made)
        scorer = as_scorer(scorer)
        width = queries.candidates.shape[1] if queries.candidates is not None else pool_range[1] - pool_range[0]
        fused_scan = fused.enabled() and fused.scan_pays(len(queries), width)  # small scans: numpy, no JIT
        # the JIT's first compile, of what this evaluation calls: not the ranker's cost
        timings["compile_s"] = fused.warmup(scan=fused_scan, gemm=scorer.gemm_operands is not None)
        name = getattr(ranker, "name", None) or ("ranker" if ranker is None else type(ranker).__name__)
        if not scorer.harness_scores:
            batch_size = _whole_row_batch(scorer, queries, pool, pool_range, batch_size, chunk_size, name)
        n, n_pos, topk = len(queries), len(queries.positives.values), max(0, int(topk))
        return cls(scorer, queries, pool, pool_range, batch_size, chunk_size, topk, name, verify, fused_scan,
                   own_scorer, timings, np.zeros(n_pos, dtype=np.int64), np.zeros(n_pos, dtype=np.int64),
                   np.zeros(n_pos, dtype=np.int64), np.full((n, topk), -1, dtype=np.int64),
                   np.full((n, topk), -np.inf, dtype=np.float64), np.zeros(n, dtype=np.int64),
                   spare_top=fused.take_topk() if fused_scan else None)  # the last evaluation's top-k buffers

    def result(self, score_s: float, compile_s: float = 0.0) -> EvalResult:
        """The evaluation's result; ``compile_s``: the seconds of ``score_s`` the first chunk of a
        score precision spent compiling its kernel (``fused.compile_seconds``), moved to compile_s."""
        timings = self.timings
        timings["compile_s"] += compile_s
        score_s -= compile_s
        timings["score_s"] = score_s
        timings["per_query_ms"] = 1000.0 * score_s / max(len(self.queries), 1)
        if self.whole:
            timings["verify_s"] = self.verify_s  # the consistency check's share of score_s
        self.top_idx[~np.isfinite(self.top_val)] = -1
        fused.keep_topk(self.spare_top)
        if self.own_scorer and self.scorer.release is not None:
            self.scorer.release()
        return EvalResult(ranks=Ragged(self.queries.positives.offsets.copy(), 1 + self.higher + self.equal + self.before),
                          topk_index=self.top_idx, topk_score=self.top_val, n_ranked=self.n_ranked, timings=timings,
                          higher=self.higher, equal=self.equal, pos_before=self.before)


@dataclass
class _Batch:
    """One query batch in flight: its positives (padded), their scores, the candidate chunks to
    walk and the counts and top-k gathered over them."""

    rows: np.ndarray
    queries: Queries
    pos: np.ndarray
    pos_ok: np.ndarray
    grade: np.ndarray
    sp: np.ndarray  # the positives' scores
    full: np.ndarray | None  # the batch's whole rows of scores (ranker code's, or a small list's)
    chunks: Any
    higher: np.ndarray
    equal: np.ndarray
    blocks: list[tuple[int, int]]
    top: _RunningTopK
    carried: fused.TopK | None = None  # the fused scan's top-k (its buffers reused batch to batch)
    finite: np.ndarray | None = None  # the fused scan's ranked candidates

    @property
    def size(self) -> int:
        return len(self.rows)


def _score_batch(sc: _Scan, rows: np.ndarray, batch: Queries) -> None:
    """Rank one batch: its positives' scores, then every chunk of candidates against them."""
    b = _open_batch(sc, rows, batch)
    excl = batch.exclude
    for a, cand in b.chunks:
        if sc.gemm_operands is not None and cand.ndim == 1 and len(cand) and (b.carried is None or not b.carried.wide):
            _gemm_chunk(sc, b, a, cand)
            continue
        _scan_chunk(sc, b, a, cand, excl)
    _close_batch(sc, b)


def _open_batch(sc: _Scan, rows: np.ndarray, batch: Queries) -> _Batch:
    """The batch's positives and their scores, and the chunks its candidates are walked in:
    ranker code's whole rows (the positives' scores read from the same calls), a small list's
    dense scores whole, or the engine's dense scores chunk by chunk (a positive's by the GEMM's
    own arithmetic, ``pair_dots``)."""
    B, name, lo, hi = len(rows), sc.name, *sc.pool_range
    pos, pos_ok = _pad(batch.positives, 0, np.int64)
    grade, _ = _pad(batch.grades, 0.0, np.float64)
    small = batch.candidates is not None and batch.candidates.shape[1] <= sc.chunk_size
    if sc.whole:  # every score from the calls over whole rows; the positives' read from them
        full = _whole_rows(sc.scorer, batch, sc.pool_range, sc.chunk_size, name)
        if sc.verify and not sc.scorer.set_dependent and _checked(int(rows[0]) // sc.batch_size):
            t0 = time.perf_counter()
            _verify(sc.scorer, batch, full, sc.pool_range, int(rows[0]) // sc.batch_size, name, sc.pool)
            sc.verify_s += time.perf_counter() - t0
        col = pos - lo if batch.candidates is None else \
            np.argmax(batch.candidates[:, :, None] == pos[:, None, :], axis=1)
        sp = np.take_along_axis(full, col, axis=1)
        chunks: Any = [(lo, batch.candidates if batch.candidates is not None else np.arange(lo, hi))]
    elif small:  # the engine's dense scores of small lists: scored whole
        full = _check(sc.scorer(batch, batch.candidates), batch.candidates.shape, name, batch, harness=True)
        col = np.argmax(batch.candidates[:, :, None] == pos[:, None, :], axis=1)
        sp = np.take_along_axis(full, col, axis=1)
        chunks = [(0, batch.candidates)]
    else:
        full = None
        sp = _check(sc.scorer(batch, pos), pos.shape, name, batch, harness=True)
        chunks = _Chunks(batch, sc.pool_range, sc.chunk_size)
    # the scores are masked and counted in row blocks of about _TILE_BYTES, so that those
    # passes read a block from cache, not memory
    width = full.shape[1] if full is not None else min(hi - lo, sc.chunk_size)
    step = max(1, _TILE_BYTES // (8 * max(1, width)))
    return _Batch(rows, batch, pos, pos_ok, grade, sp, full, chunks, np.zeros(pos.shape, dtype=np.int64),
                  np.zeros(pos.shape, dtype=np.int64), [(r0, min(B, r0 + step)) for r0 in range(0, B, step)],
                  _RunningTopK(sc.topk), finite=np.zeros(B, dtype=np.int64))


def _carried(sc: _Scan, b: _Batch) -> fused.TopK:
    if b.carried is None:
        b.carried = sc.spare_top = fused.TopK(b.size, sc.topk, sc.spare_top)
    return b.carried


def _gemm_chunk(sc: _Scan, b: _Batch, a: int, cand: np.ndarray) -> None:
    """The dense scorer's GEMM and the scan fused: each block of rows scanned in cache, over parts
    of the chunk whose packed candidates stay in cache too."""
    carried, excl, B = _carried(sc, b), b.queries.exclude, b.size
    pos_or_none = np.where(b.pos_ok, b.pos, -1)  # the fused scan's positives (-1: padding)
    part_width = fused.gemm_width()  # candidates a call
    for s0 in range(0, len(cand), part_width):
        part = cand[s0 : s0 + part_width]
        C, a0 = len(part), a + s0
        ex_row, ex_col = _exclusions_in(excl, a0, C)
        ex_off = np.searchsorted(ex_row, np.arange(B + 1)).astype(np.int64)
        q_vecs, packed = sc.gemm_operands(b.queries, part)
        fused.gemm_scan(q_vecs, packed, C, a0, b.sp, pos_or_none, ex_off, ex_col, len(ex_col) > 0,
                        b.higher, b.equal, b.finite, carried, more=a0 + C < sc.pool_range[1])
        if not len(ex_col):
            b.finite += C


def _chunk_scores(sc: _Scan, b: _Batch, cand: np.ndarray) -> np.ndarray:
    """The chunk's scores as the engine's own array, safe to modify."""
    if b.full is not None:
        return b.full if sc.whole else b.full.copy()  # _whole_rows' rows are the engine's own
    shape = cand.shape if cand.ndim == 2 else (b.size, len(cand))
    raw = sc.scorer(b.queries, cand)
    # (only the engine's dense scores come here: ranker code's are whole rows) the dense
    # scorer checks its inputs are finite, so its products are; others are scanned
    s = _check(raw, shape, sc.name, b.queries, harness=True) if not sc.scorer.finite_inputs \
        else _check_shape(raw, shape, sc.name)
    return s if sc.scorer.scratch_output else s.copy()  # never modify a scorer's own arrays


def _scan_chunk(sc: _Scan, b: _Batch, a: int, cand: np.ndarray, excl: Ragged | None) -> None:
    """Count, for every positive, the chunk's candidates scoring higher and equal (the fused scan
    or numpy's row blocks), and keep the running top-k."""
    s = _chunk_scores(sc, b, cand)
    C = s.shape[1]
    spc = b.sp.astype(s.dtype, copy=False)  # compare in the scores' own precision
    # exclusions -> -inf (never higher, never tied, never in top-k)
    if excl is not None and len(excl.values):
        if cand.ndim == 1:
            s[_exclusions_in(excl, a, C)] = -np.inf
        else:
            for r in np.unique(excl.row_ids()):
                s[r, np.isin(cand[r], excl[r])] = -np.inf
    excluded_here = excl is not None and len(excl.values) > 0
    if sc.fused_scan and cand.ndim == 1:  # one pass per row in cache (rbench.engine.fused)
        pos_or_none = np.where(b.pos_ok, b.pos, -1)
        fused.scan(s, a, spc, pos_or_none, excluded_here, b.higher, b.equal, b.finite, _carried(sc, b),
                   more=a + C < sc.pool_range[1])
        if not excluded_here:
            b.finite += C
        return
    b.top.add(s, cand)  # running top-k (unsorted until the end of the scan; topk=0: nothing)
    _count_blocks(sc, b, s, a, cand, spc, excluded_here)


def _count_blocks(sc: _Scan, b: _Batch, s: np.ndarray, a: int, cand: np.ndarray, spc: np.ndarray,
                  excluded_here: bool) -> None:
    """numpy's count over row blocks in cache; positives are masked out of the chunk (they are
    compared among themselves in ``_close_batch``)."""
    C, pos, pos_ok, rows = s.shape[1], b.pos, b.pos_ok, b.rows
    if cand.ndim == 1:
        inside = pos_ok & (pos >= a) & (pos < a + C)
        rr, cc = np.nonzero(inside)  # row-major: each block's are one slice
        lims = np.searchsorted(rr, [r0 for r0, _ in b.blocks] + [b.size])
    for bi, (r0, r1) in enumerate(b.blocks):
        sb = s[r0:r1]
        cb = cand if cand.ndim == 1 else cand[r0:r1]
        sc.n_ranked[rows[r0:r1]] += np.isfinite(sb).sum(axis=1) if excluded_here else C
        if cand.ndim == 1:
            br, bc = rr[lims[bi] : lims[bi + 1]], cc[lims[bi] : lims[bi + 1]]
            sb[br - r0, pos[br, bc] - a] = np.nan
        else:
            hit = (cb[:, :, None] == pos[r0:r1, None, :]) & pos_ok[r0:r1, None, :]
            sb[hit.any(axis=2)] = np.nan
        _count_block(sb, spc[r0:r1], b.higher[r0:r1], b.equal[r0:r1], pos.shape[1], sc.hit_bufs)


def _close_batch(sc: _Scan, b: _Batch) -> None:
    """The batch's top-k and ranked counts, and the order among its positives: higher score first;
    ties pessimistically by ascending grade, then by descending pool index (deterministic)."""
    rows, pos, pos_ok, grade, sp = b.rows, b.pos, b.pos_ok, b.grade, b.sp
    if b.carried is not None:  # the fused scan's counts and top-k (already in rank order)
        sc.n_ranked[rows] += b.finite
        if sc.topk:
            sc.top_idx[rows], sc.top_val[rows] = fused.finish(b.carried)
    elif b.top.idx is not None:
        w = b.top.idx.shape[1]
        sc.top_idx[rows, :w], sc.top_val[rows, :w] = _sort_topk(b.top.idx, b.top.val.astype(np.float64))
    ok = pos_ok[:, :, None] & pos_ok[:, None, :]
    s_i, s_j = sp[:, :, None], sp[:, None, :]
    before = (s_j > s_i) | (
        (s_j == s_i) & ((grade[:, None, :] < grade[:, :, None])
                        | ((grade[:, None, :] == grade[:, :, None]) & (pos[:, None, :] > pos[:, :, None])))
    )
    pos_before = (before & ok).sum(axis=2)
    if len(b.queries.positives.values):
        flat = batch_slice(sc.queries.positives, rows)
        sc.higher[flat], sc.equal[flat], sc.before[flat] = b.higher[pos_ok], b.equal[pos_ok], pos_before[pos_ok]


_ROW_BYTES = 1 << 30  # whole-row scoring holds a batch's rows of scores (fp64 worth) within this


def _whole_row_batch(scorer: Scorer, queries: Queries, pool: Pool, pool_range: tuple[int, int],
                     batch_size: int, chunk_size: int, name: str) -> int:
    """The batch size whole-row scoring uses (a batch's rows of scores stay within _ROW_BYTES),
    after refusing what it cannot do: a shard of a shared pool (the positives' scores would need
    calls of their own) and a set-dependent ranker's shared pool above one call (--chunk-size)."""
    width = queries.candidates.shape[1] if queries.candidates is not None else pool_range[1] - pool_range[0]
    if queries.candidates is None and pool_range != (0, len(pool)):
        raise ValueError(f"pool_range: ranker {name!r} scores with its own score(), whose positives are read "
                         "from whole rows; only the engine's dense scores are scanned shard by shard")
    if queries.candidates is None:
        require_one_call(name, scorer.set_dependent, width, chunk_size)
    return max(1, min(batch_size, _ROW_BYTES // (8 * max(1, width))))


def require_one_call(name: str, set_dependent: bool, width: int, chunk_size: int) -> None:
    """A set-dependent ranker's shared pool must fit in one call (``--chunk-size``); else one
    line naming the ranker and the alternative. (The runner asks before fitting, the engine
    again before scoring.)"""
    if set_dependent and width > chunk_size:
        raise RBenchError(f"ranker {name!r} declares set-dependent scores (set_dependent = True), so each "
                          f"query's candidates are scored in one call; the pool of {width:,} candidates is "
                          f"more than one call of {chunk_size:,} (--chunk-size): rerank a first stage's "
                          "top-N instead (--rerank-from bm25 --rerank-depth 100)")


def _whole_rows(scorer: Scorer, batch: Queries, pool_range: tuple[int, int], chunk_size: int,
                name: str) -> np.ndarray:
    """The batch's scores over each query's whole candidate list (or the whole pool), in the
    engine's own array: one call (a set-dependent ranker, or a list within ``chunk_size``) or
    one call per chunk on the fixed grid. Which calls are made never depends on the labels."""
    one = scorer.set_dependent
    if batch.candidates is not None:
        m = batch.candidates.shape[1]
        parts = [(0, batch.candidates)] if one or m <= chunk_size else \
            [(a, batch.candidates[:, a : a + chunk_size]) for a in range(0, m, chunk_size)]
    else:
        parts = [(a - pool_range[0], c) for a, c in _Chunks(batch, pool_range, chunk_size)]
    B = len(batch)
    if len(parts) == 1:
        cand = parts[0][1]
        shape = cand.shape if cand.ndim == 2 else (B, len(cand))
        return _check(scorer(batch, cand), shape, name, batch)  # (a copy: ours, not the ranker's)
    out: np.ndarray | None = None
    for a, cand in parts:
        shape = cand.shape if cand.ndim == 2 else (B, len(cand))
        s = _check(scorer(batch, cand), shape, name, batch)
        if out is None:
            width = batch.candidates.shape[1] if batch.candidates is not None else pool_range[1] - pool_range[0]
            out = np.empty((B, width), dtype=s.dtype)
        out[:, a : a + shape[1]] = s
    assert out is not None
    return out


_VERIFY_COLUMNS = 32  # candidates a checked query is scored on again (a shared pool)


def _checked(b: int) -> bool:
    """Whether batch ``b`` is checked: b + 1 a power of 16 (batches 0, 15, 255, 4095, ...), so a
    run of n batches makes about log16(n) + 1 checks and the check stays under 2% of even a
    25 ms evaluation (``benchmarks/consistency_cost.py``: one check costs ~0.1 ms warm, ~0.35 ms
    right after a batch's scoring has flushed the caches); which batches are checked is fixed.
    One check suffices for what it is for: a softmax or rank-position score, a ranker that
    ignores ``candidates`` or a noisy one disagrees on almost every pair."""
    n = b + 1
    return n & (n - 1) == 0 and (n.bit_length() - 1) % 4 == 0


def _verify(scorer: Scorer, batch: Queries, full: np.ndarray, pool_range: tuple[int, int], seed: int,
            name: str, pool: Pool) -> None:
    """The consistency check of a ranker that does not declare set-dependent scores: one query
    of a checked batch (``_checked``) is scored again on a sample of its candidates, shuffled (a
    shared pool: 32; its own list: half of it), and every score must equal the one the
    whole-row calls gave (within the ranker's ``score_tolerance``, relative to max(1, |score|)).
    The query and the columns are drawn from ``seed`` (the batch's number), never from the
    labels. This catches scores that depend on the call's other candidates or their order
    (softmax or rank positions inside a call), rankers that ignore ``candidates``, and
    nondeterministic ones; one line, exit 2."""
    import random

    rng = random.Random(seed)  # (numpy's Generator costs ~0.2 ms to seed with cold caches)
    B, width = full.shape
    r = rng.randrange(B)
    sub = batch.slice(r, r + 1).unlabelled()  # (what the ranker gets: made once, here)
    cols = np.array(rng.sample(range(width), min(width, _VERIFY_COLUMNS) if batch.candidates is None
                               else max(1, width // 2)), dtype=np.int64)
    cand = pool_range[0] + cols if batch.candidates is None else batch.candidates[r : r + 1, cols]
    want = full[r : r + 1, cols]
    got = _check(scorer(sub, cand), want.shape, name, sub)
    tol = scorer.tolerance
    if tol == 0 and np.array_equal(got, want):
        return
    got, want = got.astype(np.float64), want.astype(np.float64)
    bad = np.flatnonzero(np.abs(got - want)[0] > tol * np.maximum(1.0, np.abs(want[0])))  # relative (0: exact)
    if len(bad):
        c = int(bad[0])
        item = int(cand[c] if cand.ndim == 1 else cand[0, c])
        raise RankerOutputError(
            f"ranker {name!r} gave candidate {pool.ids[item]!r} of query {sub.ids[0]!r} the score {want[0, c]!r} "
            f"in one call and {got[0, c]!r} in another (other candidates, another order; "
            f"{'bit for bit' if tol == 0 else f'tolerance {tol:g}'}): scores must not depend on the rest of the "
            "call unless the ranker declares set_dependent = True (then each list is scored in one call), "
            "must be about the candidates passed, and must be deterministic")


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
