"""Trainable LLM routers for the routing task: RouterKNN (RouterBench) and RouterBERT (RouteLLM).

Both learn from the routing task's training signal (``rbench.tasks.families.routing.routing_outcomes``:
each train/valid query's effect and normalised cost for every LLM, its task id and the scenario
weights); the test split carries none of it, and ``fit`` never reads ``task.test``. Both are
trained on the train split and selected on the valid split; the test split is only scored.

Choices the papers leave open, written down:

- **Query text** = ``Queries.texts`` (the raw query, not the LLM prompt template), embedded or
  tokenised as it is. Default encoder: the dense ranker's offline all-MiniLM-L6-v2
  (``rbench_rankers.dense``: the same model resolution, pooling and prompts, never the network).
- **Scenario**: the objective is the task's ``w_perf * effect - w_cost * cost``
  (``--set task.scenario=balance|performance|cost``), read from the outcomes, so a router always
  optimises what the task's positives are defined by.
- **Selection on valid**: valid MRR of the task's positives (pessimistic ties, as the engine),
  then the valid mean objective of the routed (top-1) LLM, then the simpler model (smaller k,
  earlier epoch). The choice and the curve are in ``info``.

``router-knn`` (RouterBench's KNN router): cosine similarity of L2-normalised query embeddings;
the k most similar training queries (ties by training order); ``mode=mean`` (default, RouterBench)
scores an LLM by the mean objective over the neighbours (= ``w_perf * mean effect - w_cost * mean
cost``, RouterBench's predicted performance and cost); ``mode=vote`` (LLMRouter's
``KNeighborsClassifier``) by the number of neighbours whose best LLM it is, ties in votes broken
by the mean objective (so the top-1 is the majority vote whenever there is one; sklearn would
break it by class order). ``k=0`` (default) chooses k on valid from ``k_grid`` plus "all
training queries"; ``k=-1`` is every training query (the training-mean router). Lazy learner:
no gradient steps; the training budget reports the stored queries.

``router-clf`` (RouterBERT, RouteLLM's BERT classifier): a BERT-family encoder
(``AutoModel``, masked mean pooling as MiniLM was trained, ``pooling=cls`` for BERT's [CLS]) with
dropout and a linear head over the LLMs, fine-tuned end to end with cross-entropy on each
training query's best LLM (argmax of the objective, ties to the first LLM: the task's
``ties=first`` positive); logits of LLMs outside a query's candidate list are masked. Score =
the logit. AdamW (lr 5e-5, weight decay 0.01), linear warm-up over 10% of the steps then linear
decay, batch 16, 10 epochs, 256 tokens: RouteLLM fine-tunes BERT-base with a similar recipe
(a small lr, a few epochs); the larger lr suits the 22M MiniLM. The epoch with the best valid
MRR is kept (weights held in memory).
"""

from __future__ import annotations

import copy
import time
import warnings
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np

from rbench.api import Pool, Queries, TaskData
from rbench.plugin import (
    FLOAT32_KERNELS,
    AtLeast1,
    BaseRanker,
    DropoutRate,
    NonNegative,
    Positive,
    Range,
    RBenchError,
    Seed,
)
from rbench_rankers.models import from_pretrained, quiet_loading, resolve_folder

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
FLOOR = -1e6  # score of an LLM the router never saw in training (a variant pool): last, finite


# --------------------------------------------------------------------------------------------
# shared helpers
# --------------------------------------------------------------------------------------------


def outcomes_of(queries: Queries) -> Any:
    from rbench.plugin import routing_outcomes

    return routing_outcomes(queries)


def reciprocal_ranks(scores: np.ndarray, candidates: np.ndarray, positives: Any) -> np.ndarray:
    """Per-query RR of the positives among the query's candidates (``scores`` aligned with
    ``candidates``), with the engine's pessimistic ties: rank = 1 + #higher + #tied others."""
    rr = np.zeros(len(scores))
    for i in range(len(scores)):
        pos = np.flatnonzero(np.isin(candidates[i], positives[i]))
        if not len(pos):
            continue
        s = scores[i]
        ranks = [1 + int((s > s[j]).sum()) + int((s == s[j]).sum()) - 1 for j in pos]
        rr[i] = 1.0 / min(ranks)
    return rr


