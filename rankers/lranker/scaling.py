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
- Floor (``tts_min_part_factor``, ``min_keep`` here): a kept subset never has fewer than
  ``min_keep = ceil(factor * n_clusters)`` items (default 2K = 40), so K-means never sees a part
  of one item tiled K times and the projector stays in the regime it was trained in. A round
  uses min(k, |S_t| // min_keep) parts (at least one), each keeps max(min_keep, its top fraction)
  items; when fewer than ``min_keep`` survivors exist in total they are all kept as one subset.
  The pool thus stops shrinking at about k * min_keep items. ``min_keep=0`` is the bare rule:
  when fewer than k candidates survive, only the non-empty parts count and a part of one item
  keeps that item.
- The average divides by (number of parts used + 1).
- A kept subset that is the query's whole candidate set (width 1 with ``keep = 1/k``: every
  round keeps everything; or a set smaller than the floor) gives E^(0) itself: E^(0) is the
  embedding conditioned on the whole candidate set (Step 1), so it is not clustered and encoded
  again. Width 1 thus equals direct ranking, which is what the paper's update rule gives when
  the one part is the full set; before, it spent five clusterings of the full set per query
  (MiniBatchKMeans, ~50 ms each on Rec-Movie) to add the noise of new K-means seeds.
- Partitions are random, seeded by (run seed, query id, width, round) (a Fisher-Yates shuffle
  from splitmix64, ``elimination.partition_order``), so a query's result does not depend on its
  batch; scores are float64 sums; ties in the elimination go to the lower pool index.
- The query's candidate set is the pool minus the user's history (the items its ranking
  excludes there; queries scored carry no exclusion list, so the history stands for it on valid
  and test alike); E^(0) itself is conditioned on the whole
  pool's aggregation, computed once per pool (one clustering of a million-item pool, not one per
  query).
- Selection (``select_width_depth``): every (k, d) of the grid on the validation split only, by
  ``select_metric`` (MRR) per query; depths share their prefix, so each width runs once to the
  largest depth. Width 0 or depth 0 is direct ranking. A mean difference of a few hundredths of
  a point on a few hundred queries is noise, so the rule is "cheapest unless significantly
  better": settings are visited in order of cost (1 + k*d query encodings per query: E^(0) and
  k parts per round; direct costs 1), starting from the cheapest; a costlier setting replaces
  the current choice only if its mean is higher and a two-sided paired randomization test on the
  per-query differences gives p < ``alpha`` (``select_alpha``, 0.05). The selection reports
  every setting's mean and its difference to direct (SE of the paired differences, p), and for
  the winner its margin over direct and over the setting it displaced.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from .aggregation import derive_seed, seed_from_stem, seed_stem

EncodeParts = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (query rows, slots (P,K,D)) -> (P, dim)
Aggregate = Callable[[np.ndarray, int], np.ndarray]  # (vectors (n,D), seed) -> (K, D)
# an ``Aggregate`` may also have ``many(source, subsets, seeds) -> (S, K, D)`` (``Aggregator.many``):
# then each round's kept subsets of all queries are clustered in one call, with the same slots


ROUND_ITEMS = 1 << 22  # survivors eliminated per kernel call (int64: 32 MB)


@dataclass
class TTSOutput:
    means: np.ndarray  # (depth+1, n, dim): mean of E^(0..t), t = 0..depth
    embeddings: np.ndarray  # (depth+1, n, dim): E^(t)
    trace: list[dict] = field(default_factory=list)  # per round: survivors and kept-subset sizes


