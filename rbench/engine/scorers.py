"""Scorers: what the engine's scan calls for the scores of a query batch x a candidate chunk.

A ``Scorer`` is the scoring function plus what the engine must know about it, as named fields
(not attributes stuck on a closure): whether the numbers are the engine's own (the dense GEMM
path: scanned chunk by chunk, shard by shard) or ranker code's (scored over whole rows and
spot-checked), whether they depend on which candidates share the call, how far two calls may
differ, and the dense path's buffers and fused-GEMM operands. ``make_scorer`` picks one for a
ranker: the dense path for an ``EmbeddingRanker``, the ranker's own ``score`` otherwise.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from rbench.api import Pool, Queries
from rbench.core.errors import RankerOutputError
from rbench.core.settings import DEFAULTS
from rbench.engine import fused, owned

ScoreFn = Callable[[Queries, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Scorer:
    """A scoring function ``score(batch, candidates) -> (B, C) scores`` and how the engine treats it.

    - ``harness_scores``: the numbers are the engine's own (the dense path), not ranker code's: the
      scan asks for chunks (and shards) directly; ranker code is scored over whole rows instead.
    - ``set_dependent``: scores depend on which candidates share the call (listwise, pairwise, a
      softmax over the call): each query's whole list is scored in one call, never compared
      across calls.
    - ``tolerance``: relative difference two calls' scores of one pair may show (0: bit for bit).
    - ``scratch_output``: a shared-pool chunk's scores live in one reused buffer (valid until the
      next call) that the engine may modify in place.
    - ``finite_inputs``: every operand was checked finite, so the scan skips the NaN/inf scan.
    - ``gemm_operands``: (query vectors, packed candidates) of a chunk for the fused GEMM + scan.
    - ``release``: hand the scorer's buffers back when the evaluation ends.
    """

    score: ScoreFn
    harness_scores: bool = False
    set_dependent: bool = False
    tolerance: float = 0.0
    scratch_output: bool = False
    finite_inputs: bool = False
    gemm_operands: Callable[[Queries, np.ndarray], tuple[np.ndarray, np.ndarray]] | None = None
    release: Callable[[], None] | None = None

    def __call__(self, batch: Queries, candidates: np.ndarray) -> np.ndarray:
        return self.score(batch, candidates)


def as_scorer(scorer: Scorer | ScoreFn) -> Scorer:
    """A ``Scorer`` as it is; a bare function as ranker code's scores (whole rows, checked)."""
    return scorer if isinstance(scorer, Scorer) else Scorer(scorer)


def is_embedding_ranker(ranker: Any) -> bool:
    return callable(getattr(ranker, "encode_pool", None)) and callable(getattr(ranker, "encode_queries", None))


_PACKED_BYTES = 1 << 29  # a pool packed this small keeps its packed chunks across query batches (own GEMM)


def _contiguous(cand: np.ndarray) -> bool:
    """Whether the pool indices cand are one ascending run (its rows are then a view of the pool)."""
    return bool(len(cand) and cand[-1] - cand[0] + 1 == len(cand))


def encode_pool(ranker: Any, pool: Pool) -> Any:
    """The ranker's candidate vectors as the engine's own matrix (``rbench.engine.owned``: a
    private copy, or a read-only map the engine opened itself; never the object the ranker
    returned, which the engine later indexes with the positives' pool indices), checked once:
    real dtype, shape (len(pool), d), every value finite (scanned in chunks: the matrix may be
    memory-mapped or sharded)."""
    emb = owned.pool_matrix(ranker.encode_pool(pool.for_ranker()), ranker.name, len(pool))
    for a in range(0, emb.shape[0], 262144):
        block = np.asarray(emb[a : a + 262144], dtype=np.float32)
        if not np.isfinite(block).all():
            row = a + int(np.flatnonzero(~np.isfinite(block).all(axis=1))[0])
            raise RankerOutputError(f"ranker {ranker.name!r}: candidate vector {row} "
                                    f"({pool.ids[row]!r}) is not finite")
    return emb


def encode_queries(ranker: Any, queries: Queries, dim: int, batch_size: int = DEFAULTS.batch_size,
                   progress: Callable[[int], None] | None = None) -> np.ndarray:
    """The ranker's query vectors for every query, (n_queries, dim) float32, encoded in the
    engine's batches (so they equal what ``scan`` encodes batch by batch) and checked."""
    out = np.empty((len(queries), dim), dtype=np.float32)
    for rows, batch in queries.batches(batch_size):
        out[rows] = checked_query_vectors(ranker.encode_queries(batch.unlabelled()), batch, dim, ranker.name)
        if progress is not None:
            progress(len(rows))
    return out


