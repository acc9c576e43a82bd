"""The public contract between tasks, the evaluation engine and ranker plugins.

Everything a ranker sees is defined here, so a plugin written against this module keeps working
when tasks or the engine change. Arrays are numpy; variable-length per-query lists (positives,
history, exclusions) are stored as one flat array plus offsets (``Ragged``) so that millions of
queries never become millions of Python lists.
"""

from __future__ import annotations

import copy
import operator
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol, get_args, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from rbench.core.config import config_dict
from rbench.core.settings import DEFAULT_SEED

# --------------------------------------------------------------------------------------------
# What a task is (declarative, like MTEB's TaskMetadata)
# --------------------------------------------------------------------------------------------

Scenario = Literal["small", "large", "ultra"]
Domain = Literal["recommendation", "routing", "passage", "product", "generic"]
DOMAINS: tuple[str, ...] = get_args(Domain)  # the task domains, written once (in ``Domain``)
SCENARIOS: tuple[str, ...] = ("small", "large", "ultra")
VARIANT_KINDS: tuple[str, ...] = ("mixed", "shift", "scaled")  # variants that draw candidates from donors

# The paper's four templates (Appendix "Prompt Usage"); [USER QUERY] becomes ``{query}``.
_TEMPLATE = "Task: {task}\n\nQuery: {{query}}\n\n<|embedding|> {instruction}"
PROMPTS: dict[str, str] = {
    "recommendation": _TEMPLATE.format(
        task="Recommendation",
        instruction="Based on the global context information (candidate items) and the query above, "
        "recommend the most relevant item.",
    ),
    "routing": _TEMPLATE.format(
        task="Routing",
        instruction="Based on the global context information (candidate LLMs/agents) and the query "
        "above, select the most suitable route or model.",
    ),
    "passage": _TEMPLATE.format(
        task="Passage Ranking",
        instruction="Based on the global context information (candidate passages) and the query above, "
        "identify the most relevant passage.",
    ),
    "product": _TEMPLATE.format(
        task="Product Searching",
        instruction="Based on the global context information (candidate products) and the query above, "
        "return the product that best matches the search intent.",
    ),
}
PROMPTS["generic"] = PROMPTS["passage"]
PLACEHOLDER = "<|embedding|>"
MAX_GRADE = 1e9  # relevance grades are in (0, MAX_GRADE]: nDCG sums them as gains, larger ones overflow it


@dataclass(frozen=True)
class RemoteFile:
    """One downloadable file of a source. ``urls[0]`` is tried first, the rest are mirrors."""

    filename: str
    urls: tuple[str, ...]
    sha256: str | None = None  # None: no published checksum (not checked; recorded after download)
    size: int | None = None  # bytes, when known
    extract: bool = False  # an archive to unpack into the raw folder
    note: str = ""


@dataclass(frozen=True)
class Source:
    """One public input of a task: where it comes from, its license, and (when the public can
    fetch it directly) the files ``rbench data download`` gets, with their checksums."""

    name: str
    url: str
    license: str
    sha256: str | None = None
    note: str = ""
    files: tuple[RemoteFile, ...] = ()


@dataclass(frozen=True)
class TaskSpec:
    """Every fact about one task that is not code: identity, paper sizes, sources, license, the
    protocol notes, and its role in the paper and in the pool variants. A task family may extend
    it with its own facts (input layouts, pool rule) so that one task stays one declaration."""

    name: str
    title: str
    scenario: Scenario
    domain: Domain
    description: str
    paper_candidates: int | None  # per-query list size for the small scenario
    paper_queries: int | None
    sources: tuple[Source, ...]
    license: str
    how_to_get: str
    protocol: str = ""  # every choice the paper leaves open, written down
    embedded: bool = False  # data ships inside an installed package (no download)
    paper_row: int | None = None  # position in the paper's Table 2 (None: not a task of the paper)
    donates: tuple[str, ...] = ()  # pool variants (VARIANT_KINDS) that draw candidates from this task
    # the default pool is gathered from the queries' own judged candidates (ESCI, MS MARCO v1.1): the
    # train/valid positives ``fit`` is handed are much of it, so the ``prior`` floor is shown beside it
    pool_from_positives: bool = False
    tags: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        unknown = [v for v in self.donates if v not in VARIANT_KINDS]
        if unknown:
            raise ValueError(f"task {self.name!r}: donates {unknown}, expected some of {VARIANT_KINDS}")

    @property
    def prompt(self) -> str:
        return PROMPTS[self.domain]

    @property
    def downloads(self) -> tuple[RemoteFile, ...]:
        """Every directly downloadable file of the task's sources."""
        return tuple(f for s in self.sources for f in s.files)

    def render_prompt(self, query: str) -> str:
        return self.prompt.replace("{query}", query)


