"""PRP, pairwise ranking prompting (Qin et al. 2024, "Large Language Models are Effective Text
Rankers with Pairwise Ranking Prompting", NAACL Findings 2024).

Choices written down:

- Prompt: ``prompts.prp_chat``, the paper's pairwise prompt with the domain's noun. Every pair is
  asked in **both orders**, (x as A, y as B) and (y as A, x as B), as the paper does to cancel the
  position bias.
- One order's verdict, ``scoring``:

  - ``likelihood`` (the paper's scoring mode): the label's likelihood *as the answer the model
    would write*. The assistant turn is primed with the domain's noun ("Passage", the first token
    the model writes: llm-rankers primes it the same way) and the next-token log-probabilities of
    " A" and " B" are compared; since the primed noun is common to both, this is the comparison
    of the full labels "Passage A" vs "Passage B". Higher wins; equal: a tie; a label the backend
    did not report loses (both missing: a tie and a parse failure, ``labels_missing``). The
    unprimed first token (what version 1 compared) is the noun for chat models, so its A/B
    probabilities measure position, not relevance (issue 41: 12/12 prompts read A).
  - ``generation``: the greedy answer (8 new tokens) read by ``parse.parse_pair``; an
    unreadable answer, or one that echoes the instruction ("Passage A or Passage B"), is a tie
    (0.5 each) and a parse failure (``unreadable_pair``).
  - ``auto`` (default): ``likelihood`` when the backend reports logprobs *and* continues a primed
    assistant turn (``supports_prefill``: transformers, vLLM), else ``generation`` (an
    OpenAI-compatible server cannot be primed portably).
- A **comparison** is one pair over both orders: x's wins in [0, 2] (1 per order won, 0.5 per
  tied order). It is **tied** when neither candidate won overall (wins = 1: equal verdicts, or
  each candidate won in the position it was shown first, a pure position effect); the record's
  ``tie_share`` is the share of such comparisons. Ties follow the input order: sliding keeps the
  current order, sorting gives a tie to the candidate earlier in the input (so a list of ties
  comes out in input order), allpair breaks equal totals by the input order.
- ``variant=sliding`` (PRP-Sliding-K, default): ``passes`` = K = 10 bubble-sort passes from the
  back to the front comparing adjacent candidates and swapping when the lower one wins. Pass p
  (0-based) stops at position p: the p candidates in front are final after p passes, so pass p
  compares m-1-p pairs, K(m-1) - K(K-1)/2 pairs in all (145 pairs, 290 prompts for m = 20, K = 10,
  instead of K(m-1) = 190 pairs). With consistent verdicts the top K is the sort's top K.
- ``variant=sorting`` (PRP-Sorting, the paper's heapsort): a max-heap of the list (sift-down
  with the comparisons), then ``top_k`` (default 10) extractions; the top k in extraction order,
  the rest after them in their input order. O(m + k log m) pairs.
- ``variant=allpair`` (PRP-Allpair): every pair of the list, both orders; a candidate's score is
  its number of wins. Equal wins are broken by the input order (the first stage's order in a
  rerank run), by adding less than half a win. O(m^2) prompts.
- The lists of one engine call move in lockstep: each list's sort is a generator of the pairs it
  needs, and one batch asks the next pair of every list still sorting.
- Scores: allpair: wins; sliding and sorting: ``m - position`` of the final order. All three are
  set-dependent.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Annotated, Literal

import numpy as np

from rbench.plugin import Range, RBenchError

from .backends import Chat
from .base import GenerativeOptions, GenerativeRanker, order_scores
from .parse import parse_pair
from .prompts import prp_chat

LABELS = ("A", "B")
PRIMED_LABELS = (" A", " B")  # after the primed noun ("Passage"), the label token has its space

Sort = Generator[tuple[int, int], float, list[int]]  # yields (x, y), receives x's wins, returns the order


def bubble_positions(m: int, passes: int) -> list[int]:
    """The upper positions i of the adjacent pairs (i, i+1) PRP-Sliding compares, in order: pass
    p from the back (m-2) down to p (the p positions in front are final by then)."""
    return [i for p in range(min(passes, max(m - 1, 0))) for i in range(m - 2, p - 1, -1)]


def sliding_sort(m: int, passes: int) -> Sort:
    """PRP-Sliding-K over positions 0..m-1 (see the module docstring)."""
    order = list(range(m))
    for i in bubble_positions(m, passes):
        lower_wins = yield (order[i + 1], order[i])
        if lower_wins > 1.0:  # the lower candidate won the pair over both orders (a tie keeps the order)
            order[i], order[i + 1] = order[i + 1], order[i]
    return order


def heap_sort(m: int, k: int) -> Sort:
    """PRP-Sorting: heapsort's top ``k`` of 0..m-1, then the rest in input order."""
    heap = list(range(m))

    def beats(a: int, b: int) -> Generator[tuple[int, int], float, bool]:
        wins = yield (a, b)
        return wins > 1.0 or (wins == 1.0 and a < b)  # a tie goes to the earlier input position

    def sift(size: int, root: int) -> Generator[tuple[int, int], float, None]:
        while True:
            best, left = root, 2 * root + 1
            if left < size and (yield from beats(heap[left], heap[best])):
                best = left
            if left + 1 < size and (yield from beats(heap[left + 1], heap[best])):
                best = left + 1
            if best == root:
                return
            heap[root], heap[best] = heap[best], heap[root]
            root = best

    for i in range(m // 2 - 1, -1, -1):
        yield from sift(m, i)
    top: list[int] = []
    size = m
    while size and len(top) < k:
        top.append(heap[0])
        size -= 1
        heap[0], heap[size] = heap[size], heap[0]
        if size and len(top) < k:
            yield from sift(size, 0)
    return top + sorted(heap[:size])


@dataclass
class PRPOptions(GenerativeOptions):
    """Options of ``prp``."""

    variant: Literal["sliding", "sorting", "allpair"] = "sliding"
    passes: Annotated[int, Range(1, 1_000)] = 10  # sliding: K
    top_k: Annotated[int, Range(1, 10_000)] = 10  # sorting: how many candidates the heap extracts
    scoring: Literal["auto", "likelihood", "generation"] = "auto"

    def validate(self) -> None:
        super().validate()
        if self.variant not in ("sliding", "sorting", "allpair"):
            raise RBenchError(f"prp: variant {self.variant!r}: choose sliding, sorting or allpair")
        if self.scoring not in ("auto", "likelihood", "generation"):
            raise RBenchError(f"prp: scoring {self.scoring!r}: choose auto, likelihood or generation")
        if self.passes < 1:
            raise RBenchError("prp: passes must be >= 1")
        if self.top_k < 1:
            raise RBenchError("prp: top_k must be >= 1")


class PRPRanker(GenerativeRanker):
    """Pairwise ranking prompting, both orders per pair (see the module docstring)."""

    name = "prp"
    version = "2"
    description = ("PRP pairwise LLM reranker (Qin et al. 2024): both orders per pair, label likelihood; "
                   "sliding K=10, heapsort top-k or all pairs")
    Config = PRPOptions
    default_new_tokens = 8

    @classmethod
    def prompt_example(cls, domain: str = "passage") -> Chat:
        """The prompt on a two-candidate example (``rbench rankers`` shows it)."""
        return prp_chat("QUERY", "CANDIDATE A", "CANDIDATE B", domain)

    def scoring_mode(self) -> str:
        """``likelihood`` or ``generation`` (``auto`` resolved against the backend)."""
        able = self.logprobs_available and self.prefill_available
        if self.cfg.scoring == "likelihood" and not able:
            raise RBenchError(f"prp: scoring=likelihood needs a backend with logprobs that continues a primed answer; "
                              f"backend {self.backend.kind!r} does not (use scoring=generation)")
        return "likelihood" if self.cfg.scoring == "likelihood" or (self.cfg.scoring == "auto" and able) else "generation"

    def verdicts(self, items: list[tuple[str, str, str]]) -> list[float]:
        """For each (query, a, b) prompt, the share of the win that goes to A (1, 0 or 0.5)."""
        out: list[float] = []
        if self.scoring_mode() == "likelihood":
            chats = [prp_chat(q, a, b, self.domain, prime=True) for q, a, b in items]
            for lp in self.label_logprobs(chats, PRIMED_LABELS):
                a, b = lp.get(PRIMED_LABELS[0]), lp.get(PRIMED_LABELS[1])
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
        for text in self.generate([prp_chat(q, a, b, self.domain) for q, a, b in items]):
            label = parse_pair(text)
            if label is None:
                self.failed("unreadable_pair")
            out.append(0.5 if label is None else (1.0 if label == "A" else 0.0))
        return out

    def compare(self, items: list[tuple[str, str, str]]) -> list[float]:
        """(query, x, y) -> x's wins over both orders, in [0, 2] (y's are 2 minus that); a result
        of exactly 1 is a tied comparison (counted)."""
        asked = [t for q, x, y in items for t in ((q, x, y), (q, y, x))]
        v = self.verdicts(asked)
        wins = [v[2 * k] + (1.0 - v[2 * k + 1]) for k in range(len(items))]
        self.stats.comparisons += len(wins)
        self.stats.ties += sum(1 for w in wins if w == 1.0)
        return wins

    def drive(self, queries: list[str], docs: list[list[str]], sorts: list[Sort]) -> list[list[int]]:
        """Run one sort per list in lockstep: each batch asks the next pair of every list."""
        result: dict[int, list[int]] = {}
        pending: dict[int, tuple[int, int]] = {}
        for r, gen in enumerate(sorts):
            try:
                pending[r] = next(gen)
            except StopIteration as stop:
                result[r] = list(stop.value)
        prompts = 0
        while pending:
            rows = list(pending)
            got = self.compare([(queries[r], docs[r][pending[r][0]], docs[r][pending[r][1]]) for r in rows])
            prompts += 2 * len(rows)
            for r, wins in zip(rows, got):
                try:
                    pending[r] = sorts[r].send(wins)
                except StopIteration as stop:
                    result[r] = list(stop.value)
                    del pending[r]
        self.info["comparisons_per_list"] = prompts / len(sorts) if sorts else 0
        return [result[r] for r in range(len(sorts))]

    def rank(self, queries: list[str], docs: list[list[str]]) -> np.ndarray:
        m = len(docs[0]) if docs else 0
        self.info["scoring"] = self.scoring_mode() if docs else self.cfg.scoring
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
        if self.cfg.variant == "sorting":
            sorts = [heap_sort(m, self.cfg.top_k) for _ in queries]
        else:
            sorts = [sliding_sort(m, self.cfg.passes) for _ in queries]
        orders = self.drive(queries, docs, sorts)
        return np.stack([order_scores(o, m) for o in orders]) if orders else np.zeros((0, m))
