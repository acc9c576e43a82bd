"""The one HTTP policy for every request rbench makes: the OpenAI-compatible generation backend's
JSON requests (``request_json``) and the dataset downloads (``open_stream``, streamed to a file by
``rbench.tasks.sources.downloads``).

A server can be slow, broken or hostile; none of that may hang a run, crash it with a traceback,
or take the user's API key elsewhere. Every request made through ``request_json``:

- **Keeps its credentials at home.** A request carrying a credential header (``Authorization``,
  ``Proxy-Authorization``, ``Cookie``, ``api-key``, ``x-api-key``; a ``user:password@`` in the
  URL is sent as ``Authorization`` and counts as one) follows a redirect only to the
  same scheme, host and port; a redirect anywhere else is refused in one line (never followed with
  or without the key: the user should point ``base_url`` at the real address). A request without
  credentials follows redirects (at most ``max_redirects``). 301/302/303 turn a POST into a GET
  without body (what every client does); 307/308 repeat the method and body.
- **Ends at its deadline.** ``timeout_s`` is the total time of one attempt: connecting, the
  headers and the whole body. A socket timeout alone restarts at every byte, so a server that
  sends one byte every few seconds would never time out; a watchdog shuts the socket down at the
  deadline instead, whatever the server sends. A caller's ``deadline`` (``time.monotonic()``
  value, the run's) cuts every attempt and every backoff wait too (``DeadlineExceeded``).
  ``stall_s`` (default: ``timeout_s``) bounds connecting and the wait for each next byte: a
  download's deadline is hours, its stall a minute.
- **Reads at most ``max_bytes``** of an answer (16 MiB by default; a chat answer is a few kB).
- **Parses with the limits of ``rbench.core.inputs``** (nesting depth, integer digits), so deep
  nesting or a 5,000-digit number is a line naming the URL, not a ``RecursionError``.
- **Retries** connection errors, timeouts, 429 and 5xx ``retries`` times with exponential backoff
  (``backoff_s * 2**attempt``, or the server's ``Retry-After`` when shorter than 30 s); any other
  4xx, a redirect refused and an unreadable answer fail at once. The last failure is one
  ``RequestFailed`` line naming the URL, the tries, the per-try timeout, the last cause and the
  caller's ``hint`` (which options to change) when the cause was a timeout, a dropped connection
  or a busy server (429, 503), not a refused connection.

``open_stream`` is the streaming form (no retries: a cut download is resumed by the next
command): the same redirects, credential rule and deadline; ``Stream.chunks`` yields the body and
ends it with ``StreamCut`` (one line: the deadline, a stall or a lost connection) or
``RequestFailed`` past ``max_bytes``.

Proxies: the environment's ``http_proxy``/``https_proxy``/``no_proxy`` are honoured as urllib
does (HTTPS through a ``CONNECT`` tunnel); proxy credentials are not supported.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import socket
import ssl
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from rbench.core.errors import DataError, RBenchError
from rbench.core.inputs import parse_json, size_text

MAX_ANSWER_BYTES = 16 << 20
RETRY_STATUS = frozenset({429, 500, 502, 503, 504, 529})
CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "api-key", "x-api-key"})
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_MAX_RETRY_AFTER_S = 30.0


class RequestFailed(RBenchError):
    """A request that got no usable answer (after its retries, where retrying could help).

    ``transient``: the cause was a timeout or a lost connection (another try, a longer timeout or
    fewer parallel requests might succeed), as opposed to an answer the server gave."""

    def __init__(self, message: str, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class DeadlineExceeded(RBenchError):
    """The caller's overall deadline (a run's) passed: nothing more is asked."""


class StreamCut(RequestFailed):
    """A streamed body that stopped before its end: the deadline passed, no byte came for
    ``stall_s``, or the connection was lost. The message says which (no URL: the caller adds it)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, transient=True)


@dataclass(frozen=True)
class HttpPolicy:
    """How one request is made (see the module docstring). ``hint`` is appended to the message
    of a request that failed by timeout or lost connection after all its tries."""

    timeout_s: float = 60.0
    retries: int = 4
    backoff_s: float = 0.5
    max_bytes: int = MAX_ANSWER_BYTES
    max_redirects: int = 5
    hint: str = ""
    stall_s: float | None = None  # connecting and each read; None: timeout_s

    def socket_timeout(self, seconds: float) -> float:
        """The socket timeout of an attempt with ``seconds`` left: the stall bound, within them."""
        return max(min(seconds, self.stall_s or seconds), 0.001)


def one_line(text: object, limit: int = 300) -> str:
    """``text`` on one line, at most ``limit`` characters (for messages quoting a server)."""
    return " ".join(str(text).split())[:limit]


