from __future__ import annotations

import numpy as np

from rbench.cli import main
from rbench.plots import scaling_points
from rbench.results import RunRecord, record_path, write_run


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
