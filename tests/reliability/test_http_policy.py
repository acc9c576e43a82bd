"""The one HTTP policy (``rbench.core.http``) and the OpenAI-compatible backend on top of it,
against loopback servers (``http.server`` in a thread) that redirect, trickle, stall, flood and
lie (issue 42). 127.0.0.1 and localhost are two hosts to the policy: a redirect from one to the
other is a redirect to another host. Deadlines are ~1 s so that each test takes a second or two."""

from __future__ import annotations

import http.server
import json
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rbench.api import RunContext
from rbench.core.config import build_config
from rbench.core.http import DeadlineExceeded, HttpPolicy, RequestFailed, request_json
from rbench.plugin import RBenchError
from rbench_rankers.generative.backends import Decoding
from rbench_rankers.generative.backends.openai import OpenAIBackend
from rbench_rankers.generative.rankgpt import RankGPTRanker

KEY_ENV = "RBENCH_TEST_HTTP_KEY"
CHAT = [[{"role": "user", "content": "hello"}]]
OK = {"choices": [{"message": {"content": "fine"}}], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}


class Loopback:
    """A threaded HTTP server on ``host``; ``behave(handler)`` answers every request (the handler
    has ``body``, the request's bytes). ``seen`` keeps (method, path, headers) of each request;
    ``in_flight``/``most`` count requests being answered at once."""

    def __init__(self, behave: Callable[[Any], None], host: str = "127.0.0.1") -> None:
        outer = self
        self.behave, self.seen, self.in_flight, self.most = behave, [], 0, 0
        self.lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                return None

            def _any(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                self.body = self.rfile.read(n) if n else b""
                with outer.lock:
                    outer.seen.append((self.command, self.path, dict(self.headers)))
                    outer.in_flight += 1
                    outer.most = max(outer.most, outer.in_flight)
                try:
                    outer.behave(self)
                except OSError:  # the client hung up (a deadline cut it): nothing to answer
                    pass
                finally:
                    with outer.lock:
                        outer.in_flight -= 1

            do_GET = do_POST = _any

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://{host}:{self.port}/v1"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def serve():
    made: list[Loopback] = []

    def start(behave: Callable[[Any], None], host: str = "127.0.0.1") -> Loopback:
        made.append(Loopback(behave, host))
        return made[-1]

    yield start
    for s in made:
        s.close()


def send_json(h: Any, obj: Any, status: int = 200, raw: bytes | None = None) -> None:
    data = raw if raw is not None else json.dumps(obj).encode()
    h.send_response(status)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)


def redirect(to: str, status: int) -> Callable[[Any], None]:
    def behave(h: Any) -> None:
        h.send_response(status)
        h.send_header("Location", to + h.path)
        h.send_header("Content-Length", "0")
        h.end_headers()
    return behave


# ------------------------------------------------------------------------------ credentials


@pytest.mark.parametrize("status", [301, 302, 307, 308])
@pytest.mark.parametrize("how", ["chat", "models"])
def test_a_redirect_to_another_host_is_refused_and_the_key_never_leaves(serve, monkeypatch, status, how):
    monkeypatch.setenv(KEY_ENV, "sk-secret")
    elsewhere = serve(lambda h: send_json(h, OK), host="localhost")  # another host: localhost != 127.0.0.1
    first = serve(redirect(f"http://localhost:{elsewhere.port}", status))
    b = OpenAIBackend(first.url, "m", api_key_env=KEY_ENV, retries=0, timeout_s=2)
    with pytest.raises(RequestFailed, match="another host or scheme: refused") as err:
        b.chat(CHAT, Decoding()) if how == "chat" else b._request("/models")
    assert "\n" not in str(err.value) and "sk-secret" not in str(err.value)
    assert elsewhere.seen == []  # not even asked without the key: the user named another address
    assert first.seen[0][2].get("Authorization") == "Bearer sk-secret"


