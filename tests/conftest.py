"""Shared fixtures: every test gets its own RBENCH_HOME so nothing touches the user's cache.
Tests marked ``cuda`` are skipped when torch is missing or sees no CUDA device."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

# every scan through the fused kernel, however small (the engine leaves scans below
# rbench.engine.fused.SMALL_SCAN scores to the numpy passes: tests' inputs are small, and the
# kernel must stay tested); tests/engine/test_cold_start.py checks the default without it
os.environ["RBENCH_FUSED_MIN_SCORES"] = "0"


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("rbench-home")
    monkeypatch.setenv("RBENCH_HOME", str(home))
    return home


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models: thread hand-offs cost more than the maths (4x slower with 2 busy cores)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory):
    """A tiny random Qwen3 (causal) with its tokenizer, built once per test module."""
    from tests.lranker_testkit import build_tiny_qwen

    return build_tiny_qwen(tmp_path_factory.mktemp("tiny-qwen3"))


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    """A tiny random BERT (encoder) with its tokenizer, built once per test module."""
    from tests.lranker_testkit import build_tiny_bert

    return build_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.exists():
        pytest.skip("../shared/data is not present")
    return SHARED_DATA


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config, items):
    cuda_items = [item for item in items if item.get_closest_marker("cuda")]
    if not cuda_items or _cuda_available():  # torch is imported only when a cuda test was collected
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    for item in cuda_items:
        item.add_marker(skip)


@pytest.fixture
def server():
    """A loopback HTTP server (``tests.helpers.Server``) for download tests; no real network."""
    from tests.helpers import Server

    s = Server()
    s.thread.start()
    yield s
    s.httpd.shutdown()
    s.httpd.server_close()
