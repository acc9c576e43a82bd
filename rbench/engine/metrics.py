"""Ranking measures computed from the positives' ranks (named like ir_measures).

The engine never materialises a full ranking; it hands over each positive's 1-based position in
the final order (ties already resolved pessimistically, see ``TIE_RULE``). From those positions
the measures below are exact:

- ``nDCG@10``: linear gain (the grade), log2 discount, ideal DCG from the query's own grades
  (trec_eval's ``ndcg_cut``, as ir_measures computes it).
- ``RR``: reciprocal rank of the first positive, no cutoff (the paper's MRR); ``RR@k``: 0 when
  that rank is beyond k (ir_measures' ``RR@k``).
- ``R@k``: fraction of the query's positives ranked in the top k.
- any other rank-based measure by name (``per_query(..., ["P(rel=2)@10", "AP@100"])``): parsed
  from ir_measures' syntax by ``rbench.core.measures`` (the one parser; its ``FAMILIES`` list
  each family's definition) and computed here with trec_eval's semantics (``rel=N``: grades below
  N are non-relevant; a query with no relevant document scores 0).
Values are fractions in [0, 1]; tables show percentages like the paper.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from rbench.api import Ragged
from rbench.core.measures import Measure as Measure  # re-exported: measures by name, one parser
from rbench.core.measures import parse_measure as parse_measure
from rbench.core.measures import parse_measures

MEASURES: tuple[str, ...] = ("nDCG@10", "RR", "R@10", "R@100")
# what a RunRecord holds: MEASURES plus RR cut at the run file's default depth (100), the value
# ``ir_measures qrels RUN.run.gz RR@100`` reads from the exported run (rbench.engine.runfile), which
# stops at its depth where ``RR`` has no cutoff. Fixed at 100 (not --topk): a record's measures
# never depend on --topk; like R@100, the run file reproduces it when --topk >= 100.
RECORD_MEASURES: tuple[str, ...] = MEASURES + ("RR@100",)

TIE_RULE = (
    "pessimistic: a positive tied with k other candidates is placed after all of them "
    "(rank = 1 + #higher + #tied others); tied positives are ordered by ascending grade"
)


def _relevant(grades: np.ndarray, rel: int | None) -> np.ndarray:
    """Which positives count as relevant for a measure: grade >= rel (all of them without rel)."""
    return np.ones(len(grades), dtype=bool) if rel is None else grades >= rel


def _rr(n: int, rows: np.ndarray, r: np.ndarray, k: int | None) -> np.ndarray:
    best = np.full(n, np.inf)
    np.minimum.at(best, rows, r)
    return np.where(best <= (np.inf if k is None else float(k)), 1.0 / best, 0.0)


def _hits(n: int, rows: np.ndarray, r: np.ndarray, k: int) -> np.ndarray:
    """Relevant documents ranked at most k, per query."""
    hit = np.zeros(n)
    np.add.at(hit, rows, (r <= k).astype(np.float64))
    return hit


def _ap(n: int, rows: np.ndarray, r: np.ndarray, k: int | None, nrel: np.ndarray) -> np.ndarray:
    """trec_eval's map / map_cut_k: the i-th relevant document (in rank order) at rank r adds i / r
    when r <= k; the sum is divided by the query's number of relevant documents."""
    order = np.lexsort((r, rows))
    rs, rk = rows[order], r[order]
    nth = np.arange(1, len(rs) + 1) - np.searchsorted(rs, rs, side="left")  # 1-based, per query
    inside = rk <= (np.inf if k is None else float(k))
    total = np.zeros(n)
    np.add.at(total, rs[inside], nth[inside] / rk[inside])
    return np.divide(total, nrel, out=np.zeros(n), where=nrel > 0)


def _ndcg(ranks: Ragged, grades: Ragged, rows: np.ndarray, r: np.ndarray, g: np.ndarray,
          k: int | None) -> np.ndarray:
    """trec_eval's ndcg_cut_k (ndcg without k): linear gain, log2 discount, the ideal from the
    query's own grades."""
    n, npos = len(ranks), ranks.lengths()
    dcg = np.zeros(n)
    inside = r <= (np.inf if k is None else k)
    np.add.at(dcg, rows[inside], g[inside] / np.log2(r[inside] + 1.0))
    idcg = np.zeros(n)
    single = npos == 1
    idcg[single] = g[ranks.offsets[:-1][single]]  # one positive: ideal DCG = its grade
    for i in np.flatnonzero(~single):
        top = np.sort(grades[i])[::-1][:k].astype(np.float64)
        idcg[i] = float((top / np.log2(np.arange(2, len(top) + 2))).sum())
    return np.divide(dcg, idcg, out=np.zeros(n), where=idcg > 0)


def per_query(ranks: Ragged, grades: Ragged,
              measures: Iterable[str | Measure] = MEASURES) -> dict[str, np.ndarray]:
    """Per-query values of ``measures`` (names in ir_measures' syntax, or ``Measure`` objects;
    ``rbench.core.measures``) from the positives' ranks and grades (aligned rows), keyed by each
    measure's canonical name. An unknown or non-rank-based name is an ``RBenchError``."""
    if not np.array_equal(ranks.offsets, grades.offsets):
        raise ValueError("ranks and grades must have the same row layout")
    n = len(ranks)
    rows = ranks.row_ids()
    r = ranks.values.astype(np.float64)
    g = grades.values.astype(np.float64)
    out: dict[str, np.ndarray] = {}
    for m in parse_measures(measures):
        if m.name == "nDCG":
            out[str(m)] = _ndcg(ranks, grades, rows, r, g, m.cutoff)
            continue
        keep = _relevant(g, m.rel)
        rows_m, r_m = rows[keep], r[keep]
        nrel = np.bincount(rows_m, minlength=n)
        k = m.cutoff
        if m.name == "RR":
            out[str(m)] = _rr(n, rows_m, r_m, k)
        elif m.name == "AP":
            out[str(m)] = _ap(n, rows_m, r_m, k, nrel)
        elif k is None:  # R, P and Success take a cutoff (parse_measure requires it)
            raise ValueError(f"{m} has no cutoff")
        elif m.name == "R":
            out[str(m)] = np.divide(_hits(n, rows_m, r_m, k), nrel, out=np.zeros(n), where=nrel > 0)
        elif m.name == "P":
            out[str(m)] = _hits(n, rows_m, r_m, k) / float(k)
        elif m.name == "Success":
            out[str(m)] = (_hits(n, rows_m, r_m, k) > 0).astype(np.float64)
        else:  # a family in rbench.core.measures.FAMILIES without its arithmetic here
            raise ValueError(f"no arithmetic for measure {m}")
    return out


def aggregate(values: dict[str, np.ndarray]) -> dict[str, float]:
    """Mean over queries (every test query counts, as trec_eval's -c does)."""
    return {k: float(np.mean(v)) if len(v) else 0.0 for k, v in values.items()}
