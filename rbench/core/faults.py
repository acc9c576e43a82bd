"""A ranker's fault named as the ranker's: which ranker, which call, what went wrong (one line).

rbench runs code it did not write (built-in and third-party ranker plugins). An exception raised
inside that code, or a breach of the contract the harness checks by using it (a missing
``config`` attribute), used to end as rbench's own "internal error" with a traceback and exit 1,
which sends the user to rbench's bug tracker for a ranker's bug. ``ranker_fault`` tells the two
apart from the traceback alone, so no call site needs wrapping (issue 42):

- **raised inside ranker code**: the outermost frame of the traceback that runs a method of the
  ranker contract (``CALLS``: ``fit``, ``index``, ``score``, ``encode_pool``, ``encode_queries``,
  ``__init__``, ``config``) on a ranker object (``self`` has ``score`` or ``encode_queries``)
  whose class lives outside rbench's own package. Writing into the read-only arrays the engine
  hands over (``ValueError: assignment destination is read-only``) is one such exception.
- **a contract attribute missing**: an ``AttributeError`` whose object is a ranker
  (``exc.obj``, Python 3.10+).

The CLI prints the line and exits 2 (a fault the user can act on: fix or report the ranker);
``--debug`` prints the traceback first. Anything else stays an internal error.
"""

from __future__ import annotations

import traceback
from typing import Any

CALLS = ("fit", "index", "score", "encode_pool", "encode_queries", "__init__", "config")
HARNESS = ("rbench.",)  # rbench's own modules: a frame there is the harness's code, not a ranker's


def is_ranker(obj: Any) -> bool:
    """Whether ``obj`` looks like a ranker object (the contract's scoring methods)."""
    return not isinstance(obj, type) and (callable(getattr(obj, "score", None))
                                           or callable(getattr(obj, "encode_queries", None)))


def ranker_label(obj: Any) -> str:
    """The ranker's registered name (its class's ``name``), else its class name."""
    name = getattr(type(obj), "name", None)
    return name if isinstance(name, str) and name else type(obj).__name__


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if len(text) > 300:
        text = text[:297] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def ranker_fault(exc: BaseException) -> str | None:
    """One line naming the ranker, the call and the cause when ``exc`` is a ranker's fault (see
    the module doc), else None."""
    for frame, _ in traceback.walk_tb(exc.__traceback__):
        module = str(frame.f_globals.get("__name__", ""))
        if module.startswith(HARNESS) or module == "rbench":
            continue
        call = frame.f_code.co_name
        obj = frame.f_locals.get("self")
        if call in CALLS and obj is not None and is_ranker(obj):
            return (f"ranker {ranker_label(obj)!r} failed in {call}(): {_one_line(exc)} "
                    f"(a fault of the ranker's code, not of rbench; --debug shows where)")
    obj = getattr(exc, "obj", None) if isinstance(exc, AttributeError) else None
    if obj is not None and is_ranker(obj):
        missing = getattr(exc, "name", None) or "an attribute"
        return (f"ranker {ranker_label(obj)!r} lacks {missing!r}, which the harness reads (the contract: name, "
                f"version, config, fit, index, score; see docs/guides/write-a-ranker.md)")
    return None
