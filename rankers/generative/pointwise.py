"""Pointwise LLM relevance: relevance generation (Liang et al. 2022, HELM; used as the pointwise
baseline of Sachan et al. 2022 and of the PRP paper) and query likelihood (Sachan et al. 2022,
"Improving Passage Retrieval with Zero-Shot Question Generation", UPR).

Choices written down:

- ``mode=relevance`` (default): ``prompts.relevance_chat`` ("Does the passage answer the query?
  Answer 'Yes' or 'No'.", the domain's noun). With a backend that ``supports_logprobs`` the score
  is logprob("Yes") - logprob("No") of the answer's first token (a label the backend did not
  report, e.g. outside an HTTP server's top-k, gets ``LOGPROB_FLOOR`` = -50 and counts as repair
  ``label_missing``); otherwise the generated answer is read by ``parse.parse_yes_no``: yes 1,
  no 0, unreadable 0.5 (a parse failure, repair ``unreadable_yes_no``).
- ``mode=query-likelihood``: ``prompts.query_likelihood_chat`` ("Please write a question based
  on this passage."), score = the mean log-probability of the query's tokens as the answer. It
  needs a backend offering ``continuation_logprobs(chats, continuations) -> list[float]`` (the
  ``transformers`` backend does); one without it is refused in one line. (Those scores are not
  cached.)
- Each candidate is its own prompt: the scores do not depend on the other candidates
  (``set_dependent = False``), so the engine checks them across calls. ``score_tolerance`` = 1e-3
  (relative to max(1, |score|)): with the cache on (default) a re-scored pair is the same prompt
  and is served from the cache, so it agrees bit for bit; without the cache, a local backend
  batches prompts of different lengths with left padding, whose logits move with the batch's
  shape (fp32: about 1e-6..1e-5, like ``FLOAT32_KERNELS``; bf16/fp16 on a GPU and batching
  servers: up to about 1e-3 on logprob differences of order 1..10). A flipped generated label
  (mode without logprobs) exceeds it and is reported as the inconsistency it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from rbench.plugin import RBenchError

from .backends import Chat
from .base import GenerativeOptions, GenerativeRanker
from .parse import parse_yes_no
from .prompts import query_likelihood_chat, relevance_chat

LABELS = ("Yes", "No")
LOGPROB_FLOOR = -50.0


@dataclass
class PointwiseOptions(GenerativeOptions):
    """Options of ``pointwise-llm``."""

    mode: Literal["relevance", "query-likelihood"] = "relevance"

    def validate(self) -> None:
        super().validate()
        if self.mode not in ("relevance", "query-likelihood"):
            raise RBenchError(f"pointwise-llm: mode {self.mode!r}: choose relevance or query-likelihood")


class PointwiseLLMRanker(GenerativeRanker):
    """Per-candidate yes/no relevance (or query likelihood) (see the module docstring)."""

    name = "pointwise-llm"
    version = "2"
    description = "pointwise LLM relevance (HELM yes/no logprob difference; or query likelihood, UPR)"
    Config = PointwiseOptions
    set_dependent = False
    score_tolerance = 1e-3
    default_new_tokens = 4

    @classmethod
    def prompt_example(cls, domain: str = "passage") -> Chat:
        """The prompt on a two-candidate example (``rbench rankers`` shows it)."""
        return relevance_chat("QUERY", "CANDIDATE", domain)

    def rank(self, queries: list[str], docs: list[list[str]]) -> np.ndarray:
        m = len(docs[0]) if docs else 0
        flat_q = [q for q, d in zip(queries, docs) for _ in d]
        flat_d = [t for d in docs for t in d]
        if self.cfg.mode == "query-likelihood":
            inner = getattr(self.backend, "backend", self.backend)
            scorer = getattr(inner, "continuation_logprobs", None)
            if not callable(scorer):
                raise RBenchError(f"pointwise-llm: mode=query-likelihood needs a backend that scores continuations "
                                  f"(continuation_logprobs); backend {inner.kind!r} does not")
            values = scorer([query_likelihood_chat(t, self.domain) for t in flat_d], flat_q)
            return np.asarray(values, dtype=np.float64).reshape(len(queries), m)
        chats = [relevance_chat(q, t, self.domain) for q, t in zip(flat_q, flat_d)]
        out: list[float] = []
        if self.logprobs_available:
            for lp in self.label_logprobs(chats, LABELS):
                yes, no = lp.get("Yes"), lp.get("No")
                if yes is None or no is None:
                    self.stats.repaired("label_missing", int(yes is None) + int(no is None))
                out.append((LOGPROB_FLOOR if yes is None else yes) - (LOGPROB_FLOOR if no is None else no))
        else:
            for text in self.generate(chats):
                v = parse_yes_no(text)
                if v is None:
                    self.failed("unreadable_yes_no")
                out.append(0.5 if v is None else v)
        return np.asarray(out, dtype=np.float64).reshape(len(queries), m)
