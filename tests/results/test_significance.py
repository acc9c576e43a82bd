from __future__ import annotations

import numpy as np
from scipy import stats

from rbench.results.significance import paired_randomization


def test_identical_systems_not_significant():
    a = np.random.default_rng(0).random(200)
    assert paired_randomization(a, a) == 1.0


def test_clear_difference_is_significant_and_agrees_with_t_test():
    rng = np.random.default_rng(1)
    a = rng.random(300)
    b = a - 0.05 + rng.normal(0, 0.05, 300)
    p = paired_randomization(a, b, n_resamples=2000)
    assert p < 0.01 and stats.ttest_rel(a, b).pvalue < 0.01


def test_noise_only_difference_is_not_significant():
    rng = np.random.default_rng(2)
    a = rng.random(300)
    b = a + rng.normal(0, 0.05, 300)
    p = paired_randomization(a, b, n_resamples=2000)
    assert abs(p - stats.ttest_rel(a, b).pvalue) < 0.1
