"""``GenerativeRanker``: what the LLM rankers (rankgpt, prp, iranker, pointwise-llm) share.

- **Options** (``GenerativeOptions``, extended by each ranker): the backend (``transformers`` in
  process, ``vllm``, ``openai`` for any OpenAI-compatible server at ``base_url`` with the key read
  from the environment variable ``api_key_env``), the ``model`` (default ``smollm2-135m``, the
  offline SmolLM2-135M-Instruct), ``device``/``dtype``/``batch_size`` for local backends, decoding
  (``max_new_tokens``: 0 = the ranker's own default; ``temperature`` 0 = greedy; ``seed``: None =
  the run's seed), ``max_candidate_chars`` (each candidate's text is cut to this many characters,
  see ``prompts.truncate``), ``cache`` (answers are kept in one sqlite file under
  ``<cache_dir>/generation/``, keyed by backend identity, prompt and decoding, so a re-run or a
  crashed run pays only for what is missing) and ``max_list``.
- **Inputs**: query text is ``queries.texts[i]`` (the raw query, never the LLM template);
  candidate text is ``pool.text_batch(idx)`` of the pool ``index`` received; the domain's wording
  comes from ``task.spec.domain`` read in ``fit`` (``prompts.WORDING``).
- **Lists**: ``score`` takes the contract's candidates: 2-D (one list per query: the small
  scenario or a two-stage ``--rerank-from`` run) or 1-D (a shared pool). A list longer than
  ``max_list`` is refused in one line, suggesting ``--rerank-from bm25 --rerank-depth 20``;
  windowed rankers (``windowed = True``: rankgpt) take per-query lists of any length, but a
  shared pool above ``max_list`` is refused for them too (every query would read the whole pool).
- **Scores**: a ranker produces, per query, either an order (a permutation of the row: the base
  turns it into scores ``m - position``, float64, higher better, no ties) or real-valued scores.
  ``set_dependent = True`` (an order is a decision over the whole list: the engine scores each
  query's list in one call), ``transfers = True`` (nothing is fitted), ``rerank_depth = 20``
  (the default depth of ``--rerank-from``).
- **Record**: ``info["generation"]`` = ``GenerationStats.as_dict()`` (model calls, cache hits,
  tokens, seconds, parse failures and repairs by kind), ``info["backend"]`` = the backend's
  identity, ``info["prompt"]`` names the prompt and the domain wording used.
- A ready backend object may be passed as ``backend=`` to the constructor (tests, notebooks); it
  sits behind the same cache and counters as a built one (its ``identity()`` keys the cache).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from rbench.api import Pool, Queries, TaskData
from rbench.plugin import BaseRanker, RBenchError

from .backend import Chat, Decoding, GenerationStats
from .prompts import truncate, wording

ALL_DOMAINS = ("recommendation", "routing", "passage", "product", "generic")


@dataclass
class GenerativeOptions:
    """Options every generative ranker has (see the module docstring)."""

    backend: str = "transformers"  # transformers | vllm | openai
    model: str = "smollm2-135m"
    base_url: str = ""  # openai backend: the server's URL
    api_key_env: str = "OPENAI_API_KEY"  # openai backend: the environment variable holding the key
    device: str = "auto"
    dtype: str = "auto"
    batch_size: int = 8
    max_new_tokens: int = 0  # 0: the ranker's default for its answers
    temperature: float = 0.0
    seed: int | None = None  # None: the run's seed
    max_candidate_chars: int = 300
    cache: bool = True
    max_list: int = 100

    def validate(self) -> None:
        for name in ("batch_size", "max_list"):
            if getattr(self, name) < 1:
                raise RBenchError(f"{name} must be >= 1")
        for name in ("max_new_tokens", "max_candidate_chars"):
            if getattr(self, name) < 0:
                raise RBenchError(f"{name} must be >= 0")
        if self.temperature < 0:
            raise RBenchError("temperature must be >= 0")
        from .backends import KINDS  # the factory's list: one place

        if self.backend not in KINDS:
            raise RBenchError(f"backend {self.backend!r}: choose {', '.join(KINDS)}")


def order_scores(order: Any, m: int) -> np.ndarray:
    """Scores of the row's candidates from an order (0-based positions, best first): the
    candidate at position p gets ``m - p``. ``order`` must be a permutation of ``range(m)``."""
    order = np.asarray(order, dtype=np.int64)
    if order.shape != (m,) or not np.array_equal(np.sort(order), np.arange(m)):
        raise RBenchError(f"internal: an order of {m} candidates is not a permutation: {order.tolist()}")
    out = np.empty(m, dtype=np.float64)
    out[order] = m - np.arange(m, dtype=np.float64)
    return out


class GenerativeRanker(BaseRanker):
    """Base of the LLM rankers: backend, cache, counters, inputs and the order -> score rule.

    Subclasses implement ``rank(queries, docs) -> (n, m) scores`` with ``queries`` the query
    texts and ``docs[i]`` the (truncated) candidate texts of query i; ``self.generate`` and
    ``self.label_logprobs`` call the model (counted and cached); ``self.wording`` is the domain's."""

    version = "1"
    Config: ClassVar[type] = GenerativeOptions
    domains = ALL_DOMAINS
    transfers = True
    set_dependent = True
    windowed: ClassVar[bool] = False

    @classmethod
    def needs_training(cls, config: Any) -> bool:
        return False  # fit only notes the task's domain (its wording)
    rerank_depth: ClassVar[int] = 20
    default_new_tokens: ClassVar[int] = 16

    def __init__(self, config: Any | None = None, context: Any | None = None, backend: Any | None = None) -> None:
        super().__init__(config, context)
        validate = getattr(self.cfg, "validate", None)
        if callable(validate):
            validate()
        self._given_backend = backend
        self._backend: Any = None
        self._pool: Pool | None = None
        self.domain = "generic"
        self.stats = GenerationStats()
        self.info: dict[str, Any] = {}

    # -- backend --------------------------------------------------------------------------------

    @property
    def backend(self) -> Any:
        """The backend behind the response cache (built on first use)."""
        if self._backend is None:
            from .cache import CachedBackend, ResponseCache

            inner = self._given_backend if self._given_backend is not None else self._make_backend()
            cache = ResponseCache(self.context.cache_dir / "generation" / "responses.sqlite") if self.cfg.cache else None
            self._backend = CachedBackend(inner, cache, self.stats)
            self.info["backend"] = dict(self._backend.identity())
        return self._backend

    def _make_backend(self) -> Any:
        cfg = self.cfg
        options: dict[str, Any] = {"model": cfg.model, "device": cfg.device, "dtype": cfg.dtype,
                                   "batch_size": cfg.batch_size}
        if cfg.backend == "openai":
            options = {"model": cfg.model, "base_url": cfg.base_url, "api_key_env": cfg.api_key_env,
                       "batch_size": cfg.batch_size}
        try:
            from .backends import make_backend
        except ImportError:  # the factory is not there: the in-process backend still is
            if cfg.backend != "transformers":
                raise RBenchError(f"backend {cfg.backend!r} is not available in this installation") from None
            from .hf import TransformersBackend

            return TransformersBackend(**options)
        return make_backend(cfg.backend, **options)

    def decoding(self, max_new_tokens: int | None = None) -> Decoding:
        seed = self.cfg.seed if self.cfg.seed is not None else int(getattr(self.context, "seed", 0))
        return Decoding(max_new_tokens=int(self.cfg.max_new_tokens or max_new_tokens or self.default_new_tokens),
                        temperature=float(self.cfg.temperature), seed=int(seed))

    def generate(self, chats: list[Chat], max_new_tokens: int | None = None) -> list[str]:
        """The model's answer to each chat (cached, counted)."""
        if not chats:
            return []
        return [c.text for c in self.backend.chat(chats, self.decoding(max_new_tokens))]

    def label_logprobs(self, chats: list[Chat], labels: tuple[str, ...]) -> list[dict[str, float | None]]:
        """Log-probabilities of single-token ``labels`` as each chat's answer (cached, counted)."""
        if not chats:
            return []
        return [dict(s.logprobs) for s in self.backend.next_token_logprobs(chats, labels)]

    @property
    def logprobs_available(self) -> bool:
        return bool(self.backend.supports_logprobs)

    def failed(self, kind: str, n: int = 1) -> None:
        """Count ``n`` answers that needed repair ``kind`` (each is a parse failure)."""
        if n:
            self.stats.repaired(kind, n)
            self.stats.parse_failures += n

    @property
    def wording(self) -> Any:
        return wording(self.domain)

    # -- protocol -------------------------------------------------------------------------------

    def fit(self, task: TaskData) -> None:
        self.domain = str(task.spec.domain)

    def index(self, pool: Pool) -> None:
        self._pool = pool

    def score(self, queries: Queries, candidates: np.ndarray) -> np.ndarray:
        if self._pool is None:
            raise RBenchError(f"{self.name}: score() called before index(pool)")
        cand = np.asarray(candidates)
        if cand.ndim not in (1, 2):
            raise RBenchError(f"{self.name}: candidates must be 1-D or 2-D, got shape {cand.shape}")
        m = cand.shape[-1]
        if m > self.cfg.max_list and (cand.ndim == 1 or not self.windowed):
            where = "a shared pool of" if cand.ndim == 1 else "lists of"
            raise RBenchError(f"ranker {self.name!r} asks a language model about every candidate of a query, and got {where} "
                              f"{m} candidates (max_list={self.cfg.max_list}): rerank a first stage's top "
                              f"candidates instead, e.g. --rerank-from bm25 --rerank-depth 20")
        rows = cand if cand.ndim == 2 else np.broadcast_to(cand, (len(queries), m))
        out = np.zeros(rows.shape, dtype=np.float64)
        if rows.size:
            limit = self.cfg.max_candidate_chars
            uniq, inv = np.unique(rows, return_inverse=True)
            texts = [truncate(t, limit) for t in self._pool.text_batch(uniq)]
            inv = inv.reshape(rows.shape)
            docs = [[texts[j] for j in inv[i]] for i in range(len(rows))]
            qs = [" ".join(str(queries.texts[i]).split()) for i in range(len(queries))]
            out = np.asarray(self.rank(qs, docs), dtype=np.float64).reshape(rows.shape)
        self.info["generation"] = self.stats.as_dict()
        if self._backend is not None:
            self.info["backend"] = dict(self._backend.identity())
        self.info["prompt"] = {"ranker": self.name, "domain": self.domain, "noun": self.wording.noun}
        return out

    def rank(self, queries: list[str], docs: list[list[str]]) -> np.ndarray:
        raise NotImplementedError

    def close(self) -> None:
        if self._backend is not None:
            self._backend.close()
            self._backend = None
