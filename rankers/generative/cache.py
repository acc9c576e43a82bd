"""The on-disk response cache behind every generation backend, and the wrapper that uses it.

``ResponseCache`` is one sqlite3 file (stdlib, WAL journal, one row per key). The key is the
sha256 of the canonical JSON (sorted keys, no spaces) of::

    [backend.identity(), kind, chat, settings]            (namespace empty)
    [backend.identity(), kind, chat, settings, namespace]  (otherwise)

with ``namespace`` what else decides an answer (the rankers pass the prompt template version,
``prompts.TEMPLATE_VERSION``), ``kind`` ``"chat"`` (``settings`` = ``Decoding.as_dict()``) or ``"logprobs"`` (``settings``
= the labels, in the order given). Every answer is committed as soon as its batch returns, so a
run killed mid-way loses at most the batch in flight and a re-run pays only for what is missing.

``CachedBackend(backend, cache, stats)`` wraps any ``Backend``: it looks every request up, sends
only the misses to the wrapped backend (in chunks of ``chunk_size``, by default the backend's own
``batch_size``; each chunk is stored as it returns), returns hits with ``cached=True`` and adds
every answer to ``stats``. Identical requests inside one call are asked once. ``cache=None``
passes everything through (still counted).

Validated before stored, validated when read: an answer is stored only when its value has the
form the readers expect (``text`` a string; token counts non-negative integers; seconds and
logprobs finite numbers, a logprob may be ``None``); an answer that does not is returned to the
ranker but never cached, so a hostile or broken answer cannot be replayed into later runs. A
stored entry that cannot be read back (not JSON, a missing field, a wrong type) is reported in one
warning line naming the cache file and the entry's key, and **re-asked** (treated as a miss; the
fresh answer replaces it). The ranker's parsers never raise on any text (digit runs are capped,
``parse.MAX_DIGITS``), so what the cache holds can always be parsed.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
import threading
import time
import warnings
from pathlib import Path
from typing import Any

from rbench.plugin import RBenchError

from .backends import Backend, Chat, Completion, Decoding, GenerationStats, NextTokenScores

_SCHEMA = ("CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, kind TEXT NOT NULL, "
           "value TEXT NOT NULL, created REAL NOT NULL)")


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def request_key(identity: dict[str, Any], kind: str, chat: Chat, settings: Any,
                namespace: dict[str, Any] | None = None) -> str:
    """sha256 of the canonical JSON of (identity, kind, chat, decoding dict or labels[, namespace])."""
    if kind not in ("chat", "logprobs"):
        raise ValueError(f"request kind {kind!r}")
    payload: list[Any] = [identity, kind, [dict(m) for m in chat], settings]
    if namespace:
        payload.append(namespace)
    return hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()


class ResponseCache:
    """An sqlite3 key -> JSON answer store. Safe across processes (WAL, short transactions);
    a connection per thread. A file that is not a cache, or one locked for longer than
    ``timeout_s``, raises one ``RBenchError`` line naming the file."""

    def __init__(self, path: str | Path, timeout_s: float = 30.0) -> None:
        self.path = Path(path)
        self.timeout_s = float(timeout_s)
        self._local = threading.local()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._guard("open"):
            conn = self._conn()
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(_SCHEMA)
            conn.commit()

    # -- plumbing ---------------------------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(str(self.path), timeout=self.timeout_s, isolation_level="DEFERRED")
            self._local.conn = conn
        return conn

    def _guard(self, what: str) -> _Guard:
        return _Guard(self, what)

    # -- the store --------------------------------------------------------------------------

    def get_many(self, keys: list[str]) -> dict[str, Any]:
        """key -> the stored value (``UNREADABLE`` for an entry that is not JSON)."""
        found: dict[str, Any] = {}
        unique = list(dict.fromkeys(keys))
        with self._guard("read"):
            conn = self._conn()
            for i in range(0, len(unique), 500):
                part = unique[i:i + 500]
                rows = conn.execute(
                    f"SELECT key, value FROM responses WHERE key IN ({','.join('?' * len(part))})", part)
                for key, value in rows:
                    try:
                        found[key] = json.loads(value)
                    except (ValueError, TypeError, RecursionError):
                        found[key] = UNREADABLE
            conn.commit()  # end the read transaction (WAL checkpoints need it)
        return found

    def get(self, key: str) -> dict[str, Any] | None:
        return self.get_many([key]).get(key)

    def put_many(self, kind: str, items: list[tuple[str, dict[str, Any]]]) -> None:
        """Store and commit (one transaction)."""
        if not items:
            return
        now = time.time()
        with self._guard("write"):
            conn = self._conn()
            conn.executemany("INSERT OR REPLACE INTO responses (key, kind, value, created) VALUES (?, ?, ?, ?)",
                             [(k, kind, json.dumps(v, sort_keys=True), now) for k, v in items])
            conn.commit()

    def put(self, key: str, kind: str, value: dict[str, Any]) -> None:
        self.put_many(kind, [(key, value)])

    def __len__(self) -> int:
        with self._guard("read"):
            conn = self._conn()
            (n,) = conn.execute("SELECT COUNT(*) FROM responses").fetchone()
            conn.commit()
        return int(n)

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None


UNREADABLE = object()  # a stored entry that is not JSON


class _Guard:
    """Turns sqlite errors into one clear line (and rolls back a failed transaction)."""

    def __init__(self, cache: ResponseCache, what: str) -> None:
        self.cache, self.what = cache, what

    def __enter__(self) -> None:
        return None

    def __exit__(self, et: Any, exc: BaseException | None, tb: Any) -> bool:
        if exc is None or not isinstance(exc, sqlite3.Error):
            return False
        conn = getattr(self.cache._local, "conn", None)
        if conn is not None:
            try:
                conn.rollback()
            except sqlite3.Error:
                pass
        where = f"response cache {self.cache.path}"
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if "locked" in text or "busy" in text:
            raise RBenchError(f"{where} is locked by another process for more than {self.cache.timeout_s:g}s "
                              f"(cannot {self.what}); wait for that run to finish or use another cache file"
                              ) from exc
        raise RBenchError(f"{where} is not a usable response cache ({type(exc).__name__}: {text}); "
                          "delete the file or pass another cache path") from exc


# ------------------------------------------------------------------------------------------
# the wrapper
# ------------------------------------------------------------------------------------------


def _completion_value(c: Completion) -> dict[str, Any]:
    return {"text": c.text, "tokens_in": c.tokens_in, "tokens_out": c.tokens_out, "seconds": c.seconds}


def _scores_value(s: NextTokenScores) -> dict[str, Any]:
    return {"logprobs": dict(s.logprobs), "tokens_in": s.tokens_in, "seconds": s.seconds}


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def valid_value(kind: str, v: Any) -> bool:
    """Whether ``v`` is an answer of ``kind`` in the form the readers expect (see the module doc)."""
    if not isinstance(v, dict) or not _count(v.get("tokens_in")) or not _finite(v.get("seconds")):
        return False
    if kind == "chat":
        return isinstance(v.get("text"), str) and _count(v.get("tokens_out"))
    lp = v.get("logprobs")
    return isinstance(lp, dict) and all(isinstance(k, str) and (x is None or _finite(x)) for k, x in lp.items())


class CachedBackend:
    """Any ``Backend`` behind a ``ResponseCache`` (or none), counting into ``GenerationStats``.

    It is itself a ``Backend`` (same ``kind``, ``supports_logprobs`` and ``identity``)."""

    def __init__(self, backend: Backend, cache: ResponseCache | None | bool = None,
                 stats: GenerationStats | None = None, chunk_size: int | None = None,
                 namespace: dict[str, Any] | None = None) -> None:
        self.backend = backend
        self.namespace = dict(namespace or {})
        # an empty ResponseCache is falsy (__len__): test for the off values explicitly
        self.cache = None if cache is None or cache is False else cache
        self.stats = stats if stats is not None else GenerationStats()
        size = chunk_size or getattr(backend, "batch_size", None) or 32
        self.chunk_size = max(1, int(size))
        self._identity: dict[str, Any] | None = None

    @property
    def kind(self) -> str:  # type: ignore[override]
        return self.backend.kind

    @property
    def supports_logprobs(self) -> bool:  # type: ignore[override]
        return bool(self.backend.supports_logprobs)

    @property
    def supports_prefill(self) -> bool:
        """Whether a chat may end with a partial assistant message that the model continues."""
        return bool(getattr(self.backend, "supports_prefill", False))

    def identity(self) -> dict[str, Any]:
        if self._identity is None:
            self._identity = dict(self.backend.identity())
        return self._identity

    def chat(self, chats: list[Chat], decoding: Decoding) -> list[Completion]:
        settings = decoding.as_dict()
        out = self._run(
            chats, "chat", settings,
            lambda todo: self.backend.chat(todo, decoding), _completion_value,
            lambda v: Completion(text=v["text"], tokens_in=int(v["tokens_in"]), tokens_out=int(v["tokens_out"]),
                                 seconds=float(v["seconds"]), cached=True))
        return out  # type: ignore[return-value]

    def next_token_logprobs(self, chats: list[Chat], labels: tuple[str, ...]) -> list[NextTokenScores]:
        labels = tuple(labels)
        out = self._run(
            chats, "logprobs", list(labels),
            lambda todo: self.backend.next_token_logprobs(todo, labels), _scores_value,
            lambda v: NextTokenScores(logprobs={k: (None if x is None else float(x)) for k, x in v["logprobs"].items()},
                                      tokens_in=int(v["tokens_in"]), seconds=float(v["seconds"]), cached=True))
        return out  # type: ignore[return-value]

    def _run(self, chats: list[Chat], kind: str, settings: Any, call: Any, to_value: Any, from_value: Any) -> list[Any]:
        if self.cache is None:
            answers = list(call(list(chats))) if chats else []
            for a in answers:
                self.stats.add(a)
            return answers
        ident = self.identity()
        keys = [request_key(ident, kind, chat, settings, self.namespace) for chat in chats]
        hits = self.cache.get_many(keys)
        for key in [k for k, v in hits.items() if not valid_value(kind, v)]:
            warnings.warn(f"response cache {self.cache.path}: entry {key[:16]} cannot be read "
                          f"(not a {kind} answer); asking the model again", stacklevel=2)
            del hits[key]
        results: dict[str, Any] = {}
        missing: dict[str, Chat] = {}  # key -> chat, each asked once, in first-seen order
        for key, chat in zip(keys, chats):
            if key not in hits and key not in missing:
                missing[key] = chat
        todo = list(missing.items())
        for i in range(0, len(todo), self.chunk_size):
            part = todo[i:i + self.chunk_size]
            answers = list(call([chat for _, chat in part]))
            if len(answers) != len(part):
                raise RBenchError(f"backend {self.kind!r} returned {len(answers)} answers for {len(part)} requests")
            # only answers of the expected form are stored (validated before cached)
            self.cache.put_many(kind, [(key, to_value(a)) for (key, _), a in zip(part, answers)
                                       if valid_value(kind, to_value(a))])
            for (key, _), a in zip(part, answers):
                results[key] = a
                self.stats.add(a)
        out = []
        fresh_used: set[str] = set()
        for key in keys:
            if key in results and key not in fresh_used:
                fresh_used.add(key)
                out.append(results[key])
            else:  # a stored answer, or a duplicate of one asked in this call
                value = hits[key] if key in hits else to_value(results[key])
                answer = from_value(value)
                self.stats.add(answer)
                out.append(answer)
        return out

    def close(self) -> None:
        try:
            self.backend.close()
        finally:
            if self.cache is not None:
                self.cache.close()