def eliminate(survivors: np.ndarray, scores: np.ndarray, width: int, keep: float, seed: int,
              min_keep: int = 0) -> list[np.ndarray]:
    """Random split of ``survivors`` into up to ``width`` parts (``elimination.partition_order``);
    each part's top-ranked items (kept subsets), never fewer than ``min_keep`` per subset unless
    fewer survivors exist. The reference of ``elimination.eliminate_many``, which runs it for every
    query of a round at once."""
    from .elimination import partition_order

    frac = keep if keep > 0 else 1.0 / width
    n = len(survivors)
    parts = width if min_keep <= 0 else max(1, min(width, n // min_keep))
    perm = partition_order(seed, n)
    kept = []
    for part in np.array_split(perm, parts):
        if len(part) == 0:
            continue
        items, s = survivors[part], scores[part]
        n_keep = min(len(part), max(1, min_keep, math.ceil(len(part) * frac - 1e-9)))
        order = np.lexsort((items, -s))[:n_keep]
        kept.append(items[order])
    return kept


def min_part_size(factor: float, n_clusters: int) -> int:
    """The floor of a kept subset: ceil(factor * K) items (0: none)."""
    return int(math.ceil(factor * n_clusters - 1e-9)) if factor > 0 else 0


def graph_tts(E0: np.ndarray, candidate_sets: Sequence[np.ndarray], vectors: np.ndarray, width: int,
              depth: int, encode_parts: EncodeParts, aggregate: Aggregate, seeds: Sequence[int],
              keep: float = 0.0, min_keep: int = 0, agg_vectors: np.ndarray | None = None) -> TTSOutput:
    """Run ``depth`` elimination-and-update rounds of width ``width`` for every query.
    ``vectors`` score the eliminations; ``agg_vectors`` (default: the same) are what the kept
    subsets' K-means reads."""
    from .elimination import eliminate_many

    agg_vectors = vectors if agg_vectors is None else agg_vectors
    n, dim = E0.shape
    embs = np.zeros((depth + 1, n, dim), dtype=np.float32)
    embs[0] = E0
    # candidate sets are built on first use and eliminated in batches of at most ``ROUND_ITEMS``
    # items: a million-item candidate set never exists for more than a few queries at a time
    survivors: list[np.ndarray] = [np.zeros(0, dtype=np.int64)] * n
    full_size = np.zeros(n, dtype=np.int64)
    trace: list[dict] = []
    if width == 1 and (keep if keep > 0 else 1.0) >= 1.0:  # one part keeping everything, every round:
        sizes = [len(candidate_sets[i]) for i in range(n)]  # each E_m is E^(0) (the whole set), so is E^(t)
        embs[1:] = E0
        trace = [{"round": t + 1, "survivors": sizes, "kept_sizes": [[x] for x in sizes]} for t in range(depth)]
        return TTSOutput(means=embs.copy(), embeddings=embs, trace=trace)
    for t in range(depth):
        cur = embs[t]
        rows, subsets, part_seeds, kept_sizes = [], [], [], []
        whole: list[int] = []  # queries with a kept subset that is their whole candidate set
        for pending, arrays in _batches(n, t == 0, candidate_sets, survivors, full_size):
            offsets = np.r_[0, np.cumsum([len(x) for x in arrays])]
            kept, sizes = eliminate_many(vectors, cur[pending], np.concatenate(arrays), offsets,
                                         [derive_seed(seeds[i], "tts", width, t) for i in pending], width, keep,
                                         min_keep)
            for j, i in enumerate(pending):
                pos, used = int(offsets[j]), [int(x) for x in sizes[j] if x > 0]
                stem = seed_stem(seeds[i], "agg", width, t)
                for m, size in enumerate(used):
                    if size == full_size[i]:  # the whole candidate set: the view E^(0) already is
                        whole.append(i)
                    else:
                        rows.append(i)
                        subsets.append(kept[pos : pos + size])
                        part_seeds.append(seed_from_stem(stem, m))  # derive_seed(seeds[i], "agg", width, t, m)
                    pos += size
                kept_sizes.append(used)
                survivors[i] = kept[int(offsets[j]) : pos].copy()
        if not rows and not whole:  # no query
            embs[t + 1] = cur
            continue
        rows_arr = np.asarray(rows, dtype=np.int64)
        acc = cur.astype(np.float64).copy()
        if rows:
            many = getattr(aggregate, "many", None)
            if many is not None:  # every kept subset of the round in one batched clustering call
                slots = np.asarray(many(agg_vectors, subsets, part_seeds))
            else:
                slots = np.stack([aggregate(np.asarray(agg_vectors[sub]), sd) for sub, sd in zip(subsets, part_seeds)])
            parts = np.asarray(encode_parts(rows_arr, slots), dtype=np.float32)
            _add_rows(acc, rows_arr, parts)
        whole_arr = np.asarray(whole, dtype=np.int64)
        _add_rows(acc, whole_arr, E0[whole_arr])
        counts = 1 + np.bincount(rows_arr, minlength=n) + np.bincount(whole_arr, minlength=n)
        embs[t + 1] = (acc / counts[:, None]).astype(np.float32)
        trace.append({"round": t + 1, "survivors": [int(len(s)) for s in survivors],
                      "kept_sizes": kept_sizes})
    means = np.cumsum(embs.astype(np.float64), axis=0) / np.arange(1, depth + 2)[:, None, None]
    return TTSOutput(means=means.astype(np.float32), embeddings=embs, trace=trace)


def _add_rows(acc: np.ndarray, rows: np.ndarray, values: np.ndarray) -> None:
    """``np.add.at(acc, rows, values)`` for ``rows`` in non-decreasing order (a round lists each
    query's parts together, queries in order): one float64 sum per query."""
    if len(rows) == 0:
        return
    if np.any(rows[1:] < rows[:-1]):  # not grouped: the general (slower) form
        np.add.at(acc, rows, np.asarray(values, dtype=np.float64))
        return
    starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])
    acc[rows[starts]] += np.add.reduceat(np.asarray(values, dtype=np.float64), starts, axis=0)


