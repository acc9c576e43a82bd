"""GraphRouter (Feng et al., ICLR 2025): LLM routing as edge prediction on a query–task–LLM graph.

The published design (``ulab-uiuc/GraphRouter``, ``model/graph_nn.py``), written here in plain
torch (no torch-geometric needed; ``EdgeConv`` computes what PyG's ``GeneralConv`` computes with
the defaults GraphRouter uses, which ``tests/rankers/test_routers.py`` checks against PyG when it is
installed):

- **Nodes.** Query nodes, LLM nodes, and the task as GraphRouter's code realises its task nodes:
  each query node starts as ``[W_t · task embedding ‖ W_q · query embedding]`` (``FeatureAlign``),
  each LLM node as ``W_l · LLM description embedding`` (twice the hidden size, so all nodes share
  one width).
- **Edges.** One query→LLM edge per (training query, LLM) with the features (objective, cost,
  effect) — GraphRouter's ``edge_weight ‖ combined_edge`` — passed through ``ReLU(Linear)``.
- **Two message-passing layers with edge attributes** (``GeneralConv``: message
  ``W_msg x_src + W_edge e``, sum aggregation, identity skip), BatchNorm after each, ReLU between.
  Edges point from queries to LLMs, so an LLM's state summarises the training queries it served
  and their outcomes.
- **Score.** The probability of edge (q, l) is ``sigmoid(mean(x⁰_q ⊙ x²_l))`` (the query's initial
  vector against the LLM's final state); rbench returns its logit (same order, no float32
  saturation ties).
- **Training.** Labels: 1 on the edge of each query's best LLM (argmax of the objective, ties to
  the first LLM — the task's ``ties=first`` positive), 0 elsewhere; BCE. Each epoch averages the
  loss over ``mask_draws`` random draws; in each draw a training edge is visible (message passing)
  with probability ``mask_rate`` and otherwise a prediction target; one AdamW step per epoch.

Choices the paper and code leave open, written down:

- Hyper-parameters: LLMRouter's GraphRouter defaults (hidden 64, lr 1e-3, weight decay 1e-4,
  100 epochs, 4 mask draws per step, mask rate 0.3). The whole graph is one batch.
- Embeddings: the dense ranker's encoder (offline all-MiniLM-L6-v2 by default; GraphRouter used
  Longformer), L2-normalised, for query texts (``Queries.texts``) and LLM texts (the pool's
  ``"name: description"``). The data has task ids, not GraphRouter's LLM-written task
  descriptions: a task's embedding is the normalised mean of its training queries' embeddings.
- Task of a scored query: test queries carry no task id (the task exposes none), so every scored
  query — valid and test alike — takes the task whose embedding is nearest (cosine). Training
  queries use their own task.
- Selection: every epoch scores the valid queries (training edges visible, valid queries as new
  nodes without edges, eval-mode BatchNorm); the epoch with the best valid MRR (then valid mean
  objective of the routed LLM, then earlier) is kept. GraphRouter's code saves on validation
  macro-F1 of the argmax and makes valid edges visible at test time; here the test graph is the
  selection graph (training edges only), so the chosen checkpoint is scored as it was chosen.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np

from rbench.api import Pool, Queries, TaskData
from rbench.plugin import AtLeast1, NonNegative, Positive, Range, Seed
from rbench_rankers.routers import (
    DEFAULT_MODEL,
    BestEpoch,
    QueryEncodingRouter,
    budget,
    gather,
    outcomes_of,
    pool_columns,
    valid_measures,
)


@dataclass
class GraphRouterOptions:
    """Options of ``graphrouter`` (see the module doc)."""

    model: str = DEFAULT_MODEL  # encoder of queries and LLM descriptions (the dense ranker's resolution)
    max_length: AtLeast1 = 512
    batch_size: AtLeast1 = 64  # encoding batch
    device: str = "auto"
    hidden_dim: AtLeast1 = 64  # node vectors have 2 * hidden_dim dimensions (FeatureAlign)
    lr: Positive = 1e-3
    weight_decay: NonNegative = 1e-4
    epochs: AtLeast1 = 100
    mask_draws: AtLeast1 = 4  # GraphRouter's "batch_size": random edge masks averaged per step
    mask_rate: Annotated[float, Range(0, 1, lo_open=True, hi_open=True)] = 0.3  # probability that a training edge is visible in a draw
    aggr: Literal["add", "mean"] = "add"  # GeneralConv's sum (published) or a mean over incoming edges
    seed: Seed | None = None  # None: the run's --seed



@functools.cache
def modules() -> dict[str, type]:
    """The torch modules (built on first use so that listing rankers never imports torch)."""
    import torch
    from torch import nn

    class EdgeConv(nn.Module):
        """PyG ``GeneralConv(c, c, in_edge_channels=e)`` with its defaults: directed messages
        ``lin_msg(x_src) + lin_edge(edge_attr)``, one head, no attention, sum aggregation at the
        destination, identity skip (in = out channels)."""

        def __init__(self, channels: int, edge_dim: int, aggr: str = "add") -> None:
            super().__init__()
            self.lin_msg = nn.Linear(channels, channels)
            self.lin_edge = nn.Linear(edge_dim, channels)
            self.aggr = aggr

        def forward(self, x: Any, src: Any, dst: Any, edge_attr: Any) -> Any:
            msg = self.lin_msg(x[src]) + self.lin_edge(edge_attr)
            out = torch.zeros_like(x).index_add(0, dst, msg)
            if self.aggr == "mean":
                deg = torch.zeros(len(x), dtype=x.dtype, device=x.device).index_add(
                    0, dst, torch.ones(len(dst), dtype=x.dtype, device=x.device))
                out = out / deg.clamp(min=1.0)[:, None]
            return out + x

    class GraphRouterNet(nn.Module):
        """FeatureAlign + two EdgeConv layers with BatchNorm + edge-probability decoder."""

        def __init__(self, query_dim: int, task_dim: int, llm_dim: int, hidden: int, edge_dim: int,
                     aggr: str) -> None:
            super().__init__()
            self.task_lin = nn.Linear(task_dim, hidden)
            self.query_lin = nn.Linear(query_dim, hidden)
            self.llm_lin = nn.Linear(llm_dim, 2 * hidden)
            self.edge_mlp = nn.Linear(edge_dim, edge_dim)
            self.conv1 = EdgeConv(2 * hidden, edge_dim, aggr)
            self.conv2 = EdgeConv(2 * hidden, edge_dim, aggr)
            self.bn1 = nn.BatchNorm1d(2 * hidden)
            self.bn2 = nn.BatchNorm1d(2 * hidden)

        def query_init(self, query: Any, task: Any) -> Any:
            return torch.cat([self.task_lin(task), self.query_lin(query)], dim=1)

        def propagate(self, x_query: Any, llm: Any, src: Any, dst: Any, edge_attr: Any) -> Any:
            """Final states of all nodes (queries first, then LLMs) over the visible edges
            (``src`` query rows, ``dst`` LLM rows)."""
            x0 = torch.cat([x_query, self.llm_lin(llm)], dim=0)
            dst = dst + len(x_query)
            e = torch.relu(self.edge_mlp(edge_attr))
            x = torch.relu(self.bn1(self.conv1(x0, src, dst, e)))
            return x0, self.bn2(self.conv2(x, src, dst, e))

        @staticmethod
        def edge_logit(x0_query: Any, x_llm: Any) -> Any:
            """Logit of the edge probability: ``sigmoid⁻¹`` of GraphRouter's score."""
            return (x0_query * x_llm).mean(dim=-1)

    return {"EdgeConv": EdgeConv, "GraphRouterNet": GraphRouterNet}


