"""IRanker (Feng et al. 2025, "IRanker: Towards Ranking Foundation Model"): ranking by iterative
elimination, and its direct variant.

Choices written down:

- ``variant=iterative`` (the paper's method, default): at each step the model reads the query
  and the candidates still in play (``prompts.iranker_step_chat``: the candidates keep their input
  identifiers [1]..[n], in input order, eliminated ones removed) and names the least relevant
  one, which is eliminated; m - 1 model calls for a list of m, until one candidate is left. The
  ranking is the reverse of the elimination order: the survivor first, the first eliminated last.
- An answer that names no candidate still in play (unreadable, out of range, or one eliminated
  already; ``parse.parse_choice``) eliminates the last remaining candidate in the current order
  (a fixed rule that does not depend on the answer), counted as a parse failure with the reason
  as its repair kind.
- ``variant=direct``: one call asking for the whole ranking (``prompts.iranker_direct_chat``),
  read like RankGPT's answer (``parse.parse_permutation``, repairs counted the same way).
- The paper fine-tunes a model (IRanker-3B) with reinforcement learning for this decoding; any
  chat model can be used here through the backends, by default the offline SmolLM2.
- Generation budget: 8 new tokens per step; 6 per candidate for ``direct``.
- Scores: ``m - position`` of the final order (set-dependent).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from rbench.plugin import RBenchError

from .backend import Chat
from .base import GenerativeOptions, GenerativeRanker, order_scores
from .parse import parse_choice, parse_permutation
from .prompts import iranker_direct_chat, iranker_step_chat


@dataclass
class IRankerOptions(GenerativeOptions):
    """Options of ``iranker``."""

    variant: Literal["iterative", "direct"] = "iterative"

    def validate(self) -> None:
        super().validate()
        if self.variant not in ("iterative", "direct"):
            raise RBenchError(f"iranker: variant {self.variant!r}: choose iterative or direct")


class IRankerRanker(GenerativeRanker):
    """Iterative elimination of the least relevant candidate (see the module docstring)."""

    name = "iranker"
    version = "1"
    description = "IRanker LLM reranker (Feng et al. 2025): iterative elimination, or direct ranking"
    Config = IRankerOptions
    default_new_tokens = 8

    @classmethod
    def prompt_example(cls, domain: str = "passage") -> Chat:
        """The prompt on a two-candidate example (``rbench rankers`` shows it)."""
        return iranker_step_chat("QUERY", ["CANDIDATE 1", "CANDIDATE 2"], [0, 1], domain)

    def rank(self, queries: list[str], docs: list[list[str]]) -> np.ndarray:
        m = len(docs[0]) if docs else 0
        if self.cfg.variant == "direct":
            orders = []
            for text in self.generate([iranker_direct_chat(q, d, self.domain) for q, d in zip(queries, docs)], 6 * m):
                order, rep = parse_permutation(text, m)
                if rep.total:
                    self.failed("answers_repaired")
                    for kind, n in rep.as_dict().items():
                        self.stats.repaired(kind, n)
                orders.append(order)
            return np.stack([order_scores(o, m) for o in orders]) if orders else np.zeros((0, m))
        remaining = [list(range(m)) for _ in queries]
        eliminated: list[list[int]] = [[] for _ in queries]
        while m and len(remaining[0]) > 1:
            chats = [iranker_step_chat(q, [d[j] for j in r], r, self.domain)
                     for q, d, r in zip(queries, docs, remaining)]
            for r, gone, text in zip(remaining, eliminated, self.generate(chats)):
                pick, why = parse_choice(text, m, r)
                if pick is None:
                    self.failed(f"choice_{why}")
                    pick = r[-1]
                r.remove(pick)
                gone.append(pick)
        self.info["calls_per_list"] = max(0, m - 1)
        orders = [r + gone[::-1] for r, gone in zip(remaining, eliminated)]
        return np.stack([order_scores(o, m) for o in orders]) if orders else np.zeros((0, m))
