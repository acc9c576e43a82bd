"""IRanker (Feng et al. 2025, "IRanker: Towards Ranking Foundation Model"): ranking by iterative
elimination, and its direct variant.

Choices written down:

- ``variant=iterative`` (the paper's method, default): at each step the model reads the query
  and the candidates still in play (``prompts.iranker_step_chat``: IRanker's reference prompt for
  the domain: recommendation "least likely to be my next choice", routing by the task's scenario
  "least BALANCED / COST-EFFICIENT / PERFORMANCE-EFFICIENT", passages "least relevant"; the
  candidates keep their input identifiers [1]..[n], eliminated ones removed) and names the one
  to eliminate; m - 1 model calls for a list of m. The ranking is the reverse of the elimination
  order: the survivor first, the first eliminated last.
- Answers name a candidate by identifier or by its full name, as the reference reads them
  (``parse.parse_choice``); an answer that matches no name exactly is read by name similarity
  (``difflib``, counted as a ``fallbacks``, repair ``choice_similar``). An answer that still names
  no candidate in play (unreadable, out of range, or one eliminated already) eliminates the last
  remaining candidate in the current order (a fixed rule that does not depend on the answer),
  counted as a parse failure with the reason as its repair kind.
- ``think`` (default off): the reference's reasoning format (the model thinks in
  ``<think>...</think>`` and answers in ``<answer>...</answer>``, the assistant turn primed with
  "Let me solve this step by step.\n<think>"), with ``think_tokens`` = 1,024 new tokens per step
  (the reference's budget); the thinking tokens are in the record's ``tokens_out``. A backend
  that cannot continue a primed answer gets the instruction without the primed prefix.
- ``variant=direct``: one call asking for the whole ranking (``prompts.iranker_direct_chat``),
  read like RankGPT's answer (``parse.parse_permutation``, repairs counted the same way).
- The paper fine-tunes a model (IRanker-3B) with reinforcement learning for this decoding; any
  chat model can be used here through the backends, by default the offline SmolLM2.
- Generation budget: 48 new tokens per step without thinking (a full name of up to ~40 tokens
  plus its bracket; version 1's 8 cut 376 of 380 answers), ``think_tokens`` with it; 6 per
  candidate for ``direct``. Prompts longer than the backend's context are shrunk to fit
  (``fit_words``).
- Scores: ``m - position`` of the final order (set-dependent).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

import numpy as np

from rbench.plugin import Range, RBenchError

from .backends import Chat
from .base import GenerativeOptions, GenerativeRanker, order_scores
from .parse import parse_choice, parse_permutation
from .prompts import candidate_name, iranker_direct_chat, iranker_step_chat


@dataclass
class IRankerOptions(GenerativeOptions):
    """Options of ``iranker``."""

    variant: Literal["iterative", "direct"] = "iterative"
    think: bool = False  # the reference's <think>/<answer> format, think_tokens per step
    think_tokens: Annotated[int, Range(1, 1 << 20)] = 1024

    def validate(self) -> None:
        super().validate()
        if self.think_tokens < 1:
            raise RBenchError("iranker: think_tokens must be >= 1")
        if self.variant not in ("iterative", "direct"):
            raise RBenchError(f"iranker: variant {self.variant!r}: choose iterative or direct")


class IRankerRanker(GenerativeRanker):
    """Iterative elimination of the least relevant candidate (see the module docstring)."""

    name = "iranker"
    version = "2"
    description = "IRanker LLM reranker (Feng et al. 2025): iterative elimination, or direct ranking"
    Config = IRankerOptions
    default_new_tokens = 48

    @classmethod
    def prompt_example(cls, domain: str = "passage") -> Chat:
        """The prompt on a two-candidate example (``rbench rankers`` shows it)."""
        return iranker_step_chat("QUERY", ["CANDIDATE 1", "CANDIDATE 2"], [0, 1], domain, "balance" if domain == "routing" else "")

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
        think = bool(self.cfg.think)
        budget = int(self.cfg.think_tokens) if think else self.default_new_tokens
        new_tokens = int(self.cfg.max_new_tokens or budget)
        remaining = [list(range(m)) for _ in queries]
        eliminated: list[list[int]] = [[] for _ in queries]
        names = [[candidate_name(t) for t in d] for d in docs]
        while m and len(remaining[0]) > 1:
            chats = [self.fit_words(lambda w, q=q, d=d, r=r: self._step(q, d, r, w, think), new_tokens)
                     for q, d, r in zip(queries, docs, remaining)]
            for r, gone, nm, text in zip(remaining, eliminated, names, self.generate(chats, budget)):
                pick, why = parse_choice(text, m, r, nm)
                if pick is None:
                    self.failed(f"choice_{why}")
                    pick = r[-1]
                elif why == "similar":
                    self.stats.fallbacks += 1
                    self.stats.repaired("choice_similar")
                r.remove(pick)
                gone.append(pick)
        self.info["calls_per_list"] = max(0, m - 1)
        self.info["think"] = think
        orders = [r + gone[::-1] for r, gone in zip(remaining, eliminated)]
        return np.stack([order_scores(o, m) for o in orders]) if orders else np.zeros((0, m))

    def _step(self, query: str, docs: list[str], left: list[int], words: int, think: bool) -> Chat:
        from .prompts import truncate

        chat = iranker_step_chat(query, [truncate(docs[j], 0, words) for j in left], left, self.domain,
                                 self.scenario, think)
        if think and not self.prefill_available:
            chat = chat[:-1]  # the instruction still asks for <think>/<answer>, nothing is primed
        return chat