# --------------------------------------------------------------------------------------------
# Ragged arrays
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ragged:
    """Rows of different lengths in one flat array (CSR layout without columns).

    Row ``i`` is ``values[offsets[i]:offsets[i+1]]``. Cheap to slice, to save as two arrays and
    to memory-map, unlike a list of arrays.
    """

    offsets: NDArray[Any]  # int64, len n_rows + 1, offsets[0] == 0
    values: NDArray[Any]

    def __post_init__(self) -> None:
        if self.offsets.ndim != 1 or len(self.offsets) == 0 or int(self.offsets[0]) != 0:
            raise ValueError("Ragged.offsets must be 1-D and start at 0")
        if int(self.offsets[-1]) != len(self.values):
            raise ValueError(
                f"Ragged.offsets ends at {int(self.offsets[-1])} but there are {len(self.values)} values"
            )

    @classmethod
    def from_rows(cls, rows: Sequence[Sequence[Any]], dtype: Any = np.int64) -> Ragged:
        lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        values = (
            np.concatenate([np.asarray(r, dtype=dtype) for r in rows])
            if len(rows) and offsets[-1] > 0
            else np.zeros(0, dtype=dtype)
        )
        return cls(offsets, values.astype(dtype, copy=False))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> NDArray[Any]:
        """Row ``i``; negative indices count from the end, as for a list."""
        n = len(self)
        j = operator.index(i)
        if j < 0:
            j += n
        if not 0 <= j < n:
            raise IndexError(f"Ragged row {i} out of range for {n} rows")
        return self.values[self.offsets[j] : self.offsets[j + 1]]

    def __iter__(self) -> Iterator[NDArray[Any]]:
        for i in range(len(self)):
            yield self[i]

    def lengths(self) -> NDArray[Any]:
        return np.diff(self.offsets)

    def take(self, rows: NDArray[Any]) -> Ragged:
        rows = np.asarray(rows, dtype=np.int64)
        starts, ends = self.offsets[rows], self.offsets[rows + 1]
        lengths = ends - starts
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if offsets[-1] == 0:
            return Ragged(offsets, self.values[:0])
        # vectorised gather of the selected slices
        idx = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])
        return Ragged(offsets, self.values[idx])

    def slice(self, start: int, stop: int) -> Ragged:
        """Rows start .. stop-1 (``take`` of a range, without its gather: the values are a view)."""
        lo, hi = int(self.offsets[start]), int(self.offsets[stop])
        return Ragged(self.offsets[start : stop + 1] - lo, self.values[lo:hi])

    def row_ids(self) -> NDArray[Any]:
        """Row number of each value (for scatter operations)."""
        return np.repeat(np.arange(len(self), dtype=np.int64), self.lengths())


def _private(a: NDArray[Any]) -> NDArray[Any]:
    """A copy no one else holds, marked read-only. (A read-only *view* is not enough: numpy lets
    its holder set ``writeable`` back whenever the base is writeable, and write through it.)"""
    out = np.array(a, copy=True)
    out.setflags(write=False)
    return out


# --------------------------------------------------------------------------------------------
# Pool and queries
# --------------------------------------------------------------------------------------------


class TextColumn(Protocol):
    """Anything indexable by int and by int arrays that yields candidate texts (may be lazy)."""

    def __len__(self) -> int: ...
    def __getitem__(self, i: Any) -> Any: ...


@dataclass
class Pool:
    """The candidates of one task (or variant): stable ids, texts, optional domain per item.

    ``texts`` may be a lazy column (memory-mapped, on-disk) for million-item pools; rankers must
    fetch texts by index (``pool.text_batch(idx)``) instead of copying them all.
    """

    ids: NDArray[Any]  # str (object) array, unique
    texts: TextColumn
    domains: NDArray[Any] | None = None  # per-candidate source tag (mixed/shift variants)
    name: str = ""
    fingerprint: str = ""

    def __post_init__(self) -> None:
        if len(self.ids) != len(self.texts):
            raise ValueError(f"pool {self.name!r}: {len(self.ids)} ids but {len(self.texts)} texts")

    def __len__(self) -> int:
        return len(self.ids)

    def text_batch(self, idx: NDArray[Any]) -> list[str]:
        return [str(self.texts[int(i)]) for i in idx]

    def for_ranker(self) -> Pool:
        """The pool as a ranker receives it (``fit``, ``index``, ``encode_pool``): private
        read-only ids and domains, the same texts (a lazy column is read-only already; a list is
        copied), so nothing a ranker does to it reaches the harness's pool or the run file."""
        texts = list(self.texts) if isinstance(self.texts, list) else self.texts
        return Pool(ids=_private(self.ids), texts=texts,
                    domains=_private(self.domains) if self.domains is not None else None,
                    name=self.name, fingerprint=self.fingerprint)


