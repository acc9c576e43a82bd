"""Ranking measures computed from the positives' ranks (named like ir_measures).

The engine never materialises a full ranking; it hands over each positive's 1-based position in
the final order (ties already resolved pessimistically, see ``TIE_RULE``). From those positions
the measures below are exact:

- ``nDCG@10``: linear gain (the grade), log2 discount, ideal DCG from the query's own grades
  (trec_eval's ``ndcg_cut``, as ir_measures computes it).
- ``RR``: reciprocal rank of the first positive, no cutoff (the paper's MRR); ``RR@k``: 0 when
  that rank is beyond k (ir_measures' ``RR@k``).
- ``R@k``: fraction of the query's positives ranked in the top k.
Values are fractions in [0, 1]; tables show percentages like the paper.
"""

from __future__ import annotations

import numpy as np

from rbench.api import Ragged

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


def _cutoff(name: str) -> int | None:
    return int(name.split("@", 1)[1]) if "@" in name else None


def per_query(ranks: Ragged, grades: Ragged, measures: tuple[str, ...] = MEASURES) -> dict[str, np.ndarray]:
    """Per-query values of ``measures`` from the positives' ranks and grades (aligned rows)."""
    if not np.array_equal(ranks.offsets, grades.offsets):
        raise ValueError("ranks and grades must have the same row layout")
    n = len(ranks)
    rows = ranks.row_ids()
    r = ranks.values.astype(np.float64)
    g = grades.values.astype(np.float64)
    npos = ranks.lengths()
    out: dict[str, np.ndarray] = {}
    for name in measures:
        base, k = name.split("@")[0], _cutoff(name)
        if base == "RR":
            best = np.full(n, np.inf)
            np.minimum.at(best, rows, r)
            out[name] = np.where(best <= (np.inf if k is None else float(k)), 1.0 / best, 0.0)
        elif base == "R":
            hit = np.zeros(n)
            np.add.at(hit, rows, (r <= k).astype(np.float64))
            out[name] = np.divide(hit, npos, out=np.zeros(n), where=npos > 0)
        elif base == "nDCG":
            dcg = np.zeros(n)
            inside = r <= k
            np.add.at(dcg, rows[inside], g[inside] / np.log2(r[inside] + 1.0))
            idcg = np.zeros(n)
            single = npos == 1
            idcg[single] = g[ranks.offsets[:-1][single]]  # one positive: ideal DCG = its grade
            for i in np.flatnonzero(~single):
                top = np.sort(grades[i])[::-1][:k].astype(np.float64)
                idcg[i] = float((top / np.log2(np.arange(2, len(top) + 2))).sum())
            out[name] = np.divide(dcg, idcg, out=np.zeros(n), where=idcg > 0)
        else:
            raise ValueError(f"unknown measure {name!r}; known: RR, RR@k, R@k, nDCG@k")
    return out


def aggregate(values: dict[str, np.ndarray]) -> dict[str, float]:
    """Mean over queries (every test query counts, as trec_eval's -c does)."""
    return {k: float(np.mean(v)) if len(v) else 0.0 for k, v in values.items()}
