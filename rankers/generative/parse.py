"""Robust readers of the generative rankers' answers. Every reader returns something usable
(a permutation, a label, a choice) whatever the model wrote, and says what it had to repair, so
that a ranker always produces a valid ranking and the run records how often the model's answer
was not usable as given (``GenerationStats.parse_failures`` and ``repairs``).

- ``parse_permutation`` (RankGPT, IRanker direct): as rank_llm's ``_clean_response`` /
  ``_remove_duplicate`` / ``_receive_permutation``: the integers of the answer in order, read as
  1-based identifiers; identifiers outside 1..n are dropped (``out_of_range``, each occurrence),
  repeats of an identifier already placed are dropped (``duplicates``), and the identifiers the
  answer never named are appended in their input order (``missing``). One difference: when the
  answer contains bracketed identifiers (``[3]``), only those are read, so numbers inside an
  echoed passage text ("... in 2019 ...") are not taken for identifiers; an answer without
  brackets is read for every integer, as rank_llm does.
- ``parse_pair`` (PRP): "Passage A" / "Passage B" (any domain noun, any case, punctuation or
  markdown around it), or a bare "A" / "B". The first label the answer names wins (so "Passage B
  is more relevant than Passage A" reads B). Nothing readable: ``None`` (the ranker counts a tie,
  0.5 each, and a parse failure).
- ``parse_choice`` (IRanker step): the first identifier the answer names (bracketed first, else
  the first integer). ``None`` with the reason (``unreadable``, ``out_of_range``, ``eliminated``)
  when it names no candidate still in play; the ranker then eliminates the last remaining
  candidate in the current order (the one a back-to-front reading of the list would drop first:
  a fixed, answer-independent rule) and counts the failure.
- ``parse_yes_no`` (pointwise, generated labels): 1.0 for yes, 0.0 for no, ``None`` otherwise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_BRACKETED = re.compile(r"\[\s*(\d+)\s*\]")
_INTEGER = re.compile(r"\d+")


@dataclass
class Repairs:
    """What ``parse_permutation`` had to fix in one answer."""

    duplicates: int = 0
    out_of_range: int = 0
    missing: int = 0

    @property
    def total(self) -> int:
        return self.duplicates + self.out_of_range + self.missing

    def as_dict(self) -> dict[str, int]:
        return {"duplicates": self.duplicates, "out_of_range": self.out_of_range, "missing": self.missing}


def _identifiers(text: str) -> list[int]:
    found = _BRACKETED.findall(text)
    return [int(x) for x in (found if found else _INTEGER.findall(text))]


def parse_permutation(text: str, n: int) -> tuple[list[int], Repairs]:
    """The 0-based order of ``n`` candidates an answer like ``[2] > [1] > [3]`` gives, repaired
    into a permutation of ``range(n)`` (see the module docstring), and the repairs made."""
    rep = Repairs()
    seen: set[int] = set()
    order: list[int] = []
    for ident in _identifiers(str(text)):
        if not 1 <= ident <= n:
            rep.out_of_range += 1
            continue
        if ident - 1 in seen:
            rep.duplicates += 1
            continue
        seen.add(ident - 1)
        order.append(ident - 1)
    rest = [i for i in range(n) if i not in seen]
    rep.missing = len(rest)
    return order + rest, rep


_LABELLED = re.compile(r"(?i)\b(?:passage|item|model|product|candidate|option|answer)s?\s*[:\-]?\s*[\(\[\"'*]*\s*([ab])\b")
_BARE = re.compile(r"^[\s\W_]*([AaBb])[\s\W_]*$")
_STANDALONE = re.compile(r"(?<![\w'])([AB])(?![\w'])")  # an uppercase letter alone (not the article "a")


def parse_pair(text: str) -> str | None:
    """"A", "B" or None (unreadable) from a PRP answer."""
    s = str(text)
    m = _LABELLED.search(s)
    if m:
        return m.group(1).upper()
    m = _BARE.match(s)
    if m:
        return m.group(1).upper()
    m = _STANDALONE.search(s)
    return m.group(1) if m else None


def parse_choice(text: str, n: int, remaining: set[int] | list[int]) -> tuple[int | None, str]:
    """The 0-based candidate an IRanker step's answer names, if it is still in ``remaining``:
    (id, "") or (None, reason) with reason ``unreadable``, ``out_of_range`` or ``eliminated``."""
    ids = _identifiers(str(text))
    if not ids:
        return None, "unreadable"
    ident = ids[0]
    if not 1 <= ident <= n:
        return None, "out_of_range"
    if ident - 1 not in set(remaining):
        return None, "eliminated"
    return ident - 1, ""


_YES = re.compile(r"(?i)^[\s\W_]*(yes|no|true|false)\b")


def parse_yes_no(text: str) -> float | None:
    """1.0 (yes/true), 0.0 (no/false) from the answer's first word; None when it is neither."""
    m = _YES.match(str(text))
    if not m:
        return None
    return 1.0 if m.group(1).lower() in ("yes", "true") else 0.0