@dataclass
class Queries:
    """One split's queries.

    ``texts`` are the raw query contents (the paper's ``[USER QUERY]``: a search query, or the
    rendered interaction history); ``prompts`` are the same wrapped in the task's prompt template
    (what LLM rankers read). ``positives`` hold pool indices with ``grades`` aligned (graded
    relevance, > 0). ``candidates`` (small scenario) gives each query its own candidate list of
    pool indices, shape (n_queries, m). ``exclude`` lists pool indices removed from that query's
    ranking (the user's past interactions, as RecBole's full-sort evaluation does); a positive is
    never excluded. ``history`` is the ordered interaction history (pool indices) for
    recommendation tasks; ``user_ids`` name the user of each query there. The queries a ranker
    is scored on reach it as ``unlabelled()`` (``labelled`` False: no positives, grades,
    exclusions or meta; docs/reference/contract.md).
    """

    ids: NDArray[Any]
    texts: list[str]
    positives: Ragged
    grades: Ragged
    prompts: list[str] | None = None
    history: Ragged | None = None
    candidates: NDArray[Any] | None = None
    exclude: Ragged | None = None
    user_ids: NDArray[Any] | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    labelled: bool = True  # False: a label-free view (``unlabelled``): positives/grades empty rows

    def __post_init__(self) -> None:
        n = len(self.ids)
        for name in ("texts", "positives", "grades"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"Queries.{name} has {len(getattr(self, name))} rows, expected {n}")
        for name in ("prompts", "history", "exclude", "user_ids"):
            value = getattr(self, name)
            if value is not None and len(value) != n:
                raise ValueError(f"Queries.{name} has {len(value)} rows, expected {n}")
        if self.candidates is not None and (self.candidates.ndim != 2 or len(self.candidates) != n):
            raise ValueError("Queries.candidates must have shape (n_queries, m)")
        if not np.array_equal(self.positives.offsets, self.grades.offsets):
            raise ValueError("Queries.positives and Queries.grades must have the same row lengths")

    def __len__(self) -> int:
        return len(self.ids)

    def unlabelled(self) -> Queries:
        """What a ranker sees of queries it is scored on: the inputs a deployed ranker would have
        (ids, texts, prompts, history, own candidate lists, user ids) as private read-only copies,
        and no answers: ``positives`` and ``grades`` are empty rows, ``exclude`` is None (for ESCI
        and MS MARCO it lists a query's other relevant items; the engine applies exclusions
        itself) and ``meta`` is empty (routing outcomes live there). It is a ``Queries`` (not a
        type of its own) so that one ``encode_queries``/``score`` serves labelled valid queries
        during ``fit`` and label-free test queries alike; ``labelled`` tells them apart."""
        n = len(self.ids)
        empty = Ragged(_private(np.zeros(n + 1, dtype=np.int64)), _private(np.zeros(0, dtype=np.int64)))
        def maybe(x: Any) -> Any:
            return _private(x) if x is not None else None

        return Queries(
            ids=_private(self.ids), texts=list(self.texts), positives=empty,
            grades=Ragged(empty.offsets, _private(np.zeros(0, dtype=np.float64))),
            prompts=list(self.prompts) if self.prompts is not None else None,
            history=Ragged(_private(self.history.offsets), _private(self.history.values))
            if self.history is not None else None,
            candidates=maybe(self.candidates), exclude=None, user_ids=maybe(self.user_ids),
            meta={}, labelled=False)

    def private_copy(self) -> Queries:
        """A labelled copy whose arrays are private and read-only (train and valid as ``fit``
        receives them: changing them cannot change what the harness holds)."""
        rag = lambda r: Ragged(_private(r.offsets), _private(r.values))  # noqa: E731
        out = self._select(_private, list, rag)
        out.meta = copy.deepcopy(self.meta)
        return out

    def take(self, rows: NDArray[Any]) -> Queries:
        rows = np.asarray(rows, dtype=np.int64)
        return self._select(lambda xs: xs[rows], lambda xs: [xs[int(i)] for i in rows], lambda r: r.take(rows))

    def slice(self, start: int, stop: int) -> Queries:
        """Queries start .. stop-1: ``take`` of a range by slicing (the engine's batches; a
        per-row gather of the texts cost ~1% of a d = 128 evaluation)."""
        cut = lambda xs: xs[start:stop]  # noqa: E731
        return self._select(cut, cut, lambda r: r.slice(start, stop))

    def _select(self, arrays: Callable[[Any], Any], lists: Callable[[Any], Any],
                ragged: Callable[[Ragged], Ragged]) -> Queries:
        """The same rows of every per-query field: arrays, text lists and Ragged each by their own
        selector (``take`` and ``slice`` differ only in those)."""
        def maybe(pick: Callable[[Any], Any], x: Any) -> Any:
            return pick(x) if x is not None else None

        return Queries(
            ids=arrays(self.ids),
            texts=lists(self.texts),
            positives=ragged(self.positives),
            grades=ragged(self.grades),
            prompts=maybe(lists, self.prompts),
            history=maybe(ragged, self.history),
            candidates=maybe(arrays, self.candidates),
            exclude=maybe(ragged, self.exclude),
            user_ids=maybe(arrays, self.user_ids),
            meta=self.meta,
            labelled=self.labelled,
        )

    def batches(self, size: int) -> Iterator[tuple[NDArray[Any], Queries]]:
        for start in range(0, len(self), size):
            stop = min(start + size, len(self))
            yield np.arange(start, stop), self.slice(start, stop)


