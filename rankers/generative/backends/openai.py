"""``OpenAIBackend``: any OpenAI-compatible HTTP server (OpenAI, vLLM serve, llama.cpp, TGI, ...).

Standard library only: ``rbench.core.http`` (``http.client``) for the requests, a thread pool bounded by ``concurrency``.

- ``chat`` POSTs ``{base_url}/chat/completions`` with ``model``, ``messages``, ``temperature``,
  ``top_p``, ``seed``, ``max_tokens`` and ``stop`` (when given). Stop strings are also trimmed from
  the answer (servers differ on whether they echo them).
- Tokens come from the response's ``usage`` (``prompt_tokens``, ``completion_tokens``); a server
  that reports no ``usage`` gives 0 for both (the cost then shows as 0 tokens, never a guess).
  ``seconds`` is each request's own wall time (with concurrency the sum exceeds the elapsed time).
- ``next_token_logprobs`` asks for one token with ``logprobs: true, top_logprobs: 20`` at
  temperature 0 and reads the first generated position's ``top_logprobs``; a label is matched to a
  token by exact text (the best logprob if several tokens spell it), and a label not among the top
  20 is ``None``. ``supports_logprobs=None`` probes the server once (a 1-token request) on first use.
- Every request goes through ``rbench.core.http`` (the one HTTP policy): ``timeout_s`` is the
  total time of one try (headers and body, however slowly they trickle), ``deadline_s`` (0: none)
  bounds all requests of the backend together, answers are capped in bytes and parsed with the
  input limits (nesting, digits), a redirect to another host never carries the API key (refused),
  and connection errors, timeouts, 429 and 5xx are retried ``retries`` times with backoff; any
  other 4xx fails at once. Every failure is one ``RequestFailed`` line naming the URL and the cause
  (after retries: the tries, the timeout and the options to change); a passed deadline is
  ``DeadlineExceeded``. At most ``concurrency`` requests are in flight; the first failure cancels
  the requests not yet sent.
- An answer is type-checked before it is used: ``choices[0].message.content`` a string (``null``:
  the empty answer), ``usage`` absent/``null`` or an object whose ``prompt_tokens`` and
  ``completion_tokens`` are absent/``null`` or non-negative integers; anything else is one
  ``RequestFailed`` line naming the field.
- The API key is read from the environment variable ``api_key_env`` at each request (absent: no
  ``Authorization`` header, as local servers need none); it is never stored in the identity, the
  config or the record.
"""

from __future__ import annotations

import json
import math
import os
import time
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import PurePath
from typing import Any

from rbench.plugin import DeadlineExceeded, HttpPolicy, RBenchError, RequestFailed, request_json

from . import Chat, Completion, Decoding, NextTokenScores

TOP_LOGPROBS = 20


def one_line(text: object, limit: int = 300) -> str:
    return " ".join(str(text).split())[:limit]


