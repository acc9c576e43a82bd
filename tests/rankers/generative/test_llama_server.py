"""A real llama.cpp server (llama-cpp-python's ``python -m llama_cpp.server``, on loopback, with the
offline SmolLM2-135M GGUF) behind the OpenAI-compatible backend (issue 42 item 1).

That server answers one request at a time. With ``--set concurrency=1`` a generative ranker's run
completes and counts each call once; with parallel requests and a timeout one answer fits but a
queue of them does not, the failure names the fix (``--set concurrency=1`` or a larger
``timeout_s``) instead of a bare ``no answer after 5 tries``. Skipped when llama-cpp-python's
server or the GGUF is missing."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from rbench.core.http import RequestFailed
from rbench_rankers.generative.backends import Decoding
from rbench_rankers.generative.backends.openai import OpenAIBackend
from rbench_rankers.generative.rankgpt import RankGPTRanker
from tests.rankers.generative.test_rankers import import_tiny_task

GGUF = Path("~/.cache/rbench-models/SmolLM2-135M-Instruct.Q4_1.gguf").expanduser()


def _server_missing() -> str:
    if not GGUF.is_file():
        return f"needs the offline GGUF {GGUF.name} in ~/.cache/rbench-models (scripts/offline-models.sh)"
    for module in ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "pydantic_settings"):
        if importlib.util.find_spec(module) is None:
            return f"needs llama-cpp-python's server (pip install -e '.[llm-server]'): {module} is missing"
    return ""


pytestmark = [pytest.mark.slow, pytest.mark.skipif(bool(_server_missing()), reason=_server_missing() or "-")]


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    """``python -m llama_cpp.server`` on a free loopback port (one thread: on a busy machine two
    threads spin in llama.cpp's barriers, ~10x slower); its base URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(GGUF), "--host", "127.0.0.1",
             "--port", str(port), "--n_ctx", "2048", "--n_threads", "1", "--n_threads_batch", "1", "--verbose", "False"],
            stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    base = f"http://127.0.0.1:{port}/v1"
    try:
        t0 = time.monotonic()
        while True:
            if proc.poll() is not None:
                pytest.skip(f"llama_cpp.server exited ({proc.returncode}): {log.read_text(errors='replace')[-300:]}")
            try:
                with urllib.request.urlopen(base + "/models", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() - t0 > 45:
                pytest.skip("llama_cpp.server did not answer within 45 s")
            time.sleep(0.3)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_a_ranker_runs_against_a_one_slot_server_at_concurrency_1(llama_server, tmp_path):
    import rbench

    import_tiny_task(tmp_path / "beir", "llama-srv", n_test=2, m=4)
    rec = rbench.evaluate(RankGPTRanker, "llama-srv", options={
        "backend": "openai", "base_url": llama_server, "model": "smollm2", "concurrency": 1,
        "timeout_s": 30, "retries": 0, "cache": False, "max_new_tokens": 24})
    gen = rec.ranker_info["generation"]
    assert rec.n_queries == 2
    assert gen["calls"] == 2 and gen["fresh"]["calls"] == 2 and gen["cache_hits"] == 0  # one window per list
    assert gen["tokens_in"] > 0 and gen["tokens_out"] > 0  # read from the server's usage
    assert rec.ranker["config"]["concurrency"] == 1 and rec.ranker["config"]["timeout_s"] == 30


def test_parallel_requests_against_a_one_slot_server_fail_with_the_hint(llama_server):
    decoding = Decoding(max_new_tokens=8)
    chat = [{"role": "user", "content": "Write a long story about a cat."}]
    one = OpenAIBackend(llama_server, "smollm2", concurrency=1, retries=0, timeout_s=30)
    one.chat([chat], decoding)  # warm
    t0 = time.monotonic()
    one.chat([chat], decoding)
    single = time.monotonic() - t0
    # a timeout that one answer fits twice over, but not a queue of eight of them
    many = OpenAIBackend(llama_server, "smollm2", concurrency=8, retries=1, timeout_s=max(2 * single, 0.5),
                         backoff_s=0.05)
    with pytest.raises(RequestFailed) as err:
        many.chat([chat] * 8, decoding)
    message = str(err.value)
    assert "no answer after 2 tries" in message and "\n" not in message
    assert "--set concurrency=1 (now 8)" in message and "--set timeout_s" in message
