"""Generation backends: the protocol, the factory, and one module per backend kind.

Generative rankers (RankGPT, PRP, IRanker, pointwise relevance) ask a language model for text or
for the log-probabilities of a few next tokens; *how* the model runs is a backend's business. The
module of each kind is named after the kind users set with ``--set backend=KIND``:

- ``transformers`` (``backends/transformers.py``): in process, CPU or GPU, logits available;
- ``vllm`` (``backends/vllm.py``): vLLM's offline engine (GPU; optional extra);
- ``openai`` (``backends/openai.py``): any OpenAI-compatible HTTP server (``base_url``, model
  name, key from an environment variable, the one HTTP policy of ``rbench.core.http``; logprobs
  when the server offers them).

``make_backend`` is the one factory the rankers call; it imports a kind's module only when that
kind is asked for (torch, transformers and vllm stay unimported otherwise)::

    make_backend("transformers", model="smollm2-135m", batch_size=8)
    make_backend("vllm", model="Qwen/Qwen2.5-7B-Instruct", dtype="bfloat16")
    make_backend("openai", base_url="http://127.0.0.1:8000/v1", model="qwen2.5-7b")

Every backend sits behind the on-disk response cache (``rbench_rankers.generative.cache``), keyed
by (backend identity, prompt, decoding settings), so a re-run or a crashed run resumes without
paying again, and counts every call into ``GenerationStats`` (recorded as
``ranker_info["generation"]``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

from rbench.plugin import RBenchError

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
    """What a ranker's generation cost and how readable the model was, summed over the run
    (``ranker_info["generation"]``).

    Cost is **honest under the cache**: ``calls``, ``tokens_in``, ``tokens_out`` and ``seconds``
    count every answer the ranking used, at what it cost the run that produced it (a replayed
    answer carries its original tokens and seconds); ``cache_hits`` says how many of them were
    replayed and ``fresh`` what this run paid itself (model calls made, their tokens and seconds).

    Readability (``GenerativeRanker`` fills it): ``answers`` read by a parser, ``parse_failures``
    (answers that had to be repaired or could not be read; by kind in ``repairs``), ``fallbacks``
    (answers read only by a fallback, e.g. IRanker's name similarity), ``comparisons`` and
    ``ties`` (pairwise verdicts that gave no winner), and per list the rank correlation of the
    output with the input order (``lists``, and sums of Kendall's tau-b and Spearman's rho)."""

    calls: int = 0  # answers used, each counted as the model call that produced it
    cache_hits: int = 0  # of which replayed from the response cache
    tokens_in: int = 0
    tokens_out: int = 0
    seconds: float = 0.0  # model wall time that produced the answers (replayed ones: the original)
    fresh_calls: int = 0  # model calls made by this run (cache misses)
    fresh_tokens_in: int = 0
    fresh_tokens_out: int = 0
    fresh_seconds: float = 0.0
    answers: int = 0
    parse_failures: int = 0  # answers the ranker's parser had to repair or could not read
    fallbacks: int = 0
    comparisons: int = 0
    ties: int = 0
    lists: int = 0
    tau_sum: float = 0.0
    rho_sum: float = 0.0
    repairs: dict[str, int] = field(default_factory=dict)  # repair kind -> count (duplicates, missing, ...)

    def add(self, c: Completion | NextTokenScores) -> None:
        tokens_out = int(getattr(c, "tokens_out", 0))
        self.calls += 1
        self.tokens_in += c.tokens_in
        self.tokens_out += tokens_out
        self.seconds += c.seconds
        if c.cached:
            self.cache_hits += 1
            return
        self.fresh_calls += 1
        self.fresh_tokens_in += c.tokens_in
        self.fresh_tokens_out += tokens_out
        self.fresh_seconds += c.seconds

    def repaired(self, kind: str, n: int = 1) -> None:
        if n:
            self.repairs[kind] = self.repairs.get(kind, 0) + n

    def as_dict(self) -> dict[str, Any]:
        """The record's form: the counters, plus the shares ``rbench run`` and ``rbench table``
        judge a ranker by (``rbench.results.ranking_checks``): ``repaired_share`` (parse failures
        and fallbacks per answer read), ``tie_share`` (ties per comparison), and the mean over
        lists of ``input_order_tau`` / ``input_order_spearman`` (None before any list)."""
        out: dict[str, Any] = {
            "calls": self.calls, "cache_hits": self.cache_hits, "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out, "seconds": round(self.seconds, 3),
            "fresh": {"calls": self.fresh_calls, "tokens_in": self.fresh_tokens_in,
                      "tokens_out": self.fresh_tokens_out, "seconds": round(self.fresh_seconds, 3)},
            "answers": self.answers, "parse_failures": self.parse_failures, "fallbacks": self.fallbacks,
            "repairs": dict(self.repairs), "comparisons": self.comparisons, "ties": self.ties, "lists": self.lists,
        }
        out["repaired_share"] = (round((self.parse_failures + self.fallbacks) / self.answers, 4)
                                 if self.answers else None)
        out["tie_share"] = round(self.ties / self.comparisons, 4) if self.comparisons else None
        out["input_order_tau"] = round(self.tau_sum / self.lists, 4) if self.lists else None
        out["input_order_spearman"] = round(self.rho_sum / self.lists, 4) if self.lists else None
        return out


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


KINDS = ("openai", "transformers", "vllm")  # the values of ``--set backend=``; each is a module here


def make_backend(kind: str, **options: Any) -> Backend:
    """The backend of ``kind`` built with ``options``; an unknown kind or option is one line."""
    if kind == "transformers":
        from .transformers import TransformersBackend

        cls: Any = TransformersBackend
    elif kind == "vllm":
        from .vllm import VLLMBackend

        cls = VLLMBackend
    elif kind == "openai":
        from .openai import OpenAIBackend

        cls = OpenAIBackend
    else:
        raise RBenchError(f"unknown generation backend {kind!r}; choose one of: {', '.join(KINDS)}")
    try:
        return cls(**options)
    except TypeError as exc:
        if "__init__()" not in str(exc):  # a bug inside the constructor, not a wrong option
            raise
        raise RBenchError(f"backend {kind!r}: {str(exc).replace('__init__()', 'options:')}") from None