def routed_objective(scores: np.ndarray, objective: np.ndarray) -> float:
    """Mean objective of the top-1 LLM (first candidate on ties), both aligned with candidates."""
    return float(objective[np.arange(len(scores)), scores.argmax(axis=1)].mean()) if len(scores) else 0.0


def valid_measures(scores: np.ndarray, valid: Queries, objective: np.ndarray) -> dict[str, float]:
    """What selection on valid reads: the valid MRR of the positives and the mean objective of the
    routed (top-1) LLM, rounded as the curves record them."""
    return {"valid_MRR": round(float(reciprocal_ranks(scores, valid.candidates, valid.positives).mean()), 6),
            "valid_objective": round(routed_objective(scores, objective), 6)}


class BestEpoch:
    """The epoch selection on valid keeps: best valid MRR, then valid objective, then the earlier
    epoch; its weights are held in memory and put back at the end."""

    def __init__(self) -> None:
        self.key: tuple[float, float, int] | None = None
        self.state: Any = None

    def offer(self, point: dict[str, Any], epoch: int, module: Any) -> None:
        key = (point["valid_MRR"], point["valid_objective"], -epoch)
        if self.key is None or key > self.key:
            self.key, self.state = key, copy.deepcopy(module.state_dict())

    def restore(self, module: Any, last_epoch: int) -> int:
        """Load the kept weights into ``module``; the kept epoch (``last_epoch`` without valid)."""
        if self.state is not None:
            module.load_state_dict(self.state)
        return -self.key[2] if self.key else last_epoch


def pool_columns(fit_ids: np.ndarray, pool: Pool) -> np.ndarray:
    """Column of each pool candidate in the trained LLM order (-1: unseen in training)."""
    where = {str(x): i for i, x in enumerate(fit_ids)}
    return np.asarray([where.get(str(x), -1) for x in pool.ids], dtype=np.int64)


def gather(by_llm: np.ndarray, columns: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """(n, n_llm) trained-order scores -> (n, m) scores of each query's candidates (pool indices,
    1-D shared or 2-D per query); unseen LLMs get ``FLOOR``."""
    cols = columns[candidates]
    if cols.ndim == 1:
        cols = np.broadcast_to(cols, (len(by_llm), len(cols)))
    out = np.take_along_axis(by_llm, np.maximum(cols, 0), axis=1)
    return np.where(cols >= 0, out, FLOOR).astype(np.float64)


def budget(examples: int, epochs: float, steps: int, wall_s: float, negatives: int | str, params: int,
           selection: str) -> dict[str, Any]:
    """The RunRecord's ``training_budget`` (``rbench.results.training_budget``'s keys)."""
    return {"examples_seen": int(examples), "epochs": round(float(epochs), 3), "optimizer_steps": int(steps),
            "train_wall_s": round(float(wall_s), 1), "negatives_per_example": negatives,
            "trainable_params": int(params), "selection": selection}


class TextEncoder:
    """The dense ranker's encoder (``rbench_rankers.dense``: model resolution, pooling, prompts), with
    L2-normalised outputs so that inner products are cosines."""

    def __init__(self, model: str, max_length: int, batch_size: int, device: str, context: Any) -> None:
        from rbench_rankers.dense import DenseOptions, DenseRanker

        self.dense = DenseRanker(DenseOptions(model=model, max_length=max_length, batch_size=batch_size,
                                              device=device), context)

    def _norm(self, v: np.ndarray) -> np.ndarray:
        v = np.asarray(v, dtype=np.float32)
        return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)

    def queries(self, texts: list[str]) -> np.ndarray:
        enc = self.dense.encoder()
        prompt = self.dense._settings_used["query_prompt"]
        return self._norm(enc([prompt + str(t) for t in texts]))

    def passages(self, texts: list[str]) -> np.ndarray:
        enc = self.dense.encoder()
        prompt = self.dense._settings_used["passage_prompt"]
        return self._norm(enc([prompt + str(t) for t in texts]))

    @property
    def info(self) -> dict[str, Any]:
        keep = ("model_path", "model_source", "model_revision", "dim", "pooling", "max_length", "device")
        return {k: self.dense.info[k] for k in keep if k in self.dense.info}


# --------------------------------------------------------------------------------------------
# router-knn
# --------------------------------------------------------------------------------------------


