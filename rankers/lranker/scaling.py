"""Graph-based test-time scaling (paper Section 3.3) and the choice of width/depth on valid.

Round t = 0..d-1, per query: the surviving candidates S_t (S_0 = its whole candidate set) are
split at random into k disjoint parts of ~|S_t|/k items; each part keeps its top-ranked items
under the current embedding E^(t); each kept subset m is re-aggregated (the same K-means encoder)
and gives a query embedding E_m conditioned on it; then

    E^(t+1) = (E^(t) + sum_m E_m) / (k + 1),   S_{t+1} = union of the kept subsets.

The final score is the mean over t = 0..d of <E^(t), h_c>, i.e. the inner product with
mean(E^(0..d)), which is what ``encode_queries`` returns, so the engine's dense path scores it.

Choices the paper leaves open, made here:

- Survivors per part: the top ceil(|part| * keep) with keep = 1/k by default (``tts_keep=0``),
  at least one. The pool then shrinks N -> N/k -> N/k^2 ..., towards the single-candidate end of
  the "N -> 1 scales" the paper's qualitative figure shows; ``tts_keep`` sets another fraction.
- When fewer than k candidates survive, only the non-empty parts count and the average divides
  by (number of parts + 1); a part of one item keeps that item.
- Partitions are random, seeded by (run seed, query id, width, round), so a query's result does
  not depend on its batch; ties in the elimination go to the lower pool index.
- The query's candidate set is the pool minus the items its ranking excludes (they can never be
  ranked, so they should not occupy survivor slots); E^(0) itself is conditioned on the whole
  pool's aggregation, computed once per pool (one clustering of a million-item pool, not one per
  query).
- Selection (``select_width_depth``): every (k, d) of the grid on the validation split only, by
  ``select_metric`` (MRR); depths share their prefix, so each width runs once to the largest
  depth. Width 0 or depth 0 is direct ranking. Ties go to the cheaper setting (smaller k*d).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .aggregation import derive_seed

EncodeParts = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (query rows, slots (P,K,D)) -> (P, dim)
Aggregate = Callable[[np.ndarray, int], np.ndarray]  # (vectors (n,D), seed) -> (K, D)


@dataclass
class TTSOutput:
    means: np.ndarray  # (depth+1, n, dim): mean of E^(0..t), t = 0..depth
    embeddings: np.ndarray  # (depth+1, n, dim): E^(t)
    trace: list[dict] = field(default_factory=list)  # per round: survivors and kept-subset sizes


def eliminate(survivors: np.ndarray, scores: np.ndarray, width: int, keep: float,
              rng: np.random.Generator) -> list[np.ndarray]:
    """Random k-way split of ``survivors``; each part's top-ranked items (kept subsets)."""
    frac = keep if keep > 0 else 1.0 / width
    perm = rng.permutation(len(survivors))
    kept = []
    for part in np.array_split(perm, width):
        if len(part) == 0:
            continue
        items, s = survivors[part], scores[part]
        n_keep = max(1, math.ceil(len(part) * frac - 1e-9))
        order = np.lexsort((items, -s))[:n_keep]
        kept.append(items[order])
    return kept


def graph_tts(E0: np.ndarray, candidate_sets: Sequence[np.ndarray], vectors: np.ndarray, width: int,
              depth: int, encode_parts: EncodeParts, aggregate: Aggregate, seeds: Sequence[int],
              keep: float = 0.0) -> TTSOutput:
    """Run ``depth`` elimination-and-update rounds of width ``width`` for every query."""
    n, dim = E0.shape
    embs = np.zeros((depth + 1, n, dim), dtype=np.float32)
    embs[0] = E0
    # built on first use: a million-item candidate set exists for one query at a time
    survivors: list[np.ndarray | None] = [None] * n
    trace: list[dict] = []
    for t in range(depth):
        cur = embs[t]
        rows, slots, kept_sizes = [], [], []
        for i in range(n):
            S = survivors[i]
            if S is None:
                S = np.asarray(candidate_sets[i], dtype=np.int64)
            rng = np.random.default_rng(derive_seed(seeds[i], "tts", width, t))
            scores = _scores(vectors, S, cur[i])
            kept = eliminate(S, scores, width, keep, rng)
            for m, sub in enumerate(kept):
                rows.append(i)
                slots.append(aggregate(np.asarray(vectors[sub]), derive_seed(seeds[i], "agg", width, t, m)))
            kept_sizes.append([len(s) for s in kept])
            survivors[i] = np.concatenate(kept)
        rows_arr = np.asarray(rows, dtype=np.int64)
        parts = np.asarray(encode_parts(rows_arr, np.stack(slots)), dtype=np.float32)
        total = cur.astype(np.float64).copy()
        np.add.at(total, rows_arr, parts)
        counts = 1 + np.bincount(rows_arr, minlength=n)
        embs[t + 1] = (total / counts[:, None]).astype(np.float32)
        trace.append({"round": t + 1, "survivors": [int(len(s)) for s in survivors if s is not None],
                      "kept_sizes": kept_sizes})
    means = np.cumsum(embs.astype(np.float64), axis=0) / np.arange(1, depth + 2)[:, None, None]
    return TTSOutput(means=means.astype(np.float32), embeddings=embs, trace=trace)


def _scores(vectors: np.ndarray, items: np.ndarray, e: np.ndarray, chunk: int = 262_144) -> np.ndarray:
    """<e, h_c> for ``items``, in chunks (no (N, d) copy of a memory-mapped pool)."""
    out = np.empty(len(items), dtype=np.float32)
    for a in range(0, len(items), chunk):
        out[a : a + chunk] = np.asarray(vectors[items[a : a + chunk]], dtype=np.float32) @ e
    return out


@dataclass
class Selection:
    width: int
    depth: int
    table: list[dict]  # one row per (width, depth): metrics on the validation queries
    metric: str
    n_queries: int


def select_width_depth(E0: np.ndarray, widths: Sequence[int], depths: Sequence[int],
                       run: Callable[[int, int], np.ndarray], evaluate: Callable[[np.ndarray], dict[str, float]],
                       metric: str) -> Selection:
    """Grid search on validation embeddings. ``run(k, d_max)`` -> (d_max+1, n, dim) running means;
    ``evaluate(Q)`` -> metrics of query matrix ``Q`` on the validation queries."""
    table: list[dict] = []
    direct = evaluate(E0)
    if 0 in depths or 0 in widths:
        table.append({"width": 0, "depth": 0, **direct})
    d_max = max(depths)
    for k in sorted({w for w in widths if w > 0}):
        if d_max == 0:
            break
        means = run(k, d_max)
        for d in sorted({d for d in depths if d > 0}):
            table.append({"width": k, "depth": d, **evaluate(means[d])})
    if not table:
        table.append({"width": 0, "depth": 0, **direct})
    best = max(table, key=lambda r: (round(r[metric], 12), -r["width"] * r["depth"]))
    return Selection(int(best["width"]), int(best["depth"]), table, metric, len(E0))
