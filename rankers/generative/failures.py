"""``rank_queries``: what a generative ranker does when a request fails (``on_failure``).

- ``abort`` (the default): the first request that fails after its retries ends the run with its
  one line (``RequestFailed``: the URL, the cause, the options to change).
- ``skip``: the queries are ranked one at a time, so that a failure belongs to one query; a query
  whose request fails is skipped: its candidates all get the score 0, which the engine's
  pessimistic tie rule ranks as a complete miss (every positive after every other candidate). A
  failure can therefore never raise a measure: a server (or a ranker behind it) that fails on
  the hard queries does not leave them out of the average. The count and the first failure are
  recorded in ``ranker_info["failures"]``; when every query of a call fails the run aborts all
  the same (a dead server is not a result). One query at a time costs the parallelism across
  queries that rankgpt and iranker use (their requests within a query still go in parallel).

A passed run deadline (``deadline_s``, ``DeadlineExceeded``) always aborts: it is a limit the user
set on the whole run, not a failure of one query.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rbench.plugin import RBenchError, RequestFailed


def rank_queries(ranker: Any, queries: list[str], docs: list[list[str]]) -> np.ndarray[Any, Any]:
    """``ranker.rank(queries, docs)`` as an ``(n, m)`` float64 array, under ``ranker.cfg.on_failure``."""
    n, m = len(queries), (len(docs[0]) if docs else 0)
    if getattr(ranker.cfg, "on_failure", "abort") != "skip":
        return np.asarray(ranker.rank(queries, docs), dtype=np.float64).reshape(n, m)
    record = ranker.info.setdefault("failures", {"on_failure": "skip", "skipped_queries": 0, "first": ""})
    out = np.zeros((n, m), dtype=np.float64)
    failed: list[str] = []
    for i in range(n):
        try:
            out[i] = np.asarray(ranker.rank(queries[i:i + 1], docs[i:i + 1]), dtype=np.float64).reshape(m)
        except RequestFailed as exc:
            failed.append(str(exc))
            out[i] = 0.0
    if failed and len(failed) == n:
        raise RBenchError(f"{ranker.name}: every one of {n} queries failed (on_failure=skip skips some, "
                          f"not all); the first: {failed[0]}")
    record["skipped_queries"] += len(failed)
    if failed and not record["first"]:
        record["first"] = failed[0]
    return out