def test_another_port_of_the_same_host_is_another_host(serve, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-secret")
    other = serve(lambda h: send_json(h, OK))
    first = serve(redirect(f"http://127.0.0.1:{other.port}", 307))
    with pytest.raises(RequestFailed, match="refused"):
        OpenAIBackend(first.url, "m", api_key_env=KEY_ENV, retries=0, timeout_s=2).chat(CHAT, Decoding())
    assert other.seen == []


def test_a_same_origin_redirect_keeps_the_key_method_and_body(serve, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-secret")

    def behave(h: Any) -> None:
        if h.path.startswith("/v1/"):
            return redirect(f"http://127.0.0.1:{s.port}/moved", 307)(h)
        send_json(h, {"choices": [{"message": {"content": json.loads(h.body)["messages"][0]["content"]}}]})

    s = serve(behave)
    (c,) = OpenAIBackend(s.url, "m", api_key_env=KEY_ENV, retries=0, timeout_s=2).chat(CHAT, Decoding())
    assert c.text == "hello" and (c.tokens_in, c.tokens_out) == (0, 0)  # no usage: 0 tokens, documented
    assert [(m, p) for m, p, _ in s.seen] == [("POST", "/v1/chat/completions"), ("POST", "/moved/v1/chat/completions")]
    assert s.seen[1][2].get("Authorization") == "Bearer sk-secret"


def test_a_redirect_without_credentials_is_followed(serve, monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    elsewhere = serve(lambda h: send_json(h, OK) if h.command == "POST" else send_json(h, {}, 405), host="localhost")
    first = serve(redirect(f"http://localhost:{elsewhere.port}", 307))
    (c,) = OpenAIBackend(first.url, "m", api_key_env=KEY_ENV, retries=0, timeout_s=2).chat(CHAT, Decoding())
    assert c.text == "fine" and (c.tokens_in, c.tokens_out) == (3, 1)
    assert len(elsewhere.seen) == 1 and "Authorization" not in elsewhere.seen[0][2]


# ------------------------------------------------------------------------------ deadlines


def trickle_body(h: Any) -> None:
    h.send_response(200)
    h.send_header("Content-Length", "40")
    h.end_headers()
    for _ in range(40):
        h.wfile.write(b" ")
        h.wfile.flush()
        time.sleep(0.2)


def trickle_headers(h: Any) -> None:
    for byte in b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Slow: " + b"a" * 10:
        h.wfile.write(bytes([byte]))
        h.wfile.flush()
        time.sleep(0.2)


@pytest.mark.parametrize("behave", [trickle_body, trickle_headers])
def test_a_trickling_server_is_cut_at_the_deadline(serve, behave):
    s = serve(behave)
    t0 = time.monotonic()
    with pytest.raises(RequestFailed, match=r"no complete answer within 1 s"):
        request_json(s.url + "/chat/completions", {"x": 1}, policy=HttpPolicy(timeout_s=1.0, retries=0))
    assert time.monotonic() - t0 < 4  # a socket timeout restarts at every byte: ~8 s here


def stall_after_headers(h: Any) -> None:
    h.send_response(200)
    h.send_header("Content-Length", "100")
    h.end_headers()
    h.wfile.flush()
    time.sleep(20)


def ranker_backend(url: str, tmp_path: Path, **options: str) -> OpenAIBackend:
    """The backend a ranker builds from ``--set`` options (parsed as the CLI parses them)."""
    cfg = build_config(RankGPTRanker.Config, {"backend": "openai", "base_url": url, "model": "m", **options},
                       "rankgpt")
    backend = RankGPTRanker(cfg, RunContext(cache_dir=tmp_path))._make_backend()
    assert isinstance(backend, OpenAIBackend)
    return backend


def test_timeout_and_retries_are_options_and_the_last_error_names_the_knobs(serve, tmp_path):
    s = serve(stall_after_headers)
    b = ranker_backend(s.url, tmp_path, timeout_s="0.5", retries="1", concurrency="3")
    t0 = time.monotonic()
    with pytest.raises(RequestFailed) as err:
        b.chat(CHAT, Decoding())
    assert time.monotonic() - t0 < 4 and len(s.seen) == 2
    msg = str(err.value)
    assert "no answer after 2 tries (timeout 0.5 s each" in msg and "\n" not in msg
    assert "--set concurrency=1 (now 3)" in msg and "--set timeout_s" in msg


def test_a_refused_connection_does_not_blame_concurrency():
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    b = OpenAIBackend(f"http://127.0.0.1:{port}/v1", "m", retries=1, backoff_s=0.01, timeout_s=1)
    with pytest.raises(RequestFailed, match="no answer after 2 tries .*ConnectionRefusedError") as err:
        b.chat(CHAT, Decoding())
    assert "concurrency" not in str(err.value)


def test_the_run_deadline_bounds_all_requests_and_retries(serve, tmp_path):
    s = serve(stall_after_headers)
    b = ranker_backend(s.url, tmp_path, timeout_s="30", retries="5", deadline_s="1")
    t0 = time.monotonic()
    with pytest.raises(DeadlineExceeded, match=r"--set deadline_s=SECONDS"):
        b.chat(CHAT, Decoding())
    assert time.monotonic() - t0 < 4
    with pytest.raises(DeadlineExceeded):  # a later request is not even sent
        b.chat(CHAT, Decoding())
    assert len(s.seen) == 1


def test_concurrency_is_an_option_and_bounds_requests_in_flight(serve, tmp_path):
    def slow(h: Any) -> None:
        time.sleep(0.1)
        send_json(h, OK)

    s = serve(slow)
    b = ranker_backend(s.url, tmp_path, concurrency="1")
    assert [c.text for c in b.chat(CHAT * 4, Decoding())] == ["fine"] * 4
    assert s.most == 1 and len(s.seen) == 4


@pytest.mark.parametrize("option,value", [("timeout_s", "nan"), ("timeout_s", "0"), ("timeout_s", "-1"),
                                          ("timeout_s", "inf"), ("retries", "-1"), ("retries", "1.5"),
                                          ("concurrency", "0"), ("deadline_s", "-1"), ("deadline_s", "nan"),
                                          ("on_failure", "ignore")])
def test_transport_options_are_checked_when_parsed(option, value):
    with pytest.raises(RBenchError) as err:
        build_config(RankGPTRanker.Config, {option: value}, "rankgpt")
    assert option in str(err.value) and "unknown option" not in str(err.value)


# ------------------------------------------------------------------------------ floods and lies


def test_a_flood_is_cut_at_the_byte_cap(serve):
    flood = json.dumps(OK).encode() + b" " * (17 << 20)  # valid JSON, 17 MiB
    s = serve(lambda h: send_json(h, None, raw=flood))
    with pytest.raises(RequestFailed, match="an answer larger than 16 MiB: refused"):
        OpenAIBackend(s.url, "m", retries=0, timeout_s=5).chat(CHAT, Decoding())


LIES = {
    "nested": (b"[" * 100_000 + b"]" * 100_000, "nested deeper than 64 levels"),
    "digits": (b'{"choices": [{"message": {"content": "x"}}], "usage": {"prompt_tokens": ' + b"9" * 5000 + b"}}",
               "an integer longer than 4,300 digits"),
    "usage_str": (b'{"choices": [{"message": {"content": "x"}}], "usage": "many"}', "usage of type str"),
    "usage_list": (b'{"choices": [{"message": {"content": "x"}}], "usage": [1]}', "usage of type list"),
    "tokens_str": (b'{"choices": [{"message": {"content": "x"}}], "usage": {"prompt_tokens": "12"}}',
                   "usage.prompt_tokens"),
    "tokens_neg": (b'{"choices": [{"message": {"content": "x"}}], "usage": {"completion_tokens": -4}}',
                   "usage.completion_tokens"),
    "tokens_float": (b'{"choices": [{"message": {"content": "x"}}], "usage": {"prompt_tokens": 1.5}}',
                     "usage.prompt_tokens"),
    "no_choices": (b'{"choices": []}', "without choices"),
    "choices_obj": (b'{"choices": {"0": 1}}', "without choices"),
    "no_message": (b'{"choices": [{"text": "x"}]}', "without choices\\[0\\].message"),
    "choice_str": (b'{"choices": ["x"]}', "without choices\\[0\\].message"),
    "content_list": (b'{"choices": [{"message": {"content": [{"type": "text", "text": "a"}]}}]}',
                     "content of type list"),
    "content_int": (b'{"choices": [{"message": {"content": 5}}]}', "content of type int"),
    "top_list": (b"[1, 2]", "not an object"),
    "not_utf8": (b'{"choices": "\xff\xfe"}', "not UTF-8"),
    "not_json": (b"<html>proxy error</html>", "not valid JSON"),
}


@pytest.mark.parametrize("lie", sorted(LIES))
def test_a_lying_answer_is_one_line_naming_what_is_wrong(serve, lie):
    raw, expected = LIES[lie]
    s = serve(lambda h: send_json(h, None, raw=raw))
    with pytest.raises(RequestFailed, match=expected) as err:
        OpenAIBackend(s.url, "m", retries=0, timeout_s=2).chat(CHAT, Decoding())
    assert "\n" not in str(err.value) and s.url in str(err.value)
    assert len(s.seen) == 1  # a lie is not retried


def test_lying_logprobs_and_listings_are_ignored_not_crashed_on(serve):
    def behave(h: Any) -> None:
        if h.path.endswith("/models"):
            return send_json(h, {"data": 7})
        top = [7, {"token": "A", "logprob": 10 ** 4000}, {"token": "B", "logprob": True},
               {"token": "A", "logprob": -0.5}, {"token": None, "logprob": -0.1}]
        send_json(h, {"choices": [{"logprobs": {"content": [{"top_logprobs": top}]}}]})

    s = serve(behave)
    b = OpenAIBackend(s.url, "m", retries=0, timeout_s=2)
    assert b.identity() == {"backend": "openai", "base_url": s.url, "model": "m"}
    (scores,) = b.next_token_logprobs(CHAT, ("A", "B"))
    assert scores.logprobs == {"A": -0.5, "B": None} and scores.tokens_in == 0


# ------------------------------------------------------------------------------ on_failure


def ranking_server(fail_on: str = "") -> Callable[[Any], None]:
    """An OpenAI-compatible server that ranks each list's positive (subject 0) first, answers
    HTTP 400 to any prompt containing ``fail_on`` (a context too long, say) and lists one model."""

    def behave(h: Any) -> None:
        if h.path.endswith("/models"):
            return send_json(h, {"data": [{"id": "m"}]})
        prompt = json.dumps(json.loads(h.body)["messages"])
        if fail_on and fail_on in prompt:
            return send_json(h, {"error": {"message": "this prompt is too long for the context"}}, 400)
        listed = re.findall(r"\[(\d+)\] note \S+ on subject (\d+)", prompt)  # the positive is subject 0
        order = [i for i, subject in sorted(listed, key=lambda c: (c[1] != "0", int(c[0])))]
        send_json(h, {"choices": [{"message": {"content": " > ".join(f"[{i}]" for i in order)}}],
                      "usage": {"prompt_tokens": 10, "completion_tokens": 5}})

    return behave


def import_small_task(root: Path, name: str, n_test: int = 3, m: int = 4) -> None:
    """A small-scenario BEIR-style task: one train, one dev and ``n_test`` test queries, each with
    ``m`` candidates of which the first is its only positive."""
    from rbench.tasks.registry import import_task

    root.mkdir(parents=True, exist_ok=True)
    docs, queries, qrels, cands = [], [], ["query-id\tcorpus-id\tscore"], []
    for qi, split in enumerate(["train", "dev"] + ["test"] * n_test):
        queries.append({"_id": f"q{qi}", "text": f"question number {qi}", "split": split})
        ids = [f"d{qi}-{j}" for j in range(m)]
        docs += [{"_id": d, "text": f"note {d} on subject {j}"} for j, d in enumerate(ids)]
        qrels.append(f"q{qi}\t{ids[0]}\t1")
        cands.append({"query_id": f"q{qi}", "candidates": ids})
    for fname, rows in (("corpus.jsonl", docs), ("queries.jsonl", queries), ("candidates.jsonl", cands)):
        (root / fname).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (root / "qrels.tsv").write_text("\n".join(qrels) + "\n")
    import_task(name, root / "corpus.jsonl", root / "queries.jsonl", root / "qrels.tsv", scenario="small",
                candidates=root / "candidates.jsonl")


def test_on_failure_skip_counts_the_query_as_a_miss_and_records_the_options(serve, tmp_path):
    import rbench

    import_small_task(tmp_path / "beir", "http-tiny")
    s = serve(ranking_server(fail_on="question number 3"))
    options = {"backend": "openai", "base_url": s.url, "model": "m", "timeout_s": "5", "retries": "0",
               "concurrency": "2", "deadline_s": "60", "cache": "false"}
    with pytest.raises(RequestFailed, match="HTTP 400: this prompt is too long"):  # the default: abort
        rbench.evaluate("rankgpt", "http-tiny", options=options, results_dir=tmp_path / "r1")
    assert not list((tmp_path / "r1").rglob("*.json"))  # nothing written half-way

    rec = rbench.evaluate("rankgpt", "http-tiny", options={**options, "on_failure": "skip"},
                          results_dir=tmp_path / "r2")
    assert rec.n_queries == 3  # the skipped query stays in the average
    failures = rec.ranker_info["failures"]
    assert failures["skipped_queries"] == 1 and "HTTP 400" in failures["first"]
    config = rec.ranker["config"]
    assert (config["timeout_s"], config["retries"], config["concurrency"], config["deadline_s"],
            config["on_failure"]) == (5.0, 0, 2, 60.0, "skip")
    # the server puts the positive first: RR 1 for the two answered queries, and the skipped one
    # a complete miss (its positive tied with the other 3 candidates, placed after them: RR 1/4)
    rr = next(v for k, v in rec.metrics.items() if k.lower().startswith(("rr", "mrr")))
    assert rr == pytest.approx((1 + 1 + 0.25) / 3)


def test_on_failure_skip_still_aborts_when_every_query_fails(serve, tmp_path):
    from rbench_rankers.generative.base import GenerativeRanker  # noqa: F401  (the base under test)

    s = serve(ranking_server(fail_on="question number"))
    cfg = build_config(RankGPTRanker.Config, {"backend": "openai", "base_url": s.url, "model": "m", "retries": "0",
                                              "on_failure": "skip", "cache": "false"}, "rankgpt")
    ranker = RankGPTRanker(cfg, RunContext(cache_dir=tmp_path, seed=0))
    from rbench.api import Pool, Queries, Ragged

    pool = Pool(ids=np.array([f"d{k}" for k in range(4)], dtype=object), texts=[f"text {k}" for k in range(4)], name="p")
    queries = Queries(ids=np.array(["a", "b"], dtype=object), texts=["question number 1", "question number 2"],
                      positives=Ragged.from_rows([[], []]),
                      grades=Ragged.from_rows([[], []], dtype=np.float64)).unlabelled()
    ranker.index(pool)
    with pytest.raises(RBenchError, match="every one of 2 queries failed"):
        ranker.score(queries, np.array([[0, 1, 2, 3], [3, 2, 1, 0]]))
