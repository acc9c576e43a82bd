"""The answer parsers of the generative rankers: fuzzed with seeded random answers (every output
is a permutation / a valid label, and the repairs add up), plus rank_llm's known cases."""

from __future__ import annotations

import random

import pytest

from rbench_rankers.generative.parse import parse_choice, parse_pair, parse_permutation, parse_yes_no


def test_rank_llm_known_case():
    order, rep = parse_permutation("[3] > [1] > [3] > [9]", 4)
    assert [i + 1 for i in order] == [3, 1, 2, 4]  # missing ids appended in input order
    assert rep.as_dict() == {"duplicates": 1, "out_of_range": 1, "missing": 2}
    assert rep.total == 4


@pytest.mark.parametrize("text,n,want,counts", [
    ("[2] > [1] > [3]", 3, [2, 1, 3], (0, 0, 0)),
    ("2 > 1", 3, [2, 1, 3], (0, 0, 1)),  # no brackets: every integer, as rank_llm reads it
    ("[2] > [1] passage 3 from 2019", 3, [2, 1, 3], (0, 0, 1)),  # brackets present: only those
    ("", 4, [1, 2, 3, 4], (0, 0, 4)),
    ("I cannot rank these.", 2, [1, 2], (0, 0, 2)),
    ("[0] > [5] > [1] > [1] > [2]", 2, [1, 2], (1, 2, 0)),
    ("[ 3 ]>[2]>[1]", 3, [3, 2, 1], (0, 0, 0)),
])
def test_permutation_cases(text, n, want, counts):
    order, rep = parse_permutation(text, n)
    assert [i + 1 for i in order] == want
    assert (rep.duplicates, rep.out_of_range, rep.missing) == counts


def _random_answer(rng: random.Random, n: int) -> str:
    pieces = []
    for _ in range(rng.randint(0, 2 * n + 3)):
        kind = rng.random()
        if kind < 0.6:
            pieces.append(f"[{rng.randint(-2, n + 3)}]")
        elif kind < 0.75:
            pieces.append(str(rng.randint(0, 10 ** rng.randint(1, 25))))
        else:
            pieces.append(rng.choice([">", " > ", "and", "Passage", "\n", "[", "]", "[]", "--", "ü", "\x00"]))
    return rng.choice([" ", "", " > "]).join(pieces)


def test_permutation_fuzz():
    rng = random.Random(1234)
    for _ in range(3000):
        n = rng.randint(0, 25)
        text = _random_answer(rng, n)
        order, rep = parse_permutation(text, n)
        assert sorted(order) == list(range(n)), (text, n, order)
        named = n - rep.missing  # ids the answer placed, in the answer's first-seen order
        assert 0 <= named <= n
        assert order[named:] == sorted(order[named:]), (text, order)  # missing: input order
        from re import findall

        ints = [int(x) for x in (findall(r"\[\s*(\d+)\s*\]", text) or findall(r"\d+", text))]
        assert rep.out_of_range == sum(1 for x in ints if not 1 <= x <= n)
        assert rep.duplicates == sum(1 for x in ints if 1 <= x <= n) - named
        if rep.total == 0:
            assert [i + 1 for i in order] == ints


@pytest.mark.parametrize("text,want", [
    ("Passage A", "A"), ("Passage B", "B"), ("passage b.", "B"), ("**Passage A**", "A"),
    ("B", "B"), ("a", "A"), (" (A) ", "A"), ("Item B is more relevant.", "B"),
    ("Passage B is more relevant than Passage A", "B"), ("Product: A", "A"), ("Model B", "B"),
    ("The answer is B.", "B"), ("I think a passage is relevant", None), ("", None), ("Passage C", None),
    ("Neither", None),
])
def test_pair_cases(text, want):
    assert parse_pair(text) == want


def test_pair_fuzz_only_labels_or_none():
    rng = random.Random(7)
    alphabet = "ABab PassgeItmMdlC.:*()[]\"'\n0123"
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        assert parse_pair(text) in ("A", "B", None)


def test_choice():
    assert parse_choice("[3]", 5, [0, 2, 4]) == (2, "")
    assert parse_choice("Eliminate [5] first, then [3]", 5, [4]) == (4, "")
    assert parse_choice("candidate 2", 5, [1]) == (1, "")
    assert parse_choice("[2]", 5, [0, 2]) == (None, "eliminated")
    assert parse_choice("[9]", 5, [0]) == (None, "out_of_range")
    assert parse_choice("[0]", 5, [0]) == (None, "out_of_range")
    assert parse_choice("none of them", 5, [0]) == (None, "unreadable")
    rng = random.Random(3)
    for _ in range(2000):
        n = rng.randint(1, 12)
        remaining = sorted(rng.sample(range(n), rng.randint(1, n)))
        pick, why = parse_choice(_random_answer(rng, n), n, remaining)
        assert (pick in remaining and why == "") or (pick is None and why in ("unreadable", "out_of_range",
                                                                              "eliminated"))


@pytest.mark.parametrize("text,want", [("Yes", 1.0), ("yes.", 1.0), (" **No**", 0.0), ("no, it does not", 0.0),
                                       ("True", 1.0), ("Maybe", None), ("", None), ("Nope", None)])
def test_yes_no(text, want):
    assert parse_yes_no(text) == want
