"""RankGPT (Sun et al. 2023, "Is ChatGPT Good at Search? Investigating Large Language Models as
Re-Ranking Agents", EMNLP 2023): listwise reranking by permutation generation with a sliding
window, as the paper and rank_llm run it.

Choices written down:

- Prompt: ``prompts.rankgpt_chat`` (RankGPT's system message, the numbered [1]..[n] candidates,
  the closing instruction asking for ``[2] > [1]``; the domain's noun in place of "passage";
  the candidates in one user turn, as rank_llm's open-model rankers send them).
- Sliding window (``sliding_windows``): window ``window`` = 20, step ``step`` = 10, back to front:
  the first window covers the last ``window`` positions of the current order; it is reordered by
  the model's permutation, moved ``step`` positions towards the front, and so on until a window
  has started at position 0 (clipped there). A list no longer than ``window`` is one call. The
  input order is the row's order as the engine gives it (the first stage's order in a rerank run;
  a shuffled list in the small scenario). ``passes`` (default 1, the paper's) repeats the sweep.
  ``step`` must lie in 1..``window`` (a larger step would leave candidates no window reads).
- Answers are read by ``parse.parse_permutation`` (rank_llm's repair: out-of-range and repeated
  identifiers dropped, missing ones appended in their current order); every repaired answer
  counts one ``parse_failures`` and its repairs by kind (``duplicates``, ``out_of_range``,
  ``missing``, in numbers of identifiers).
- Candidates: their first ``max_candidate_words`` = 300 words (the paper's cut); a window whose
  prompt and answer budget exceed the backend's context is shrunk to fit (fewer words per
  candidate, ``fit_words``, as rank_llm does), the smallest limit recorded. Answers are read
  after ``<think>`` blocks are dropped (``parse.strip_think``).
- Generation budget: 6 new tokens per candidate of the window ("[12] > " is at most 6 tokens for
  the tokenizers in use), unless ``max_new_tokens`` is set. Greedy decoding by default.
- Scores: position in the final order, ``m - position`` (set-dependent: one call per list).
- The query's lists of one engine call move in lockstep (window k of every query is one batch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import numpy as np

from rbench.plugin import Range, RBenchError

from .backends import Chat
from .base import GenerativeOptions, GenerativeRanker, order_scores
from .parse import parse_permutation
from .prompts import rankgpt_chat, truncate

# sliding-window passes over a list: each is a prompt per window per query (issue 42: capped)
Passes = Annotated[int, Range(1, 100)]


def sliding_windows(n: int, window: int, step: int) -> list[tuple[int, int]]:
    """The windows ``[start, end)`` of one back-to-front pass over ``n`` positions, in the order
    they are reranked: the last ``window`` positions first, then ``step`` towards the front, until
    a window starts at 0 (clipped at 0)."""
    if window < 1 or not 1 <= step <= window:
        raise RBenchError(f"sliding window: need window >= 1 and 1 <= step <= window, got window={window}, step={step}")
    out: list[tuple[int, int]] = []
    end = n
    while end > 0:
        start = max(0, end - window)
        out.append((start, end))
        if start == 0:
            break
        end -= step
    return out


@dataclass
class RankGPTOptions(GenerativeOptions):
    """Options of ``rankgpt`` (the shared ones, plus the window)."""

    window: Annotated[int, Range(2, 10_000)] = 20
    step: Annotated[int, Range(1, 10_000)] = 10
    passes: Passes = 1

    def validate(self) -> None:
        super().validate()
        if self.step > self.window:
            raise RBenchError(f"rankgpt: need step <= window (got window={self.window}, step={self.step})")


class RankGPTRanker(GenerativeRanker):
    """RankGPT's listwise sliding-window permutation ranker (see the module docstring)."""

    name = "rankgpt"
    version = "2"
    description = "RankGPT listwise LLM reranker (Sun et al. 2023): permutation generation, sliding window 20/10"
    Config = RankGPTOptions
    windowed = True

    @classmethod
    def prompt_example(cls, domain: str = "passage") -> Chat:
        """The prompt on a two-candidate example (``rbench rankers`` shows it)."""
        return rankgpt_chat("QUERY", ["CANDIDATE 1", "CANDIDATE 2"], domain)

    def rank(self, queries: list[str], docs: list[list[str]]) -> np.ndarray:
        cfg = self.cfg
        m = len(docs[0]) if docs else 0
        orders = [list(range(m)) for _ in queries]
        for _ in range(cfg.passes):
            for start, end in sliding_windows(m, cfg.window, cfg.step):
                if end - start < 2:
                    continue  # one candidate: nothing to order
                budget = 6 * (end - start)
                chats = [self.fit_words(lambda w, q=q, d=d, o=o, a=start, b=end: rankgpt_chat(
                    q, [truncate(d[j], 0, w) for j in o[a:b]], self.domain),
                    int(cfg.max_new_tokens or budget)) for q, d, o in zip(queries, docs, orders)]
                answers = self.generate(chats, budget)
                for o, text in zip(orders, answers):
                    perm, rep = parse_permutation(text, end - start)
                    if rep.total:
                        self.failed("answers_repaired")
                        for kind, n in rep.as_dict().items():
                            self.stats.repaired(kind, n)
                    o[start:end] = [o[start + p] for p in perm]
        self.info["windows"] = {"window": cfg.window, "step": cfg.step, "passes": cfg.passes,
                                "per_list": len(sliding_windows(m, cfg.window, cfg.step)) * cfg.passes}
        return np.stack([order_scores(o, m) for o in orders]) if orders else np.zeros((0, m))
