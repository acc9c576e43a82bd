"""Small builders shared by tests: synthetic pools, queries and table-driven rankers."""

from __future__ import annotations

import hashlib
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

from rbench.api import BaseRanker, Pool, Queries, Ragged


def make_pool(n: int, prefix: str = "d") -> Pool:
    ids = np.array([f"{prefix}{i}" for i in range(n)], dtype=object)
    return Pool(ids=ids, texts=np.array([f"text {i}" for i in range(n)], dtype=object), name="synthetic",
                fingerprint=f"synthetic-{n}")


def make_queries(positives: list[list[int]], grades: list[list[float]] | None = None,
                 exclude: list[list[int]] | None = None, candidates: np.ndarray | None = None) -> Queries:
    n = len(positives)
    grades = grades or [[1.0] * len(p) for p in positives]
    return Queries(
        ids=np.array([f"q{i}" for i in range(n)], dtype=object),
        texts=[f"query {i}" for i in range(n)],
        positives=Ragged.from_rows(positives),
        grades=Ragged.from_rows(grades, dtype=np.float64),
        exclude=Ragged.from_rows(exclude) if exclude is not None else None,
        candidates=candidates,
    )


class TableRanker(BaseRanker):
    """Scores looked up in a fixed (n_queries, pool) table, keyed by query id."""

    name = "table"
    version = "test"

    def __init__(self, table: np.ndarray) -> None:
        super().__init__()
        self.table = table
        self.calls = 0

    def score(self, queries: Queries, candidates: np.ndarray) -> np.ndarray:
        self.calls += 1
        rows = np.array([int(q[1:]) for q in queries.ids])
        if candidates.ndim == 1:
            return self.table[np.ix_(rows, candidates)]
        return np.take_along_axis(self.table[rows], candidates, axis=1)


def engine_scorer(ranker):
    """A ranker's ``score`` as if it were the engine's own scorer (``harness_scores``): scanned
    chunk by chunk and shard by shard like the dense path, for tests of the scan's mechanics (a
    ranker's own ``score`` is scored over whole rows instead)."""

    def score(queries: Queries, candidates: np.ndarray) -> np.ndarray:
        return ranker.score(queries, candidates)

    from rbench.engine.scorers import Scorer

    return Scorer(score, harness_scores=True)


def table_scorer(table: np.ndarray):
    """``engine_scorer`` of a ``TableRanker``."""
    return engine_scorer(TableRanker(table))


def with_downloads(monkeypatch, name: str, files) -> None:
    """Point built-in task ``name``'s download files at ``files`` (e.g. a loopback server)."""
    import dataclasses

    from rbench.api import Source
    from rbench.tasks import registry

    task = registry.BUILTIN[name]
    spec = dataclasses.replace(task.spec, sources=(Source("test files", "http://127.0.0.1/", "test",
                                                          files=tuple(files)),))
    monkeypatch.setitem(registry.BUILTIN, name, dataclasses.replace(task, spec=spec))


def cli(capsys, *args) -> tuple[int, str, str]:
    """Run ``rbench ARGS`` in-process: (exit code, stdout, stderr)."""
    from rbench.cli.app import main

    code = main(list(args))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def one_line(err: str) -> str:
    """The one line a user error prints on stderr (no traceback, no internal error, no Abort)."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err and "internal error" not in err and "Abort" not in err, err
    return lines[0]


class Server:
    """A loopback HTTP server with Range support and scripted failures (cut bodies, no length,
    chunked, no validator, ignored Range), for download tests that never touch the network."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.cut: dict[str, list[int]] = {}  # path -> byte counts after which to drop the connection
        self.ignore_range: set[str] = set()
        self.no_validator: set[str] = set()
        self.no_length: set[str] = set()  # no Content-Length: the body ends when the connection closes
        self.chunked: set[str] = set()  # Transfer-Encoding: chunked (its last chunk marks the end)
        self.log: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_HEAD(self) -> None:  # noqa: N802  (the size shown before `download --all`)
                server.log.append({"path": self.path, "method": "HEAD"})
                if self.path not in server.files:
                    self.send_error(404)
                    return
                self.send_response(200)
                if self.path not in server.no_length:
                    self.send_header("Content-Length", str(len(server.files[self.path])))
                self.end_headers()

            def do_GET(self) -> None:  # noqa: N802
                path = self.path
                server.log.append({"path": path, "range": self.headers.get("Range"),
                                   "if_range": self.headers.get("If-Range")})
                if path not in server.files:
                    self.send_error(404)
                    return
                body = server.files[path]
                etag = '"' + hashlib.sha1(body).hexdigest() + '"'
                start, status = 0, 200
                rng = self.headers.get("Range")
                if rng and path not in server.ignore_range:
                    if_range = self.headers.get("If-Range")
                    if if_range is None or if_range == etag:
                        start = int(rng.split("=")[1].split("-")[0])
                        if start >= len(body):
                            self.send_response(416)
                            self.send_header("Content-Range", f"bytes */{len(body)}")
                            self.end_headers()
                            return
                        status = 206
                chunked = path in server.chunked
                if chunked:
                    self.protocol_version = "HTTP/1.1"
                self.send_response(status)
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
                if chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                    self.send_header("Connection", "close")
                elif path not in server.no_length:
                    self.send_header("Content-Length", str(len(body) - start))
                if path not in server.no_validator:
                    self.send_header("ETag", etag)
                    self.send_header("Accept-Ranges", "bytes")
                self.end_headers()
                payload = body[start:]
                cuts = server.cut.get(path)
                n = cuts.pop(0) if cuts else None
                data = payload if n is None else payload[:n]
                if chunked:
                    for i in range(0, len(data), 1000):
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(data[i:i + 1000]), data[i:i + 1000]))
                    if n is None:
                        self.wfile.write(b"0\r\n\r\n")
                else:
                    self.wfile.write(data)
                if n is not None:
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02},
                                       daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"

    def requests_for(self, path: str) -> list[dict]:
        return [r for r in self.log if r["path"] == path]


def fused_and_reference(monkeypatch, *args, **kw):
    """``scan(*args, **kw)`` through the engine's numpy passes (``RBENCH_FUSED=0``, the
    reference) and through the fused kernels: (reference, fused)."""
    from rbench.engine.scan import scan

    monkeypatch.setenv("RBENCH_FUSED", "0")
    ref = scan(*args, **kw)
    monkeypatch.setenv("RBENCH_FUSED", "1")
    return ref, scan(*args, **kw)


def assert_same_eval(ref, got) -> None:
    """Two EvalResults identical in every rank count, n_ranked and the top-k (indices and scores)."""
    for name in ("higher", "equal", "n_ranked", "topk_index", "topk_score"):
        np.testing.assert_array_equal(getattr(got, name), getattr(ref, name), err_msg=name)
    np.testing.assert_array_equal(got.ranks.values, ref.ranks.values)


def assert_shards_merge(monkeypatch, ranker, queries, pool, ranges, **kw) -> None:
    """Each shard (pool_range) gives the same result fused and through the numpy passes, and the
    shards merge into the whole scan's ranks and top-k."""
    from rbench.engine.scan import merge, scan

    whole = scan(ranker, queries, pool, **kw)
    parts = []
    for pool_range in ranges:
        ref, got = fused_and_reference(monkeypatch, ranker, queries, pool, pool_range=pool_range, **kw)
        assert_same_eval(ref, got)
        parts.append(got)
    merged = merge(parts)
    np.testing.assert_array_equal(merged.topk_index, whole.topk_index)
    np.testing.assert_array_equal(merged.ranks.values, whole.ranks.values)
