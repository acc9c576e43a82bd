"""The generation backends on real models: TransformersBackend on the offline SmolLM2-135M GGUF and
on a tiny random Llama; OpenAIBackend against a real OpenAI-compatible server (llama-cpp-python's
``llama_cpp.server`` serving the same GGUF on loopback) and through loopback proxies that fail,
refuse or count; the factory; and (``cuda``) VLLMBackend against TransformersBackend.

The SmolLM2 and server tests skip when the GGUF is not in the offline model folder or when
llama-cpp-python is not installed (``pip install 'llama-cpp-python[server]'``)."""

from __future__ import annotations

import http.server
import json
import math
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from rbench.plugin import RBenchError
from rbench_rankers.generative.backends import Backend, Decoding, make_backend

SMOL_GGUF = Path("~/.cache/rbench-models/SmolLM2-135M-Instruct.Q4_1.gguf").expanduser()

CHATS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hello."}],
    [{"role": "user", "content": "Count from one to five, please, using digits and commas only."}],
]
AB = [{"role": "user", "content": "Which passage answers 'capital of France'? A: Paris is the capital of France. "
                                  "B: Bananas are yellow. Answer with A or B."}]


def _need_smol() -> None:
    if not SMOL_GGUF.is_file():
        pytest.skip("the SmolLM2-135M-Instruct Q4_1 GGUF is not in the offline model folder")
    pytest.importorskip("gguf", reason="transformers needs the gguf package to read GGUF files")


@pytest.fixture(scope="module")
def smol(one_torch_thread):
    _need_smol()
    from rbench_rankers.generative.backends.transformers import TransformersBackend

    backend = TransformersBackend("smollm2-135m", device="cpu", batch_size=4, max_length=2048)
    backend.load()
    yield backend
    backend.close()