@dataclass
class TaskData:
    """A loaded task: its spec, the candidate pool and the three splits.

    ``pool`` is what the test split is ranked against. Variants (mixed, shift, scaled) replace
    ``pool`` and the test queries' indices but keep ``train_pool``/``train``/``valid`` as in the
    original task, because the paper trains on the original task only. The transfer variant
    (``from-<task>``) keeps ``spec``, ``pool`` and ``test`` of the task and takes ``train``,
    ``valid``, ``train_pool`` and ``train_spec`` from the source task: ``fit`` reads
    ``fit_pool``/``fit_spec`` and so learns only from the source.
    """

    spec: TaskSpec
    pool: Pool
    train: Queries
    valid: Queries
    test: Queries
    variant: str = "original"
    train_pool: Pool | None = None
    info: dict[str, Any] = field(default_factory=dict)
    train_spec: TaskSpec | None = None  # the task train/valid come from (transfer variant; None: spec)

    @property
    def fit_pool(self) -> Pool:
        return self.train_pool if self.train_pool is not None else self.pool

    @property
    def fit_spec(self) -> TaskSpec:
        """The task ``train``/``valid``/``fit_pool`` belong to (what a checkpoint is keyed on)."""
        return self.train_spec if self.train_spec is not None else self.spec

    @property
    def fingerprint(self) -> str:
        return self.pool.fingerprint

    def for_fit(self) -> TaskData:
        """What ``fit`` receives: train and valid with their labels (the training signal) as private
        copies, the pools as ``Pool.for_ranker``, and the evaluated split without labels
        (``Queries.unlabelled``). The runner keeps this object; nothing done to the copy changes
        what the ranker is scored against."""
        return TaskData(spec=self.spec, pool=self.pool.for_ranker(), train=self.train.private_copy(),
                        valid=self.valid.private_copy(), test=self.test.unlabelled(), variant=self.variant,
                        train_pool=self.train_pool.for_ranker() if self.train_pool is not None else None,
                        info=copy.deepcopy(self.info), train_spec=self.train_spec)


# --------------------------------------------------------------------------------------------
# Rankers
# --------------------------------------------------------------------------------------------


