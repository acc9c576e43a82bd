"""Training budgets and curves (the ``rbench.results.training_budget`` contract) as RecBole's rankers record them:
filled from what RecBole actually ran, kept when a cached model is reused, derived for models
cached before budgets were recorded."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("recbole")

import rbench_rankers.recbole as R  # noqa: E402
from rbench.api import RunContext  # noqa: E402
from rbench.results.training_budget import BUDGET_FIELDS, budget_cells, fmt_duration  # noqa: E402
from rbench.tasks.families.recsys import load_atomic_dir  # noqa: E402
from tests.rankers.test_recbole import SPEC, _write_atomic  # noqa: E402

CONTRACT_BUDGET = {"examples_seen": int, "epochs": float, "optimizer_steps": int, "train_wall_s": float,
                   "trainable_params": int, "selection": str}
CONTRACT_CURVE = ("epoch", "step", "examples", "train_loss", "valid_MRR", "seconds")


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    d = tmp_path_factory.mktemp("toy-budget")
    _write_atomic(d)
    return load_atomic_dir(SPEC, d, "toy", None)


def _ctx(path: Path) -> RunContext:
    return RunContext(cache_dir=path, seed=0, show_progress=False)


def test_sasrec_budget_and_curve_follow_the_contract_and_survive_reuse(task, tmp_path):
    cfg = R.SASRecOptions(epochs=3, train_batch_size=32, learning_rate=0.01)
    r = R.SASRecRanker(cfg, _ctx(tmp_path))
    r.fit(task)
    info = json.loads(json.dumps(r.info, default=str))  # as it lands in RunRecord.ranker_info
    b, curve = info["training_budget"], info["training_curve"]
    for key, typ in CONTRACT_BUDGET.items():
        assert isinstance(b[key], typ), (key, b[key])
    epochs, rows = info["epochs_run"], info["data_train_rows"]
    steps_per_epoch = math.ceil(rows / 32)
    assert epochs == 3 and b["epochs"] == 3.0
    assert b["examples_seen"] == rows * epochs and b["optimizer_steps"] == steps_per_epoch * epochs
    assert b["negatives_per_example"] == f"all {info['n_items_vocab']} items (full softmax)"
    assert b["trainable_params"] == sum(p.numel() for p in r.model.parameters() if p.requires_grad)
    assert b["train_wall_s"] == info["train_s"] > 0 and "of 3 evaluations" in b["selection"]
    assert [p["epoch"] for p in curve] == [1.0, 2.0, 3.0]
    assert [p["step"] for p in curve] == [steps_per_epoch * k for k in (1, 2, 3)]
    assert [p["examples"] for p in curve] == [rows * k for k in (1, 2, 3)]
    for p in curve:
        assert set(CONTRACT_CURVE) <= set(p)
        assert p["train_loss"] > 0 and 0.0 <= p["valid_MRR"] <= 1.0 and p["seconds"] > 0
    assert curve[-1]["train_loss"] < curve[0]["train_loss"]  # lr 0.01 on a learnable pattern
    # RecBole's own validation scores (valid_metric MRR@10) are the curve's valid_MRR
    assert [round(p["valid_MRR"], 5) for p in curve] == [s for _, s in info["valid_curve"]]
    # a reused model reports the budget that trained it
    again = R.SASRecRanker(dataclasses.replace(cfg), _ctx(tmp_path))
    again.fit(task)
    assert again.info["reused"] is True
    assert again.info["training_budget"] == b and again.info["training_curve"] == curve
    # a model cached before budgets existed: the budget is derived, no curve is invented
    meta_path = Path(r.info["run_dir"]) / "meta.json"
    meta = json.loads(meta_path.read_text())
    for key in ("training_budget", "training_curve", "training_curve_note"):
        del meta[key]
    meta_path.write_text(json.dumps(meta))
    old = R.SASRecRanker(dataclasses.replace(cfg), _ctx(tmp_path))
    old.fit(task)
    assert old.info["training_budget"] == b and "training_curve" not in old.info


def test_bpr_budget_counts_one_sampled_negative(task, tmp_path):
    r = R.BPRRanker(R.BPROptions(epochs=1), _ctx(tmp_path))
    r.fit(task)
    b = r.info["training_budget"]
    assert b["negatives_per_example"] == 1 and b["epochs"] == 1.0
    assert b["examples_seen"] == r.info["data_train_rows"] and b["optimizer_steps"] == 1  # < 2048 pairs


def test_budget_cells_format():
    b = {"examples_seen": 1234567, "epochs": 2.5, "optimizer_steps": 603, "train_wall_s": 125.4,
         "negatives_per_example": 15, "trainable_params": 596_049_920, "selection": "last epoch"}
    assert budget_cells(b) == ["1,234,567", "2.5", "603", "2m 05s", "15 sampled", "596.05M", "last epoch"]
    assert budget_cells({"epochs": 3.0})[:2] == ["–", "3"]
    assert len(budget_cells({})) == len(BUDGET_FIELDS)
    assert fmt_duration(4.04) == "4.0 s" and fmt_duration(3720) == "1h 02m"
