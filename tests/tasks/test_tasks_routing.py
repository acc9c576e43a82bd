"""Routing loader on GraphRouter-format CSVs written here (multi-line quoted responses, extra
columns), checked against an independent pandas derivation of the scenario objective."""

from __future__ import annotations

import csv
import json
import random

import numpy as np
import pandas as pd
import pytest

from rbench.core import paths
from rbench.core.errors import DataError
from rbench.engine.scan import validate_queries
from rbench.tasks.families.routing import normalise_cost
from rbench.tasks.registry import data_status, get_task, load_task

LLMS = ["llm-a", "llm-b", "llm-c", "llm-d"]


def raw():
    d = paths.raw_dir("routing-balance")
    d.mkdir(parents=True, exist_ok=True)
    return d


def make_rows(n_tasks: int = 3, per_task: int = 10, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    idx = 0
    for t in range(n_tasks):
        for k in range(per_task):
            for j, llm in enumerate(LLMS):
                rows.append({"query_idx": idx, "task_id": f"task{t}", "query": f"Q{t}-{k}: solve, please",
                             "ground_truth": "x", "metric": "em", "llm": llm,
                             "effect": rng.choice([0.0, 0.25, 0.5, 1.0]),
                             "cost": round(rng.uniform(1e-5, 1e-3) * (j + 1), 8),
                             "response": f"line one\nline two, with comma\n\"quoted\" {k}"})
            idx += 1
    return rows


def write_csv(path, rows, columns=None) -> None:
    columns = columns or list(rows[0])
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


def write_routing_task(n_tasks: int = 4, per_task: int = 40) -> str:
    """Raw routing-balance files of synthetic rows in the test's RBENCH_HOME; returns the task name."""
    d = paths.raw_dir("routing-balance")
    d.mkdir(parents=True, exist_ok=True)
    write_csv(d / "router_data.csv", make_rows(n_tasks=n_tasks, per_task=per_task))
    return "routing-balance"


def expected_positive(rows: list[dict], w_perf: float, by: str = "task_id") -> dict[str, list[str]]:
    """Independent derivation: per-group min-max cost, objective, every LLM at the max."""
    df = pd.DataFrame(rows)
    g = df.groupby(by)["cost"]
    span = g.transform("max") - g.transform("min")
    df["c"] = np.where(span > 0, (df["cost"] - g.transform("min")) / span.where(span > 0, 1), 0.0)
    df["obj"] = w_perf * df["effect"] - (1 - w_perf) * df["c"]
    out = {}
    for qid, q in df.groupby("query_idx"):
        best = q["obj"].max()
        out[str(qid)] = list(q.loc[np.isclose(q["obj"], best, rtol=0, atol=1e-12), "llm"])
    return out


def gather(task):
    got = {}
    for q in (task.train, task.valid, task.test):
        for i, qid in enumerate(q.ids):
            got[qid] = [task.pool.ids[p] for p in q.positives[i]]
    return got


@pytest.mark.parametrize("scenario,w_perf", [("balance", 0.5), ("performance", 1.0), ("cost", 0.2)])
def test_positive_maximises_the_scenario_objective(scenario, w_perf):
    rows = make_rows()
    write_csv(raw() / "router_data.csv", rows)
    exp = expected_positive(rows, w_perf)
    first = load_task("routing-balance", {"scenario": scenario})
    every = load_task("routing-balance", {"scenario": scenario, "ties": "all"})
    order = {n: i for i, n in enumerate(first.pool.ids)}
    assert gather(every) == {q: sorted(v, key=order.get) for q, v in exp.items()}
    assert gather(first) == {q: [min(v, key=order.get)] for q, v in exp.items()}
    assert first.info["n_queries_with_tied_best"] == sum(len(v) > 1 for v in exp.values())
    for q in (first.train, first.valid, first.test):
        validate_queries(q, first.pool)
        assert q.candidates.shape == (len(q), 4)
        assert (np.sort(q.candidates, axis=1) == np.arange(4)).all()


def picks_by_text(task) -> dict[str, str]:
    return {text: task.pool.ids[q.positives[i][0]] for q in (task.train, task.valid, task.test)
            for i, text in enumerate(q.texts)}


def test_hand_made_query_flips_with_the_scenario():
    # task t: costs 0..10 -> normalised 0..1 (per task)
    rows = [{"task_id": "t", "query": q, "llm": llm, "effect": eff, "cost": cost}
            for q in ("q0", "q1")
            for llm, eff, cost in [("strong-expensive", 1.0, 10.0), ("cheap-ok", 0.7, 0.0), ("mid", 0.8, 5.0)]]
    rows += [{"task_id": "t", "query": f"q{k}", "llm": llm, "effect": 0.0, "cost": 1.0}
             for k in range(2, 10) for llm in ("strong-expensive", "cheap-ok", "mid")]
    write_csv(raw() / "router_data.csv", rows)
    # performance: effects 1.0 > 0.8 > 0.7
    assert picks_by_text(load_task("routing-balance", {"scenario": "performance"}))["q0"] == "strong-expensive"
    # balance: 0.5*1-0.5*1 = 0 < 0.5*0.8-0.5*0.5 = 0.15 < 0.5*0.7-0 = 0.35
    got = picks_by_text(load_task("routing-balance", {"scenario": "balance"}))
    assert got["q0"] == got["q1"] == "cheap-ok"
    # cost scenario on raw costs: 0.2*1-0.8*10 < 0.2*0.8-0.8*5 < 0.2*0.7-0.8*0
    got = picks_by_text(load_task("routing-balance", {"scenario": "cost", "cost_norm": "none"}))
    assert got["q0"] == "cheap-ok"
    # queries where every LLM ties: 'first' takes the first LLM in candidate order
    assert got["q5"] == "strong-expensive"


def test_descriptions_order_and_text():
    rows = make_rows()
    write_csv(raw() / "router_data.csv", rows)
    desc = {name: {"feature": f"  {name} is a model\n that answers  ", "input_price": 0.1}
            for name in ["llm-d", "llm-b", "llm-a", "llm-c", "unused"]}
    (raw() / "candidate_models.json").write_text(json.dumps(desc))
    t = load_task("routing-balance")
    assert list(t.pool.ids) == ["llm-d", "llm-b", "llm-a", "llm-c"]
    assert t.pool.texts[0] == "llm-d: llm-d is a model that answers"
    plain = load_task("routing-balance", {"descriptions": "false"})
    assert list(plain.pool.ids) == LLMS and list(plain.pool.texts) == LLMS
    del desc["llm-b"]
    (raw() / "candidate_models.json").write_text(json.dumps(desc))
    with pytest.raises(DataError, match="no description for LLM 'llm-b'") as err:
        load_task("routing-balance")
    assert "candidate_models.json" in str(err.value)


def test_split_is_seeded_stratified_and_disjoint():
    write_csv(raw() / "router_data.csv", make_rows(n_tasks=3, per_task=20))
    a, b, c = (load_task("routing-balance", seed=s) for s in (7, 7, 8))
    assert [list(q.ids) for q in (a.train, a.valid, a.test)] == [list(q.ids) for q in (b.train, b.valid, b.test)]
    assert list(a.test.ids) != list(c.test.ids) and a.fingerprint != c.fingerprint
    ids = [set(q.ids) for q in (a.train, a.valid, a.test)]
    assert len(set.union(*ids)) == 60 == sum(map(len, ids))
    task_of = {str(r["query_idx"]): r["task_id"] for r in make_rows(n_tasks=3, per_task=20)}
    for q, k in ((a.valid, 2), (a.test, 2)):
        assert sorted(task_of[x] for x in q.ids) == sorted([f"task{t}" for t in range(3)] * k)


def test_split_test_evaluates_every_query_zero_shot_and_keeps_the_default_fingerprint(capsys):
    from rbench.cli.app import main
    from rbench.tasks.families.routing import FAMILY, RoutingOptions, _fingerprint_text

    write_csv(raw() / "router_data.csv", make_rows(n_tasks=3, per_task=20))
    default = load_task("routing-balance", seed=7)
    every = load_task("routing-balance", {"split": "test"}, seed=7)
    assert len(every.train) == len(every.valid) == 0 and sorted(every.test.ids) == sorted(
        [*default.train.ids, *default.valid.ids, *default.test.ids])
    assert every.fingerprint != default.fingerprint
    # records made before the option existed keep their fingerprint: the default leaves it out
    assert _fingerprint_text(RoutingOptions()) == (
        "RoutingOptions(scenario='balance', cost_norm='task', ties='first', descriptions=True)")
    assert FAMILY.test_only(get_task("routing-balance"), RoutingOptions(split="test"))
    assert not FAMILY.test_only(get_task("routing-balance"), RoutingOptions())
    # untrained rankers run on every query; a router that trains is refused in one line
    assert main(["run", "-r", "pop", "-t", "routing-balance", "--set", "task.split=test", "-q",
                 "--results-dir", str(paths.raw_dir("routing-balance").parent / "res")]) == 0
    capsys.readouterr()
    assert main(["run", "-r", "router-knn", "-t", "routing-balance", "--set", "task.split=test", "-q",
                 "--results-dir", str(paths.raw_dir("routing-balance").parent / "res")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "router-knn" in err and "task.split=test" in err


def test_query_ids_fall_back_to_a_hash_without_query_idx():
    rows = make_rows()
    cols = [c for c in rows[0] if c != "query_idx"]
    write_csv(raw() / "router_data.csv", rows, cols)
    t = load_task("routing-balance")
    assert all(len(x) == 13 and x.startswith("q") for x in t.test.ids)
    assert len(t.train) + len(t.valid) + len(t.test) == 30


def line_of(path, needle: str) -> int:
    with open(path, encoding="utf-8") as fh:
        for i, line in enumerate(fh, start=1):
            if needle in line:
                return i
    raise AssertionError(needle)


def test_malformed_rows_name_file_line_and_field():
    path = raw() / "router_data.csv"
    rows = make_rows()
    rows[13]["effect"] = "high"
    rows[13]["query"] = "MARKER query"
    write_csv(path, rows)
    with pytest.raises(DataError) as err:
        load_task("routing-balance")
    # records span several lines (multi-line responses): the reported line is the record's first
    assert f"line {line_of(path, 'MARKER query')}" in str(err.value) and err.value.field == "effect"
    assert "router_data.csv" in str(err.value)

    rows = make_rows()
    del rows[5]  # one query with 3 LLMs
    write_csv(path, rows)
    with pytest.raises(DataError, match="same candidate LLMs") as err:
        load_task("routing-balance")
    assert err.value.field == "llm"

    rows = make_rows()
    rows[5]["llm"] = rows[4]["llm"]
    write_csv(path, rows)
    with pytest.raises(DataError, match="two rows") as err:
        load_task("routing-balance")

    rows = make_rows()
    write_csv(path, rows, [c for c in rows[0] if c != "cost"])
    with pytest.raises(DataError, match="missing column") as err:
        load_task("routing-balance")
    assert err.value.field == "cost" and err.value.line == 1


def test_normalise_cost_groups():
    cost = np.array([1.0, 3.0, 2.0, 5.0, 5.0])
    assert normalise_cost(cost, np.array([0, 0, 0, 1, 1])).tolist() == [0.0, 1.0, 0.5, 0.0, 0.0]
    assert normalise_cost(cost, None).tolist() == [0.0, 0.5, 0.25, 1.0, 1.0]


def test_data_status():
    spec = get_task("routing-balance")
    present, detail = data_status(spec)
    assert not present and detail.startswith("not present: " + spec.how_to_get)
    sub = raw() / "graphrouter"
    sub.mkdir()
    write_csv(sub / "router_data.csv", make_rows())
    present, detail = data_status(spec)
    assert present and "router_data.csv" in detail and "no LLM descriptions" in detail


@pytest.mark.shared
def test_routeprofile_shared(shared_data):
    src = shared_data / "routing-routeprofile"
    if not src.exists():
        pytest.skip("routing-routeprofile not in ../shared/data")
    paths.raw_dir("routing-balance").parent.mkdir(parents=True, exist_ok=True)
    paths.raw_dir("routing-balance").symlink_to(src, target_is_directory=True)
    task = load_task("routing-balance", seed=0)
    desc = json.loads((src / "candidate_models.json").read_text())
    assert list(task.pool.ids) == list(desc)  # 8 LLMs in the description file's order
    assert all(t.startswith(f"{n}: ") for n, t in zip(task.pool.ids, task.pool.texts))
    assert (len(task.train), len(task.valid), len(task.test)) == (480, 60, 60)
    for q in (task.train, task.valid, task.test):
        validate_queries(q, task.pool)
        assert q.candidates.shape[1] == 8
    df = pd.read_csv(src / "router_data.csv")
    exp = expected_positive(df.to_dict("records"), 0.5)
    order = {n: i for i, n in enumerate(task.pool.ids)}
    assert gather(task) == {q: [min(v, key=order.get)] for q, v in exp.items()}
    texts = dict(zip(df["query_idx"].astype(str), df["query"]))
    assert all(texts[qid] == text for qid, text in zip(task.test.ids, task.test.texts))