def _origin(parts: urllib.parse.SplitResult) -> tuple[str, str, int]:
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme, (parts.hostname or "").lower(), port


@dataclass
class _Answer:
    status: int
    reason: str
    headers: http.client.HTTPMessage
    body: bytes


class _Transient(Exception):
    """One attempt failed in a way another attempt might not (timeout, connection). ``slow``: a
    timeout or a dropped connection, what an overloaded server does (not a refused connection)."""

    def __init__(self, message: str, slow: bool = True) -> None:
        super().__init__(message)
        self.slow = slow


class _Watchdog:
    """Shuts the connection's socket down at ``seconds`` from now: a blocked read then returns at
    once, however slowly the server trickles bytes."""

    def __init__(self, conn: http.client.HTTPConnection, seconds: float) -> None:
        self.conn = conn
        self.fired = False
        self._timer = threading.Timer(max(seconds, 0.0), self._cut)
        self._timer.daemon = True
        self._timer.start()

    def _cut(self) -> None:
        self.fired = True
        sock = self.conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cancel(self) -> None:
        self._timer.cancel()


def _connection(parts: urllib.parse.SplitResult, timeout: float) -> tuple[http.client.HTTPConnection, bool]:
    """A connection to ``parts``' host (through the environment's proxy, if any) and whether
    the request line must carry the absolute URL (plain HTTP through a proxy)."""
    host, port = parts.hostname or "", parts.port
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and not urllib.request.proxy_bypass(host):
        pp = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        if parts.scheme == "https":
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                pp.hostname or "", pp.port or 80, timeout=timeout, context=ssl.create_default_context())
            conn.set_tunnel(host, port)
            return conn, False
        return http.client.HTTPConnection(pp.hostname or "", pp.port or 80, timeout=timeout), True
    if parts.scheme == "https":
        return http.client.HTTPSConnection(host, port, timeout=timeout, context=ssl.create_default_context()), False
    return http.client.HTTPConnection(host, port, timeout=timeout), False