def _batches(n: int, first_round: bool, candidate_sets: Sequence[np.ndarray], survivors: list[np.ndarray],
             full_size: np.ndarray) -> Iterator[tuple[list[int], list[np.ndarray]]]:
    """The queries of a round in order, in batches of about ``ROUND_ITEMS`` survivors; in the first
    round each candidate set is built here, when its batch is reached (and its size noted)."""
    pending: list[int] = []
    arrays: list[np.ndarray] = []
    total = 0
    for i in range(n):
        if first_round:
            S = np.asarray(candidate_sets[i], dtype=np.int64)
            full_size[i] = len(S)
        else:
            S = survivors[i]
        pending.append(i)
        arrays.append(S)
        total += len(S)
        if total >= ROUND_ITEMS:
            yield pending, arrays
            pending, arrays, total = [], [], 0
    if pending:
        yield pending, arrays


class RowView(Sequence):
    """``seq[rows[i]]`` for i in range(len(rows)), built on access (candidate sets are large)."""

    def __init__(self, seq: Sequence, rows: np.ndarray) -> None:
        self.seq, self.rows = seq, np.asarray(rows, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i):  # type: ignore[override]
        return self.seq[int(self.rows[int(i)])]


def tts_chunk(cfg) -> int:
    """Queries per chunk of test-time scaling (also the prefix cache's capacity, ``prefix.py``)."""
    return max(1, 2 * int(cfg.encode_batch_size))


def chunk_rows(n: int, size: int) -> list[np.ndarray]:
    return [np.arange(a, min(n, a + size)) for a in range(0, n, max(1, size))]


def concat_outputs(outputs: Sequence[TTSOutput]) -> TTSOutput:
    """Join the outputs of consecutive query chunks (results do not depend on the chunking)."""
    if len(outputs) == 1:
        return outputs[0]
    trace = []
    for t, first in enumerate(outputs[0].trace):
        trace.append({"round": first["round"],
                      "survivors": [x for o in outputs for x in o.trace[t]["survivors"]],
                      "kept_sizes": [x for o in outputs for x in o.trace[t]["kept_sizes"]]})
    return TTSOutput(means=np.concatenate([o.means for o in outputs], axis=1),
                     embeddings=np.concatenate([o.embeddings for o in outputs], axis=1), trace=trace)


# ------------------------------------------------------------------------------------------
# choosing (k, d) on the validation split
# ------------------------------------------------------------------------------------------


def cost(width: int, depth: int) -> int:
    """Query encodings per query: E^(0) plus k parts per round (direct: 1)."""
    return 1 + width * depth if width > 0 and depth > 0 else 1


def paired(a: np.ndarray, b: np.ndarray, n_resamples: int = 10000, seed: int = 0) -> dict[str, float]:
    """Mean of the per-query differences a - b, its standard error and the two-sided paired
    randomization p-value."""
    from rbench.plugin import paired_randomization

    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    n = len(d)
    se = float(d.std(ddof=1) / math.sqrt(n)) if n > 1 else 0.0
    return {"margin": float(d.mean()) if n else 0.0, "se": se,
            "p": float(paired_randomization(a, b, n_resamples=n_resamples, seed=seed))}


