"""Leaderboard marks on a synthetic results set: best/second, significance, below-popularity."""

from __future__ import annotations

import numpy as np

from rbench.results.leaderboard import build, to_csv, to_json, to_markdown
from rbench.results.record import ColumnKey, RowKey, RunRecord, per_query_bytes, record_path, write_run
from rbench.tasks.pools import Variant

ML = ColumnKey("ml-100k")


def _write(res, ranker, task, rr_values, scenario="large", variant="original", ranker_info=None, options=None,
           label=None, task_options=None, created="2026-11-22T00:00:00+00:00"):
    from rbench.core.config import config_hash

    rr = np.asarray(rr_values, dtype=float)
    values = {"nDCG@10": rr * 0.9, "RR": rr, "R@10": (rr > 0.1).astype(float), "R@100": np.ones_like(rr)}
    diff = {k: v for k, v in (("ranker", options), ("task", task_options)) if v}
    rec = RunRecord(task=task, variant=variant, scenario=scenario, task_fingerprint="f", ranker={"name": ranker,
                    "version": "1", "config": dict(options or {}), **({"label": label} if label else {})},
                    seed=0, n_queries=len(rr),
                    metrics={k: float(v.mean()) for k, v in values.items()}, timings={}, peak_rss_bytes=0,
                    created=created, ranker_info=ranker_info or {}, run_options={"non_default": diff},
                    config_hash=config_hash(diff) if diff else "")
    key = task if variant == "original" else f"{task}~{variant}"
    write_run(rec, record_path(res, scenario, key, ranker, rec.config_hash), per_query_bytes(
        np.array([f"q{i}" for i in range(len(rr))]), values, np.ones(len(rr), dtype=int)))


def test_marks(tmp_path):
    rng = np.random.default_rng(0)
    base = rng.random(400) * 0.5
    _write(tmp_path, "pop", "ml-100k", base)
    _write(tmp_path, "strong", "ml-100k", np.clip(base + 0.2, 0, 1))       # clearly best
    _write(tmp_path, "close", "ml-100k", np.clip(base + 0.2 + rng.normal(0, 0.01, 400), 0, 1) - 0.0005)
    _write(tmp_path, "weak", "ml-100k", base * 0.5)                         # below popularity
    lb = build(tmp_path, "large")
    assert lb.rows[0] == RowKey("pop") and lb.label(lb.rows[0]) == "pop"  # floors first
    marks = lb.rank_marks()
    assert marks[(RowKey("strong"), ML, "RR")] == "best"
    assert marks[(RowKey("close"), ML, "RR")] == "second"
    assert lb.below_floors() == {(RowKey("weak"), ML)}
    sig = lb.significance()
    assert sig[(RowKey("weak"), ML, "RR")] < 0.05 and sig[(RowKey("pop"), ML, "RR")] < 0.05
    assert sig[(RowKey("close"), ML, "RR")] > 0.05
    md = to_markdown(lb)
    assert "| strong | **" in md and "<u>" in md and "▽" in md and "| *test queries* | 400 | 400 |" in md
    weak_row = next(line for line in md.splitlines() if line.startswith("| weak |"))
    assert weak_row.count("*") >= 2
    assert "strong,ml-100k,400" in to_csv(lb)
    assert '"scenario": "large"' in to_json(lb)


def test_variant_tables_are_separate(tmp_path):
    _write(tmp_path, "pop", "ml-100k", [0.5, 0.2])
    _write(tmp_path, "pop", "ml-100k", [0.1, 0.1], variant="mixed")
    assert build(tmp_path, "large").tasks == [ML]
    mixed = build(tmp_path, "large", "mixed")
    assert mixed.tasks == [ColumnKey("ml-100k", Variant("mixed"))] and mixed.label(mixed.tasks[0]) == "ml-100k~mixed"
    assert build(tmp_path, "small").rows == []


def test_paper_reference_rows_are_separate_and_labelled(tmp_path):
    from rbench.results.leaderboard import paper_reference

    _write(tmp_path, "pop", "rec-movie", [0.5, 0.2])
    lb = build(tmp_path, "large")
    md = to_markdown(lb, paper=True)
    main_part, ref_part = md.split("## Reference", 1)
    assert "LRanker" not in main_part and "| LRanker | 8.02 | 7.80 |" in ref_part and "A6000" in ref_part
    movie = ColumnKey("rec-movie")
    assert ("SASRec", movie, "RR", 3.84) in paper_reference("large", "original", [movie])
    assert "## Reference" not in to_markdown(lb)
    # never under ml-100k (MovieLens 100K is not the paper's MovieLens 1M Rec-Movie)
    assert paper_reference("large", "original", [ML]) == []
    other = tmp_path / "other"
    _write(other, "pop", "ml-100k", [0.5, 0.2])
    assert "not ml-100k" in to_markdown(build(other, "large"), paper=True)


def test_labels_spell_out_non_default_options():
    from rbench.results.record import RunRecord

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
    assert lb.deltas[(RowKey("pop"), ColumnKey("ml-100k", Variant("mixed")))] == -0.5
    md = to_markdown(lb)
    assert "Δ MRR" in md and "-50.0%" in md
    assert "-50.00" in to_csv(lb)
    assert "Δ MRR" not in to_markdown(build(tmp_path, "large"))


