"""BM25 over the candidate pool: rank-bm25's ``BM25Okapi`` scores at bm25s speed.

Score of document d for query q (tokens counted with repetition, as rank-bm25 does)::

    sum_{t in q} idf(t) * tf(t, d) * (k1 + 1) / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl))

Choices the paper leaves open (it only names BM25, Robertson & Zaragoza 2009):

- **Defaults equal rank-bm25's ``BM25Okapi()``** (k1=1.5, b=0.75, epsilon=0.25), the BM25 most
  Python code uses, so scores can be checked against it (tests do, to 1e-5 relative).
- **idf** (``idf=``):
  - ``"okapi"`` (default): ``log((N - df + 0.5) / (df + 0.5))``, Robertson-Sparck Jones. It is
    negative for terms in more than half of the documents; as in ``BM25Okapi`` those terms get
    ``epsilon * mean idf`` instead, the mean taken over the whole vocabulary *before* flooring.
    ``epsilon=0`` gives idf 0 to those terms, i.e. ``BM25Okapi(epsilon=0)`` (and bm25s'
    ``idf_method="robertson"``), so there is no separate "floor 0" mode. Terms in exactly half of
    the documents have idf 0 and are not floored (rank-bm25 floors only idf < 0).
  - ``"lucene"``: ``log(1 + (N - df + 0.5) / (df + 0.5))``, never negative, no floor (Lucene,
    Anserini/Pyserini, bm25s' default). Lucene drops the constant ``(k1 + 1)`` factor; keeping it
    here changes no ranking and keeps one tf formula for every idf choice.
  - ``"atire"``: ``log(N / df)`` (ATIRE; 0 for a term in every document).
  ``epsilon`` is used by ``"okapi"`` only.
- **Tokens**: see ``rbench_rankers.text`` (lowercase, ``\\w+``, Lucene English stopwords on, no
  stemming); queries and candidates go through the same tokenizer. Query tokens absent from the
  pool score 0; an empty query (or one made only of stopwords) scores 0 everywhere, an empty
  document scores 0 for every query. ``avgdl`` counts tokens after stopword removal.
- **Statistics** (N, df, avgdl) are those of the pool being ranked, as with any BM25 index:
  a pool variant (mixed/shift/scaled) changes idf.

How bm25s is used: no bm25s method alone is ``BM25Okapi`` (different idf, and no floor). The
index is built by ``bm25s.BM25(method="atire", idf_method="lucene")``, whose per-(term, document)
weight is ``idf_lucene(t) * tf-part``; each term's postings are then rescaled by
``idf(t) / idf_lucene(t)``. The Lucene idf is never 0 (unlike ATIRE's ``log(N/df)`` for a term
in every document), so every term, including those in all N documents, takes one path. Scoring
sums the postings of the query's terms with bm25s' ``get_scores_from_ids``. Weights and scores
are float32.

How the engine's calls are served: the engine calls ``score`` once per (query batch, pool chunk).
The first call for a query batch that needs many candidates computes that batch's scores over
the whole pool once (n_queries x N float32) and later calls for the same ``Queries`` object
slice it, so memory is bounded by batch x pool (256 queries x 10^6 documents: 1 GB; lower the
engine's batch size for larger pools); the last batch's scores are kept until the next batch or
``index`` call. Small candidate sets (the per-query 20-item lists, the engine's check samples) are
scored directly from the postings (binary search per term), without touching the other N
documents. Both paths add the same float32 terms in the same order,
so a (query, document) pair gets bit-identical scores whichever path or call produced it — the
engine's consistency check re-scores a sample of candidates in a small call and requires exactly
that.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np

from rbench.api import Pool, Queries
from rbench.plugin import AtLeast1, BaseRanker, Fraction, NonNegative, Range, RBenchError
from rbench_rankers.text import Tokenizer

IdfKind = Literal["okapi", "lucene", "atire"]

# Candidate sets of at most _DIRECT_MAX per query that are also below pool / _DIRECT_RATIO are
# scored from the postings directly (binary search: ~log(df) per term and candidate) instead of
# through the batch's full-pool scores; larger ones (the engine's pool chunks) use the latter,
# since walking a whole pool in chunks by binary search would cost log(df) times a full pass.
_DIRECT_MAX = 4096
_DIRECT_RATIO = 16


@dataclass
class BM25Options:
    """BM25 options; the defaults make scores equal to rank-bm25's ``BM25Okapi()``."""

    k1: NonNegative = 1.5  # term-frequency saturation
    b: Fraction = 0.75  # document-length normalisation (0 = none, 1 = full)
    epsilon: Annotated[float, Range()] = 0.25  # idf="okapi": terms in > half the docs get epsilon * mean idf
    idf: IdfKind = "okapi"
    lowercase: bool = True
    stopwords: bool = True  # Lucene's 33 English stopwords (see rbench_rankers.text)
    index_chunk: AtLeast1 = 8192  # texts fetched per step while indexing (lazy text columns)

    def validate(self) -> None:
        if self.idf not in ("okapi", "lucene", "atire"):
            raise RBenchError(f"bm25: idf must be okapi, lucene or atire, got {self.idf!r}")


