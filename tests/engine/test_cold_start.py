"""A fresh install's first small run compiles no kernel: scans below
``rbench.engine.fused.SMALL_SCAN`` scores run on the numpy passes (the numbers are the same:
tests/engine/test_fused.py), so `rbench run --ranker pop --task ml-100k` on an empty numba cache
pays no JIT wait (benchmarks/cold_start.py measures it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rbench.engine import fused


def test_small_scans_leave_the_kernel_alone_and_large_ones_use_it(monkeypatch):
    monkeypatch.delenv("RBENCH_FUSED_MIN_SCORES", raising=False)
    assert not fused.scan_pays(943, 1682)  # ml-100k
    assert fused.scan_pays(6040, 3884 * 3)  # past SMALL_SCAN
    monkeypatch.setenv("RBENCH_FUSED_MIN_SCORES", "0")
    assert fused.scan_pays(1, 1)
    from rbench.core.errors import RBenchError

    monkeypatch.setenv("RBENCH_FUSED_MIN_SCORES", "5e7")
    with pytest.raises(RBenchError, match="RBENCH_FUSED_MIN_SCORES must be .* got '5e7'"):
        fused.scan_pays(1, 1)


def test_the_first_small_run_on_an_empty_numba_cache_compiles_nothing(tmp_path):
    pytest.importorskip("numba")
    pytest.importorskip("recbole")
    cache = tmp_path / "numba"
    cache.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "RBENCH_FUSED_MIN_SCORES"}
    env.update(NUMBA_CACHE_DIR=str(cache), RBENCH_HOME=str(tmp_path / "home"))
    done = subprocess.run([sys.executable, "-c", "from rbench.cli.app import entry; entry()", "run", "-r", "pop",
                           "-t", "ml-100k", "--no-write", "--json", "-q"], env=env, capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    rec = json.loads(done.stdout)
    rec = rec[0] if isinstance(rec, list) else rec
    assert rec["timings"]["compile_s"] < 1.0, rec["timings"]
    compiled = [p.name for p in Path(cache).rglob("*") if p.is_file() and "fused" in p.name]
    assert not compiled, compiled  # no kernel of rbench.engine.kernels.fused was compiled