def test_lranker_rows_are_named_by_preset_and_ablation():
    from rbench.rankers import make_ranker
    from rbench_rankers.lranker.config import CPU_PRESET
    from rbench_rankers.lranker.ranker import LRankerRanker

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

    from rbench.results.leaderboard import rich_budget_table

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
    from rbench.results.leaderboard import rich_budget_table

    _write(tmp_path, "pop", "ml-100k", [0.5, 0.2])
    _write(tmp_path, "sasrec", "ml-100k", [0.6, 0.3], ranker_info={"epochs_run": 3})  # an older record
    lb = build(tmp_path, "large")
    assert "Training budgets" not in to_markdown(lb) and rich_budget_table(lb) is None
    assert to_csv(lb).splitlines()[0].endswith("selection,protocol")


def test_rows_are_configurations_and_labels_come_from_the_records(tmp_path, monkeypatch):
    """Rows key on (ranker, non-default options), never on the rendered name: two configurations
    whose stored labels coincide both show (told apart by their option hashes); one
    configuration on two test sets is one row; no plugin is imported to name a row."""
    from rbench import rankers as plugins

    def no_import(name):
        raise AssertionError(f"the leaderboard imported plugin {name!r}")

    monkeypatch.setattr(plugins, "load_ranker_class", no_import)
    same = "ghost (preset=cpu)"  # a plugin that is not installed, naming its own configurations
    _write(tmp_path, "ghost", "ml-100k", [0.5, 0.3], options={"preset": "cpu", "sim": "dot"}, label=same,
           created="2026-11-22T01:00:00+00:00")
    _write(tmp_path, "ghost", "ml-100k", [0.2, 0.2], options={"preset": "cpu", "sim": "cos"}, label=same)
    _write(tmp_path, "ghost", "msmarco", [0.9, 0.7], options={"preset": "cpu", "sim": "cos"}, label=same,
           task_options={"split": "test"})
    lb = build(tmp_path, "large")
    dot, cos = RowKey("ghost", '{"preset": "cpu", "sim": "dot"}'), RowKey("ghost", '{"preset": "cpu", "sim": "cos"}')
    assert sorted(lb.rows, key=str) == sorted([dot, cos], key=str)
    assert lb.tasks == [ML, ColumnKey("msmarco", options='{"split": "test"}')]
    labels = {lb.label(r) for r in lb.rows}
    assert labels == {f"{same} [{dot.options_hash}]", f"{same} [{cos.options_hash}]"}
    assert lb.label(lb.tasks[1]) == "msmarco (split=test)"
    md = to_markdown(lb)
    assert md.count(f"| {same} [") == 2 and "| 40.00 | 40.00 |" not in md
    assert f"| {same} [{dot.options_hash}] | **36.00** | **40.00** | – | – |" in md  # its own values


def test_variant_tables_key_on_the_parsed_variant(tmp_path):
    """A table of a kind shows every N of it; one of scaled:30 does not show scaled:300 (no
    prefix matching); a record holding the raw text (scaled=1_000) is filed under its label."""
    _write(tmp_path, "pop", "ml-100k", [0.5, 0.3])
    _write(tmp_path, "pop", "ml-100k", [0.4, 0.2], variant="scaled:30")
    _write(tmp_path, "pop", "ml-100k", [0.3, 0.1], variant="scaled:300")
    _write(tmp_path, "pop", "ml-100k", [0.2, 0.1], variant="scaled=1_000")
    every = build(tmp_path, "large", "scaled")
    assert [every.label(t) for t in every.tasks] == ["ml-100k~scaled:1000", "ml-100k~scaled:30", "ml-100k~scaled:300"]
    assert every.deltas[(RowKey("pop"), ColumnKey("ml-100k", Variant("scaled", 1000)))] == -0.625
    one = build(tmp_path, "large", "scaled:30")
    assert one.tasks == [ColumnKey("ml-100k", Variant("scaled", 30))]
    spelled = build(tmp_path, "large", "scaled=1_000")
    assert spelled.tasks == [ColumnKey("ml-100k", Variant("scaled", 1000))] and spelled.variant == "scaled:1000"



def test_a_column_with_a_fingerprint_and_a_data_name_is_one_bracket_group():
    """``task [data 1117736d] [data: Last.fm]`` read as a Markdown reference link ([text] [label])
    and failed the docs site's strict build: the name goes inside the fingerprint's brackets."""
    from rbench.results.leaderboard import _with_source

    assert _with_source("rec-music [data 1117736d]", "Last.fm") == "rec-music [data 1117736d: Last.fm]"
    assert _with_source("rec-music", "Last.fm") == "rec-music [data: Last.fm]"
    assert _with_source("rec-music [data 1117736d]", None) == "rec-music [data 1117736d]"
    assert "] [" not in _with_source("rec-music (max_queries=20) [data 1117736d]", "Last.fm (hetrec2011)")