@dataclass
class RouterKNNOptions:
    """Options of ``router-knn`` (see the module doc)."""

    model: str = DEFAULT_MODEL  # query encoder: hub name or local folder (the dense ranker's resolution)
    max_length: AtLeast1 = 512  # tokens per query (min with the model's own limit)
    batch_size: AtLeast1 = 64
    device: str = "auto"
    k: Annotated[int, Range(-1)] = 0  # neighbours; 0 = chosen on valid from k_grid (+ all); -1 = every training query
    k_grid: tuple[AtLeast1, ...] = (1, 2, 3, 5, 7, 10, 15, 20, 30, 50, 100, 200)
    mode: Literal["mean", "vote"] = "mean"  # mean objective (RouterBench) | majority vote of the best LLM (LLMRouter)

    def validate(self) -> None:
        if not self.k_grid:
            raise RBenchError("k_grid must hold at least one k")


class QueryEncodingRouter(BaseRanker):
    """Base of the routers that embed query texts: one lazily loaded ``TextEncoder`` built from
    the options ``model``, ``max_length``, ``batch_size`` and ``device``."""

    score_tolerance = FLOAT32_KERNELS  # torch fp32 kernels (rbench.api)

    def __init__(self, config: Any | None = None, context: Any | None = None) -> None:
        super().__init__(config, context)
        self.info: dict[str, Any] = {}
        self._encoder: TextEncoder | None = None

    def encoder(self) -> TextEncoder:
        if self._encoder is None:
            c = self.cfg
            self._encoder = TextEncoder(c.model, c.max_length, c.batch_size, c.device, self.context)
        return self._encoder


class RouterKNNRanker(QueryEncodingRouter):
    """RouterBench's kNN router: an LLM's score is the mean objective over the k nearest training
    queries (``mode=vote``: their majority vote of the best LLM); k chosen on valid."""

    name = "router-knn"
    transfers = False  # per-LLM outcomes of the training pool
    version = "1"
    description = "kNN router (RouterBench): mean objective of the k nearest training queries; k chosen on valid"
    Config = RouterKNNOptions
    domains = ("routing",)

    # -- fit ---------------------------------------------------------------------------------

    def fit(self, task: TaskData) -> None:
        self.cfg.validate()
        t0 = time.perf_counter()
        train = task.train
        out = outcomes_of(train)
        n_llm = len(task.fit_pool)
        self.fit_ids = np.asarray(task.fit_pool.ids, dtype=object)
        self.emb = self.encoder().queries(list(train.texts))
        # (n_train, n_llm): objective per training query and LLM; an LLM a query lacks counts as
        # missing (nan) in the neighbour means
        self.obj = out.by_pool(out.objective(), n_llm)
        self.best = np.zeros((len(train), n_llm))
        self.best[np.arange(len(train)), out.best()] = 1.0
        n = len(train)
        grid = sorted({min(k, n) for k in self.cfg.k_grid} | {n})
        curve = []
        if self.cfg.k == 0 and len(task.valid):
            vout = outcomes_of(task.valid)
            vemb = self.encoder().queries(list(task.valid.texts))
            vobj = vout.objective()
            cols = np.arange(n_llm)
            for k in grid:
                s = gather(self._by_llm(vemb, k), cols, task.valid.candidates)
                curve.append({"k": k, **valid_measures(s, task.valid, vobj)})
            best = max(curve, key=lambda p: (p["valid_MRR"], p["valid_objective"], -p["k"]))
            self.k = int(best["k"])
            selection = (f"k={self.k} of {len(grid)} values by valid MRR "
                         f"({100 * best['valid_MRR']:.2f}), then valid objective, then smaller k")
        else:
            self.k = n if self.cfg.k in (-1, 0) else min(self.cfg.k, n)
            selection = f"k={self.k} as configured" if self.cfg.k > 0 else f"k={self.k} (every training query)"
        wall = time.perf_counter() - t0
        self.info = {"k": self.k, "mode": self.cfg.mode, "k_selection": curve, "n_train": n,
                     "scenario": out.scenario, "weights": {"performance": out.w_perf, "cost": out.w_cost},
                     "encoder": self.encoder().info,
                     "training_budget": budget(n, 1.0, 0, wall, "none (lazy learner: stores the training queries)",
                                               0, selection)}

    def _by_llm(self, q_emb: np.ndarray, k: int) -> np.ndarray:
        """(n_q, n_llm) scores in trained LLM order."""
        sims = q_emb @ self.emb.T
        k = min(k, self.emb.shape[0])
        nbrs = np.argsort(-sims, axis=1, kind="stable")[:, :k]
        with warnings.catch_warnings():  # an LLM no neighbour has: nan, then FLOOR / 2
            warnings.simplefilter("ignore", RuntimeWarning)
            mean = np.nanmean(self.obj[nbrs], axis=1)  # (n_q, n_llm)
        mean = np.where(np.isnan(mean), FLOOR / 2, mean)
        if self.cfg.mode == "mean":
            return mean
        votes = self.best[nbrs].sum(axis=1)
        tie = (np.argsort(np.argsort(mean, axis=1, kind="stable"), axis=1) + 1) / (mean.shape[1] + 1)
        return votes + tie

    # -- scoring ----------------------------------------------------------------------------------

    def index(self, pool: Pool) -> None:
        self._columns = pool_columns(self.fit_ids, pool)

    def score(self, queries: Queries, candidates: np.ndarray) -> np.ndarray:
        q = self.encoder().queries(list(queries.texts))
        return gather(self._by_llm(q, self.k), self._columns, candidates)


