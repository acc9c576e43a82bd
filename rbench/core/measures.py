"""Measures by name: ir_measures' syntax parsed once, into frozen ``Measure`` objects.

Why here, apart from the arithmetic (``rbench.engine.metrics``): ``--measure`` is a run setting
(``rbench.core.settings``) that is checked when options are parsed, before numpy or any task is
loaded, and ``rbench table --measure`` reads names without computing anything. This module is the
one parser; every caller (CLI, ``rbench.evaluate``, the runner, tables, ``per_query``) goes
through ``parse_measure``.

The engine hands over each positive's exact 1-based rank over the whole pool (ties resolved
pessimistically), never a truncated list, so a measure is offered only when it is a function of
the relevant documents' ranks alone, and then it is exact. ``Judged@k`` counts the judged
documents in the top k, which the positives' ranks do not give: it is refused, as are measures
outside ``FAMILIES``.

Semantics follow ir_measures (trec_eval): ``rel=N`` makes grades below N non-relevant for that
measure; without ``rel`` every positive is relevant (ir_measures' default ``rel=1`` on the
integer grades trec_eval reads; ``rel=1`` is written without it, as ir_measures does). A query
with no relevant document scores 0 (trec_eval ``-c``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from rbench.core.errors import RBenchError, did_you_mean


@dataclass(frozen=True)
class Family:
    """One kind of measure: whether it takes a cutoff (required, as ir_measures' P, R and Success
    do, or optional) and a ``rel`` threshold, and its exact definition (the docs page's text)."""

    name: str
    cutoff_required: bool
    takes_rel: bool
    trec_eval: str  # the trec_eval measure ir_measures computes it with
    definition: str


FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("nDCG", False, False, "ndcg_cut_k (ndcg without a cutoff)",
           "sum over positives ranked at most k of grade / log2(rank + 1), divided by the same sum over the "
           "query's grades sorted in descending order (the ideal ranking's top k). Linear gain: the grade itself. "
           "No `rel` (ir_measures' nDCG has none): every positive's grade is its gain."),
    Family("RR", False, True, "recip_rank",
           "1 / the rank of the best-ranked relevant document; 0 when it is ranked beyond k (`RR@k`) or the "
           "query has none. `RR` without a cutoff is the paper's MRR (the whole pool is ranked)."),
    Family("R", True, True, "recall_k",
           "relevant documents ranked at most k / the query's relevant documents."),
    Family("P", True, True, "P_k",
           "relevant documents ranked at most k / k (always k, also when a query's list holds fewer than k "
           "candidates, as trec_eval does)."),
    Family("AP", False, True, "map (map_cut_k with a cutoff)",
           "sum, over the relevant documents ranked at most k, of the precision at their rank (i / rank for the "
           "i-th relevant document in rank order), divided by the query's number of relevant documents (not by "
           "min(k, that number): trec_eval's map_cut)."),
    Family("Success", True, True, "success_k",
           "1 when a relevant document is ranked at most k, else 0."),
)}

# ir_measures' other names of the same measures
ALIASES = {"MRR": "RR", "MAP": "AP", "NDCG": "nDCG", "Precision": "P", "Recall": "R"}
# known to ir_measures and refused with their own reason (the generic refusal names FAMILIES)
NOT_RANK_BASED = {
    "Judged": "counts the judged documents in the top k; rbench knows only the positives' ranks, not which "
              "other candidates were judged",
}
_SYNTAX = re.compile(r"(?P<name>[A-Za-z_]\w*)(?:\((?P<params>[^()]*)\))?(?:@(?P<cutoff>[^@()]*))?")
MAX_NUMBER_DIGITS = 9  # a cutoff or rel of at most 999,999,999: ASCII digits only (int() reads Unicode digits,
# and str.isdigit() is true for superscripts such as '²', which int() refuses: issue 42)
_NUMBER = re.compile(rf"[0-9]{{1,{MAX_NUMBER_DIGITS}}}")
EXPECTED = ("expected NAME, NAME@K, NAME(rel=N) or NAME(rel=N)@K with NAME one of "
            + ", ".join(FAMILIES) + " (ir_measures' syntax, e.g. nDCG@10, RR(rel=2)@10, P@5)")