def idf_weights(df: np.ndarray, n_docs: int, kind: IdfKind, epsilon: float = 0.25) -> np.ndarray:
    """Per-term idf (float64) for document frequencies ``df`` (all >= 1) in ``n_docs`` documents."""
    df = np.asarray(df, dtype=np.float64)
    if kind == "okapi":
        raw = np.log(n_docs - df + 0.5) - np.log(df + 0.5)
        floor = epsilon * float(raw.mean()) if len(raw) else 0.0
        return np.where(raw < 0, floor, raw)
    if kind == "lucene":
        return np.log1p((n_docs - df + 0.5) / (df + 0.5))
    if kind == "atire":
        return np.log(n_docs / df)
    raise ValueError(f"unknown idf kind {kind!r}")


class _TokenLists(Sequence):
    """Documents' token ids as Python lists, produced on demand from one flat int32 array.

    bm25s reads the corpus three times; handing it this view instead of a list of lists keeps
    the tokenized pool at 4 bytes per token."""

    def __init__(self, offsets: np.ndarray, values: np.ndarray) -> None:
        self.offsets, self.values = offsets, values

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: Any) -> list[int]:
        if not isinstance(i, (int, np.integer)):
            raise TypeError("_TokenLists supports integer indexing only")
        return self.values[self.offsets[i] : self.offsets[i + 1]].tolist()

    def __iter__(self) -> Iterator[list[int]]:
        values = self.values
        for a, b in zip(self.offsets[:-1].tolist(), self.offsets[1:].tolist()):
            yield values[a:b].tolist()


@dataclass
class _Index:
    model: Any  # bm25s.BM25 holding the rescaled postings
    data: np.ndarray  # float32 weight per posting, term-major
    indices: np.ndarray  # int32 document of each posting, increasing within a term
    indptr: np.ndarray  # int64, postings of term t are indptr[t]:indptr[t+1]
    vocab: dict[str, int]
    n_docs: int


@dataclass
class _Batch:
    """Per-``Queries`` state reused across the engine's chunk calls for one query batch."""

    queries: Queries  # held so that its id() cannot be reused by another object meanwhile
    tokens: list[np.ndarray]  # query term ids, repeats kept, out-of-vocabulary terms dropped
    full: np.ndarray | None = None  # (n_queries, N) float32, read-only, computed on demand


