"""Paired tests, effect sizes and multiple-comparison corrections on per-query differences.

Why a module of its own: ``rbench compare`` and the leaderboard's ``*`` mark both test runs of
one test set query by query, and must correct for testing many pairs at once (the chance of at
least one false "significant" grows with every test; Holm 1979 bounds it at alpha and is never
weaker than Bonferroni). Pure numpy/scipy, so every number can be checked against scipy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rbench.core.errors import RBenchError, unknown
from rbench.core.settings import DEFAULT_SEED
from rbench.results.significance import paired_randomization

TESTS = {"randomization": "two-sided paired randomization test", "t": "two-sided paired t-test"}
CORRECTIONS = {"holm": "Holm", "bonferroni": "Bonferroni", "none": "no correction"}


def _differences(a: ArrayLike, b: ArrayLike) -> NDArray[np.float64]:
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise RBenchError(f"paired values: expected two 1-D arrays of one length, not shapes {x.shape} and {y.shape}")
    return x - y


def paired_t(a: ArrayLike, b: ArrayLike) -> tuple[float, float]:
    """(t, two-sided p) of the mean of ``a - b`` being 0 (scipy.stats.ttest_rel's numbers).

    Differences that are all equal have no spread: scipy answers NaN there; here all zero is
    p = 1 (nothing differs) and a constant non-zero shift is p = 0 (it differs on every query)."""
    from scipy import stats

    d = _differences(a, b)
    n = len(d)
    if n < 2:
        return math.nan, 1.0
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    if sd == 0.0 or not math.isfinite(sd):
        return (0.0, 1.0) if mean == 0.0 else (math.copysign(math.inf, mean), 0.0)
    t = mean / (sd / math.sqrt(n))
    return t, float(2.0 * stats.t.sf(abs(t), n - 1))


@dataclass(frozen=True)
class Effect:
    """The size of a paired difference ``a - b``: its mean with a paired-t confidence interval,
    and Cohen's d_z (mean over the standard deviation of the differences), the effect size of a
    paired design, comparable across measures of other scales."""

    mean_diff: float
    ci_low: float
    ci_high: float
    d_z: float
    confidence: float = 0.95


def effect(a: ArrayLike, b: ArrayLike, confidence: float = 0.95) -> Effect:
    """The mean difference of ``a - b`` with its paired-t ``confidence`` interval, and d_z."""
    from scipy import stats

    if not 0.0 < confidence < 1.0:
        raise RBenchError(f"confidence: expected a number between 0 and 1, not {confidence!r}")
    d = _differences(a, b)
    n = len(d)
    mean = float(d.mean()) if n else math.nan
    sd = float(d.std(ddof=1)) if n > 1 else math.nan
    if n < 2 or not math.isfinite(sd):
        return Effect(mean, math.nan, math.nan, math.nan, confidence)
    half = float(stats.t.ppf(0.5 + confidence / 2.0, n - 1)) * sd / math.sqrt(n)
    d_z = mean / sd if sd > 0 else (0.0 if mean == 0 else math.copysign(math.inf, mean))
    return Effect(mean, mean - half, mean + half, d_z, confidence)


def p_value(a: ArrayLike, b: ArrayLike, test: str = "randomization", n_resamples: int = 10000,
            seed: int = DEFAULT_SEED) -> float:
    """The two-sided p-value of ``test`` ("randomization": sign flips; "t": paired t-test)."""
    if test == "randomization":
        _differences(a, b)  # the shapes checked
        return paired_randomization(np.asarray(a), np.asarray(b), n_resamples=n_resamples, seed=seed)
    if test == "t":
        return paired_t(a, b)[1]
    raise unknown("test", test, TESTS)


def holm(p: ArrayLike) -> NDArray[np.float64]:
    """Holm's step-down adjusted p-values (in the input's order): the i-th smallest p times
    (m - i + 1), made non-decreasing along that order and capped at 1. Rejecting where the
    adjusted p < alpha keeps the family-wise error at alpha."""
    raw = np.asarray(p, dtype=np.float64)
    m = raw.size
    if m == 0:
        return raw.copy()
    order = np.argsort(raw, kind="stable")
    scaled = np.minimum(1.0, np.maximum.accumulate(raw[order] * (m - np.arange(m))))
    out = np.empty(m, dtype=np.float64)
    out[order] = scaled
    return out


def bonferroni(p: ArrayLike) -> NDArray[np.float64]:
    """Bonferroni's adjusted p-values: each p times the number of tests, capped at 1."""
    raw = np.asarray(p, dtype=np.float64)
    return np.minimum(1.0, raw * raw.size)


def adjust(p: ArrayLike, correction: str = "holm") -> NDArray[np.float64]:
    """``p`` corrected for testing them together ("holm", "bonferroni" or "none")."""
    if correction == "holm":
        return holm(p)
    if correction == "bonferroni":
        return bonferroni(p)
    if correction == "none":
        return np.asarray(p, dtype=np.float64).copy()
    raise unknown("correction", correction, CORRECTIONS)