def checked_query_vectors(q: Any, batch: Queries, dim: int, name: str) -> np.ndarray:
    """A ranker's query vectors for ``batch`` as the engine's own contiguous float32 copy
    (``rbench.engine.owned``: copy, then check dtype, shape, finiteness; one line naming the
    ranker and the query otherwise); a torch tensor is read through detach/cpu/numpy."""
    expected = f"a ({len(batch)}, {dim}) array"
    q = owned.plain_copy(q, name, "encode_queries", expected)
    if q.ndim != 2 or q.shape[0] != len(batch) or q.shape[1] != dim:
        raise RankerOutputError(f"ranker {name!r}: encode_queries returned shape "
                                f"{q.shape}, expected ({len(batch)}, {dim})")
    if not np.isfinite(q).all():
        row = int(np.flatnonzero(~np.isfinite(q).all(axis=1))[0])
        raise RankerOutputError(f"ranker {name!r} returned a non-finite query vector "
                                f"for query {batch.ids[row]!r}")
    return np.ascontiguousarray(q, dtype=np.float32)


def make_scorer(ranker: Any, pool: Pool) -> tuple[Scorer, dict[str, float]]:
    """Index the pool and return ``score(batch, candidates)`` for the engine's loop. The ranker
    receives the pool as ``Pool.for_ranker`` and queries as ``Queries.unlabelled``."""
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    if is_embedding_ranker(ranker):
        emb = encode_pool(ranker, pool)
        timings["index_s"] = time.perf_counter() - t0
        return dense_scorer(emb, lambda batch: ranker.encode_queries(batch.unlabelled()), ranker.name,
                            pool_checked=True), timings
    ranker.index(pool.for_ranker())
    timings["index_s"] = time.perf_counter() - t0
    return ranker_scorer(ranker), timings


def ranker_scorer(ranker: Any) -> Scorer:
    """A ranker's own ``score`` as the engine calls it: the batch's label-free view (made once per
    batch) and the candidates as a private read-only copy, so neither the answers nor the
    engine's arrays are within its reach. Carries what the ranker declares: ``set_dependent``
    (its scores depend on which candidates share the call: each query's whole list is then
    scored in one call and never compared across calls) and ``score_tolerance`` (how far two
    calls' scores of one pair may differ, relative to max(1, |score|), for fp32/GPU kernels whose
    arithmetic follows the batch's shape; 0: bit for bit)."""
    view: dict[str, Queries] = {}

    def score(batch: Queries, cand: np.ndarray) -> np.ndarray:
        if view.get("of") is not batch:  # hold the batch: an id() could be reused
            # (a label-free batch is the engine's own private view, made for this call: used as it is)
            view["of"], view["as"] = batch, batch.unlabelled() if batch.labelled else batch
        mine = np.array(cand, dtype=np.int64)
        mine.setflags(write=False)
        return ranker.score(view["as"], mine)

    return Scorer(score, set_dependent=bool(getattr(ranker, "set_dependent", False)),
                  tolerance=float(getattr(ranker, "score_tolerance", 0.0) or 0.0))