@dataclass
class Selection:
    width: int
    depth: int
    table: list[dict]  # one row per (width, depth): mean metrics, cost, difference to direct
    metric: str
    n_queries: int
    alpha: float = 0.05
    vs_direct: dict = field(default_factory=dict)  # winner - direct: margin, se, p
    vs_beaten: dict | None = None  # winner - the setting it displaced: width, depth, margin, se, p
    steps: list[dict] = field(default_factory=list)  # the rule's comparisons, in cost order

    def as_dict(self) -> dict:
        return {"width": self.width, "depth": self.depth, "metric": self.metric, "n_queries": self.n_queries,
                "rule": f"cheapest unless a costlier setting is better with paired p < {self.alpha}",
                "alpha": self.alpha, "margin": self.vs_direct.get("margin", 0.0),
                "se": self.vs_direct.get("se", 0.0), "p": self.vs_direct.get("p", 1.0),
                "vs_direct": self.vs_direct, "vs_beaten": self.vs_beaten, "steps": self.steps,
                "table": self.table}


def select_width_depth(E0: np.ndarray, widths: Sequence[int], depths: Sequence[int],
                       run: Callable[[int, int], np.ndarray],
                       evaluate: Callable[[np.ndarray], dict[str, np.ndarray]], metric: str,
                       alpha: float = 0.05, n_resamples: int = 10000, seed: int = 0) -> Selection:
    """Grid search on validation embeddings. ``run(k, d_max)`` -> (d_max+1, n, dim) running means;
    ``evaluate(Q)`` -> per-query metric values (name -> (n_queries,)) of query matrix ``Q``."""
    per: dict[tuple[int, int], dict[str, np.ndarray]] = {}
    direct = {k: np.asarray(v, dtype=np.float64) for k, v in evaluate(E0).items()}
    grid: list[tuple[int, int]] = []
    if 0 in depths or 0 in widths:
        grid.append((0, 0))
        per[(0, 0)] = direct
    d_max = max(depths)
    for k in sorted({w for w in widths if w > 0}):
        if d_max == 0:
            break
        means = run(k, d_max)
        for d in sorted({d for d in depths if d > 0}):
            grid.append((k, d))
            per[(k, d)] = {m: np.asarray(v, dtype=np.float64) for m, v in evaluate(means[d]).items()}
    if not grid:
        grid.append((0, 0))
        per[(0, 0)] = direct
    n = len(direct[metric])
    tested: dict[tuple, dict[str, float]] = {}  # each pair once: a randomization test of 6,040 queries takes 0.2 s

    def test(a: tuple[int, int], b: tuple[int, int]) -> dict[str, float]:
        if (a, b) not in tested:
            tested[(a, b)] = paired(per[a][metric], per[b][metric] if b in per else direct[metric], n_resamples,
                                    seed)
        return tested[(a, b)]

    table = []
    for key in grid:
        row = {"width": key[0], "depth": key[1], "cost": cost(*key),
               **{m: float(np.mean(v)) if len(v) else 0.0 for m, v in per[key].items()}}
        if key != (0, 0):
            vs = test(key, (0, 0))
            row.update({"delta": vs["margin"], "se": vs["se"], "p": vs["p"]})
        table.append(row)
    # cheapest first; a costlier setting must beat the current choice significantly
    order = sorted(grid, key=lambda kd: (cost(*kd), kd[1], kd[0]))
    best, beaten, steps = order[0], None, []
    for cand in order[1:]:
        vs = test(cand, best)
        win = vs["margin"] > 0 and vs["p"] < alpha
        steps.append({"candidate": list(cand), "incumbent": list(best), **vs, "switch": bool(win)})
        if win:
            best, beaten = cand, {"width": best[0], "depth": best[1], **vs}
    vs_direct = test(best, (0, 0)) if best != (0, 0) else {"margin": 0.0, "se": 0.0, "p": 1.0}
    return Selection(int(best[0]), int(best[1]), table, metric, n, alpha, vs_direct, beaten, steps)
