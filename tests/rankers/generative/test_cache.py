"""The response cache: hits cost no model call, every part of the key matters, stats are counted,
a killed run resumes paying only for what is missing, and a broken or locked file is one line.

The hit/miss tests wrap a real backend (TransformersBackend on a tiny random Llama with SmolLM2's
tokenizer; skipped when the SmolLM2 GGUF is absent) in a counting wrapper. The kill/resume test
runs in a subprocess with a slow deterministic backend (no model: the test is about when rows
are committed, and a model load would cost the subprocess seconds)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rbench.plugin import RBenchError
from rbench_rankers.generative.backends import Backend, Decoding, GenerationStats
from rbench_rankers.generative.cache import CachedBackend, ResponseCache, request_key

SMOL_GGUF = Path("~/.cache/rbench-models/SmolLM2-135M-Instruct.Q4_1.gguf").expanduser()
CHATS = [[{"role": "user", "content": f"Which is better, item {i} or item {i + 1}?"}] for i in range(3)]


class Counting:
    """Wraps a backend and counts the requests it actually receives."""

    def __init__(self, inner, identity=None) -> None:
        self.inner, self.kind, self.supports_logprobs = inner, inner.kind, inner.supports_logprobs
        self.batch_size = getattr(inner, "batch_size", 8)
        self._identity = identity
        self.chat_requests = 0
        self.logprob_requests = 0

    def identity(self):
        return self._identity if self._identity is not None else self.inner.identity()

    def chat(self, chats, decoding):
        self.chat_requests += len(chats)
        return self.inner.chat(chats, decoding)

    def next_token_logprobs(self, chats, labels):
        self.logprob_requests += len(chats)
        return self.inner.next_token_logprobs(chats, labels)

    def close(self):
        pass


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, one_torch_thread):
    if not SMOL_GGUF.is_file():
        pytest.skip("the SmolLM2-135M-Instruct Q4_1 GGUF (whose tokenizer the tiny model uses) is absent")
    pytest.importorskip("gguf")
    from rbench_rankers.generative.backends.transformers import TransformersBackend
    from tests.rankers.generative.test_backends import build_tiny_llama

    return TransformersBackend(str(build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))), device="cpu")


def test_second_call_is_all_hits_with_no_model_call(tiny, tmp_path):
    counting = Counting(tiny)
    stats = GenerationStats()
    cached = CachedBackend(counting, ResponseCache(tmp_path / "r.sqlite"), stats)
    assert isinstance(cached, Backend) and cached.identity() == tiny.identity()
    d = Decoding(max_new_tokens=4)
    first = cached.chat(CHATS, d)
    assert counting.chat_requests == 3 and stats.calls == 3 and stats.cache_hits == 0
    assert stats.tokens_in == sum(c.tokens_in for c in first) > 0 and stats.tokens_out == 12
    seconds = stats.seconds
    again = cached.chat(CHATS, d)
    assert counting.chat_requests == 3  # nothing new reached the model
    assert [c.text for c in again] == [c.text for c in first] and all(c.cached for c in again)
    # honest cost: the replayed answers count at what they cost the call that produced them
    assert stats.cache_hits == 3 and stats.fresh_calls == 3 and stats.fresh_seconds == seconds
    assert stats.calls == 6 and stats.tokens_out == 24 and stats.seconds == pytest.approx(2 * seconds)
    # logprobs: the same, keyed by the labels
    lp = cached.next_token_logprobs(CHATS[:2], ("A", "B"))
    lp2 = cached.next_token_logprobs(CHATS[:2], ("A", "B"))
    assert counting.logprob_requests == 2 and [x.logprobs for x in lp2] == [x.logprobs for x in lp]
    assert all(x.cached for x in lp2) and stats.cache_hits == 5
    # a new process (a re-run) sees the same rows
    fresh = Counting(tiny)
    rerun = CachedBackend(fresh, ResponseCache(tmp_path / "r.sqlite"), GenerationStats())
    assert [c.text for c in rerun.chat(CHATS, d)] == [c.text for c in first] and fresh.chat_requests == 0


def test_each_part_of_the_key_makes_a_miss(tiny, tmp_path):
    counting = Counting(tiny)
    cache = ResponseCache(tmp_path / "r.sqlite")
    cached = CachedBackend(counting, cache, GenerationStats())
    d = Decoding(max_new_tokens=3)
    cached.chat(CHATS[:1], d)
    assert counting.chat_requests == 1
    for other in (Decoding(max_new_tokens=4), Decoding(max_new_tokens=3, temperature=0.7),
                  Decoding(max_new_tokens=3, seed=1), Decoding(max_new_tokens=3, stop=("\n",)),
                  Decoding(max_new_tokens=3, top_p=0.9)):
        before = counting.chat_requests
        cached.chat(CHATS[:1], other)
        assert counting.chat_requests == before + 1, other
    before = counting.chat_requests
    cached.chat(CHATS[1:2], d)  # another prompt
    cached.chat([[{"role": "system", "content": "x"}, *CHATS[0]]], d)  # another message list
    assert counting.chat_requests == before + 2
    other_model = Counting(tiny, identity={**tiny.identity(), "weights": "0" * 16})
    CachedBackend(other_model, cache, GenerationStats()).chat(CHATS[:1], d)
    assert other_model.chat_requests == 1  # same prompt and decoding, another model: a miss
    cached.next_token_logprobs(CHATS[:1], ("A", "B"))
    cached.next_token_logprobs(CHATS[:1], ("B", "A"))
    cached.next_token_logprobs(CHATS[:1], ("A", "B"))
    assert counting.logprob_requests == 2


def test_key_is_canonical_and_kind_separated():
    ident = {"backend": "x", "model": "m"}
    chat = [{"role": "user", "content": "hi"}]
    a = request_key(ident, "chat", chat, Decoding().as_dict())
    assert a == request_key({"model": "m", "backend": "x"}, "chat", [{"content": "hi", "role": "user"}],
                            Decoding().as_dict())
    assert a != request_key(ident, "logprobs", chat, Decoding().as_dict())
    assert len(a) == 64 and int(a, 16) >= 0


def test_duplicates_in_one_call_are_asked_once_and_no_cache_passes_through(tiny, tmp_path):
    counting = Counting(tiny)
    stats = GenerationStats()
    cached = CachedBackend(counting, ResponseCache(tmp_path / "r.sqlite"), stats)
    out = cached.chat([CHATS[0], CHATS[1], CHATS[0]], Decoding(max_new_tokens=3))
    assert counting.chat_requests == 2 and out[0].text == out[2].text and out[2].cached
    assert stats.fresh_calls == 2 and stats.cache_hits == 1 and stats.calls == 3
    for off in (None, False):
        plain = Counting(tiny)
        s = GenerationStats()
        direct = CachedBackend(plain, off, s)
        direct.chat(CHATS[:2], Decoding(max_new_tokens=3))
        direct.chat(CHATS[:2], Decoding(max_new_tokens=3))
        assert plain.chat_requests == 4 and s.calls == s.fresh_calls == 4 and s.cache_hits == 0


SLOW_RUN = textwrap.dedent("""
    import sys, time
    from rbench_rankers.generative.backends import Completion, Decoding, GenerationStats
    from rbench_rankers.generative.cache import CachedBackend, ResponseCache

    class Slow:
        kind, supports_logprobs, batch_size = "slow", False, 1
        def identity(self):
            return {"backend": "slow", "model": "echo"}
        def chat(self, chats, decoding):
            time.sleep(float(sys.argv[3]))
            with open(sys.argv[2], "a") as log:
                log.write("".join(c[-1]["content"] + "\\n" for c in chats))
            return [Completion(c[-1]["content"].upper(), 3, 1, 0.01) for c in chats]
        def next_token_logprobs(self, chats, labels):
            raise NotImplementedError
        def close(self):
            pass

    cached = CachedBackend(Slow(), ResponseCache(sys.argv[1]), GenerationStats())
    chats = [[{"role": "user", "content": f"prompt {i}"}] for i in range(int(sys.argv[4]))]
    out = cached.chat(chats, Decoding())
    assert [c.text for c in out] == [f"PROMPT {i}" for i in range(len(chats))]
