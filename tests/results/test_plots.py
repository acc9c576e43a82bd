from __future__ import annotations

import numpy as np
import pytest

from rbench.cli.app import main
from rbench.results.plots import scaling_points
from rbench.results.record import RunRecord, record_path, write_run


def _rec(res, ranker, variant, pool, rr):
    rec = RunRecord(task="ml-100k", variant=variant, scenario="large", task_fingerprint="f",
                    ranker={"name": ranker, "version": "1", "config": {}}, seed=0, n_queries=10,
                    metrics={"nDCG@10": rr / 2, "RR": rr, "R@10": 0.0, "R@100": 0.0}, timings={},
                    peak_rss_bytes=0, task_info={"pool_size": pool}, created="2026-01-01T00:00:00+00:00")
    key = "ml-100k" if variant == "original" else f"ml-100k~{variant}"
    write_run(rec, record_path(res, "large", key, ranker, ""), None)


def test_scaling_plot(tmp_path, capsys):
    res = tmp_path / "results"
    for n, rr in ((1682, 0.05), (10000, 0.03), (100000, 0.01)):
        _rec(res, "pop", "original" if n == 1682 else f"scaled:{n}", n, rr)
    _rec(res, "bm25", "original", 1682, 0.02)
    _rec(res, "bm25", "mixed", 50000, 0.001)  # not a scaling point
    assert (res / "large" / "ml-100k~scaled-10000" / "pop.json").exists()
    pts = scaling_points(res, "ml-100k", ["pop", "bm25"])
    assert [p[0] for p in pts["pop"]] == [1682, 10000, 100000]
    assert np.allclose([p[1] for p in pts["pop"]], [0.05, 0.03, 0.01])
    assert [p[0] for p in pts["bm25"]] == [1682]
    png = tmp_path / "s.png"
    assert main(["plot", "scaling", "--task", "ml-100k", "-r", "pop", "-r", "bm25", "--results-dir", str(res),
                 "-o", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["plot", "scaling", "--task", "esci", "-r", "pop", "--results-dir", str(res), "-o", str(png)]) == 2


def _trained(res, ranker, curve, variant="original", created="2026-01-01T00:00:00+00:00"):
    info = {"training_budget": {"examples_seen": 10, "epochs": float(len(curve)), "optimizer_steps": len(curve),
                                "train_wall_s": 1.0, "negatives_per_example": 1, "trainable_params": 5,
                                "selection": "last"},
            "training_curve": curve}
    rec = RunRecord(task="ml-100k", variant=variant, scenario="large", task_fingerprint="f",
                    ranker={"name": ranker, "version": "1", "config": {}}, seed=0, n_queries=10,
                    metrics={"nDCG@10": 0.1, "RR": 0.1, "R@10": 0.0, "R@100": 0.0}, timings={}, peak_rss_bytes=0,
                    created=created, ranker_info=info)
    key = "ml-100k" if variant == "original" else f"ml-100k~{variant}"
    write_run(rec, record_path(res, "large", key, ranker, ""), None)


def _curve(n, loss0, mrr0, with_loss=True):
    return [{"epoch": float(e), "step": 10 * e, "examples": 100 * e, "train_loss": loss0 / e if with_loss else None,
             "valid_MRR": mrr0 + 0.01 * e, "seconds": 2.0 * e} for e in range(1, n + 1)]


def test_training_plot(tmp_path, capsys):
    from rbench.results.plots import training_curves

    res = tmp_path / "results"
    _trained(res, "lranker", _curve(3, 2.0, 0.05))
    _trained(res, "lranker", _curve(9, 9.0, 0.5), variant="mixed", created="2026-02-01T00:00:00+00:00")
    _trained(res, "sasrec", _curve(5, 4.0, 0.02, with_loss=False))  # a curve without train losses
    _rec(res, "pop", "original", 1682, 0.05)  # untrained: no curve
    curves = training_curves(res, "ml-100k", ["lranker", "sasrec", "pop"])
    assert list(curves) == ["lranker", "sasrec"]
    assert len(curves["lranker"]) == 3  # the original-pool record, not the newer variant's (same model)
    assert curves["lranker"][0] == pytest.approx({"epoch": 1.0, "step": 10.0, "examples": 100.0, "train_loss": 2.0,
                                                  "valid_MRR": 0.06, "seconds": 2.0})
    assert curves["sasrec"][-1]["train_loss"] is None
    png = tmp_path / "t.png"
    assert main(["plot", "training", "--task", "ml-100k", "-r", "lranker", "-r", "sasrec", "--results-dir",
                 str(res), "-o", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    out = capsys.readouterr().out
    assert "lranker" in out and "8.00" in out and "written:" in out  # best valid MRR 8.00 % at epoch 3


def test_training_plot_without_curves_is_a_one_line_error(tmp_path, capsys):
    res = tmp_path / "results"
    _rec(res, "pop", "original", 1682, 0.05)
    _rec(res, "sasrec", "original", 1682, 0.05)  # an older record: no training_curve
    png = tmp_path / "t.png"
    assert main(["plot", "training", "--task", "ml-100k", "-r", "sasrec", "-r", "pop", "--results-dir", str(res),
                 "-o", str(png)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "training curve" in err and not png.exists()
    assert main(["plot", "training", "--task", "ml-100k", "-r", "sasrec", "--results-dir",
                 str(tmp_path / "nothing"), "-o", str(png)]) == 2