class BM25Ranker(BaseRanker):
    """BM25 (Okapi idf with rank-bm25's floor by default), sparse scoring through bm25s."""

    name = "bm25"
    transfers = True  # no fit: the index is built on the scored pool
    version = "1"
    description = "BM25 (rank-bm25 BM25Okapi scores, bm25s sparse index); zero-shot lexical"
    Config = BM25Options

    def __init__(self, config: Any | None = None, context: Any | None = None) -> None:
        super().__init__(config, context)
        self.tokenizer = Tokenizer(lowercase=self.cfg.lowercase, stopwords=self.cfg.stopwords)
        self._index: _Index | None = None
        self._batch: _Batch | None = None
        self.info: dict[str, Any] = {}

    # ---------------------------------------------------------------------------------- index

    def _tokenize_pool(self, pool: Pool) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
        """Token ids of every document as (offsets, flat int32 values), reading texts in chunks
        by integer index so that lazy (on-disk) text columns are never materialised."""
        texts, n = pool.texts, len(pool)
        vocab: dict[str, int] = {}
        flat = array("i")
        lengths = np.zeros(n, dtype=np.int64)
        for a in range(0, n, self.cfg.index_chunk):
            for i in range(a, min(a + self.cfg.index_chunk, n)):
                ids = [vocab.setdefault(t, len(vocab)) for t in self.tokenizer(texts[i])]
                lengths[i] = len(ids)
                flat.extend(ids)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        values = np.frombuffer(flat, dtype=np.int32) if len(flat) else np.zeros(0, dtype=np.int32)
        return offsets, values, vocab

    def index(self, pool: Pool) -> None:
        import bm25s  # deferred: listing rankers stays instant

        offsets, values, vocab = self._tokenize_pool(pool)
        n_docs, n_vocab = len(pool), len(vocab)
        model = bm25s.BM25(k1=self.cfg.k1, b=self.cfg.b, method="atire", idf_method="lucene",
                           dtype="float32", int_dtype="int32", backend="numpy")
        if n_vocab:
            built = model.build_index_from_ids(list(range(n_vocab)), _TokenLists(offsets, values),
                                               show_progress=False)
            data, indices, indptr = built["data"], built["indices"], built["indptr"].astype(np.int64)
        else:  # every document empty: nothing to score
            data = np.zeros(0, np.float32)
            indices, indptr = np.zeros(0, np.int32), np.zeros(1, np.int64)
        df = np.diff(indptr)
        indices = _sort_postings(data, indices, indptr)
        idf = idf_weights(df, n_docs, self.cfg.idf, self.cfg.epsilon)
        # the Lucene idf bm25s multiplied in, rounded to float32 as bm25s stored it
        applied = np.log1p((n_docs - df + 0.5) / (df + 0.5)).astype(np.float32).astype(np.float64)
        _rescale_postings(data, indptr, idf / applied)
        model.scores = {"data": data, "indices": indices, "indptr": indptr, "num_docs": n_docs}
        model.vocab_dict = vocab
        model.nonoccurrence_array = None
        self._index = _Index(model, data, indices, indptr, vocab, n_docs)
        self._batch = None
        raw_okapi = np.log(n_docs - df + 0.5) - np.log(df + 0.5)
        self.info = {
            "n_docs": n_docs, "vocab_size": n_vocab, "postings": int(len(data)),
            "avgdl": float(len(values) / n_docs) if n_docs else 0.0,
            "empty_docs": int(np.count_nonzero(np.diff(offsets) == 0)),
            "terms_in_over_half_of_docs": int(np.count_nonzero(raw_okapi < 0)),
            "idf": self.cfg.idf, "tokenizer": self.tokenizer.describe(),
            "bm25s_version": getattr(bm25s, "__version__", "?"),
        }

    # ---------------------------------------------------------------------------------- score

    def _query_tokens(self, queries: Queries) -> list[np.ndarray]:
        vocab = self._require_index().vocab
        return [np.array([vocab[t] for t in self.tokenizer(text) if t in vocab], dtype=np.int32)
                for text in queries.texts]

    def _batch_state(self, queries: Queries) -> _Batch:
        if self._batch is None or self._batch.queries is not queries:
            self._batch = _Batch(queries, self._query_tokens(queries))
        return self._batch

    def _full_scores(self, batch: _Batch) -> np.ndarray:
        """Scores of every pool document for each query of ``batch`` (computed once per batch)."""
        if batch.full is None:
            idx = self._require_index()
            full = np.zeros((len(batch.tokens), idx.n_docs), dtype=np.float32)
            for row, toks in zip(full, batch.tokens):
                if len(toks):
                    row[:] = idx.model.get_scores_from_ids(toks)
            full.flags.writeable = False
            batch.full = full
        return batch.full

    def _direct_scores(self, tokens: list[np.ndarray], cand: np.ndarray) -> np.ndarray:
        """Scores of each query's own candidates, looked up in the postings by binary search.

        Adds, per candidate, the same float32 weights in the same term order as bm25s' full
        scoring does, so results are bit-identical to ``_full_scores``."""
        idx = self._require_index()
        out = np.zeros(cand.shape, dtype=np.float32)
        for row, toks, docs in zip(out, tokens, cand):
            for t in toks.tolist():
                a, b = int(idx.indptr[t]), int(idx.indptr[t + 1])
                post = idx.indices[a:b]
                pos = np.minimum(np.searchsorted(post, docs), b - a - 1)
                hit = post[pos] == docs
                row[hit] += idx.data[a:b][pos[hit]]
        return out

    def score(self, queries: Queries, candidates: np.ndarray) -> np.ndarray:
        idx = self._require_index()
        cand = _check_candidates(candidates, len(queries), idx.n_docs)
        batch = self._batch_state(queries)
        m = cand.shape[-1]
        if batch.full is None and m <= _DIRECT_MAX and m * _DIRECT_RATIO < idx.n_docs:
            rows = cand if cand.ndim == 2 else np.broadcast_to(cand, (len(queries), m))
            return self._direct_scores(batch.tokens, rows)
        full = self._full_scores(batch)
        if cand.ndim == 2:
            return np.take_along_axis(full, cand, axis=1)
        if m and int(cand[-1]) - int(cand[0]) + 1 == m and np.all(np.diff(cand) == 1):
            return full[:, int(cand[0]) : int(cand[0]) + m]  # read-only view, no copy
        return full[:, cand]

    def _require_index(self) -> _Index:
        if self._index is None:
            raise RBenchError("bm25: score() called before index(pool)")
        return self._index


