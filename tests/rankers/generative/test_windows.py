"""RankGPT's sliding-window arithmetic against a slow reference that simulates the window's
moves, and PRP-Sliding's pair positions against a reference bubble sort."""

from __future__ import annotations

import pytest

from rbench.plugin import RBenchError
from rbench_rankers.generative.prp import bubble_positions
from rbench_rankers.generative.rankgpt import sliding_windows


def reference_windows(n: int, window: int, step: int) -> list[tuple[int, int]]:
    """Move a window of ``window`` slots over positions n-1 .. 0 one step at a time, keeping each
    placement the window takes every ``step`` moves, until position 0 is inside it."""
    out: list[tuple[int, int]] = []
    if n == 0:
        return out
    top = n - 1  # the window's last (back) position
    moves = 0
    while True:
        if moves % step == 0:
            covered = [p for p in range(n) if top - window < p <= top]
            out.append((min(covered), max(covered) + 1))
            if 0 in covered:
                return out
        top -= 1
        moves += 1


CASES = [(n, w, s) for n in range(0, 46) for w in (1, 2, 3, 4, 5, 10, 20) for s in range(1, w + 1)]


@pytest.mark.parametrize("n,window,step", CASES[:: max(1, len(CASES) // 900)])
def test_windows_match_the_reference(n, window, step):
    assert sliding_windows(n, window, step) == reference_windows(n, window, step)


def test_windows_named_cases():
    assert sliding_windows(100, 20, 10) == [(80, 100), (70, 90), (60, 80), (50, 70), (40, 60), (30, 50),
                                            (20, 40), (10, 30), (0, 20)]
    assert sliding_windows(5, 20, 10) == [(0, 5)]  # n < window: one call
    assert sliding_windows(20, 20, 10) == [(0, 20)]  # n == window
    assert sliding_windows(25, 20, 10) == [(5, 25), (0, 15)]
    assert sliding_windows(40, 20, 20) == [(20, 40), (0, 20)]  # step == window: disjoint
    assert sliding_windows(41, 20, 20) == [(21, 41), (1, 21), (0, 1)]
    assert sliding_windows(0, 20, 10) == []
    for n, w, s in CASES:  # every position is read, windows never exceed the list, no gaps
        wins = sliding_windows(n, w, s)
        assert all(0 <= a < b <= n and b - a <= w for a, b in wins)
        assert {p for a, b in wins for p in range(a, b)} == set(range(n))
        assert all(b2 >= a1 for (a1, _), (_, b2) in zip(wins, wins[1:]))  # consecutive windows touch


def test_windows_refuse_bad_steps():
    for w, s in [(20, 0), (20, 21), (0, 1)]:
        with pytest.raises(RBenchError):
            sliding_windows(30, w, s)


def reference_bubble(values: list[float], passes: int) -> list[int]:
    """Bubble sort from the back, ``passes`` times, best (largest value) to the front."""
    order = list(range(len(values)))
    for _ in range(passes):
        i = len(order) - 1
        while i > 0:
            if values[order[i]] > values[order[i - 1]]:
                order[i], order[i - 1] = order[i - 1], order[i]
            i -= 1
    return order


def simulate_positions(values: list[float], passes: int) -> list[int]:
    order = list(range(len(values)))
    for i in bubble_positions(len(values), passes):
        if values[order[i + 1]] > values[order[i]]:
            order[i], order[i + 1] = order[i + 1], order[i]
    return order


def test_bubble_positions_are_a_bubble_sort():
    import random

    rng = random.Random(5)
    for _ in range(400):
        m, k = rng.randint(0, 14), rng.randint(1, 6)
        values = [rng.random() for _ in range(m)]
        assert simulate_positions(values, k) == reference_bubble(values, k)
        want = sorted(range(m), key=lambda j: -values[j])
        assert simulate_positions(values, k)[: min(k, m)] == want[: min(k, m)]
    assert bubble_positions(4, 2) == [2, 1, 0, 2, 1]  # pass 1 stops at position 1: position 0 is final
