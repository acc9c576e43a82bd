"""Does a ranker rank? The checks ``rbench run`` warns with and ``rbench table`` marks by.

A language-model ranker can look healthy (no error, plausible metrics) while its output is just
the order it was given: a verdict that reads the answer's position instead of its content, a
budget that cuts every answer off and a fallback that keeps the input order (issue 41). The
generative rankers therefore record, in ``ranker_info["generation"]``
(``rbench_rankers.generative.backends.GenerationStats``):

- ``input_order_tau``: the mean over the ranked lists of Kendall's tau-b between the output
  scores and the input order (1.0: the output is the input order);
- ``repaired_share``: the share of the model's answers that had to be repaired, could not be
  read, or were read only by a fallback (parse failures + fallbacks, per answer read);
- ``tie_share``: the share of pairwise comparisons with no winner (PRP), shown, not judged.

A record is **flagged** when ``input_order_tau >= TAU_MAX`` (0.95: on 20 candidates, at most
about 5 of the 190 pairs swapped) or ``repaired_share > REPAIRED_MAX`` (0.5: most answers were
not the model's own ranking). Records without these fields (every other ranker) are never
flagged. ``flag`` gives the reasons in words; ``MARK`` is the table's mark and ``LEGEND`` its
line under the table.
"""

from __future__ import annotations

from typing import Any

TAU_MAX = 0.95
REPAIRED_MAX = 0.5
MARK = "⚠"
LEGEND = (f"`{MARK}`: the ranker's output is (nearly) its input order (mean Kendall tau with the input order "
          f">= {TAU_MAX}) or most of its model's answers were repaired or unreadable (> {REPAIRED_MAX:.0%}): "
          "the metric is the first stage's (or the shuffle's), not the ranker's (ranker_info.generation).")


def flag(ranker_info: dict[str, Any] | None) -> list[str]:
    """Why a record's ranker did not (really) rank, in words ([] when it did, or when the record
    carries no generation statistics)."""
    gen = (ranker_info or {}).get("generation")
    if not isinstance(gen, dict):
        return []
    why: list[str] = []
    tau = gen.get("input_order_tau")
    if isinstance(tau, (int, float)) and tau >= TAU_MAX:
        why.append(f"its output is (nearly) the input order (mean Kendall tau {tau:.3f} >= {TAU_MAX})")
    share = gen.get("repaired_share")
    if isinstance(share, (int, float)) and share > REPAIRED_MAX:
        why.append(f"{share:.0%} of the model's answers were repaired or unreadable (> {REPAIRED_MAX:.0%})")
    return why