@runtime_checkable
class Ranker(Protocol):
    """What every ranker plugin provides (the required part of the contract).

    ``score(queries, candidates)``: ``candidates`` is either a 1-D array of pool indices shared by
    all queries (returns shape (n_queries, len(candidates))) or a 2-D array with one row of pool
    indices per query (returns the same shape). Scores must be finite; higher is better.

    What a ranker sees (docs/reference/contract.md): ``fit`` gets ``TaskData.for_fit`` (train/valid with
    labels, the evaluated split ``Queries.unlabelled``, private read-only copies); ``index`` gets
    ``Pool.for_ranker``; ``score`` gets each batch's ``Queries.unlabelled`` and a read-only copy of
    ``candidates``. What else the harness may read from a ranker, and the default when a ranker
    leaves it out, is ``RankerTraits``: nothing outside these protocols (``RANKER_ATTRIBUTES``;
    ``tests/test_ranker_contract.py`` holds the harness to it).
    """

    name: str
    version: str

    @property
    def config(self) -> dict[str, Any]: ...

    def fit(self, task: TaskData) -> None: ...

    def index(self, pool: Pool) -> None: ...

    def score(self, queries: Queries, candidates: NDArray[Any]) -> NDArray[Any]: ...


@runtime_checkable
class EmbeddingRanker(Protocol):
    """A narrower contract most neural rankers fit: score = <query vector, candidate vector>.

    The engine then scores on its own dense path (GEMM over candidate chunks), so every such
    ranker gets the same speed, caching and sharding. A ranker with pool-aware query encoding
    (LRanker's test-time scaling) does that work inside ``encode_queries``.
    """

    name: str
    version: str

    @property
    def config(self) -> dict[str, Any]: ...

    def fit(self, task: TaskData) -> None: ...

    def encode_pool(self, pool: Pool) -> NDArray[Any]: ...

    def encode_queries(self, queries: Queries) -> NDArray[Any]: ...


class RankerTraits(Protocol):
    """The optional part of the contract: every other attribute the harness reads from a ranker
    class or object, each with the default the harness assumes when a ranker leaves it out
    (``BaseRanker`` declares those defaults, so a subclass sets only what differs). A ranker is
    built as ``cls(config=..., context=RunContext(...))``, with whichever of the two its
    ``__init__`` takes (none: ``cls()``).

    Adding an attribute the harness reads means declaring it here first (docs/reference/development.md);
    ``tests/test_ranker_contract.py`` fails on a read of anything that is not declared.
    """

    description: ClassVar[str]
    """One line for ``rbench rankers`` and the docs (default: the class docstring's first line)."""
    domains: ClassVar[tuple[str, ...]]
    """The task domains the ranker applies to; a run on another domain is refused (default: all)."""
    Config: ClassVar[type]
    """The typed options: a dataclass whose defaults are the paper's settings; ``--set KEY=VALUE``
    sets its fields (default: ``NoOptions``, no options)."""
    presets: ClassVar[dict[str, dict[str, Any]]]
    """Named option sets (``--set model=NAME``), shown by ``rbench rankers`` (default: none)."""
    transfers: ClassVar[bool]
    """Whether what ``fit`` learns still means something on another task's pool, so the ranker
    may be fitted on one task and scored on another (``--variant from-TASK``; default False:
    refused; see ``BaseRanker``)."""
    set_dependent: ClassVar[bool]
    """Scores depend on which candidates share the call (listwise, pairwise, a softmax over the
    call): the engine scores each query's whole list in one call (default False)."""
    score_tolerance: ClassVar[float]
    """How far (relative) one pair's scores from two calls may differ before the engine's
    consistency check fails (default 0: bit for bit; ``FLOAT32_KERNELS`` for torch fp32 GEMMs)."""
    pairwise: ClassVar[bool]
    """The ranker scores (query, candidate) pairs one by one, too slowly for a whole pool: it is
    listed as a reranker (``--rerank-from``) (default False)."""
    rerank_depth: ClassVar[int]
    """How many first-stage candidates it reranks when ``--rerank-depth`` is not given (default:
    ``rbench.run.rerank.DEFAULT_DEPTH``)."""

    @classmethod
    def needs_training(cls, config: Any) -> bool:
        """Whether ``fit`` with these options learns from the train split (default: whether the
        class has a ``fit`` other than ``BaseRanker``'s); a test-only task refuses it."""
        ...

    @classmethod
    def prompt_example(cls, domain: str = "passage") -> Any:
        """A generative ranker's prompt on a two-candidate example (chat messages), shown by
        ``rbench rankers`` (default: none)."""
        ...

    cfg: Any
    """A built object's typed options (its ``Config`` instance), read when a ready-made object is
    handed to ``rbench.evaluate`` (default: none; its ``config`` is then all there is)."""

    @property
    def label(self) -> str:
        """A name for this configuration in records and tables, beside ``name`` (default: none)."""
        ...

    @property
    def info(self) -> dict[str, Any]:
        """What the ranker reports about its run (kept in the record's ``ranker_info``; default:
        empty)."""
        ...