@dataclass(frozen=True)
class Measure:
    """One measure, as ir_measures models it: a family name, a cutoff (None: the whole ranking)
    and a relevance threshold (None: every positive is relevant, ir_measures' default rel=1).
    ``str()`` is ir_measures' canonical spelling, the key a RunRecord's ``metrics`` use."""

    name: str
    cutoff: int | None = None
    rel: int | None = None

    def __str__(self) -> str:
        params = f"(rel={self.rel})" if self.rel is not None else ""
        return f"{self.name}{params}" + (f"@{self.cutoff}" if self.cutoff is not None else "")

    @property
    def family(self) -> Family:
        return FAMILIES[self.name]


def _short(text: str) -> str:
    """``text`` as the message quotes it: at most 60 characters (a 10,000-digit name is one line)."""
    return repr(text) if len(text) <= 60 else repr(text[:57]) + f"... ({len(text):,} characters)"


def _refuse(text: str, why: str) -> RBenchError:
    return RBenchError(f"measure {_short(text)}: {why}; {EXPECTED}")


def _number(text: str) -> int | None:
    """A cutoff or rel: ASCII digits, at most ``MAX_NUMBER_DIGITS`` of them, else None."""
    text = text.strip()
    return int(text) if _NUMBER.fullmatch(text) else None


def _rel(text: str, params: str) -> int | None:
    """The ``rel=N`` parameter (an integer >= 1; 1 is the default, read as None)."""
    key, _, value = params.partition("=")
    if key.strip() != "rel" or not value.strip():
        raise _refuse(text, f"unknown parameter {params.strip()!r} (rbench takes only rel=N)")
    rel = _number(value)
    if rel is None or rel < 1:
        raise _refuse(text, f"rel must be an integer of at least 1, got {_short(value.strip())} (ASCII digits, "
                            f"at most {MAX_NUMBER_DIGITS})")
    return None if rel == 1 else rel


def _did_you_mean(name: str) -> str:
    """A suggestion, first by case alone (``ndcg`` is nDCG, names are case-sensitive as in ir_measures)."""
    same = [n for n in [*FAMILIES, *ALIASES] if n.lower() == name.lower()]
    return f" (did you mean {same[0]!r}?)" if same else did_you_mean(name, [*FAMILIES, *ALIASES])


def parse_measure(spec: str | Measure) -> Measure:
    """A measure from ir_measures' syntax (``nDCG@10``, ``RR(rel=2)@10``, ``AP``, ``MRR@10``...),
    or the ``Measure`` itself; anything else is an ``RBenchError`` in one line saying what is
    expected."""
    if isinstance(spec, Measure):
        return parse_measure(str(spec))  # re-checked: a hand-built Measure may not be one
    if not isinstance(spec, str):
        raise RBenchError(f"measure {_short(repr(spec))}: expected a name such as 'nDCG@10' (a string), "
                          f"not {type(spec).__name__}")
    text = spec.strip()
    match = _SYNTAX.fullmatch(text)
    if match is None:
        raise _refuse(spec, "not in ir_measures' syntax")
    name = ALIASES.get(match["name"], match["name"])
    if name in NOT_RANK_BASED:
        raise RBenchError(f"measure {_short(spec)}: {name} {NOT_RANK_BASED[name]}; {EXPECTED}")
    if name not in FAMILIES:
        raise _refuse(spec, f"unknown measure {match['name']!r}{_did_you_mean(match['name'])}")
    family = FAMILIES[name]
    cutoff = None
    if match["cutoff"] is not None:
        cutoff = _number(match["cutoff"])
        if cutoff is None or cutoff < 1:
            raise _refuse(spec, f"the cutoff must be an integer of at least 1, got {_short(match['cutoff'])} "
                                f"(ASCII digits, at most {MAX_NUMBER_DIGITS})")
    elif family.cutoff_required:
        raise _refuse(spec, f"{name} needs a cutoff ({name}@K)")
    rel = None
    if match["params"] is not None and match["params"].strip():
        if not family.takes_rel:
            raise _refuse(spec, f"{name} takes no parameters (its gains are the grades)")
        rel = _rel(spec, match["params"])
    return Measure(name, cutoff, rel)


def parse_measures(specs: Iterable[str | Measure]) -> tuple[Measure, ...]:
    """Each of ``specs`` parsed, duplicates (however spelled) dropped, in the order given."""
    if isinstance(specs, (str, Measure)):  # one name where a list belongs: not its characters
        specs = [specs]
    return tuple(dict.fromkeys(parse_measure(s) for s in specs))
