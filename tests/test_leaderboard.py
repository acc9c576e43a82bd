"""Leaderboard marks on a synthetic results set: best/second, significance, below-popularity."""

from __future__ import annotations

import numpy as np

from rbench.leaderboard import build, to_csv, to_json, to_markdown
from rbench.results import RunRecord, per_query_bytes, record_path, write_run


def _write(res, ranker, task, rr_values, scenario="large", variant="original", ranker_info=None):
    rr = np.asarray(rr_values, dtype=float)
    values = {"nDCG@10": rr * 0.9, "RR": rr, "R@10": (rr > 0.1).astype(float), "R@100": np.ones_like(rr)}
    rec = RunRecord(task=task, variant=variant, scenario=scenario, task_fingerprint="f", ranker={"name": ranker,
                    "version": "1", "config": {}}, seed=0, n_queries=len(rr),
                    metrics={k: float(v.mean()) for k, v in values.items()}, timings={}, peak_rss_bytes=0,
                    created="2026-11-22T00:00:00+00:00", ranker_info=ranker_info or {})
    key = task if variant == "original" else f"{task}~{variant}"
    write_run(rec, record_path(res, scenario, key, ranker, ""), per_query_bytes(
        np.array([f"q{i}" for i in range(len(rr))]), values, np.ones(len(rr), dtype=int)))


def test_marks(tmp_path):
    rng = np.random.default_rng(0)
    base = rng.random(400) * 0.5
    _write(tmp_path, "pop", "ml-100k", base)
    _write(tmp_path, "strong", "ml-100k", np.clip(base + 0.2, 0, 1))       # clearly best
    _write(tmp_path, "close", "ml-100k", np.clip(base + 0.2 + rng.normal(0, 0.01, 400), 0, 1) - 0.0005)
    _write(tmp_path, "weak", "ml-100k", base * 0.5)                         # below popularity
    lb = build(tmp_path, "large")
    assert lb.rows[0] == "pop"  # floors first
    marks = lb.rank_marks()
    assert marks[("strong", "ml-100k", "RR")] == "best"
    assert marks[("close", "ml-100k", "RR")] == "second"
    assert lb.below_pop() == {("weak", "ml-100k")}
    sig = lb.significance()
    assert sig[("weak", "ml-100k", "RR")] < 0.05 and sig[("pop", "ml-100k", "RR")] < 0.05
    assert sig[("close", "ml-100k", "RR")] > 0.05
    md = to_markdown(lb)
    assert "| strong | **" in md and "<u>" in md and "▽" in md and "| *test queries* | 400 | 400 |" in md
    weak_row = next(line for line in md.splitlines() if line.startswith("| weak |"))
    assert weak_row.count("*") >= 2
    assert "strong,ml-100k,400" in to_csv(lb)
    assert '"scenario": "large"' in to_json(lb)


def test_variant_tables_are_separate(tmp_path):
    _write(tmp_path, "pop", "ml-100k", [0.5, 0.2])
    _write(tmp_path, "pop", "ml-100k", [0.1, 0.1], variant="mixed")
    assert build(tmp_path, "large").tasks == ["ml-100k"]
    assert build(tmp_path, "large", "mixed").tasks == ["ml-100k~mixed"]
    assert build(tmp_path, "small").rows == []


def test_paper_reference_rows_are_separate_and_labelled(tmp_path):
    from rbench.leaderboard import paper_reference

    _write(tmp_path, "pop", "ml-100k", [0.5, 0.2])
    lb = build(tmp_path, "large")
    md = to_markdown(lb, paper=True)
    main_part, ref_part = md.split("## Reference", 1)
    assert "LRanker" not in main_part and "| LRanker | 8.02 | 7.80 |" in ref_part and "A6000" in ref_part
    assert ("SASRec", "ml-100k", "RR", 3.84) in paper_reference("large", "original", ["ml-100k"])
    assert "## Reference" not in to_markdown(lb)


def test_labels_spell_out_non_default_options():
    from rbench.results import RunRecord

    rec = RunRecord(task="msmarco", variant="original", scenario="large", task_fingerprint="f",
                    ranker={"name": "dense", "version": "1", "config": {}}, seed=1, n_queries=4, metrics={},
                    timings={}, peak_rss_bytes=0, config_hash="abcd1234",
                    run_options={"non_default": {"ranker": {"model": "/very/long/local/path/to/all-MiniLM-L6-v2"},
                                                 "task": {"split": "test"}, "seed": 1}})
    assert rec.label == "dense (model=all-MiniLM-L6-v2)"
    assert rec.column == "msmarco (split=test, seed=1)"
    rec.run_options["non_default"]["ranker"] = {f"opt{i}": "x" * 10 for i in range(5)}
    assert rec.label == "dense-abcd1234"


