"""``GenerativeRanker``: what the LLM rankers (rankgpt, prp, iranker, pointwise-llm) share.

- **Options** (``GenerativeOptions``, extended by each ranker): the backend (``transformers`` in
  process, ``vllm``, ``openai`` for any OpenAI-compatible server at ``base_url`` with the key read
  from the environment variable ``api_key_env``), the ``model`` (default ``smollm2-135m``, the
  offline SmolLM2-135M-Instruct), ``device``/``dtype``/``batch_size`` for local backends, decoding
  (``max_new_tokens``: 0 = the ranker's own default; ``temperature`` 0 = greedy; ``seed``: None =
  the run's seed), ``max_candidate_words`` (each candidate's text is cut to this many words,
  default 300 as RankGPT's paper; a prompt that still exceeds the backend's context is shrunk to
  fit, ``fit_words``) and ``max_candidate_chars`` (0: no cut by characters), ``cache`` (answers
  are kept in one sqlite file under ``<cache_dir>/generation/``, keyed by backend identity
  (weights by content digest), prompt, decoding and ``prompts.TEMPLATE_VERSION``, so a re-run or
  a crashed run pays only for what is missing) and ``max_list``.
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
- **Record**: ``info["generation"]`` = ``GenerationStats.as_dict()`` (the cost of the answers used,
  the cache hits and this run's own cost apart, parse failures, fallbacks, ties, repairs by kind,
  and the mean rank correlation of each output list with its input order), ``info["backend"]``
  = the backend's identity, ``info["prompt"]`` names the prompt, its template version and the
  domain wording used. ``rbench run`` warns and ``rbench table`` marks a record whose output is
  (nearly) the input order or whose answers were mostly repaired
  (``rbench.results.ranking_checks``).
- A ready backend object may be passed as ``backend=`` to the constructor (tests, notebooks); it
  sits behind the same cache and counters as a built one (its ``identity()`` keys the cache).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

import numpy as np

from rbench.api import DOMAINS, Pool, Queries, TaskData
from rbench.plugin import AtLeast0, AtLeast1, BaseRanker, Range, RBenchError, Seed

from .backends import Chat, Decoding, GenerationStats
from .failures import rank_queries
from .prompts import TEMPLATE_VERSION, truncate, wording

# the most candidates one LLM prompt lists: every list is a prompt (and a window's answer) per query (issue 42)
MaxList = Annotated[int, Range(1, 10_000)]



@dataclass
class GenerativeOptions:
    """Options every generative ranker has (see the module docstring)."""

    backend: str = "transformers"  # transformers | vllm | openai
    model: str = "smollm2-135m"
    base_url: str = ""  # openai backend: the server's URL
    api_key_env: str = "OPENAI_API_KEY"  # openai backend: the environment variable holding the key
    timeout_s: Annotated[float, Range(0, 86_400, lo_open=True)] = 60.0  # openai backend: seconds one try of a request may take in all (headers and body)
    retries: Annotated[int, Range(0, 100)] = 4  # openai backend: tries after the first on a timeout, lost connection, 429 or 5xx
    concurrency: Annotated[int, Range(1, 256)] = 4  # openai backend: requests in flight at once (1 for a one-at-a-time server, e.g. llama.cpp's)
    deadline_s: Annotated[float, Range(0, 30 * 86_400)] = 0.0  # openai backend: seconds all requests of the run may take together (0: no limit)
    on_failure: Literal["abort", "skip"] = "abort"  # a query whose request fails: abort the run, or skip it (scored as a miss, counted)
    device: str = "auto"
    dtype: str = "auto"
    batch_size: AtLeast1 = 8
    max_new_tokens: Annotated[int, Range(0, 1 << 20)] = 0  # 0: the ranker's default for its answers
    temperature: Annotated[float, Range(0, 100)] = 0.0
    seed: Seed | None = None  # None: the run's seed
    max_candidate_words: AtLeast0 = 300  # RankGPT's cut; shrunk further when a prompt exceeds the context
    max_candidate_chars: AtLeast0 = 0  # 0: no cut by characters
    cache: bool = True
    max_list: MaxList = 100

    def validate(self) -> None:
        from .backends import KINDS  # the factory's list: one place

        if self.backend not in KINDS:
            raise RBenchError(f"backend {self.backend!r}: choose {', '.join(KINDS)}")


def input_order_correlation(scores: np.ndarray) -> tuple[float, float]:
    """(Kendall's tau-b, Spearman's rho) of one list's scores with its input order (the first
    candidate of the input is "best": score ``m - position``). 1.0: the output *is* the input
    order; about 0: unrelated. A list of one candidate, or constant scores, gives (1.0, 1.0): it
    ranked nothing."""
    x = np.asarray(scores, dtype=np.float64)
    m = x.shape[0]
    if m < 2 or np.all(x == x[0]):
        return 1.0, 1.0
    y = m - np.arange(m, dtype=np.float64)
    dx = np.sign(x[:, None] - x[None, :])
    dy = np.sign(y[:, None] - y[None, :])
    iu = np.triu_indices(m, 1)
    concord = float((dx * dy)[iu].sum())
    tx, ty = float(np.abs(dx[iu]).sum()), float(np.abs(dy[iu]).sum())
    tau = concord / np.sqrt(tx * ty)
    rx = _average_ranks(x)
    ry = _average_ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    rho = float((rx * ry).sum() / np.sqrt((rx * rx).sum() * (ry * ry).sum()))
    return float(tau), rho


def _average_ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x), dtype=np.float64)
    ranks[order] = np.arange(len(x), dtype=np.float64)
    for v in np.unique(x):
        tied = x == v
        if tied.sum() > 1:
            ranks[tied] = ranks[tied].mean()
    return ranks


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
    domains = DOMAINS
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
        self.scenario = ""  # routing: the task's objective (balance / performance / cost)
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
            self._backend = CachedBackend(inner, cache, self.stats, namespace={"template": TEMPLATE_VERSION})
            self.info["backend"] = dict(self._backend.identity())
        return self._backend

    def _make_backend(self) -> Any:
        cfg = self.cfg
        options: dict[str, Any] = {"model": cfg.model, "device": cfg.device, "dtype": cfg.dtype,
                                   "batch_size": cfg.batch_size}
        if cfg.backend == "openai":
            options = {"model": cfg.model, "base_url": cfg.base_url, "api_key_env": cfg.api_key_env,
                       "batch_size": cfg.batch_size, "timeout_s": cfg.timeout_s, "retries": cfg.retries,
                       "concurrency": cfg.concurrency, "deadline_s": cfg.deadline_s}
        from .backends import make_backend

        return make_backend(cfg.backend, **options)

    def decoding(self, max_new_tokens: int | None = None) -> Decoding:
        seed = self.cfg.seed if self.cfg.seed is not None else int(getattr(self.context, "seed", 0))
        return Decoding(max_new_tokens=int(self.cfg.max_new_tokens or max_new_tokens or self.default_new_tokens),
                        temperature=float(self.cfg.temperature), seed=int(seed))

    def generate(self, chats: list[Chat], max_new_tokens: int | None = None) -> list[str]:
        """The model's answer to each chat (cached, counted; each counts one answer read)."""
        if not chats:
            return []
        texts = [c.text for c in self.backend.chat(chats, self.decoding(max_new_tokens))]
        self.stats.answers += len(texts)
        return texts

    @property
    def prefill_available(self) -> bool:
        """Whether the backend continues a partial assistant message (a primed answer)."""
        return bool(getattr(self.backend, "supports_prefill", False))

    def fit_words(self, make_chat: Any, new_tokens: int) -> Chat:
        """``make_chat(max_words)`` at ``max_candidate_words``, shrunk (fewer words per candidate,
        as rank_llm shrinks passages) until the prompt and ``new_tokens`` fit the backend's
        context; a backend that cannot count tokens gets the first. The smallest limit used is
        recorded (``info["shrunk_to_words"]``)."""
        words = int(self.cfg.max_candidate_words) or 10 ** 6
        chat = make_chat(words)
        inner = getattr(self.backend, "backend", self.backend)
        count, limit = getattr(inner, "count_tokens", None), getattr(inner, "context_length", None)
        if not callable(count) or not limit:
            return chat
        for _ in range(12):
            n = int(count([chat])[0])
            room = int(limit) - int(new_tokens)
            if n <= room or words <= 8:
                break
            longest = max((len(m["content"].split()) for m in chat), default=1)
            words = max(8, min(words, longest) * room // max(n, 1) * 9 // 10)
            chat = make_chat(words)
            prev = self.info.get("shrunk_to_words")
            self.info["shrunk_to_words"] = words if prev is None else min(prev, words)
        return chat

    def label_logprobs(self, chats: list[Chat], labels: tuple[str, ...]) -> list[dict[str, float | None]]:
        """Log-probabilities of single-token ``labels`` as each chat's answer (cached, counted)."""
        if not chats:
            return []
        got = [dict(s.logprobs) for s in self.backend.next_token_logprobs(chats, labels)]
        self.stats.answers += len(got)
        return got

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
        info = getattr(task, "info", None) or {}
        self.scenario = str(info.get("scenario", "")) if self.domain == "routing" else ""

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
            uniq, inv = np.unique(rows, return_inverse=True)
            texts = [truncate(t, self.cfg.max_candidate_chars, self.cfg.max_candidate_words)
                     for t in self._pool.text_batch(uniq)]
            inv = inv.reshape(rows.shape)
            docs = [[texts[j] for j in inv[i]] for i in range(len(rows))]
            qs = [" ".join(str(queries.texts[i]).split()) for i in range(len(queries))]
            out = rank_queries(self, qs, docs).reshape(rows.shape)
            for row in out:  # how far each output list is from its input order (record, checks)
                tau, rho = input_order_correlation(row)
                self.stats.lists += 1
                self.stats.tau_sum += tau
                self.stats.rho_sum += rho
        self.info["generation"] = self.stats.as_dict()
        if self._backend is not None:
            self.info["backend"] = dict(self._backend.identity())
        self.info["prompt"] = {"ranker": self.name, "domain": self.domain, "noun": self.wording.noun,
                               "template": TEMPLATE_VERSION, **({"scenario": self.scenario} if self.scenario else {})}
        return out

    def rank(self, queries: list[str], docs: list[list[str]]) -> np.ndarray:
        raise NotImplementedError

    def close(self) -> None:
        if self._backend is not None:
            self._backend.close()
            self._backend = None