class GraphRouterRanker(QueryEncodingRouter):
    """GraphRouter: edge prediction on the query–task–LLM graph (see the module doc)."""

    name = "graphrouter"
    transfers = False  # LLM nodes of the training pool
    version = "1"
    description = "GraphRouter: GNN over the query-task-LLM graph with (effect, cost) edges; epoch chosen on valid"
    Config = GraphRouterOptions
    domains = ("routing",)

    # -- graph -------------------------------------------------------------------------------

    def _task_of(self, q_emb: np.ndarray) -> np.ndarray:
        """Embedding of the nearest task (cosine) for queries without a task id."""
        return self.task_emb[np.argmax(q_emb @ self.task_emb.T, axis=1)]

    def _scores(self, q_emb: np.ndarray, task_emb: np.ndarray) -> np.ndarray:
        """(n, n_llm) edge logits of new query nodes against the trained graph (eval mode)."""
        import torch

        net = self.net
        net.eval()
        with torch.inference_mode():
            _, x = net.propagate(net.query_init(self.g["query"], self.g["task"]), self.g["llm"], self.g["src"],
                                 self.g["dst"], self.g["edge"])
            x_llm = x[len(self.g["query"]):]
            x0 = net.query_init(torch.as_tensor(q_emb, device=self.device), torch.as_tensor(task_emb, device=self.device))
            logits = net.edge_logit(x0[:, None, :], x_llm[None, :, :])
        return logits.double().cpu().numpy()

    def fit(self, task: TaskData) -> None:
        import torch

        t0 = time.perf_counter()
        cfg = self.cfg
        seed = cfg.seed if cfg.seed is not None else self.context.seed
        torch.manual_seed(seed)
        dev = cfg.device
        self.device = ("cuda" if torch.cuda.is_available() else "cpu") if dev == "auto" else dev
        train, valid = task.train, task.valid
        out = outcomes_of(train)
        pool = task.fit_pool
        n_llm = len(pool)
        self.fit_ids = np.asarray(pool.ids, dtype=object)

        enc = self.encoder()
        q_emb = enc.queries(list(train.texts))
        llm_emb = enc.passages(pool.text_batch(np.arange(n_llm)))
        tasks, task_code = np.unique(out.task_ids.astype(str), return_inverse=True)
        task_emb = np.zeros((len(tasks), q_emb.shape[1]), dtype=np.float32)
        np.add.at(task_emb, task_code, q_emb)
        self.task_emb = task_emb / np.maximum(np.linalg.norm(task_emb, axis=1, keepdims=True), 1e-12)

        # the training graph: one edge per (training query, candidate LLM)
        n, m = out.candidates.shape
        src = np.repeat(np.arange(n), m)
        dst = out.candidates.reshape(-1)
        edge = np.stack([out.objective().reshape(-1), out.cost.reshape(-1), out.effect.reshape(-1)], axis=1)
        label = (dst == np.repeat(out.best(), m)).astype(np.float32)
        as_t = functools.partial(torch.tensor, device=self.device)  # copies: the splits are read-only
        self.g = {"query": as_t(q_emb), "task": as_t(self.task_emb[task_code]), "llm": as_t(llm_emb),
                  "src": as_t(src, dtype=torch.long), "dst": as_t(dst, dtype=torch.long),
                  "edge": as_t(edge, dtype=torch.float32)}
        y = as_t(label)

        Net = modules()["GraphRouterNet"]
        torch.manual_seed(seed)
        self.net = Net(q_emb.shape[1], q_emb.shape[1], llm_emb.shape[1], cfg.hidden_dim, edge.shape[1],
                       cfg.aggr).to(self.device)
        opt = torch.optim.AdamW(self.net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        bce = torch.nn.BCEWithLogitsLoss()
        gen = torch.Generator().manual_seed(seed)

        if len(valid):
            vout = outcomes_of(valid)
            v_emb = enc.queries(list(valid.texts))
            v_task = self._task_of(v_emb)
            vobj = vout.objective()
            vbest = vout.best()
        curve: list[dict[str, Any]] = []
        kept = BestEpoch()
        for epoch in range(1, cfg.epochs + 1):
            self.net.train()
            opt.zero_grad()
            total = 0.0
            for _ in range(cfg.mask_draws):
                visible = (torch.rand(len(src), generator=gen) < cfg.mask_rate).to(self.device)
                target = ~visible
                x_q = self.net.query_init(self.g["query"], self.g["task"])
                x0, x = self.net.propagate(x_q, self.g["llm"], self.g["src"][visible], self.g["dst"][visible],
                                           self.g["edge"][visible])
                logit = self.net.edge_logit(x0[self.g["src"][target]], x[n + self.g["dst"][target]])
                loss = bce(logit, y[target]) / cfg.mask_draws
                loss.backward()
                total += float(loss.detach())
            opt.step()
            point: dict[str, Any] = {"epoch": epoch, "step": epoch, "examples": epoch * cfg.mask_draws * n,
                                     "train_loss": round(total, 6), "valid_MRR": None, "valid_objective": None}
            if len(valid):
                s_llm = self._scores(v_emb, v_task)
                s = gather(s_llm, np.arange(n_llm), valid.candidates)
                point.update(valid_measures(s, valid, vobj))
                onehot = (valid.candidates == vbest[:, None]).astype(np.float64)
                point["valid_loss"] = round(float(np.mean(np.logaddexp(0, s) - onehot * s)), 6)
                kept.offer(point, epoch, self.net)
            point["seconds"] = round(time.perf_counter() - t0, 3)
            curve.append(point)
        best_epoch = kept.restore(self.net, cfg.epochs)
        wall = time.perf_counter() - t0
        selection = (f"best valid MRR of {len(curve)} epoch evaluations, epoch {best_epoch}" if kept.key
                     else f"last epoch ({cfg.epochs}; no valid split)")
        n_params = sum(p.numel() for p in self.net.parameters() if p.requires_grad)
        self.info = {"training_curve": curve, "best_epoch": best_epoch, "n_train": n, "n_tasks": len(tasks),
                     "n_edges": int(len(src)), "scenario": out.scenario,
                     "weights": {"performance": out.w_perf, "cost": out.w_cost}, "encoder": enc.info,
                     "device": self.device,
                     "training_budget": budget(cfg.epochs * cfg.mask_draws * n, cfg.epochs, cfg.epochs, wall,
                                               f"{m - 1} other LLM edges of the query (BCE)", n_params, selection)}

    # -- scoring ----------------------------------------------------------------------------------

    def index(self, pool: Pool) -> None:
        self._columns = pool_columns(self.fit_ids, pool)

    def score(self, queries: Queries, candidates: np.ndarray) -> np.ndarray:
        q = self.encoder().queries(list(queries.texts))
        return gather(self._scores(q, self._task_of(q)), self._columns, candidates)