# -------------------------------------------------------------------------------------- helpers


def _check_candidates(candidates: Any, n_queries: int, n_docs: int) -> np.ndarray:
    cand = np.asarray(candidates)
    if cand.size == 0:
        cand = cand.astype(np.int64)
    if cand.ndim not in (1, 2):
        raise ValueError(f"bm25: candidates must be 1-D or 2-D, got shape {cand.shape}")
    if not np.issubdtype(cand.dtype, np.integer):
        raise ValueError(f"bm25: candidates must be integer pool indices, got dtype {cand.dtype}")
    if cand.ndim == 2 and cand.shape[0] != n_queries:
        raise ValueError(f"bm25: candidates has {cand.shape[0]} rows for {n_queries} queries")
    if cand.size and (int(cand.min()) < 0 or int(cand.max()) >= n_docs):
        raise ValueError(f"bm25: candidate indices must lie in [0, {n_docs}), "
                         f"got [{int(cand.min())}, {int(cand.max())}]")
    return cand


def _sort_postings(data: np.ndarray, indices: np.ndarray, indptr: np.ndarray) -> np.ndarray:
    """Make documents increase within each term's postings (binary search relies on it).

    bm25s' CSC builders already produce this order; the check is one vectorised pass."""
    starts = np.zeros(len(indices), dtype=bool)
    starts[indptr[:-1][np.diff(indptr) > 0]] = True
    ok = np.diff(indices.astype(np.int64)) > 0
    if len(indices) < 2 or np.all(ok | starts[1:]):
        return indices
    term = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    order = np.lexsort((indices, term))
    data[:] = data[order]
    return indices[order]


def _rescale_postings(data: np.ndarray, indptr: np.ndarray, factor: np.ndarray,
                      block: int = 1 << 22) -> None:
    """``data[postings of t] *= factor[t]`` in float64 then back to float32, in blocks of about
    ``block`` postings so that the temporary arrays stay small for large pools."""
    n_terms, t = len(indptr) - 1, 0
    while t < n_terms:
        end = int(np.searchsorted(indptr, indptr[t] + block, side="right")) - 1
        end = min(max(end, t + 1), n_terms)
        a, b = int(indptr[t]), int(indptr[end])
        per_posting = np.repeat(factor[t:end], np.diff(indptr[t : end + 1]))
        data[a:b] = data[a:b] * per_posting
        t = end
