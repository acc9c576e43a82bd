"""Paired significance tests on per-query metrics (the IR standard: Smucker et al., CIKM 2007).

A two-sided paired randomization (sign-flip) test on the mean difference: under the null
hypothesis the two systems are exchangeable per query, so each per-query difference's sign is
flipped at random. Seeded, so a table is reproducible.
"""

from __future__ import annotations

import numpy as np

from rbench.core.settings import DEFAULT_SEED


def paired_randomization(a: np.ndarray, b: np.ndarray, n_resamples: int = 10000, seed: int = DEFAULT_SEED,
                         block: int = 500) -> float:
    """p-value of the mean of ``a - b`` being 0 (aligned per-query values)."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    if len(d) == 0 or not np.any(d):
        return 1.0
    observed = abs(d.mean())
    rng = np.random.default_rng(seed)
    extreme = 0
    done = 0
    while done < n_resamples:
        m = min(block, n_resamples - done)
        signs = rng.integers(0, 2, size=(m, len(d)), dtype=np.int8) * 2 - 1
        means = np.abs(signs @ d) / len(d)
        extreme += int((means >= observed - 1e-15).sum())
        done += m
    return (extreme + 1) / (n_resamples + 1)
