"""``OpenAIBackend``: any OpenAI-compatible HTTP server (OpenAI, vLLM serve, llama.cpp, TGI, ...).

Standard library only: ``urllib.request`` for the POSTs, a thread pool bounded by ``concurrency``.

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
- Connection errors, timeouts, 429 and 5xx are retried ``retries`` times with exponential backoff
  (``backoff_s * 2**attempt``, or the server's ``Retry-After`` when shorter than 30 s); any other
  4xx fails at once. Every failure is one ``RBenchError`` line naming the URL, the status and the
  server's message.
- The API key is read from the environment variable ``api_key_env`` at each request (absent: no
  ``Authorization`` header, as local servers need none); it is never stored in the identity, the
  config or the record.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import PurePath
from typing import Any

from rbench.plugin import RBenchError

from .backend import Chat, Completion, Decoding, NextTokenScores

TOP_LOGPROBS = 20
_RETRY_STATUS = {429, 500, 502, 503, 504, 529}


def _one_line(text: str, limit: int = 300) -> str:
    return " ".join(str(text).split())[:limit]


class OpenAIBackend:
    kind = "openai"

    def __init__(self, base_url: str, model: str, api_key_env: str = "OPENAI_API_KEY", timeout_s: float = 60,
                 retries: int = 4, backoff_s: float = 0.5, concurrency: int = 4,
                 supports_logprobs: bool | None = None, batch_size: int | None = None) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise RBenchError(f"base_url {base_url!r} must start with http:// or https://")
        if concurrency < 1 or retries < 0:
            raise RBenchError("concurrency must be >= 1 and retries >= 0")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key_env = api_key_env
        self.timeout_s = float(timeout_s)
        self.retries = int(retries)
        self.backoff_s = float(backoff_s)
        self.concurrency = int(concurrency)
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
        url = f"{self.base_url}{path}"
        data = None if body is None else json.dumps(body).encode("utf-8")
        tries = (self.retries if retries is None else retries) + 1
        last = ""
        for attempt in range(tries):
            req = urllib.request.Request(url, data=data, headers=self._headers(),
                                         method="GET" if data is None else "POST")
            wait = self.backoff_s * (2 ** attempt)
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    raw = resp.read()
                try:
                    return json.loads(raw.decode("utf-8"))
                except ValueError:
                    raise RBenchError(f"{url} answered HTTP 200 with no JSON: {_one_line(raw[:200])}") from None
            except urllib.error.HTTPError as exc:
                message = _server_message(exc)
                if exc.code not in _RETRY_STATUS:
                    raise RBenchError(f"{url} answered HTTP {exc.code}: {message}") from None
                last = f"HTTP {exc.code}: {message}"
                after = exc.headers.get("Retry-After") if exc.headers else None
                if after:
                    try:
                        wait = min(max(float(after), 0.0), 30.0)
                    except ValueError:
                        pass
            except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                last = f"{type(reason).__name__}: {_one_line(reason)}" if not isinstance(reason, str) else reason
            if attempt + 1 < tries:
                time.sleep(wait)
        raise RBenchError(f"{url}: no answer after {tries} tries ({last})")

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
        ids = [str(m.get("id", "")) for m in listing.get("data", []) if isinstance(m, dict)]
        ids = [i for i in ids if i]
        pick = self.model if self.model in ids else (ids[0] if len(ids) == 1 else "")
        if pick.startswith("/") or "\\" in pick:
            pick = PurePath(pick).name
        return pick

    def _map(self, fn: Any, items: list[Any]) -> list[Any]:
        if len(items) <= 1 or self.concurrency == 1:
            return [fn(x) for x in items]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(items))) as pool:
            return list(pool.map(fn, items))

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
            usage = resp.get("usage") or {}
            return Completion(text=text, tokens_in=int(usage.get("prompt_tokens") or 0),
                              tokens_out=int(usage.get("completion_tokens") or 0), seconds=seconds)

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
                tok, lp = entry.get("token"), entry.get("logprob")
                if isinstance(tok, str) and isinstance(lp, (int, float)) and math.isfinite(lp):
                    best[tok] = max(best.get(tok, -math.inf), float(lp))
            usage = resp.get("usage") or {}
            return NextTokenScores(logprobs={lab: best.get(lab) for lab in labels},
                                   tokens_in=int(usage.get("prompt_tokens") or 0), seconds=seconds)

        return self._map(one, list(chats))

    def close(self) -> None:
        return None


def _server_message(exc: urllib.error.HTTPError) -> str:
    try:
        raw = exc.read().decode("utf-8", "replace")
    except Exception:  # noqa: BLE001 - a broken body still gets a message
        return _one_line(exc.reason or "")
    try:
        data = json.loads(raw)
        err = data.get("error", data) if isinstance(data, dict) else data
        if isinstance(err, dict):
            msg = err.get("message") or err.get("detail") or json.dumps(err)
        else:
            msg = err
        return _one_line(msg if isinstance(msg, str) else json.dumps(msg))
    except ValueError:
        return _one_line(raw or exc.reason or "")


def _message_text(resp: dict[str, Any], where: str) -> str:
    try:
        content = resp["choices"][0]["message"].get("content")
    except (KeyError, IndexError, TypeError, AttributeError):
        raise RBenchError(f"{where}/chat/completions answered without choices[0].message: "
                          f"{_one_line(json.dumps(resp)[:200])}") from None
    return content or ""


def _top_logprobs(resp: dict[str, Any]) -> list[dict[str, Any]] | None:
    try:
        content = resp["choices"][0]["logprobs"]["content"]
        top = content[0]["top_logprobs"]
    except (KeyError, IndexError, TypeError):
        return None
    return top if isinstance(top, list) else None