class OpenAIBackend:
    kind = "openai"

    def __init__(self, base_url: str, model: str, api_key_env: str = "OPENAI_API_KEY", timeout_s: float = 60,
                 retries: int = 4, backoff_s: float = 0.5, concurrency: int = 4,
                 supports_logprobs: bool | None = None, batch_size: int | None = None,
                 deadline_s: float = 0.0) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise RBenchError(f"base_url {base_url!r} must start with http:// or https://")
        if concurrency < 1 or retries < 0:
            raise RBenchError("concurrency must be >= 1 and retries >= 0")
        if not (math.isfinite(timeout_s) and timeout_s > 0 and math.isfinite(deadline_s) and deadline_s >= 0):
            raise RBenchError("timeout_s must be a finite number > 0 and deadline_s a finite number >= 0")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key_env = api_key_env
        self.timeout_s = float(timeout_s)
        self.retries = int(retries)
        self.backoff_s = float(backoff_s)
        self.concurrency = int(concurrency)
        self.deadline_s = float(deadline_s)
        self._deadline: float | None = None  # monotonic; set by the first request
        self.policy = HttpPolicy(
            timeout_s=self.timeout_s, retries=self.retries, backoff_s=self.backoff_s,
            hint=(f"a server that answers one request at a time (llama.cpp's, by default) needs "
                  f"--set concurrency=1 (now {self.concurrency}), or a larger --set timeout_s"))
        # requests handed over per call by CachedBackend (each such chunk is committed as it
        # returns); by default one round of the thread pool
        self.batch_size = int(batch_size or self.concurrency)
        self._supports = supports_logprobs
        self._identity: dict[str, Any] | None = None

    # -- HTTP -------------------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        key = os.environ.get(self.api_key_env, "") if self.api_key_env else ""
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def _request(self, path: str, body: dict[str, Any] | None = None, retries: int | None = None) -> dict[str, Any]:
        if self.deadline_s and self._deadline is None:
            self._deadline = time.monotonic() + self.deadline_s
        url = f"{self.base_url}{path}"
        try:
            resp = request_json(url, body, self._headers(), self.policy, self._deadline, retries)
        except DeadlineExceeded as exc:
            raise DeadlineExceeded(f"{exc}; the run may ask the server for {self.deadline_s:g} s in all "
                                   "(--set deadline_s=SECONDS, 0 for no limit)") from None
        if not isinstance(resp, dict):
            raise RequestFailed(f"{url} answered with JSON that is not an object: {one_line(json.dumps(resp))[:200]}")
        return resp

    # -- the Backend ------------------------------------------------------------------------

    def identity(self) -> dict[str, Any]:
        if self._identity is None:
            ident: dict[str, Any] = {"backend": "openai", "base_url": self.base_url, "model": self.model}
            reported = self._server_model()
            if reported:
                ident["server_model"] = reported
            self._identity = ident
        return self._identity

    def _server_model(self) -> str:
        """The id the server reports for ``model`` (``GET /models``): the matching entry, or the
        only one; a file path is shortened to its name. ``""`` when the server lists nothing."""
        try:
            listing = self._request("/models", retries=1)
        except RBenchError:
            return ""
        data = listing.get("data")
        ids = [str(m.get("id", "")) for m in (data if isinstance(data, list) else []) if isinstance(m, dict)]
        ids = [i for i in ids if i]
        pick = self.model if self.model in ids else (ids[0] if len(ids) == 1 else "")
        if pick.startswith("/") or "\\" in pick:
            pick = PurePath(pick).name
        return pick

    def _map(self, fn: Any, items: list[Any]) -> list[Any]:
        if len(items) <= 1 or self.concurrency == 1:
            return [fn(x) for x in items]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(items))) as pool:
            futures = [pool.submit(fn, x) for x in items]
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            failed = next((f for f in futures if f in done and f.exception() is not None), None)
            if failed is not None:  # the first failure ends the call: nothing more is sent
                for f in futures:
                    f.cancel()
                raise failed.exception()  # type: ignore[misc]
            return [f.result() for f in futures]

    def chat(self, chats: list[Chat], decoding: Decoding) -> list[Completion]:
        def one(chat: Chat) -> Completion:
            body: dict[str, Any] = {"model": self.model, "messages": chat, "temperature": decoding.temperature,
                                    "top_p": decoding.top_p, "seed": decoding.seed,
                                    "max_tokens": decoding.max_new_tokens}
            if decoding.stop:
                body["stop"] = list(decoding.stop)
            t0 = time.perf_counter()
            resp = self._request("/chat/completions", body)
            seconds = time.perf_counter() - t0
            text = _message_text(resp, self.base_url)
            for s in decoding.stop:
                if s and s in text:
                    text = text[:text.find(s)]
            tokens_in, tokens_out = _usage(resp, self.base_url)
            return Completion(text=text, tokens_in=tokens_in, tokens_out=tokens_out, seconds=seconds)

        return self._map(one, list(chats))

    def _logprob_body(self, chat: Chat) -> dict[str, Any]:
        return {"model": self.model, "messages": chat, "temperature": 0.0, "max_tokens": 1,
                "logprobs": True, "top_logprobs": TOP_LOGPROBS, "seed": 0}

    @property
    def supports_logprobs(self) -> bool:
        if self._supports is None:
            try:
                resp = self._request("/chat/completions", self._logprob_body([{"role": "user", "content": "Hi"}]))
                self._supports = _top_logprobs(resp) is not None
            except RBenchError:
                self._supports = False
        return self._supports

    def next_token_logprobs(self, chats: list[Chat], labels: tuple[str, ...]) -> list[NextTokenScores]:
        labels = tuple(labels)

        def one(chat: Chat) -> NextTokenScores:
            t0 = time.perf_counter()
            resp = self._request("/chat/completions", self._logprob_body(chat))
            seconds = time.perf_counter() - t0
            top = _top_logprobs(resp)
            if top is None:
                raise RBenchError(f"{self.base_url}/chat/completions returned no logprobs for model {self.model!r} "
                                  "(the server does not offer them: use generated labels)")
            best: dict[str, float] = {}
            for entry in top:
                tok, lp = (entry.get("token"), entry.get("logprob")) if isinstance(entry, dict) else (None, None)
                if isinstance(tok, str) and isinstance(lp, (int, float)) and not isinstance(lp, bool):
                    value = float(lp) if isinstance(lp, float) or abs(lp) < 1 << 1000 else math.inf
                    if math.isfinite(value):
                        best[tok] = max(best.get(tok, -math.inf), value)
            return NextTokenScores(logprobs={lab: best.get(lab) for lab in labels},
                                   tokens_in=_usage(resp, self.base_url)[0], seconds=seconds)

        return self._map(one, list(chats))

    def close(self) -> None:
        return None