def build_tiny_llama(dest: Path) -> Path:
    """A random LlamaForCausalLM (hidden 32, 2 layers) with SmolLM2's real tokenizer (from the GGUF)
    and chat template, saved as a folder."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(str(SMOL_GGUF.parent), gguf_file=SMOL_GGUF.name)
    tok.save_pretrained(dest)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, tie_word_embeddings=True)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(dest)
    return dest


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory, one_torch_thread):
    _need_smol()  # its tokenizer is the real one the tiny model uses
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


# ------------------------------------------------------------------------------------------
# TransformersBackend
# ------------------------------------------------------------------------------------------


def test_smollm_greedy_is_deterministic_and_counts_tokens(smol):
    assert isinstance(smol, Backend)
    d = Decoding(max_new_tokens=12)
    first = smol.chat(CHATS[:1], d)[0]
    again = smol.chat(CHATS[:1], d)[0]
    assert first.text.strip() and first.text == again.text
    assert first.tokens_in > 10 and 0 < first.tokens_out <= 12 and first.seconds > 0 and not first.cached
    ident = smol.identity()
    assert ident["backend"] == "transformers" and ident["model"] == "smollm2-135m"
    assert ident["dtype"] == "float32" and ident["device"] == "cpu" and len(ident["weights"]) == 16
    assert str(Path.home()) not in json.dumps(ident)


def test_smollm_batch_equals_single_calls(smol):
    d = Decoding(max_new_tokens=10)
    batch = smol.chat(CHATS, d)  # three prompts of different lengths: left padding matters
    singles = [smol.chat([c], d)[0] for c in CHATS]
    assert [b.text for b in batch] == [s.text for s in singles]
    assert [b.tokens_in for b in batch] == [s.tokens_in for s in singles]
    assert len({s.tokens_in for s in singles}) == 3


def test_smollm_next_token_logprobs_equal_a_manual_forward_pass(smol):
    import torch

    chats = [AB, CHATS[2]]
    got = smol.next_token_logprobs(chats, ("A", "B", " Yes"))
    model, tok = smol.load()
    for chat, scores in zip(chats, got):
        text = tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        ids = tok(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
        with torch.inference_mode():
            logp = torch.log_softmax(model(input_ids=ids).logits[0, -1].float(), dim=-1)
        assert scores.tokens_in == ids.shape[1]
        for label in ("A", "B", " Yes"):
            first = tok.encode(label, add_special_tokens=False)[0]
            assert math.isfinite(scores.logprobs[label])
            assert scores.logprobs[label] == pytest.approx(float(logp[first]), abs=1e-4)
    assert got[0].logprobs["A"] != got[0].logprobs["B"]


def test_tiny_llama_folder_batches_like_single_calls_and_identity_tracks_weights(tiny_dir, tmp_path):
    from rbench_rankers.generative.backends.transformers import TransformersBackend

    b = TransformersBackend(str(tiny_dir), device="cpu", batch_size=3)
    d = Decoding(max_new_tokens=6)
    batch = b.chat(CHATS, d)
    singles = [b.chat([c], d)[0] for c in CHATS]
    assert [x.text for x in batch] == [x.text for x in singles]
    assert all(x.tokens_out == 6 for x in batch)  # random weights rarely emit EOS in 6 tokens
    lp_batch = b.next_token_logprobs(CHATS, ("A", "B"))
    lp_single = [b.next_token_logprobs([c], ("A", "B"))[0] for c in CHATS]
    for x, y in zip(lp_batch, lp_single):
        assert x.logprobs["A"] == pytest.approx(y.logprobs["A"], abs=1e-4)
        assert x.logprobs["B"] == pytest.approx(y.logprobs["B"], abs=1e-4)
    before = b.identity()["weights"]
    copy = tmp_path / "copy"
    copy.mkdir()
    for p in tiny_dir.iterdir():
        (copy / p.name).write_bytes(p.read_bytes())
    assert TransformersBackend(str(copy)).identity()["weights"] == before  # names + sizes, not the folder
    with open(copy / "config.json", "a") as fh:
        fh.write(" ")
    assert TransformersBackend(str(copy)).identity()["weights"] != before


def test_tiny_llama_sampling_is_seeded(tiny_dir):
    from rbench_rankers.generative.backends.transformers import TransformersBackend

    b = TransformersBackend(str(tiny_dir), device="cpu")
    hot = Decoding(max_new_tokens=8, temperature=1.5, seed=3)
    one, two = b.chat(CHATS[:1], hot)[0], b.chat(CHATS[:1], hot)[0]
    assert one.text == two.text
    others = {b.chat(CHATS[:1], Decoding(max_new_tokens=8, temperature=1.5, seed=s))[0].text for s in range(4, 8)}
    assert len(others | {one.text}) > 1


def test_smollm_stop_strings_end_the_answer(smol):
    from rbench_rankers.generative.backends.transformers import trim_at_stop

    full = smol.chat(CHATS[:1], Decoding(max_new_tokens=12))[0]
    words = full.text.split()
    assert len(words) >= 3, full.text
    stop = words[len(words) // 2]
    cut = smol.chat(CHATS[:1], Decoding(max_new_tokens=12, stop=(stop,)))[0]
    assert cut.text == full.text[:full.text.find(stop)]
    assert cut.tokens_out < full.tokens_out  # generation stopped there, not only the text
    assert trim_at_stop("a1b2c", ("2", "1")) == "a" and trim_at_stop("abc", ("x",)) == "abc"


def test_too_long_prompt_is_one_clear_line(tiny_dir):
    from rbench_rankers.generative.backends.transformers import TransformersBackend

    b = TransformersBackend(str(tiny_dir), device="cpu", max_length=64)
    with pytest.raises(RBenchError, match="exceeds max_length=64") as err:
        b.chat([[{"role": "user", "content": "word " * 200}]], Decoding(max_new_tokens=8))
    assert "\n" not in str(err.value)


def test_generation_modules_import_no_torch():
    code = ("import sys\n"
            "import rbench_rankers.generative.backends, rbench_rankers.generative.cache\n"
            "import rbench_rankers.generative.backends.transformers, rbench_rankers.generative.backends.openai\n"
            "import rbench_rankers.generative.backends.vllm\n"
            "assert not {'torch', 'transformers', 'vllm'} & set(sys.modules), sorted(sys.modules)\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_make_backend_names_its_choices_and_checks_options():
    with pytest.raises(RBenchError, match="unknown generation backend 'llamacpp'.*openai, transformers, vllm"):
        make_backend("llamacpp", model="x")
    with pytest.raises(RBenchError, match="backend 'openai'.*unexpected keyword"):
        make_backend("openai", base_url="http://127.0.0.1:9/v1", model="m", dtype="float32")
    b = make_backend("openai", base_url="http://127.0.0.1:9/v1/", model="m", batch_size=5)
    assert b.kind == "openai" and b.base_url == "http://127.0.0.1:9/v1" and b.batch_size == 5
    t = make_backend("transformers", model="some/model", device="cpu")
    assert t.kind == "transformers" and t.supports_logprobs


def test_vllm_missing_is_one_line_naming_the_extra():
    try:
        import vllm  # noqa: F401
    except ImportError:
        with pytest.raises(RBenchError, match=r"pip install 'rbench\[vllm\]' \(needs a CUDA GPU\)"):
            make_backend("vllm", model="smollm2-135m")
    else:
        pytest.skip("vllm is installed")


# ------------------------------------------------------------------------------------------
# OpenAIBackend against a real server
# ------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerDied(Exception):
    """llama_cpp.server exited: its exit status and the end of its log."""


def _start_llama_server(log: Path) -> tuple[subprocess.Popen, str]:
    """Start the server, wait for it to list its model, then ask for one short completion: a
    server that cannot generate on this machine shows up here, with its log, not as a refused
    connection in the first test that uses it."""
    port = free_port()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(SMOL_GGUF), "--model_alias", "smollm2-135m",
           "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--n_threads", "1",
           "--logits_all", "true", "--verbose", "false"]
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 90
    while True:
        try:
            with urllib.request.urlopen(f"{base}/models", timeout=2) as resp:
                if resp.status == 200:
                    break
        except (urllib.error.URLError, OSError):
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop(proc)
            raise ServerDied(f"did not start (exit {proc.returncode}): {_tail(log)}")
        time.sleep(0.3)
    body = json.dumps({"model": "smollm2-135m", "messages": [{"role": "user", "content": "Hi"}],
                       "max_tokens": 2, "temperature": 0}).encode()
    req = urllib.request.Request(f"{base}/chat/completions", data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        time.sleep(1)
        _stop(proc)
        raise ServerDied(f"failed its first completion ({type(exc).__name__}: {exc}; exit {proc.returncode}): "
                         f"{_tail(log)}") from None
    return proc, base


def _tail(log: Path) -> str:
    return " | ".join(log.read_text(errors="replace").strip().splitlines()[-15:])


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


_SERVER: dict[str, object] = {}


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    """llama-cpp-python's OpenAI-compatible server on loopback, serving the SmolLM2 GGUF.

    A server that dies during its warm-up is started once more (the first log is kept); a second
    failure means this machine cannot run the server binary: the server tests skip with its exit
    status and log in the reason (shown by ``pytest -rs``). Once warmed up, a server that dies
    during a test fails that test (``_server_still_alive``)."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install 'llama-cpp-python[server]')")
    pytest.importorskip("llama_cpp.server", reason="llama-cpp-python was installed without its [server] extra")
    if not SMOL_GGUF.is_file():
        pytest.skip("the SmolLM2-135M-Instruct Q4_1 GGUF is not in the offline model folder")
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    try:
        proc, base = _start_llama_server(log)
    except ServerDied:
        try:
            proc, base = _start_llama_server(log)
        except ServerDied as second:  # twice: this machine cannot run the server binary
            pytest.skip(f"llama_cpp.server cannot serve on this machine: {second}")
    _SERVER.update(proc=proc, log=log)
    try:
        yield base
    finally:
        _SERVER.clear()
        _stop(proc)