def dense_scorer(emb: Any, encode_queries: Callable[[Queries], np.ndarray], name: str = "dense",
                 pool_checked: bool = False) -> Scorer:
    """The engine's fast path for inner-product scores: a GEMM of the batch's query vectors against
    each candidate chunk (``emb`` may be memory-mapped, fp16/bf16-stored or sharded; chunks are
    computed in fp32).

    The scorer is marked ``scratch_output``: a shared-pool chunk's scores are written into one
    reused buffer (valid until the next call), which the engine may modify in place; faulting in
    a fresh batch x chunk matrix per chunk costs more than the comparisons on these machines.
    ``finite_inputs``: the query vectors are checked here; when the candidates were checked too
    (``pool_checked``, as ``make_scorer`` does), the engine skips scanning every score for NaN/inf."""
    cache: dict[str, Any] = {}
    chunks = _PoolChunks(emb)
    candidates, packed_chunk = chunks.candidates, chunks.packed
    own = fused.own_gemm(int(emb.shape[1]))

    def query_vectors(batch: Queries) -> np.ndarray:
        if cache.get("batch") is not batch:  # hold the batch: an id() could be reused
            cache["batch"], cache["q"] = batch, checked_query_vectors(encode_queries(batch), batch, emb.shape[1], name)
        return cache["q"]

    def score(batch: Queries, cand: np.ndarray) -> np.ndarray:
        q = query_vectors(batch)
        if cand.ndim == 1:
            size = q.shape[0] * len(cand)
            if cache.get("buf") is None or cache["buf"].size < size:
                cache["buf"] = np.empty(size, dtype=np.float32)
            out = cache["buf"][:size].reshape(q.shape[0], len(cand))
            if own and len(cand):
                return fused.gemm(q, packed_chunk(cand), out)
            return np.matmul(q, np.asarray(candidates(cand), dtype=np.float32).T, out=out)
        g = np.asarray(emb[cand], dtype=np.float32)
        if own:  # the GEMM's bits: a candidate identical to a positive ties with it
            return fused.pair_dots(q, g)
        return np.einsum("bd,bmd->bm", q, g)

    def operands(batch: Queries, cand: np.ndarray) -> tuple[np.ndarray, Any]:
        """(query vectors, packed candidates) of a shared-pool chunk, for the engine's fused GEMM
        and scan (``fused.gemm_scan``): the same scores ``score`` returns, never written whole."""
        if fused.tile_gemm():  # BLAS tiles (rbench.engine.blas_tiles): the raw candidates, fp32
            return query_vectors(batch), chunks.tiles(cand)
        return query_vectors(batch), packed_chunk(cand)

    return Scorer(score, harness_scores=True, scratch_output=True, finite_inputs=pool_checked,
                  release=chunks.release, gemm_operands=operands if own else None)


class _PoolChunks:
    """A dense scorer's candidate chunks: views of the pool's rows, and packed for rbench's GEMM."""

    def __init__(self, emb: Any) -> None:
        self.emb = emb
        self.kept: dict[tuple[int, int], np.ndarray] = {}
        self.buf: np.ndarray | None = None
        self.norms: dict[tuple[int, int], np.ndarray] = {}  # the BLAS tiles' candidate norms

    def candidates(self, cand: np.ndarray) -> Any:
        emb = self.emb
        return emb[cand[0] : cand[-1] + 1] if _contiguous(cand) else emb[cand]  # (a view: no copy)

    def packed(self, cand: np.ndarray) -> np.ndarray:
        """The chunk's candidates packed for rbench's GEMM. A pool whose packed copy fits in
        _PACKED_BYTES keeps its chunks for the next query batches; a larger one is packed again
        for each batch into one reused buffer (on these machines fresh pages cost more than the
        packing itself)."""
        key = (int(cand[0]), len(cand)) if _contiguous(cand) else None
        if key is not None and key in self.kept:
            return self.kept[key]
        keep = key is not None and self.emb.shape[0] * self.emb.shape[1] * 4 <= _PACKED_BYTES
        block = fused.pack(self.candidates(cand), None if keep else self.buf)
        if keep:
            self.kept[key] = block  # type: ignore[index]
        else:
            self.buf = block
        return block

    def tiles(self, cand: np.ndarray) -> Any:
        """The chunk's fp32 candidates for the BLAS tiles (``rbench.engine.blas_tiles``), with
        their tiles' norms, kept per chunk for the next query batches (the pool is fixed)."""
        from rbench.engine.blas_tiles import Candidates, tile_norms

        e = np.require(self.candidates(cand), np.float32, "C")
        key = (int(cand[0]), len(cand)) if _contiguous(cand) else None
        if key is None:
            return Candidates(e)
        if key not in self.norms:
            self.norms[key] = tile_norms(e)
        return Candidates(e, self.norms[key])

    def release(self) -> None:
        """Leave the packed candidates' memory to the next scorer (``fused.keep_buffer``): the
        scorer is not used any more."""
        for block in [*self.kept.values(), self.buf]:
            fused.keep_buffer(block)
        self.buf = None
        self.kept.clear()


def vector_scorer(emb: Any, query_vectors: np.ndarray, queries: Queries, name: str = "dense",
                  pool_checked: bool = False) -> Scorer:
    """``dense_scorer`` over query vectors computed beforehand (row i belongs to ``queries.ids[i]``)."""
    row_of = {str(q): i for i, q in enumerate(queries.ids)}
    return dense_scorer(emb, lambda batch: query_vectors[[row_of[str(i)] for i in batch.ids]], name,
                        pool_checked=pool_checked)

