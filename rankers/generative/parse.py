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
  An answer that offers both labels as alternatives ("Passage A or Passage B", the instruction
  echoed) reads ``None``: it chose nothing.
- ``parse_choice`` (IRanker step), as IRanker's reference evaluation reads a pick: the first
  bracketed identifier (``[3]``) of a candidate still in play; else the candidate whose **name**
  (its text, e.g. a routing model's name) the answer contains (the longest such name, so
  "LLaMA-3 (70b)" is not read as "LLaMA-3"); else an answer that is an identifier alone ("3",
  "passage 3"); else, when names are given, the remaining candidate whose name is the most similar
  to the answer (``difflib`` ratio >= ``SIMILAR_MIN``; reason ``similar``, a *fallback* the ranker
  counts apart from failures); else the first integer of the answer (a number inside a garbled
  name is not taken for an identifier while the name can still be recognised).
  ``None`` with the reason (``unreadable``, ``out_of_range``, ``eliminated``) when it names no
  candidate still in play; the ranker then eliminates the last remaining candidate in the current
  order (a fixed, answer-independent rule) and counts the failure.
- ``parse_yes_no`` (pointwise, generated labels): 1.0 for yes, 0.0 for no, ``None`` otherwise.

Every reader first drops reasoning (``strip_think``: ``<think>...</think>`` blocks, as rank_llm
does, and an unclosed ``<think>`` to the end: an answer cut off while thinking chose nothing) and
reads the content of the last ``<answer>...</answer>`` when there is one (IRanker's format).
Digit runs longer than ``MAX_DIGITS`` are never converted to ``int`` (Python refuses strings of
more than 4,300 digits): such a number is out of range for any list.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

_BRACKETED = re.compile(r"\[\s*(\d+)\s*\]")
_INTEGER = re.compile(r"\d+")
_THINK = re.compile(r"(?is)<think>.*?</think>")
_OPEN_THINK = re.compile(r"(?is)<think>.*\Z")
_ANSWER = re.compile(r"(?is)<answer>\s*(.*?)\s*</answer>")
MAX_DIGITS = 9  # longer identifiers are out of range for any list a ranker reads
SIMILAR_MIN = 0.5  # the least difflib ratio for a similarity fallback to pick a name


def strip_think(text: str) -> str:
    """The answer without its reasoning: ``<think>`` blocks removed (an unclosed one to the end),
    then the content of the last ``<answer>...</answer>`` if the answer has one."""
    s = _OPEN_THINK.sub("", _THINK.sub("", str(text)))
    # a closing tag without its opening one (the prompt opened the block): drop what precedes it
    if "</think>" in s.lower():
        s = re.split(r"(?i)</think>", s)[-1]
    found = _ANSWER.findall(s)
    return found[-1] if found else s


def _to_int(digits: str) -> int:
    """The integer a digit run spells, or ``10**MAX_DIGITS`` (out of range) for a longer run."""
    core = digits.lstrip("0") or "0"
    return int(core) if len(core) <= MAX_DIGITS else 10 ** MAX_DIGITS


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
    return [_to_int(x) for x in (found if found else _INTEGER.findall(text))]


def parse_permutation(text: str, n: int) -> tuple[list[int], Repairs]:
    """The 0-based order of ``n`` candidates an answer like ``[2] > [1] > [3]`` gives, repaired
    into a permutation of ``range(n)`` (see the module docstring), and the repairs made."""
    rep = Repairs()
    seen: set[int] = set()
    order: list[int] = []
    for ident in _identifiers(strip_think(text)):
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
_NOUN = r"(?:passage|item|model|product|candidate|option|answer)?s?\s*[:\-]?\s*"
_ECHO = re.compile(rf"(?i)\b{_NOUN}([ab])\s+or\s+{_NOUN}([ab])\b")


def parse_pair(text: str) -> str | None:
    """"A", "B" or None (unreadable) from a PRP answer."""
    s = strip_think(text)
    echo = _ECHO.search(s)
    if echo and echo.group(1).upper() != echo.group(2).upper():
        return None  # "Passage A or Passage B": the instruction echoed, no choice made
    m = _LABELLED.search(s)
    if m:
        return m.group(1).upper()
    m = _BARE.match(s)
    if m:
        return m.group(1).upper()
    m = _STANDALONE.search(s)
    return m.group(1) if m else None


_ID_ALONE = re.compile(r"(?i)^[\s\W_]*(?:(?:passage|item|model|product|candidate|llm|option|id)s?\s*(?:id)?\s*[:#]?\s*)?"
                       r"(\d+)[\s\W_]*$")


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^\w()./+-]+", " ", str(text).lower()).split())


def parse_choice(text: str, n: int, remaining: set[int] | list[int],
                 names: list[str] | None = None) -> tuple[int | None, str]:
    """The 0-based candidate an IRanker step's answer names, if it is still in ``remaining``:
    (id, "") read exactly, (id, "similar") by the similarity fallback, or (None, reason) with
    reason ``unreadable``, ``out_of_range`` or ``eliminated``. ``names[i]`` is candidate i's name
    (its text), for answers that name a candidate instead of giving its identifier."""
    s = strip_think(text)
    left = set(remaining)
    bracketed = [_to_int(x) for x in _BRACKETED.findall(s)]
    if bracketed:
        ident = bracketed[0]
        if not 1 <= ident <= n:
            return None, "out_of_range"
        return (ident - 1, "") if ident - 1 in left else (None, "eliminated")
    said = _norm(s)
    if names is not None and said:
        named = [i for i in left if _norm(names[i]) and _norm(names[i]) in said]
        if named:
            return max(named, key=lambda i: (len(_norm(names[i])), -said.find(_norm(names[i])), -i)), ""
    alone = _ID_ALONE.match(s)
    if alone:  # "3", "passage 3", "ID: 3"
        ident = _to_int(alone.group(1))
        if not 1 <= ident <= n:
            return None, "out_of_range"
        return (ident - 1, "") if ident - 1 in left else (None, "eliminated")
    ints = [_to_int(x) for x in _INTEGER.findall(s)]
    if names is not None and said:
        ranked = sorted(left, key=lambda i: (-difflib.SequenceMatcher(None, said, _norm(names[i])).ratio(), i))
        if ranked and difflib.SequenceMatcher(None, said, _norm(names[ranked[0]])).ratio() >= SIMILAR_MIN:
            return ranked[0], "similar"
    if not ints:
        return None, "unreadable"
    ident = ints[0]
    if not 1 <= ident <= n:
        return None, "out_of_range"
    return (ident - 1, "") if ident - 1 in left else (None, "eliminated")


_YES = re.compile(r"(?i)^[\s\W_]*(yes|no|true|false)\b")


def parse_yes_no(text: str) -> float | None:
    """1.0 (yes/true), 0.0 (no/false) from the answer's first word; None when it is neither."""
    m = _YES.match(strip_think(text))
    if not m:
        return None
    return 1.0 if m.group(1).lower() in ("yes", "true") else 0.0
