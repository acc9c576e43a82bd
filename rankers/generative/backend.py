"""The generation backend protocol: one interface, three implementations.

Generative rankers (RankGPT, PRP, IRanker, pointwise relevance) ask a language model for text or
for the log-probabilities of a few next tokens; *how* the model runs is a backend's business:

- ``transformers`` (``rbench_rankers.generative.hf``): in process, CPU or GPU, logits available;
- ``vllm`` (``rbench_rankers.generative.vllm_engine``): vLLM's offline engine (GPU; optional extra);
- ``openai`` (``rbench_rankers.generative.openai_compat``): any OpenAI-compatible HTTP server
  (``base_url``, model name, key from an environment variable, timeouts, retries with backoff,
  bounded concurrency; logprobs when the server offers them).

Every backend sits behind the on-disk response cache (``rbench_rankers.generative.cache``), keyed
by (backend identity, prompt, decoding settings), so a re-run or a crashed run resumes without
paying again, and counts every call into ``GenerationStats`` (recorded as
``ranker_info["generation"]``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

Message = dict[str, str]  # {"role": "system" | "user" | "assistant", "content": ...}
Chat = list[Message]


@dataclass(frozen=True)
class Decoding:
    """Decoding settings. Greedy by default (temperature 0); ``seed`` is recorded and passed on."""

    max_new_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    stop: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Completion:
    """One answer: the text and what it cost. ``cached`` answers cost no model time."""

    text: str
    tokens_in: int
    tokens_out: int
    seconds: float
    cached: bool = False


@dataclass(frozen=True)
class NextTokenScores:
    """Log-probabilities of the given single-token continuations after the prompt (``None`` where
    the backend did not report a label, e.g. an HTTP server's top-k logprobs not reaching it)."""

    logprobs: dict[str, float | None]
    tokens_in: int
    seconds: float
    cached: bool = False


@dataclass
class GenerationStats:
    """What a ranker's generation cost, summed over the run (``ranker_info["generation"]``)."""

    calls: int = 0  # model calls actually made (cache misses)
    cache_hits: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    seconds: float = 0.0  # wall time of the model calls (cache hits excluded)
    parse_failures: int = 0  # answers the ranker's parser had to repair or could not read
    repairs: dict[str, int] = field(default_factory=dict)  # repair kind -> count (duplicates, missing, ...)

    def add(self, c: Completion | NextTokenScores) -> None:
        if c.cached:
            self.cache_hits += 1
            return
        self.calls += 1
        self.tokens_in += c.tokens_in
        self.tokens_out += getattr(c, "tokens_out", 0)
        self.seconds += c.seconds

    def repaired(self, kind: str, n: int = 1) -> None:
        if n:
            self.repairs[kind] = self.repairs.get(kind, 0) + n

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "seconds": round(self.seconds, 3)}


@runtime_checkable
class Backend(Protocol):
    """What every generation backend provides.

    ``identity`` names what produced an answer (backend kind, model, revision or weights digest,
    dtype/device where they change numerics): the response cache keys on it, the RunRecord stores
    it. ``chat`` answers each conversation (batched as the backend sees fit, results in input
    order). ``next_token_logprobs`` scores single-token continuations (PRP's "A"/"B", pointwise
    "Yes"/"No"); ``supports_logprobs`` says whether it can (else rankers fall back to generated
    labels).
    """

    kind: str
    supports_logprobs: bool

    def identity(self) -> dict[str, Any]: ...

    def chat(self, chats: list[Chat], decoding: Decoding) -> list[Completion]: ...

    def next_token_logprobs(self, chats: list[Chat], labels: tuple[str, ...]) -> list[NextTokenScores]: ...

    def close(self) -> None: ...
