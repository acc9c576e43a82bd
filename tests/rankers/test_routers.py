"""Trainable routers (router-knn, router-clf, graphrouter) and the routing task's training signal,
on tiny GraphRouter-format CSVs written here; encoders are a tiny random BERT built from a config."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pandas as pd
import pytest

from rbench.api import RunContext
from rbench.core import paths
from rbench.rankers import make_ranker
from rbench.results.training_budget import BUDGET_FIELDS
from rbench.run.runner import RunOptions, run
from rbench.tasks.families.routing import WEIGHTS, has_outcomes, routing_outcomes
from rbench.tasks.registry import load_task

pytestmark = pytest.mark.usefixtures("one_torch_thread")

LLMS = ["llm-a", "llm-b", "llm-c", "llm-d"]


def toy_rows(n_tasks: int = 3, per_task: int = 12, seed: int = 0, always: str | None = None) -> list[dict]:
    """Task t's best LLM is LLMS[t] (or ``always``); texts use the tiny tokenizer's words."""
    rng = random.Random(seed)
    rows, idx = [], 0
    for t in range(n_tasks):
        for k in range(per_task):
            good = always or LLMS[t % len(LLMS)]
            for j, llm in enumerate(LLMS):
                rows.append({"query_idx": idx, "task_id": f"task{t}", "query": f"w{t} w{t + 10} w{(k * 7) % 90 + 20}",
                             "llm": llm, "effect": 1.0 if llm == good else rng.choice([0.0, 0.25]),
                             "cost": round(rng.uniform(1e-5, 1e-3) * (j + 1), 8), "response": "r\nr"})
            idx += 1
    return rows


def write_task(rows: list[dict]) -> None:
    d = paths.raw_dir("routing-balance")
    d.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(d / "router_data.csv", index=False)


def frame(rows: list[dict], scenario: str) -> pd.DataFrame:
    """Independent derivation: per-task min-max cost and the scenario objective."""
    df = pd.DataFrame(rows)
    g = df.groupby("task_id")["cost"]
    span = g.transform("max") - g.transform("min")
    df["c"] = np.where(span > 0, (df["cost"] - g.transform("min")) / span.where(span > 0, 1), 0.0)
    w_perf, w_cost = WEIGHTS[scenario]
    df["obj"] = w_perf * df["effect"] - w_cost * df["c"]
    df["qid"] = df["query_idx"].astype(str)
    return df


class Forbidden:
    """Stands in for the test split: any use of it fails the test."""

    def __getattr__(self, name):
        raise AssertionError(f"fit read task.test.{name}")

    def __len__(self):
        raise AssertionError("fit read len(task.test)")


def tiny(name: str, bert_dir, **sets) -> object:
    base = {"model": str(bert_dir)}
    if name == "router-clf":
        base.update(epochs="2", batch_size="8")
    if name == "graphrouter":
        base.update(epochs="5", hidden_dim="8")
    base.update({k: str(v) for k, v in sets.items()})
    return make_ranker(name, base, RunContext(cache_dir=paths.cache_dir(), seed=0, show_progress=False))


# ------------------------------------------------------------------------------------------
# the training signal
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", ["balance", "performance", "cost"])
def test_outcomes_reach_train_and_valid_only(scenario):
    rows = toy_rows()
    write_task(rows)
    df = frame(rows, scenario).set_index(["qid", "llm"])
    for _attempt in range(2):  # the second load comes from the prepared-data store
        task = load_task("routing-balance", {"scenario": scenario})
        assert not has_outcomes(task.test) and task.test.meta == {}
        with pytest.raises(Exception, match="routing outcomes"):
            routing_outcomes(task.test)
        for q in (task.train, task.valid):
            out = routing_outcomes(q)
            assert (out.w_perf, out.w_cost) == WEIGHTS[scenario] and out.scenario == scenario
            for i, qid in enumerate(q.ids):
                names = [task.pool.ids[c] for c in q.candidates[i]]
                exp = df.loc[[(qid, n) for n in names]]
                assert out.effect[i].tolist() == exp["effect"].tolist()
                assert np.allclose(out.cost[i], exp["c"]) and np.allclose(out.objective()[i], exp["obj"])
                assert out.task_ids[i] == exp["task_id"].iloc[0]
            # the best LLM is the task's positive (ties=first), and rows follow ids after a take
            assert out.best().tolist() == [int(p[0]) for p in q.positives]
            rows_ = np.array([len(q) - 1, 0, 1])
            sub = routing_outcomes(q.take(rows_))
            assert np.array_equal(sub.effect, out.effect[rows_]) and list(sub.task_ids) == list(out.task_ids[rows_])


@pytest.mark.parametrize("name", ["router-knn", "router-clf", "graphrouter"])
def test_fit_never_reads_the_test_split(name, bert_dir):
    write_task(toy_rows())
    task = load_task("routing-balance")
    ranker = tiny(name, bert_dir)
    ranker.fit(dataclasses.replace(task, test=Forbidden()))
    ranker.index(task.pool)
    s = ranker.score(task.test, task.test.candidates)
    assert s.shape == task.test.candidates.shape and np.isfinite(s).all()
    shared = ranker.score(task.test, np.arange(len(task.pool)))  # a 1-D candidate list works too
    assert np.allclose(shared, s)
    b = ranker.info["training_budget"]
    assert {k for k, _, _ in BUDGET_FIELDS} <= set(b)


# ------------------------------------------------------------------------------------------
# router-knn
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", ["balance", "cost"])
def test_knn_with_every_neighbour_is_the_training_mean_router(scenario, bert_dir):
    rows = toy_rows(seed=3)
    write_task(rows)
    task = load_task("routing-balance", {"scenario": scenario})
    df = frame(rows, scenario)
    mean = df[df["qid"].isin(set(task.train.ids))].groupby("llm")["obj"].mean()
    expected = np.array([mean[task.pool.ids[c]] for c in task.test.candidates[0]])
    for k in (-1, 10_000):
        ranker = tiny("router-knn", bert_dir, k=k)
        ranker.fit(task)
        ranker.index(task.pool)
        s = ranker.score(task.test, task.test.candidates)
        assert ranker.info["k"] == len(task.train)
        assert np.allclose(s, expected[None, :], atol=1e-12)
    vote = tiny("router-knn", bert_dir, k=-1, mode="vote")
    vote.fit(task)
    vote.index(task.pool)
    top = vote.score(task.test, task.test.candidates).argmax(axis=1)
    majority = pd.Series([task.pool.ids[p[0]] for p in task.train.positives]).value_counts().index[0]
    assert {task.pool.ids[task.test.candidates[i, j]] for i, j in enumerate(top)} == {majority}


def test_knn_chooses_k_on_valid(bert_dir):
    write_task(toy_rows(per_task=20))
    task = load_task("routing-balance")
    ranker = tiny("router-knn", bert_dir)
    ranker.fit(task)
    curve = ranker.info["k_selection"]
    ks = [p["k"] for p in curve]
    assert ks == sorted(set(ks)) and ks[-1] == len(task.train) and ranker.info["k"] in ks
    best = max(p["valid_MRR"] for p in curve)
    assert next(p for p in curve if p["k"] == ranker.info["k"])["valid_MRR"] == best
    assert f"k={ranker.info['k']}" in ranker.info["training_budget"]["selection"]


# ------------------------------------------------------------------------------------------
# graphrouter
# ------------------------------------------------------------------------------------------


def test_graphrouter_trains_and_scores_a_tiny_graph(bert_dir):
    write_task(toy_rows(always="llm-c"))  # one LLM is best everywhere: its edge must win
    task = load_task("routing-balance")
    ranker = tiny("graphrouter", bert_dir, epochs=40, lr=0.01)
    ranker.fit(task)
    curve = ranker.info["training_curve"]
    assert [p["epoch"] for p in curve] == list(range(1, 41))
    assert curve[-1]["train_loss"] < curve[0]["train_loss"]
    assert ranker.info["n_edges"] == len(task.train) * 4 and ranker.info["n_tasks"] == 3
    assert ranker.info["best_epoch"] == max(curve, key=lambda p: (p["valid_MRR"], p["valid_objective"],
                                                                   -p["epoch"]))["epoch"]
    ranker.index(task.pool)
    s = ranker.score(task.test, task.test.candidates)
    picked = {task.pool.ids[task.test.candidates[i, j]] for i, j in enumerate(s.argmax(axis=1))}
    assert picked == {"llm-c"}


def test_edge_conv_matches_pyg_general_conv():
    torch = pytest.importorskip("torch")
    pyg = pytest.importorskip("torch_geometric.nn")
    from rbench_rankers.graphrouter import modules

    torch.manual_seed(0)
    ref = pyg.GeneralConv(in_channels=6, out_channels=6, in_edge_channels=3)
    ours = modules()["EdgeConv"](6, 3)
    ours.lin_msg.load_state_dict(ref.lin_msg.state_dict())
    ours.lin_edge.load_state_dict(ref.lin_edge.state_dict())
    x, e = torch.randn(7, 6), torch.randn(9, 3)
    src, dst = torch.tensor([0, 1, 2, 0, 1, 2, 3, 4, 0]), torch.tensor([5, 5, 5, 6, 6, 6, 5, 6, 6])
    assert torch.allclose(ours(x, src, dst, e), ref(x, torch.stack([src, dst]), edge_attr=e), atol=1e-6)


# ------------------------------------------------------------------------------------------
# router-clf and the CLI road
# ------------------------------------------------------------------------------------------


def test_router_clf_learns_and_keeps_the_best_valid_epoch(bert_dir):
    write_task(toy_rows(per_task=16))
    task = load_task("routing-balance")
    ranker = tiny("router-clf", bert_dir, epochs=4, lr=3e-3)
    ranker.fit(task)
    curve = ranker.info["training_curve"]
    assert len(curve) == 4 and curve[-1]["train_loss"] < curve[0]["train_loss"]
    best = max(curve, key=lambda p: (p["valid_MRR"], p["valid_objective"], -p["epoch"]))
    assert ranker.info["best_epoch"] == best["epoch"]
    ranker.index(task.pool)
    s = ranker.score(task.valid, task.valid.candidates)  # the kept weights give the kept valid MRR
    from rbench_rankers.routers import reciprocal_ranks

    assert reciprocal_ranks(s, task.valid.candidates, task.valid.positives).mean() == pytest.approx(best["valid_MRR"])


@pytest.mark.parametrize("scenario", ["balance", "performance", "cost"])
@pytest.mark.parametrize("name", ["router-knn", "router-clf", "graphrouter"])
def test_every_router_runs_every_scenario(name, scenario, bert_dir, tmp_path):
    write_task(toy_rows())
    sets = {"model": str(bert_dir), "task.scenario": scenario}
    if name == "router-clf":
        sets.update(epochs="1", batch_size="8")
    if name == "graphrouter":
        sets.update(epochs="3", hidden_dim="8")
    out = run(RunOptions(ranker=name, task="routing-balance", sets=sets, results_dir=tmp_path))
    rec = out.record
    assert rec.n_queries == 3 and 0 < rec.metrics["RR"] <= 1
    assert rec.ranker_info["scenario"] == scenario
    assert rec.ranker_info["training_budget"]["selection"]


def test_routers_refuse_tasks_without_outcomes(bert_dir):
    from rbench.api import TaskData
    from tests.lranker_testkit import SPEC, toy_pool, toy_queries

    pool = toy_pool(10)
    q = toy_queries(6, "t", 10, 0, candidates=4)
    task = TaskData(spec=SPEC, pool=pool, train=q, valid=q, test=q)
    with pytest.raises(Exception, match="routing outcomes"):
        tiny("router-knn", bert_dir).fit(task)