def _open(url: str, method: str, body: bytes | None, headers: dict[str, str], seconds: float,
          policy: HttpPolicy) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse, _Watchdog]:
    """Send one request and read its status and headers, all under a watchdog that cuts the
    connection ``seconds`` from now (the caller reads the body, then cancels the dog and closes)."""
    parts = urllib.parse.urlsplit(url)
    conn, absolute = _connection(parts, policy.socket_timeout(seconds))
    target = url if absolute else (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    dog = _Watchdog(conn, seconds)
    try:
        conn.request(method, target, body=body, headers=headers)
        return conn, conn.getresponse(), dog
    except (OSError, http.client.HTTPException) as exc:
        dog.cancel()
        conn.close()
        raise _cause(exc, dog, seconds, policy) from None


def _cause(exc: BaseException, dog: _Watchdog, seconds: float, policy: HttpPolicy) -> _Transient:
    """What cut a request or a body, in words."""
    if dog.fired:
        return _Transient(f"no complete answer within {seconds:.3g} s")
    if isinstance(exc, (TimeoutError, socket.timeout)):
        if policy.stall_s is not None and policy.stall_s < seconds:
            return _Transient(f"no byte for {policy.stall_s:.3g} s (a stalled server)")
        return _Transient(f"no answer within {seconds:.3g} s")
    reason = getattr(exc, "reason", None) or exc
    return _Transient(f"{type(exc).__name__}: {one_line(reason) or 'connection lost'}",
                      slow=not isinstance(exc, ConnectionRefusedError))


def _attempt(url: str, method: str, body: bytes | None, headers: dict[str, str], seconds: float,
             policy: HttpPolicy) -> _Answer:
    """One request and its whole answer within ``seconds`` (no redirect handling)."""
    conn, resp, dog = _open(url, method, body, headers, seconds, policy)
    max_bytes = policy.max_bytes
    try:
        try:
            chunks: list[bytes] = []
            size = 0
            while True:
                chunk = resp.read1(1 << 16)
                if not chunk:
                    break
                size += len(chunk)
                if size > max_bytes:
                    raise RequestFailed(f"{url} sent an answer larger than {size_text(max_bytes)}: refused")
                chunks.append(chunk)
        except (OSError, http.client.HTTPException) as exc:
            raise _cause(exc, dog, seconds, policy) from None
        if dog.fired:  # the watchdog's shutdown reads as an end of body: the answer is cut
            raise _Transient(f"no complete answer within {seconds:.3g} s")
        return _Answer(resp.status, resp.reason or "", resp.headers, b"".join(chunks))
    finally:
        dog.cancel()
        conn.close()


def _redirect(url: str, answer: _Answer, headers: dict[str, str]) -> str:
    """The URL ``answer`` redirects to, or a refusal when it would carry credentials elsewhere."""
    location = answer.headers.get("Location")
    if not location:
        raise RequestFailed(f"{url} answered HTTP {answer.status} (a redirect) without a Location")
    target = urllib.parse.urljoin(url, location.strip())
    parts = urllib.parse.urlsplit(target)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RequestFailed(f"{url} redirected (HTTP {answer.status}) to {one_line(target, 200)!r}: not an http(s) URL")
    carries = sorted(h for h in headers if h.lower() in CREDENTIAL_HEADERS)
    if carries and _origin(parts) != _origin(urllib.parse.urlsplit(url)):
        scheme, host, port = _origin(parts)
        raise RequestFailed(
            f"{url} redirected (HTTP {answer.status}) to {scheme}://{host}:{port}, another host or scheme: refused, "
            f"rbench never sends credentials ({', '.join(carries)}) to a host other than the one named; "
            "if that address is right, name it in the URL itself")
    return target


def _server_message(answer: _Answer, url: str) -> str:
    """The error text of a non-2xx answer (OpenAI's ``{"error": {"message": ...}}`` or the body)."""
    raw = answer.body.decode("utf-8", "replace")
    try:
        data = parse_json(raw, url)
    except DataError:
        return one_line(raw or answer.reason)
    err = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(err, dict):
        err = err.get("message") or err.get("detail") or err
    return one_line(err if isinstance(err, str) else json.dumps(err))


def _exchange(url: str, method: str, body: bytes | None, headers: dict[str, str], policy: HttpPolicy,
              until: float) -> _Answer:
    """One attempt, redirects followed under the policy, all within ``until`` (monotonic)."""
    for _ in range(policy.max_redirects + 1):
        answer = _attempt(url, method, body, headers, until - time.monotonic(), policy)
        if answer.status not in _REDIRECTS:
            return answer
        target = _redirect(url, answer, headers)
        if answer.status in (301, 302, 303) and method != "GET":
            method, body = "GET", None
            headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
        url = target
    raise RequestFailed(f"{url}: more than {policy.max_redirects} redirects")


def request_json(url: str, body: Any = None, headers: dict[str, str] | None = None,
                 policy: HttpPolicy | None = None, deadline: float | None = None,
                 retries: int | None = None) -> Any:
    """``url``'s JSON answer (a POST of ``body`` as JSON, or a GET when ``body`` is None) under
    ``policy``; ``deadline`` (a ``time.monotonic()`` value) bounds everything, retries included;
    ``retries`` overrides the policy's. Every failure is ``RequestFailed`` or ``DeadlineExceeded``."""
    policy = policy or HttpPolicy()
    url, headers = _credentials_of(url, headers or {})
    try:
        data = None if body is None else json.dumps(body, allow_nan=False).encode("utf-8")
    except ValueError:  # strict JSON has no NaN or infinity; a server would read them differently
        raise RBenchError(f"{url}: the request holds NaN or infinity (not JSON): not sent") from None
    hdrs = {"Accept": "application/json", **({"Content-Type": "application/json"} if data is not None else {}),
            **(headers or {})}
    tries = (policy.retries if retries is None else retries) + 1
    last = ""
    for attempt in range(tries):
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            raise DeadlineExceeded(f"{url}: the run's deadline passed ({last or 'before this request'})")
        until = now + policy.timeout_s if deadline is None else min(now + policy.timeout_s, deadline)
        wait = policy.backoff_s * (2 ** attempt)
        try:
            answer = _exchange(url, "GET" if data is None else "POST", data, hdrs, policy, until)
        except _Transient as exc:
            if deadline is not None and time.monotonic() >= deadline:
                raise DeadlineExceeded(f"{url}: the run's deadline passed ({exc})") from None
            last, transient = str(exc), exc.slow
        else:
            if 200 <= answer.status < 300:
                return _decode(answer, url)
            message = _server_message(answer, url)
            if answer.status not in RETRY_STATUS:
                raise RequestFailed(f"{url} answered HTTP {answer.status}: {message}")
            last, transient = f"HTTP {answer.status}: {message}", answer.status in (429, 503)  # busy
            after = answer.headers.get("Retry-After")
            if after:
                try:
                    wait = min(max(float(after), 0.0), _MAX_RETRY_AFTER_S)
                except ValueError:
                    pass
        if attempt + 1 < tries:
            if deadline is not None and time.monotonic() + wait >= deadline:
                raise DeadlineExceeded(f"{url}: the run's deadline would pass while waiting to retry ({last})")
            time.sleep(wait)
    hint = f"; {policy.hint}" if transient and policy.hint else ""
    raise RequestFailed(f"{url}: no answer after {tries} {'try' if tries == 1 else 'tries'} "
                        f"(timeout {policy.timeout_s:g} s each; last: {last}){hint}", transient=transient)


def _decode(answer: _Answer, url: str) -> Any:
    try:
        text = answer.body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RequestFailed(f"{url} answered HTTP {answer.status} with bytes that are not UTF-8 "
                            f"(byte {exc.start})") from None
    try:
        return parse_json(text, url)
    except DataError as exc:
        raise RequestFailed(f"{url} answered HTTP {answer.status} with {exc.reason}: "
                            f"{one_line(text[:80], 80)}") from None



def public_url(url: str) -> str:
    """``url`` as it may be shown or stored: without a ``user:password@`` part."""
    return _credentials_of(url, {})[0]


def _credentials_of(url: str, headers: dict[str, str]) -> tuple[str, dict[str, str]]:
    """``url`` without a ``user:password@`` part, and ``headers`` with it as ``Authorization``
    (so the credential rule of redirects applies to it as to any key)."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018  (a malformed port raises here, not later)
    except ValueError as exc:
        raise RequestFailed(f"not a URL ({exc})") from None
    if parts.username is None and parts.password is None:
        return url, headers
    user = urllib.parse.unquote(parts.username or "")
    secret = urllib.parse.unquote(parts.password or "")
    host = parts.hostname or ""
    netloc = (f"[{host}]" if ":" in host else host) + (f":{parts.port}" if parts.port else "")
    token = base64.b64encode(f"{user}:{secret}".encode()).decode("ascii")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc)), {**headers, "Authorization": f"Basic {token}"}


class Stream:
    """An answer whose body is being read (``open_stream``): the final ``url`` after redirects,
    ``status``, ``headers``, and ``framed``: whether the body's end is known (a
    ``Content-Length``, or chunked transfer, whose last chunk marks the end) rather than the
    connection closing, which a cut transfer also does."""

    def __init__(self, url: str, resp: http.client.HTTPResponse, dog: _Watchdog, seconds: float,
                 policy: HttpPolicy) -> None:
        self.url, self.status, self.reason, self.headers = url, resp.status, resp.reason or "", resp.headers
        self.framed = resp.length is not None or bool(resp.chunked)
        self._resp, self._dog, self._seconds, self._policy = resp, dog, seconds, policy

    def chunks(self, size: int = 1 << 20, limit: int | None = None) -> Iterator[bytes]:
        """The body, ``size`` bytes at a time; past ``limit`` bytes (default: the policy's
        ``max_bytes``) ``RequestFailed``; cut by the deadline, a stall or a lost connection:
        ``StreamCut`` (raised also when the deadline's shutdown looked like an end of body)."""
        limit = self._policy.max_bytes if limit is None else limit
        got = 0
        while True:
            try:
                chunk = self._resp.read1(size)
            except (OSError, http.client.HTTPException) as exc:
                raise StreamCut(str(_cause(exc, self._dog, self._seconds, self._policy))) from None
            if self._dog.fired:
                raise StreamCut(f"no complete answer within {self._seconds:.3g} s (the deadline)")
            if not chunk:
                return
            got += len(chunk)
            if got > limit:
                raise RequestFailed(f"{self.url} sent more than {size_text(limit)}: refused")
            yield chunk


@contextlib.contextmanager
def open_stream(url: str, headers: dict[str, str] | None = None, policy: HttpPolicy | None = None,
                method: str = "GET") -> Iterator[Stream]:
    """``url``'s answer, its body unread, under ``policy`` (redirects and credentials as for
    ``request_json``; ``timeout_s`` the deadline of the whole exchange, body included; no
    retries). A status other than a redirect is the caller's to judge. Failures before the body:
    ``RequestFailed`` (``transient`` for a timeout or a lost connection)."""
    policy = policy or HttpPolicy()
    url, hdrs = _credentials_of(url, {"Accept-Encoding": "identity", **(headers or {})})
    until = time.monotonic() + policy.timeout_s
    for _ in range(policy.max_redirects + 1):
        seconds = until - time.monotonic()
        try:
            conn, resp, dog = _open(url, method, None, hdrs, seconds, policy)
        except _Transient as exc:
            raise RequestFailed(f"{url}: {exc}", transient=True) from None
        try:
            if resp.status in _REDIRECTS:
                url = _redirect(url, _Answer(resp.status, resp.reason or "", resp.headers, b""), hdrs)
                continue
            yield Stream(url, resp, dog, seconds, policy)
            return
        finally:
            dog.cancel()
            conn.close()
    raise RequestFailed(f"{url}: more than {policy.max_redirects} redirects")
