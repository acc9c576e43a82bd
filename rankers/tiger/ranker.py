"""TIGER (Rajput et al., NeurIPS 2023): generative retrieval over semantic IDs, scored exactly.

The LRanker paper's strongest recommendation baseline. What it does here:

1. **Semantic IDs** (``quantiser.py``): the pool's text embeddings (the ``dense`` ranker's
   encoder, by default the offline all-MiniLM-L6-v2; ``text_model`` to change; vectors come from
   rbench's embedding cache) are residual-quantised into 3 levels x 256 codes plus a
   collision code. Cached under ``<cache>/tiger/sid-<key>`` with key = sha256 of the embedding
   matrix (so: per pool and encoder) + the quantiser's options and seed.
2. **Model** (``model.py``): a T5 encoder-decoder built from a config and trained from scratch
   (``train.py``) on the training windows (history IDs -> target ID), selected on validation MRR.
   Cached under ``<cache>/tiger/model-<key>`` (key: the IDs, the training/validation data, the
   options, the seed, the torch/transformers versions); ``reuse=false`` retrains.
3. **Scoring**: every pool item's exact log-likelihood under teacher forcing, one decoder step per
   node of the pool's code tree (``TreeScorer``). The engine asks for chunks of the pool; the
   whole score vector of a query batch is computed at its first request and indexed after that,
   so all chunks see one consistent computation. Per-query candidate lists (small scenario) get
   a tree of their own candidates only. Pools above ``exact_max_items`` use beam mode (top
   ``beam_size`` exact, the rest ranked after them by their deepest scored prefix);
   ``ranker_info.scoring`` says which ran.
4. **Unseen candidates** (variant pools): matched to the training pool by id (as the RecBole
   rankers do); the rest get IDs from the same quantiser (their embeddings through the fitted
   codebooks, collision codes continuing the training items' numbering).

Choices the TIGER paper leaves open or that this machine forces, written down:

- Defaults are the paper's model: T5 with 4 encoder and 4 decoder layers, d_model 128, 6 heads of
  64, feed-forward 1024, ReLU, dropout 0.1, 2,000 hashed user tokens, histories of 20 items
  (= rbench's window), batch 256, learning rate constant then inverse-square-root decay over
  10k steps, at most 200k steps. The paper's optimiser for lr 0.01 is T5X's Adafactor; here AdamW
  at 1e-3 (Adam-family at 0.01 diverges on transformers; the schedule shape is kept).
- The default quantiser is RQ-KMeans (deterministic, seconds); ``quantiser=rq-vae`` is TIGER's.
- Model selection: validation MRR of the exact scoring (TIGER reports recall of beam search;
  rbench's metrics need every item scored). The paper has no early stopping; ``patience`` stops
  when validation stops improving, which keeps the paper's 200k-step ceiling affordable.
- The softmax of every step runs over the whole vocabulary (what T5 trains), so the score is the
  model's likelihood of the ID, not a re-normalised one over valid codes.
- ``preset=cpu`` (two CPU cores; ``CPU_PRESET``): a 2+2-layer T5 (d_model 128, 4 heads of 32,
  feed-forward 512; ~3.5x the paper model's training throughput here: 107 vs 31 examples/s at
  batch 256 and 82 input tokens, two busy cores), batch 64, 800 steps (51k examples: half a
  pass over ml-100k's 97k windows, 2.5 over Last.fm's 20k), validation every 400 steps on 200
  queries; the budget is what fits 20 minutes on two shared cores. It changes only options still
  at their paper default.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np

from rbench.api import Pool, Queries, TaskData
from rbench.plugin import (
    FLOAT32_KERNELS,
    AtLeast0,
    AtLeast1,
    BaseRanker,
    DropoutRate,
    NonNegative,
    Positive,
    PresetOptions,
    RBenchError,
    Seed,
    atomic_path,
    atomic_write_text,
    canonical_json,
)

# Two CPU cores, ml-100k in about 20 minutes (see the module docstring and README).
CPU_PRESET: dict[str, Any] = {
    "num_layers": 2, "num_decoder_layers": 2, "num_heads": 4, "d_kv": 32, "d_ff": 512,
    "batch_size": 64, "max_steps": 800, "lr_constant_steps": 400, "eval_every": 400,
    "valid_max_queries": 200, "patience": 2,
}


@dataclass
class TigerOptions(PresetOptions):
    """TIGER's options; defaults are the paper's settings (see the module docstring)."""

    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {"cpu": CPU_PRESET}

    preset: Literal["paper", "cpu"] = "paper"
    text_model: str = "sentence-transformers/all-MiniLM-L6-v2"  # item text encoder for the IDs
    quantiser: Literal["rq-kmeans", "rq-vae"] = "rq-kmeans"
    levels: AtLeast1 = 3  # residual levels (plus one collision code)
    codebook_size: AtLeast1 = 256
    rqvae_epochs: AtLeast0 = 20000  # the paper's RQ-VAE epochs (rq-vae only)
    user_buckets: AtLeast0 = 2000  # hashed user-id tokens prepended to the input (0: none)
    max_history: AtLeast1 = 20  # history items in the encoder input
    d_model: AtLeast1 = 128
    d_ff: AtLeast1 = 1024
    num_layers: AtLeast1 = 4  # encoder layers
    num_decoder_layers: AtLeast1 = 4
    num_heads: AtLeast1 = 6
    d_kv: AtLeast1 = 64
    dropout: DropoutRate = 0.1
    batch_size: AtLeast1 = 256
    lr: Positive = 1e-3
    lr_constant_steps: AtLeast0 = 10000  # constant lr, then inverse square root decay
    weight_decay: NonNegative = 0.0
    epochs: AtLeast0 = 0  # 0: bounded by max_steps only
    max_steps: AtLeast0 = 200000
    windows_per_user: AtLeast0 = 0  # 0: every training window; N: the newest N per user
    eval_every: AtLeast0 = 0  # steps between validations (0: every epoch)
    valid_max_queries: AtLeast0 = 0  # 0: every validation query
    patience: AtLeast0 = 5  # validations without improvement before stopping (0: never)
    scoring: Literal["auto", "exact", "beam"] = "auto"  # auto: exact up to exact_max_items
    exact_max_items: AtLeast0 = 200_000
    beam_size: AtLeast1 = 100
    score_rows: AtLeast1 = 16384  # query x tree-node rows per scoring pass (memory bound)
    device: str = "auto"  # auto | cpu | cuda[:n]
    seed: Seed | None = None  # None: the run's --seed
    reuse: bool = True  # reuse IDs and a model trained with the same data, options and seed


    def validate(self) -> None:
        if self.epochs == 0 and self.max_steps == 0:
            raise RBenchError("tiger needs a budget: epochs > 0 or max_steps > 0")


def _sha(*parts: Any) -> str:
    h = hashlib.sha256()
    for p in parts:
        if isinstance(p, np.ndarray):
            h.update(str(p.dtype).encode() + str(p.shape).encode())
            h.update(np.ascontiguousarray(p).tobytes())
        else:
            h.update(canonical_json(p).encode())
        h.update(b"\x1e")
    return h.hexdigest()[:20]


class TigerRanker(BaseRanker):
    """TIGER: semantic IDs + a T5 that generates the next item's ID; exact pool scoring."""

    score_tolerance = FLOAT32_KERNELS  # torch fp32 kernels (rbench.api)
    # a per-query list is decoded through a code tree of that list's items (and beam mode, above
    # exact_max_items, prunes by the others), so a candidate's score may depend on the others in
    # the call: the engine scores each query's whole list in one call
    set_dependent = True

    name = "tiger"
    transfers = True  # unseen items get IDs from the fitted quantiser (text embeddings)
    version = "1"
    description = "TIGER generative retrieval (semantic IDs + T5), exact likelihood of every candidate"
    Config = TigerOptions
    domains = ("recommendation",)

    def __init__(self, config: Any | None = None, context: Any | None = None) -> None:
        super().__init__(config, context)
        self.info: dict[str, Any] = {}
        self.model: Any = None
        self.sids: Any = None
        self.vocab: Any = None
        self._scorer: Any = None
        self._fit_pool: Pool | None = None
        self._fit_tokens: np.ndarray | None = None
        self._pool: Pool | None = None
        self._tokens: np.ndarray | None = None
        self._trie: Any = None
        self._batch: Queries | None = None
        self._cached: Any = None

    @property
    def label(self) -> str:
        """The table row's name: the preset and what differs from it (not every option it sets)."""
        return TigerOptions.row_label("tiger", self.config)

    # ---------------------------------------------------------------------------- setup

    @property
    def seed(self) -> int:
        return int(self.cfg.seed if self.cfg.seed is not None else self.context.seed)

    @property
    def device(self) -> str:
        import torch

        if self.cfg.device == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        return self.cfg.device

    @property
    def cache(self) -> Path:
        return Path(self.context.cache_dir) / "tiger"

    def _log(self, msg: str) -> None:
        if getattr(self.context, "show_progress", True):
            print(msg, file=sys.stderr, flush=True)

    def embeddings(self, pool: Pool) -> np.ndarray:
        """The pool's item text embeddings (the dense ranker's encoder and on-disk cache)."""
        from rbench_rankers.dense import DenseOptions, DenseRanker

        enc = DenseRanker(DenseOptions(model=self.cfg.text_model), self.context)
        return np.asarray(enc.encode_pool(pool), dtype=np.float32)

    def _semantic_ids(self, emb: np.ndarray) -> Any:
        from rbench_rankers.tiger import quantiser

        c = self.cfg
        opts = {"method": c.quantiser, "levels": c.levels, "size": c.codebook_size, "seed": self.seed,
                "vae_epochs": c.rqvae_epochs if c.quantiser == "rq-vae" else None, "v": 1}
        d = self.cache / f"sid-{_sha(emb, opts)}"
        if c.reuse and (d / "sid.npz").exists() and (d / "sid.json").exists():
            with np.load(d / "sid.npz") as z:
                arrays = {k: z[k] for k in z.files}
            info = json.loads((d / "sid.json").read_text())
            return quantiser.SemanticIds.from_arrays(c.quantiser, arrays, {**info, "cached": True})
        t0 = time.perf_counter()
        sids = quantiser.fit(emb, c.quantiser, c.levels, c.codebook_size, self.seed, c.rqvae_epochs)
        sids.info["fit_s"] = round(time.perf_counter() - t0, 3)
        d.mkdir(parents=True, exist_ok=True)
        with atomic_path(d / "sid.npz") as tmp:
            with open(tmp, "wb") as fh:
                np.savez(fh, **sids.arrays())
        atomic_write_text(d / "sid.json", json.dumps(sids.info, default=str))
        sids.info["cached"] = False
        return sids

    def _build_model(self) -> Any:
        from rbench_rankers.tiger.model import build_t5

        c = self.cfg
        return build_t5(self.vocab, c.d_model, c.d_ff, c.num_layers, c.num_decoder_layers, c.num_heads, c.d_kv,
                        c.dropout, self.seed).to(self.device)

    # ---------------------------------------------------------------------------- fit

    def fit(self, task: TaskData) -> None:
        import torch

        from rbench_rankers.tiger.model import TreeScorer, Vocab
        from rbench_rankers.tiger.train import build_examples, newest_windows, train

        t_fit = time.perf_counter()
        c = self.cfg
        if task.train.history is None:
            raise RBenchError("tiger needs Queries.history (a recommendation task)")
        pool = task.fit_pool
        t0 = time.perf_counter()
        threads = torch.get_num_threads()
        emb = self.embeddings(pool)
        embed_s = time.perf_counter() - t0
        self.sids = self._semantic_ids(emb)
        torch.set_num_threads(threads)  # scikit-learn's thread limiter can leave torch's count changed
        self.vocab = Vocab(tuple([c.codebook_size] * c.levels + [self.sids.collision_size]), c.user_buckets)
        self._fit_pool, self._fit_tokens = pool, self.vocab.tokens(self.sids.codes)
        self._task_name = task.fit_spec.name  # the fitted pool's task (its id prefix in variant pools)
        self._set_pool(pool, self._fit_tokens)
        torch.manual_seed(self.seed)
        self.model = self._build_model()
        self._scorer = TreeScorer(self.model)

        rows = newest_windows(task.train, c.windows_per_user)
        ex = build_examples(task.train, rows, self._fit_tokens, self.vocab, c.max_history)
        valid = task.valid
        if c.valid_max_queries and len(valid) > c.valid_max_queries:
            pick = np.sort(np.random.default_rng(self.seed).choice(len(valid), c.valid_max_queries, replace=False))
            valid = valid.take(pick)
        key = _sha(self.sids.codes, ex.ids, ex.labels, valid.positives.values, valid.history.values
                   if valid.history is not None else None, {k: v for k, v in dataclasses.asdict(c).items()
                   if k not in ("reuse", "device", "scoring", "exact_max_items", "beam_size", "score_rows")},
                   self.seed, torch.__version__, __import__("transformers").__version__)
        run_dir = self.cache / f"model-{key}"
        meta = self._load(run_dir) if c.reuse else None
        if meta is None:
            n_params = int(sum(p.numel() for p in self.model.parameters() if p.requires_grad))
            self._log(f"  tiger: {len(ex.labels):,} training examples, {n_params / 1e6:.2f}M parameters, "
                      f"{len(valid)} validation queries")
            res = train(self.model, ex, batch_size=c.batch_size, lr=c.lr, lr_constant_steps=c.lr_constant_steps,
                        weight_decay=c.weight_decay, epochs=c.epochs, max_steps=c.max_steps,
                        eval_every=c.eval_every, patience=c.patience, seed=self.seed, device=self.device,
                        evaluate=lambda: self._valid_mrr(valid, pool), log=self._log)
            if res.best_state is not None:
                self.model.load_state_dict(res.best_state)
            train_only = res.train_s - res.eval_s
            meta = {"epochs_run": round(res.epochs, 4), "steps": res.steps, "best_step": res.best_step,
                    "best_valid_MRR": res.best_valid, "train_s": round(res.train_s, 2),
                    "valid_eval_s": round(res.eval_s, 2),
                    "s_per_epoch": round(train_only / max(res.epochs, 1e-9), 2),
                    "training_curve": res.curve,
                    "training_budget": {
                        "examples_seen": res.examples_seen, "epochs": round(res.epochs, 4),
                        "optimizer_steps": res.steps, "train_wall_s": round(res.train_s, 2),
                        "negatives_per_example": f"all {self.vocab.size} tokens per ID step (full softmax)",
                        "trainable_params": n_params,
                        "selection": f"best exact valid MRR of {len(res.curve)} evaluations on {len(valid)} "
                                     f"queries, step {res.best_step}"}}
            self._save(run_dir, meta)
            meta["reused"] = False
        else:
            meta["reused"] = True
        self.model.eval()
        self.info.update({
            "semantic_ids": {"method": c.quantiser, "levels": c.levels, "codebook_size": c.codebook_size,
                             "collision_size": self.sids.collision_size, **self.sids.info},
            "text_model": c.text_model, "embed_s": round(embed_s, 3), "training_examples": int(len(ex.labels)),
            "training_windows": int(len(rows)), "valid_queries_used": int(len(valid)), "run_dir": str(run_dir),
            "device": self.device, **meta, "fit_s": round(time.perf_counter() - t_fit, 3)})

    def _load(self, run_dir: Path) -> dict[str, Any] | None:
        import torch

        w, m = run_dir / "model.pt", run_dir / "meta.json"
        if not (w.exists() and m.exists()):
            return None
        try:
            state = torch.load(w, map_location=self.device, weights_only=True)
            self.model.load_state_dict(state)
            return json.loads(m.read_text())
        except Exception as exc:  # noqa: BLE001 - an unreadable cache is trained again
            self._log(f"  tiger: cached model {w} unusable ({type(exc).__name__}); training again")
            return None

    def _save(self, run_dir: Path, meta: dict[str, Any]) -> None:
        import torch

        run_dir.mkdir(parents=True, exist_ok=True)
        with atomic_path(run_dir / "model.pt") as tmp:
            torch.save({k: v.detach().cpu() for k, v in self.model.state_dict().items()}, tmp)
        atomic_write_text(run_dir / "meta.json", json.dumps(meta, default=str))

    def _valid_mrr(self, valid: Queries, pool: Pool) -> float:
        from rbench.plugin import ranker_scorer, scan

        self._set_pool(pool, self._fit_tokens)
        res = scan(self, valid, pool, scorer=ranker_scorer(self), topk=0)
        if len(valid) == 0:
            return 0.0
        best = np.minimum.reduceat(res.ranks.values, res.ranks.offsets[:-1])  # each query's best positive
        return float(np.mean(1.0 / best))

    # ---------------------------------------------------------------------------- pool

    def _set_pool(self, pool: Pool, tokens: np.ndarray) -> None:
        from rbench_rankers.tiger.model import Trie

        if self._pool is pool and self._tokens is tokens:
            return
        self._pool, self._tokens, self._trie = pool, tokens, None
        self._batch, self._cached = None, None
        n = len(pool)
        mode = self.cfg.scoring if self.cfg.scoring != "auto" else (
            "exact" if n <= self.cfg.exact_max_items else "beam")
        self._mode = mode
        self._trie_builder = lambda: Trie.build(tokens)
        self.info["scoring"] = mode if mode == "exact" else f"beam (beam_size={self.cfg.beam_size})"

    def index(self, pool: Pool) -> None:
        if self.model is None:
            raise RBenchError("tiger: fit() must run before index()")
        if pool is self._fit_pool or (pool.fingerprint and self._fit_pool is not None
                                      and pool.fingerprint == self._fit_pool.fingerprint
                                      and len(pool) == len(self._fit_pool)):
            self._set_pool(pool, self._fit_tokens)
            self.info.update({"pool_candidates": len(pool), "unseen_candidates": 0})
            return
        from rbench_rankers.recbole import match_to_fit

        fit_index = {str(i): k for k, i in enumerate(self._fit_pool.ids)}
        pos = match_to_fit(pool, fit_index, getattr(self, "_task_name", ""))
        tokens = np.empty((len(pool), self._fit_tokens.shape[1]), dtype=np.int64)
        seen = pos >= 0
        tokens[seen] = self._fit_tokens[pos[seen]]
        shared = 0
        if (~seen).any():
            emb = self.embeddings(pool)
            codes, shared = self.sids.extend(emb[~seen])
            tokens[~seen] = self.vocab.tokens(codes)
        self._set_pool(pool, tokens)
        self.info.update({"pool_candidates": int(len(pool)), "unseen_candidates": int((~seen).sum()),
                          "unseen_policy": "IDs from the fitted quantiser (same codebooks)",
                          "unseen_sharing_last_collision_code": int(shared)})

    # ---------------------------------------------------------------------------- scoring

    def _encode(self, queries: Queries) -> tuple[Any, Any]:
        import torch

        from rbench_rankers.tiger.model import encoder_inputs

        if queries.history is None:
            raise RBenchError("tiger needs Queries.history (a recommendation task)")
        users = None if queries.user_ids is None else list(queries.user_ids)
        ids, mask = encoder_inputs(self._tokens, list(queries.history), users, self.vocab, self.cfg.max_history)
        dev = self.device
        return self._scorer.encode(torch.from_numpy(ids).to(dev), torch.from_numpy(mask).to(dev))

    def _tree_scores(self, queries: Queries, trie: Any) -> np.ndarray:
        """(n_queries, items of ``trie``) scores, in query sub-batches bounded by ``score_rows``."""
        import torch

        widest = max(len(t) for t in trie.token + [trie.item_token])
        sub = max(1, self.cfg.score_rows // max(widest, 1))
        out = np.empty((len(queries), len(trie.item_token)), dtype=np.float64)
        with torch.inference_mode():
            for a in range(0, len(queries), sub):
                rows = np.arange(a, min(len(queries), a + sub))
                cross, bias = self._encode(queries.take(rows))
                if self._mode == "exact":
                    out[rows] = self._scorer.exact(trie, cross, bias)
                else:
                    out[rows] = self._scorer.beam(trie, cross, bias, self.cfg.beam_size)
        return out

    def _score_batch(self, queries: Queries) -> Any:
        from rbench_rankers.tiger.model import Trie

        if queries.candidates is None:  # a shared pool: every item, once per batch
            if self._trie is None:
                self._trie = self._trie_builder()
            return self._tree_scores(queries, self._trie)
        per_row = []  # per-query lists: a tree of the query's own candidates
        for i in range(len(queries)):
            items = np.unique(queries.candidates[i])  # the list holds every candidate scored (the engine scores whole lists)
            s = self._tree_scores(queries.take(np.array([i])), Trie.build(self._tokens[items]))[0]
            per_row.append((items, s))
        return per_row

    def score(self, queries: Queries, candidates: np.ndarray) -> np.ndarray:
        if self.model is None:
            raise RBenchError("tiger: fit() must run before scoring")
        if self._pool is None:
            raise RBenchError("tiger: index(pool) must run before scoring")
        if self._batch is not queries:  # hold the batch itself: an id() could be reused
            self._batch, self._cached = queries, self._score_batch(queries)
        cand = np.asarray(candidates, dtype=np.int64)
        if isinstance(self._cached, np.ndarray):
            if cand.ndim == 1:
                return self._cached[:, cand]
            return np.take_along_axis(self._cached, cand, axis=1)
        rows = [cand] * len(queries) if cand.ndim == 1 else list(cand)
        out = np.empty((len(queries), rows[0].shape[0] if len(rows) else 0), dtype=np.float64)
        for i, (items, s) in enumerate(self._cached):
            pos = np.searchsorted(items, rows[i])
            if (pos >= len(items)).any() or not np.array_equal(items[np.minimum(pos, len(items) - 1)], rows[i]):
                raise RBenchError(f"tiger: candidate outside query {queries.ids[i]!r}'s list was requested")
            out[i] = s[pos]
        return out