# --------------------------------------------------------------------------------------------
# router-clf
# --------------------------------------------------------------------------------------------


@dataclass
class RouterClfOptions:
    """Options of ``router-clf`` (see the module doc)."""

    model: str = DEFAULT_MODEL  # BERT-family encoder: hub name or local folder
    pooling: Literal["mean", "cls"] = "mean"
    max_length: AtLeast1 = 256
    epochs: AtLeast1 = 10
    batch_size: AtLeast1 = 16
    lr: Positive = 5e-5
    weight_decay: NonNegative = 0.01
    warmup: Annotated[float, Range(0, 1, hi_open=True)] = 0.1  # fraction of the steps with a linear warm-up
    dropout: DropoutRate = 0.1
    device: str = "auto"
    seed: Seed | None = None  # None: the run's --seed



class RouterClfRanker(BaseRanker):
    """RouterBERT (RouteLLM's BERT classifier): an encoder fine-tuned as an N-way classifier of the
    best LLM; score = logit. The epoch with the best valid MRR is kept."""

    score_tolerance = FLOAT32_KERNELS  # torch fp32 kernels (rbench.api)

    name = "router-clf"
    transfers = False  # one class per training-pool LLM
    version = "1"
    description = "BERT-family classifier of the best LLM (RouterBERT); score = logit; epoch chosen on valid"
    Config = RouterClfOptions
    domains = ("routing",)

    def __init__(self, config: Any | None = None, context: Any | None = None) -> None:
        super().__init__(config, context)
        self.info: dict[str, Any] = {}

    def _load(self, n_llm: int) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        from rbench_rankers.dense import model_max_length, preset_model

        resolved = resolve_folder(preset_model(self.cfg.model))
        quiet_loading()
        try:
            self.tok = from_pretrained(AutoTokenizer, resolved.path)
            encoder = from_pretrained(AutoModel, resolved.path)
        except (OSError, ValueError) as exc:
            raise RBenchError(f"cannot load model {resolved.name!r} from {resolved.path}: {exc}") from exc
        dev = self.cfg.device
        self.device = ("cuda" if torch.cuda.is_available() else "cpu") if dev == "auto" else dev
        self.max_length = min(self.cfg.max_length, model_max_length(self.tok, encoder.config))
        hidden = int(encoder.config.hidden_size)
        self.model = torch.nn.ModuleDict({
            "encoder": encoder.float(), "dropout": torch.nn.Dropout(self.cfg.dropout),
            "head": torch.nn.Linear(hidden, n_llm)}).to(self.device)
        self.resolved = resolved

    def _logits(self, texts: list[str]) -> Any:
        from rbench_rankers.dense import masked_mean

        batch = self.tok(texts, padding=True, truncation=True, max_length=self.max_length,
                         return_tensors="pt").to(self.device)
        hidden = self.model["encoder"](**batch).last_hidden_state
        vec = masked_mean(hidden, batch["attention_mask"]) if self.cfg.pooling == "mean" else hidden[:, 0]
        return self.model["head"](self.model["dropout"](vec))

    def _predict(self, texts: list[str]) -> np.ndarray:
        import torch

        self.model.eval()
        order = np.argsort([-len(t) for t in texts], kind="stable")  # less padding
        out = np.zeros((len(texts), self.model["head"].out_features), dtype=np.float64)
        with torch.inference_mode():
            for a in range(0, len(texts), 64):
                idx = order[a : a + 64]
                out[idx] = self._logits([texts[i] for i in idx]).float().cpu().numpy()
        return out

    def fit(self, task: TaskData) -> None:
        import torch

        t0 = time.perf_counter()
        seed = self.cfg.seed if self.cfg.seed is not None else self.context.seed
        torch.manual_seed(seed)
        train, valid = task.train, task.valid
        out = outcomes_of(train)
        n_llm = len(task.fit_pool)
        self.fit_ids = np.asarray(task.fit_pool.ids, dtype=object)
        self._load(n_llm)
        labels = torch.as_tensor(out.best(), dtype=torch.long)
        allowed = torch.zeros((len(train), n_llm), dtype=torch.bool)
        allowed[torch.arange(len(train))[:, None], torch.tensor(out.candidates, dtype=torch.long)] = True  # a copy: the split is read-only
        texts = [str(t) for t in train.texts]
        vtexts = [str(t) for t in valid.texts]
        vobj = outcomes_of(valid).objective() if len(valid) else None
        params = [p for p in self.model.parameters() if p.requires_grad]
        decay = [p for p in params if p.ndim > 1]
        no_decay = [p for p in params if p.ndim <= 1]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": self.cfg.weight_decay},
                                 {"params": no_decay, "weight_decay": 0.0}], lr=self.cfg.lr)
        per_epoch = (len(train) + self.cfg.batch_size - 1) // self.cfg.batch_size
        total = per_epoch * self.cfg.epochs
        warm = max(1, int(round(self.cfg.warmup * total)))
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: (s + 1) / warm if s < warm else max(0.0, (total - s) / max(1, total - warm)))
        gen = torch.Generator().manual_seed(seed)
        curve: list[dict[str, Any]] = []
        kept = BestEpoch()
        steps = 0
        for epoch in range(1, self.cfg.epochs + 1):
            self.model.train()
            perm = torch.randperm(len(train), generator=gen).numpy()
            losses = []
            for a in range(0, len(train), self.cfg.batch_size):
                idx = perm[a : a + self.cfg.batch_size]
                logits = self._logits([texts[i] for i in idx])
                logits = logits.masked_fill(~allowed[idx].to(self.device), float("-inf"))
                loss = torch.nn.functional.cross_entropy(logits, labels[idx].to(self.device))
                opt.zero_grad()
                loss.backward()
                opt.step()
                sched.step()
                steps += 1
                losses.append(float(loss.detach()))
            point: dict[str, Any] = {"epoch": epoch, "step": steps, "examples": epoch * len(train),
                                     "train_loss": round(float(np.mean(losses)), 6), "valid_MRR": None,
                                     "valid_objective": None}
            if len(valid):
                s = gather(self._predict(vtexts), np.arange(n_llm), valid.candidates)
                point.update(valid_measures(s, valid, vobj))
                kept.offer(point, epoch, self.model)
            point["seconds"] = round(time.perf_counter() - t0, 3)
            curve.append(point)
            if getattr(self.context, "show_progress", False):
                import sys

                print(f"  router-clf epoch {epoch}: loss {point['train_loss']:.4f} valid MRR "
                      f"{point['valid_MRR']} ({point['seconds']:.0f}s)", file=sys.stderr, flush=True)
        best_epoch = kept.restore(self.model, self.cfg.epochs)
        wall = time.perf_counter() - t0
        selection = (f"best valid MRR of {len(curve)} epoch evaluations, epoch {best_epoch}" if kept.key
                     else f"last epoch ({self.cfg.epochs}; no valid split)")
        n_params = sum(p.numel() for p in params)
        self.info = {"training_curve": curve, "best_epoch": best_epoch, "n_train": len(train),
                     "scenario": out.scenario, "weights": {"performance": out.w_perf, "cost": out.w_cost},
                     "model_path": str(self.resolved.path), "model_source": self.resolved.source,
                     "model_revision": self.resolved.revision, "max_length": self.max_length, "device": self.device,
                     "training_budget": budget(len(train) * self.cfg.epochs, self.cfg.epochs, steps, wall,
                                               f"all {n_llm - 1} other LLMs (softmax)", n_params, selection)}

    def index(self, pool: Pool) -> None:
        self._columns = pool_columns(self.fit_ids, pool)

    def score(self, queries: Queries, candidates: np.ndarray) -> np.ndarray:
        return gather(self._predict([str(t) for t in queries.texts]), self._columns, candidates)