@pytest.fixture(autouse=True)
def _server_still_alive():
    """After each test: a server that died during it fails the test with its log."""
    yield
    proc = _SERVER.get("proc")
    if isinstance(proc, subprocess.Popen) and proc.poll() is not None:
        log = _SERVER["log"]
        assert isinstance(log, Path)
        pytest.fail(f"llama_cpp.server died during this test (exit {proc.returncode}): {_tail(log)}")


class Proxy:
    """A loopback HTTP proxy in front of ``upstream``: it can answer ``fail`` (a status) to the
    first ``fail_times`` requests, hold each request ``delay`` seconds, and counts requests and
    the most that were in flight at once. Everything else is forwarded to the real server."""

    def __init__(self, upstream: str, fail: int = 0, fail_times: int = 0, delay: float = 0.0) -> None:
        self.upstream, self.fail, self.fail_times, self.delay = upstream.rstrip("/"), fail, fail_times, delay
        self.requests = 0
        self.inflight = 0
        self.max_inflight = 0
        self.lock = threading.Lock()
        self.auth: list[str | None] = []
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _answer(self, code: int, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _handle(self, method: str) -> None:
                data = self.rfile.read(int(self.headers.get("Content-Length") or 0)) if method == "POST" else None
                with proxy.lock:
                    proxy.requests += 1
                    n = proxy.requests
                    proxy.inflight += 1
                    proxy.max_inflight = max(proxy.max_inflight, proxy.inflight)
                    proxy.auth.append(self.headers.get("Authorization"))
                try:
                    if proxy.delay:
                        time.sleep(proxy.delay)
                    if proxy.fail and n <= proxy.fail_times:
                        msg = {401: "Invalid API key", 503: "overloaded, try again"}.get(proxy.fail, "no")
                        self._answer(proxy.fail, json.dumps({"error": {"message": msg}}).encode())
                        return
                    path = self.path[len("/v1"):] if self.path.startswith("/v1") else self.path
                    req = urllib.request.Request(proxy.upstream + path, data=data, method=method,
                                                 headers={"Content-Type": "application/json"})
                    try:
                        with urllib.request.urlopen(req, timeout=120) as resp:
                            self._answer(resp.status, resp.read())
                    except urllib.error.HTTPError as exc:
                        self._answer(exc.code, exc.read())
                finally:
                    with proxy.lock:
                        proxy.inflight -= 1

            def do_GET(self):
                self._handle("GET")

            def do_POST(self):
                self._handle("POST")

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def proxy_factory(llama_server):
    made: list[Proxy] = []

    def make(**kw) -> Proxy:
        p = Proxy(llama_server, **kw)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


def _clear_prefix_cache(base: str) -> None:
    body = json.dumps({"model": "smollm2-135m", "prompt": "Zebra", "max_tokens": 1, "temperature": 0}).encode()
    req = urllib.request.Request(f"{base}/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        json.loads(resp.read())


def test_server_chat_is_greedy_and_repeatable(llama_server):
    from rbench_rankers.generative.backends.openai import OpenAIBackend

    b = OpenAIBackend(llama_server, "smollm2-135m", timeout_s=60)
    d = Decoding(max_new_tokens=12)
    # llama.cpp reuses the key/value cache of the longest prompt prefix it has seen, and a prefix
    # computed inside another prompt can differ in the last bits, enough to flip a near-tie of
    # greedy decoding: a raw prompt sharing no first token with the chat template clears it
    _clear_prefix_cache(llama_server)
    first = b.chat(CHATS[:2], d)
    _clear_prefix_cache(llama_server)
    second = b.chat(CHATS[:2], d)
    assert all(c.text.strip() for c in first)
    assert [c.text for c in first] == [c.text for c in second]
    assert all(c.tokens_in > 5 and 0 < c.tokens_out <= 12 and c.seconds > 0 for c in first)
    ident = b.identity()
    assert ident["backend"] == "openai" and ident["base_url"] == llama_server and ident["model"] == "smollm2-135m"
    assert ident.get("server_model") == "smollm2-135m"


def test_server_next_token_logprobs_for_labels(llama_server):
    from rbench_rankers.generative.backends.openai import OpenAIBackend

    b = OpenAIBackend(llama_server, "smollm2-135m")
    assert b.supports_logprobs
    (s,) = b.next_token_logprobs([AB], ("A", "B", "no-such-token-label"))
    assert s.logprobs["A"] is not None and math.isfinite(s.logprobs["A"]) and s.logprobs["A"] <= 0
    assert s.logprobs["B"] is not None and math.isfinite(s.logprobs["B"])
    assert s.logprobs["no-such-token-label"] is None
    assert s.tokens_in > 10


def test_server_503_twice_is_retried_then_answered(proxy_factory, llama_server, monkeypatch):
    from rbench_rankers.generative.backends.openai import OpenAIBackend

    monkeypatch.setenv("RBENCH_TEST_KEY", "sk-test-123")
    p = proxy_factory(fail=503, fail_times=2)
    b = OpenAIBackend(p.url, "smollm2-135m", api_key_env="RBENCH_TEST_KEY", retries=3, backoff_s=0.05)
    _clear_prefix_cache(llama_server)  # both answers from the same cache state (see above)
    (c,) = b.chat(CHATS[:1], Decoding(max_new_tokens=8))
    _clear_prefix_cache(llama_server)
    direct = OpenAIBackend(llama_server, "smollm2-135m").chat(CHATS[:1], Decoding(max_new_tokens=8))[0]
    assert p.requests == 3 and c.text == direct.text
    assert p.auth[-1] == "Bearer sk-test-123"
    assert "sk-test-123" not in json.dumps(b.identity())


def test_server_401_is_one_line_without_retry(proxy_factory):
    from rbench_rankers.generative.backends.openai import OpenAIBackend

    p = proxy_factory(fail=401, fail_times=10**6)
    b = OpenAIBackend(p.url, "smollm2-135m", retries=4, backoff_s=0.05)
    with pytest.raises(RBenchError) as err:
        b.chat(CHATS[:1], Decoding(max_new_tokens=4))
    msg = str(err.value)
    assert "\n" not in msg and "HTTP 401" in msg and "Invalid API key" in msg and p.url in msg
    assert p.requests == 1


def test_server_concurrency_is_bounded(proxy_factory):
    from rbench_rankers.generative.backends.openai import OpenAIBackend

    p = proxy_factory(delay=0.3)
    b = OpenAIBackend(p.url, "smollm2-135m", concurrency=2)
    chats = [[{"role": "user", "content": f"Say the number {i}."}] for i in range(6)]
    out = b.chat(chats, Decoding(max_new_tokens=3))
    assert len(out) == 6 and p.requests == 6
    assert p.max_inflight == 2  # reached, never exceeded


def test_closed_port_fails_after_bounded_retries():
    from rbench_rankers.generative.backends.openai import OpenAIBackend

    url = f"http://127.0.0.1:{free_port()}/v1"
    b = OpenAIBackend(url, "m", retries=3, backoff_s=0.05, timeout_s=2)
    t0 = time.monotonic()
    with pytest.raises(RBenchError) as err:
        b.chat(CHATS[:1], Decoding())
    took = time.monotonic() - t0
    msg = str(err.value)
    assert "\n" not in msg and f"{url}/chat/completions" in msg and "after 4 tries" in msg
    assert 0.05 + 0.1 + 0.2 <= took < 5  # three backoffs, then stop


# ------------------------------------------------------------------------------------------
# vLLM against transformers (GPU only)
# ------------------------------------------------------------------------------------------


@pytest.mark.cuda
def test_vllm_greedy_answers_and_labels_match_transformers():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    pytest.importorskip("vllm", reason="vllm is not installed (pip install 'rbench[vllm]')")
    _need_smol()
    from rbench_rankers.generative.backends.transformers import TransformersBackend
    from rbench_rankers.generative.backends.vllm import VLLMBackend

    model = os.environ.get("RBENCH_VLLM_TEST_MODEL", "smollm2-135m")
    v = VLLMBackend(model, dtype="float32", gpu_memory_utilization=0.3, max_model_len=2048)
    t = TransformersBackend(model, device="cuda", dtype="float32")
    d = Decoding(max_new_tokens=16)
    assert [c.text for c in v.chat(CHATS, d)] == [c.text for c in t.chat(CHATS, d)]
    for a, b in zip(v.next_token_logprobs([AB], ("A", "B")), t.next_token_logprobs([AB], ("A", "B"))):
        assert max(a.logprobs, key=lambda k: a.logprobs[k] or -1e9) == max(b.logprobs, key=lambda k: b.logprobs[k])
        assert a.logprobs["A"] == pytest.approx(b.logprobs["A"], abs=0.05)
    v.close()


def test_each_backend_kind_is_the_module_of_its_name():
    """``--set backend=KIND`` and the file are one name: ``backends/KIND.py`` defines the backend
    whose ``kind`` is KIND (the factory imports it from there)."""
    import importlib

    import rbench_rankers.generative.backends as backends

    folder = Path(backends.__file__).parent
    assert sorted(p.stem for p in folder.glob("*.py") if p.stem != "__init__") == sorted(backends.KINDS)
    for kind in backends.KINDS:
        module = importlib.import_module(f"rbench_rankers.generative.backends.{kind}")
        classes = [c for c in vars(module).values() if isinstance(c, type) and c.__module__ == module.__name__
                   and getattr(c, "kind", None) == kind]
        assert len(classes) == 1, kind


def test_the_backends_are_part_of_the_generative_rankers_source_digest(tmp_path, monkeypatch):
    """A record's ``source_sha256`` of a generative ranker covers its backends too, now that they
    sit one folder down: editing a file of a sub-folder changes the digest."""
    import importlib
    import sys

    from rbench.core.hashing import source_digest

    pkg = tmp_path / "digest_pkg" / "gen"
    (pkg / "backends").mkdir(parents=True)
    for f in (tmp_path / "digest_pkg" / "__init__.py", pkg / "__init__.py", pkg / "backends" / "__init__.py"):
        f.write_text("")
    (pkg / "ranker.py").write_text("class R:\n    name = 'r'\n")
    (pkg / "backends" / "openai.py").write_text("TIMEOUT = 60\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cls = importlib.import_module("digest_pkg.gen.ranker").R
    first = source_digest(cls)
    (pkg / "backends" / "openai.py").write_text("TIMEOUT = 6000\n")
    assert source_digest(cls) != first
    for name in [m for m in sys.modules if m.startswith("digest_pkg")]:
        del sys.modules[name]