AnyRanker = Ranker | EmbeddingRanker
"""A built ranker: scored through ``score``, or through its vectors on the engine's dense path."""


def _members(proto: type) -> set[str]:
    """The names a protocol declares: its annotations and its methods/properties."""
    names: set[str] = set()
    for klass in proto.__mro__:
        if klass in (object, Protocol) or klass.__module__ == "typing":
            continue
        names |= set(getattr(klass, "__annotations__", {}))
        names |= {n for n in vars(klass) if not n.startswith("_")}
    return names


RANKER_ATTRIBUTES: frozenset[str] = frozenset(
    _members(Ranker) | _members(EmbeddingRanker) | _members(RankerTraits) | {"__init__"})
"""Every attribute the harness may read from a ranker class or object: the contract, declared once."""


# --------------------------------------------------------------------------------------------
# The base class of the contract: its defaults, typed options, no-op fit/index
# --------------------------------------------------------------------------------------------


@dataclass
class NoOptions:
    """Options of a ranker that has none."""


FLOAT32_KERNELS = 1e-5  # ``score_tolerance`` of torch models: fp32 GEMMs whose blocking follows the batch's
# shape give one pair scores a few ulps apart in calls of different sizes (measured: <= 3e-7 relative)


@dataclass
class RunContext:
    """What the harness hands a ranker at construction: where to cache, which seed, progress."""

    cache_dir: Path
    seed: int = DEFAULT_SEED
    show_progress: bool = True


class BaseRanker:
    """Convenience base: typed options (``Config``), metadata, no-op ``fit``/``index``, and the
    defaults of every ``RankerTraits`` attribute a subclass leaves alone.

    Subclasses set ``name``, ``version``, ``Config`` (a dataclass whose defaults are the paper's
    settings), ``domains`` (the task domains the ranker applies to) and ``transfers``.

    ``transfers``: whether what ``fit`` learns still means something on another task's pool, so
    that the ranker may be fitted on one task and scored on another (``--variant from-<task>``,
    the paper's zero-shot table). The rule: True when the fitted state reads candidates only
    through their text (zero-shot rankers such as bm25, random, dense; text encoders fine-tuned
    on the source, such as lranker, cross-encoder, rankllama; tiger, whose semantic IDs come from
    text embeddings through its fitted quantiser); False when it is keyed on the training pool's
    own items or labels (learned item embeddings of the RecBole family, popularity counts, a
    router's per-model classes), which another pool does not have. False is the default, so a
    plugin that says nothing is refused rather than scored on items it never saw.
    """

    name: ClassVar[str] = ""
    version: ClassVar[str] = "0"
    description: ClassVar[str] = ""
    Config: ClassVar[type] = NoOptions
    domains: ClassVar[tuple[str, ...]] = DOMAINS
    transfers: ClassVar[bool] = False
    # the engine's contract on scores (rbench.engine.scan.scan): ``set_dependent`` rankers (listwise,
    # pairwise, a softmax over the call) get each query's whole list in one call; the others'
    # scores of one pair must agree between calls within ``score_tolerance`` (relative; 0: bit for bit)
    set_dependent: ClassVar[bool] = False
    score_tolerance: ClassVar[float] = 0.0
    pairwise: ClassVar[bool] = False

    def __init__(self, config: Any | None = None, context: RunContext | None = None) -> None:
        self.cfg = config if config is not None else self.Config()
        self.context = context or RunContext(cache_dir=Path(".rbench-cache"), seed=DEFAULT_SEED)

    @property
    def config(self) -> dict[str, Any]:
        return config_dict(self.cfg)

    @classmethod
    def needs_training(cls, config: Any) -> bool:
        """Whether ``fit`` with these typed options learns from the train split, so that a task
        with a test split only (a zero-shot collection: ``TaskFamily.test_only``) leaves it nothing
        to learn from: the runner refuses it there before loading, naming ``--variant from-TASK``
        (fit on another task). Default: True when the class overrides ``fit``, so a plugin that
        says nothing is refused rather than fitted on nothing; a ranker whose fit learns nothing
        (bm25, dense, random) or only a floor's statistics (pop) returns False."""
        return getattr(cls, "fit", None) is not BaseRanker.fit

    def fit(self, task: Any) -> None:  # zero-shot rankers learn nothing
        return None

    def index(self, pool: Any) -> None:
        return None
