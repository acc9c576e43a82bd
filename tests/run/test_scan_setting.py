"""``--scan torch|cuda``: an embedding ranker's scores scanned by rbench.engine.torch_scan, chosen
per run, recorded, kept apart from the CPU engine's record, refused where it does not apply."""

from __future__ import annotations

import numpy as np
import pytest

import rbench
import rbench.public
from rbench.core.errors import RBenchError

pytest.importorskip("torch")


class IntegerVectors:
    """Integer-valued vectors (exact fp32 sums on every path): the torch scan must give the CPU
    engine's numbers bit for bit, ties included."""

    name, version = "int-vectors", "1"
    config: dict = {}

    def fit(self, task):
        return None

    def encode_pool(self, pool):
        rng = np.random.default_rng(0)
        return rng.integers(-3, 4, (len(pool), 8)).astype(np.float32)

    def encode_queries(self, queries):
        rng = np.random.default_rng([int(abs(hash(str(i)))) % 2**32 for i in queries.ids[:1]] or [0])
        return np.stack([np.random.default_rng(abs(hash(str(i))) % 2**32).integers(-3, 4, 8)
                         for i in queries.ids]).astype(np.float32) + 0 * rng.random()


def test_the_torch_scan_gives_the_engines_record_and_says_so(tmp_path):
    cpu = rbench.evaluate(IntegerVectors(), "ml-100k", max_queries=200, results_dir=tmp_path)
    torch_run = rbench.evaluate(IntegerVectors(), "ml-100k", max_queries=200, results_dir=tmp_path, scan="torch")
    assert torch_run.metrics == cpu.metrics  # exact arithmetic: identical ranks, ties included
    assert torch_run.run_options["scan"] == "torch" and "scan" not in cpu.run_options
    assert torch_run.config_hash != cpu.config_hash  # its own file: never stands for the engine's record
    assert (cpu.per_query["rank"].to_numpy() == torch_run.per_query["rank"].to_numpy()).all()
    assert len(list(tmp_path.rglob("*.json"))) == 2


def test_the_scan_setting_is_refused_where_it_does_not_apply():
    with pytest.raises(RBenchError, match="--scan torch scans an embedding ranker.*'bm25' scores with its own score"):
        rbench.evaluate("bm25", "ml-100k", scan="torch")
    with pytest.raises(RBenchError, match="--scan-precision bf16 applies to the torch scan"):
        rbench.evaluate(IntegerVectors(), "ml-100k", scan_precision="bf16")
    with pytest.raises(RBenchError, match="--scan torch and --ray-shards are two ways to scan"):
        rbench.public.plan_run(IntegerVectors(), "ml-100k", scan="torch", ray_shards=2)
    with pytest.raises(RBenchError, match="unknown --scan 'gpu'"):
        rbench.evaluate(IntegerVectors(), "ml-100k", scan="gpu")
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(RBenchError, match="--scan cuda: torch sees no CUDA device"):
            rbench.evaluate(IntegerVectors(), "ml-100k", scan="cuda")
