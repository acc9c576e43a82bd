"""PRP, pairwise ranking prompting (Qin et al. 2024, "Large Language Models are Effective Text
Rankers with Pairwise Ranking Prompting", NAACL Findings 2024).

Choices written down:

- Prompt: ``prompts.prp_chat``, the paper's pairwise prompt with the domain's noun. Every pair is
  asked in **both orders**, (x as A, y as B) and (y as A, x as B), as the paper does to cancel the
  position bias.
- One order's verdict: with a backend that ``supports_logprobs``, the paper's scoring mode: the
  next-token log-probabilities of "A" and "B" are compared (higher wins, equal: a tie); a label
  the backend did not report counts as the loser (both missing: a tie and a parse failure).
  Otherwise the generated answer is read by ``parse.parse_pair`` (an unreadable answer: a tie,
  0.5 each, and a parse failure, counted as repair ``unreadable_pair``).
- ``variant=allpair`` (PRP-Allpair): every pair of the list, both orders; a candidate's score is
  its number of wins (1 per order won, 0.5 per tie), O(n^2) prompts. Equal wins are broken by the
  input order (the first stage's order in a rerank run), by adding less than half a win.
- ``variant=sliding`` (PRP-Sliding-K, the default): ``passes`` = K = 10 bubble-sort passes, each
  from the back of the current order to the front, comparing adjacent candidates (positions
  i, i+1 for i = m-2 .. 0) and swapping when the lower one wins the pair (its wins over both
  orders exceed the upper one's; a tie keeps the order). After K passes the top K are the
  sort's top K when the comparisons are consistent. O(K n) prompts. The paper reports
  PRP-Sliding-10 as close to PRP-Allpair on NDCG@10 at linear cost, so it is the default.
- Generation budget for the label mode: 8 new tokens ("Passage A" and punctuation).
- Scores: allpair: wins; sliding: ``m - position`` of the final order. Both are set-dependent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from rbench.plugin import RBenchError

from .backend import Chat
from .base import GenerativeOptions, GenerativeRanker, order_scores
from .parse import parse_pair
from .prompts import prp_chat

LABELS = ("A", "B")


def bubble_positions(m: int, passes: int) -> list[int]:
    """The upper positions i of the adjacent pairs (i, i+1) PRP-Sliding compares, in order: each
    pass from the back (m-2) to the front (0)."""
    return [i for _ in range(passes) for i in range(m - 2, -1, -1)]


@dataclass
class PRPOptions(GenerativeOptions):
    """Options of ``prp``."""

    variant: Literal["sliding", "allpair"] = "sliding"
    passes: int = 10  # sliding: K

    def validate(self) -> None:
        super().validate()
        if self.variant not in ("sliding", "allpair"):
            raise RBenchError(f"prp: variant {self.variant!r}: choose sliding or allpair")
        if self.passes < 1:
            raise RBenchError("prp: passes must be >= 1")


class PRPRanker(GenerativeRanker):
    """Pairwise ranking prompting, both orders per pair (see the module docstring)."""

    name = "prp"
    version = "1"
    description = "PRP pairwise LLM reranker (Qin et al. 2024): both orders per pair, sliding K=10 or all pairs"
    Config = PRPOptions
    default_new_tokens = 8

    @classmethod
    def prompt_example(cls, domain: str = "passage") -> Chat:
        """The prompt on a two-candidate example (``rbench rankers`` shows it)."""
        return prp_chat("QUERY", "CANDIDATE A", "CANDIDATE B", domain)

    def verdicts(self, chats: list[list[dict[str, str]]]) -> list[float]:
        """For each prompt, the share of the win that goes to A (1, 0 or 0.5 for a tie)."""
        out: list[float] = []
        if self.logprobs_available:
            for lp in self.label_logprobs(chats, LABELS):
                a, b = lp.get("A"), lp.get("B")
                if a is None and b is None:
                    self.failed("labels_missing")
                    out.append(0.5)
                elif b is None or (a is not None and a > b):
                    out.append(1.0)
                elif a is None or b > a:
                    out.append(0.0)
                else:
                    out.append(0.5)
            return out
        for text in self.generate(chats):
            label = parse_pair(text)
            if label is None:
                self.failed("unreadable_pair")
            out.append(0.5 if label is None else (1.0 if label == "A" else 0.0))
        return out

    def compare(self, items: list[tuple[str, str, str]]) -> list[float]:
        """(query, x, y) -> x's wins over both orders, in [0, 2] (y's are 2 minus that)."""
        chats = []
        for q, x, y in items:
            chats.append(prp_chat(q, x, y, self.domain))
            chats.append(prp_chat(q, y, x, self.domain))
        v = self.verdicts(chats)
        return [v[2 * k] + (1.0 - v[2 * k + 1]) for k in range(len(items))]

    def rank(self, queries: list[str], docs: list[list[str]]) -> np.ndarray:
        m = len(docs[0]) if docs else 0
        if self.cfg.variant == "allpair":
            pairs = [(i, j) for i in range(m) for j in range(i + 1, m)]
            wins = np.zeros((len(queries), m), dtype=np.float64)
            items = [(q, d[i], d[j]) for q, d in zip(queries, docs) for i, j in pairs]
            got = self.compare(items)
            k = 0
            for r in range(len(queries)):
                for i, j in pairs:
                    wins[r, i] += got[k]
                    wins[r, j] += 2.0 - got[k]
                    k += 1
            self.info["comparisons_per_list"] = 2 * len(pairs)
            return wins + (m - np.arange(m)) / (2.0 * (m + 1))  # ties -> input order, < half a win
        orders = [list(range(m)) for _ in queries]
        positions = bubble_positions(m, self.cfg.passes)
        for i in positions:
            got = self.compare([(q, d[o[i + 1]], d[o[i]]) for q, d, o in zip(queries, docs, orders)])
            for o, lower_wins in zip(orders, got):
                if lower_wins > 1.0:  # the lower candidate won the pair over both orders
                    o[i], o[i + 1] = o[i + 1], o[i]
        self.info["comparisons_per_list"] = 2 * len(positions)
        return np.stack([order_scores(o, m) for o in orders]) if orders else np.zeros((0, m))