def _message_text(resp: dict[str, Any], where: str) -> str:
    """``choices[0].message.content``: a string, or ``null`` (no text: the empty answer)."""
    choices = resp.get("choices")
    if not isinstance(choices, list) or not choices:
        raise RequestFailed(f"{where}/chat/completions answered without choices (expected a non-empty list): "
                            f"{one_line(json.dumps(resp))[:200]}")
    first = choices[0]
    message = first.get("message") if isinstance(first, dict) else None
    if not isinstance(message, dict):
        raise RequestFailed(f"{where}/chat/completions answered without choices[0].message (expected an object): "
                            f"{one_line(json.dumps(first))[:200]}")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise RequestFailed(f"{where}/chat/completions answered a choices[0].message.content of type "
                            f"{type(content).__name__} (expected a string)")
    return content or ""


def _usage(resp: dict[str, Any], where: str) -> tuple[int, int]:
    """``(prompt_tokens, completion_tokens)`` of the answer's ``usage``; 0 for what the server
    did not report (absent or ``null``), one line for anything that is not a count."""
    usage = resp.get("usage")
    if usage is None:
        return 0, 0
    if not isinstance(usage, dict):
        raise RequestFailed(f"{where}/chat/completions answered a usage of type {type(usage).__name__} "
                            "(expected an object with token counts)")
    counts = []
    for name in ("prompt_tokens", "completion_tokens"):
        value = usage.get(name)
        if value is None:
            value = 0
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise RequestFailed(f"{where}/chat/completions answered usage.{name} = {one_line(json.dumps(value))[:40]} "
                                "(expected a non-negative integer)")
        counts.append(value)
    return counts[0], counts[1]


def _top_logprobs(resp: dict[str, Any]) -> list[dict[str, Any]] | None:
    try:
        content = resp["choices"][0]["logprobs"]["content"]
        top = content[0]["top_logprobs"]
    except (KeyError, IndexError, TypeError):
        return None
    return top if isinstance(top, list) else None