""")


def _rows(db: Path) -> int:
    try:
        with sqlite3.connect(db, timeout=1) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM responses").fetchone()[0])
    except sqlite3.Error:
        return 0


def test_a_killed_run_resumes_paying_only_for_the_missing_answers(tmp_path):
    script, db, log = tmp_path / "run.py", tmp_path / "r.sqlite", tmp_path / "calls.log"
    script.write_text(SLOW_RUN)
    n, k = 8, 3
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path.cwd()), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, str(script), str(db), str(log), "0.25", str(n)], env=env)
    deadline = time.monotonic() + 60
    while _rows(db) < k:
        assert proc.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = _rows(db)
    assert k <= done < n
    asked_first = log.read_text().splitlines()
    log.unlink()
    rerun = subprocess.run([sys.executable, str(script), str(db), str(log), "0", str(n)], env=env, timeout=60)
    assert rerun.returncode == 0
    asked_again = log.read_text().splitlines()
    assert len(asked_again) == n - done  # only the missing ones
    assert not set(asked_again) & set(asked_first[:done])
    assert _rows(db) == n


def test_a_corrupted_cache_file_is_one_clear_line(tmp_path):
    bad = tmp_path / "r.sqlite"
    bad.write_bytes(b"this is not an sqlite database, just some bytes" * 100)
    with pytest.raises(RBenchError) as err:
        ResponseCache(bad)
    msg = str(err.value)
    assert "\n" not in msg and "not a usable response cache" in msg and str(bad) in msg


def test_a_locked_cache_file_is_one_clear_line(tmp_path):
    path = tmp_path / "r.sqlite"
    cache = ResponseCache(path, timeout_s=0.2)
    cache.put("k1", "chat", {"text": "x"})
    holder = sqlite3.connect(path, timeout=0.1, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        assert cache.get("k1") == {"text": "x"}  # WAL: readers still read
        with pytest.raises(RBenchError) as err:
            cache.put("k2", "chat", {"text": "y"})
        msg = str(err.value)
        assert "\n" not in msg and "locked by another process" in msg
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    cache.put("k2", "chat", {"text": "y"})  # usable again once the lock is gone
    assert len(cache) == 2
