"""Writing a BEIR folder (corpus.jsonl, queries.jsonl, qrels/{train,dev,test}.tsv) from an outside
package's rows: what ``from_ir_datasets`` and ``from_hf`` share. The folder is then validated and
imported like any other by ``rbench.tasks.families.imported.import_beir_folder``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rbench.core.errors import DataError, RBenchError


def external_error(flag: str, ident: str, exc: BaseException) -> RBenchError:
    """A failure inside ir_datasets / datasets (no network, an unknown id) as one line."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    cause = exc.__cause__ or exc.__context__
    if cause is not None and str(cause).strip():  # datasets wraps the reason (a schema clash) in its own error
        text += f" ({type(cause).__name__}: {' '.join(str(cause).split())[:200]})"
    return RBenchError(f"{flag} {ident}: {type(exc).__name__}: {text[:500]}")


def jsonl_writer(path: Path) -> Any:
    path.parent.mkdir(parents=True, exist_ok=True)
    return open(path, "w", encoding="utf-8", newline="\n")


def json_line(obj: dict[str, Any]) -> str:
    return json.dumps(obj, ensure_ascii=False) + "\n"


def tsv_id(value: Any, where: str, row: int, field: str) -> str:
    """An id as a qrels TSV field: a tab or line break would split the line."""
    if isinstance(value, bool) or not isinstance(value, (str, int)) or str(value) == "":
        raise DataError(f"expected a non-empty string id, got {value!r}", where, row, field)
    text = str(value)
    if any(c in text for c in "\t\r\n"):
        raise DataError(f"id {text!r} holds a tab or line break", where, row, field)
    return text