def test_variant_table_shows_relative_mrr_change(tmp_path):
    _write(tmp_path, "pop", "ml-100k", [0.5, 0.3])            # MRR 0.4
    _write(tmp_path, "pop", "ml-100k", [0.3, 0.1], variant="mixed")  # MRR 0.2 -> -50%
    lb = build(tmp_path, "large", "mixed")
    assert lb.deltas[("pop", "ml-100k~mixed")] == -0.5
    md = to_markdown(lb)
    assert "Δ MRR" in md and "-50.0%" in md
    assert "-50.00" in to_csv(lb)
    assert "Δ MRR" not in to_markdown(build(tmp_path, "large"))


def test_lranker_rows_are_named_by_preset_and_ablation():
    from rankers.lranker.config import CPU_PRESET
    from rankers.lranker.ranker import LRankerRanker
    from rbench.plugins import make_ranker

    assert make_ranker("lranker", {}).label == "lranker"
    cpu = make_ranker("lranker", {"preset": "cpu"}).config
    assert LRankerRanker.label_for(cpu) == "lranker (preset=cpu)"
    assert LRankerRanker.label_for({**cpu, "tts": False}) == "lranker (preset=cpu, tts=false)"
    assert "epochs=" not in LRankerRanker.label_for(cpu) and "epochs" in CPU_PRESET
    assert LRankerRanker.label_for({**cpu, "epochs": 99}) == "lranker (preset=cpu, epochs=99)"


SASREC_BUDGET = {"examples_seen": 4713300, "epochs": 50.0, "optimizer_steps": 2350, "train_wall_s": 192.4,
                 "negatives_per_example": "all 1682 items (full softmax)", "trainable_params": 124_480,
                 "selection": "best valid MRR@10 (RecBole full sort) of 50 evaluations, epoch 40"}
LRANKER_BUDGET = {"examples_seen": 30000, "epochs": 1.0, "optimizer_steps": 3750, "train_wall_s": 3725.0,
                  "negatives_per_example": 15, "trainable_params": 596_049_920,
                  "selection": "best valid MRR of 6 evaluations"}


def test_training_budgets_are_shown_for_trained_rows_only(tmp_path):
    import csv
    import io
    import json

    from rich.console import Console

    from rbench.leaderboard import rich_budget_table

    _write(tmp_path, "pop", "ml-100k", [0.5, 0.2])  # untrained: no budget
    _write(tmp_path, "sasrec", "ml-100k", [0.6, 0.3], ranker_info={"training_budget": SASREC_BUDGET,
                                                                   "training_curve": []})
    _write(tmp_path, "lranker", "ml-100k", [0.7, 0.4], ranker_info={"training_budget": LRANKER_BUDGET})
    _write(tmp_path, "gru4rec", "ml-100k", [0.1, 0.1], ranker_info={"training_budget": "garbled"})  # ignored
    lb = build(tmp_path, "large")
    md = to_markdown(lb)
    main_table, foot = md.split("**Training budgets**", 1)
    assert "| sasrec |" in main_table and "examples seen" not in main_table  # the table itself is unchanged
    assert ("| Ranker | Task | examples seen | epochs | optimizer steps | train wall time | negatives/example "
            "| trainable params | model selection |") in foot
    assert ("| sasrec | ml-100k | 4,713,300 | 50 | 2,350 | 3m 12s | all 1682 items (full softmax) | 124.5k "
            "| best valid MRR@10 (RecBole full sort) of 50 evaluations, epoch 40 |") in foot
    assert "| lranker | ml-100k | 30,000 | 1 | 3,750 | 1h 02m | 15 sampled | 596.05M |" in foot
    assert "| pop |" not in foot and "| gru4rec |" not in foot
    assert foot.index("| sasrec |") < foot.index("| lranker |")  # table row order
    rows = {r["ranker"]: r for r in csv.DictReader(io.StringIO(to_csv(lb)))}
    assert rows["sasrec"]["examples_seen"] == "4713300" and rows["sasrec"]["optimizer_steps"] == "2350"
    assert rows["lranker"]["negatives_per_example"] == "15" and rows["lranker"]["train_wall_s"] == "3725.0"
    assert rows["pop"]["examples_seen"] == "" and rows["pop"]["MRR"] == "35.00"
    data = {r["ranker"]: r for r in json.loads(to_json(lb))["rows"]}
    assert data["lranker"]["training_budget"] == LRANKER_BUDGET and "training_budget" not in data["pop"]
    console = Console(width=250, record=True)
    console.print(rich_budget_table(lb))
    text = console.export_text()
    assert "Training budgets" in text and "3m 12s" in text and "596.05M" in text and "pop" not in text


def test_records_without_budgets_show_no_footnote(tmp_path):
    from rbench.leaderboard import rich_budget_table

    _write(tmp_path, "pop", "ml-100k", [0.5, 0.2])
    _write(tmp_path, "sasrec", "ml-100k", [0.6, 0.3], ranker_info={"epochs_run": 3})  # an older record
    lb = build(tmp_path, "large")
    assert "Training budgets" not in to_markdown(lb) and rich_budget_table(lb) is None
    assert to_csv(lb).splitlines()[0].endswith("selection")
