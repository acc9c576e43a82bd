"""Content hashes shared by downloads, the prepared cache and task imports."""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def canonical_json(value: Any) -> str:
    """The one canonical text of a JSON-like value: keys sorted, anything else as ``str``. Every
    cache key, config hash and record comparison of rbench goes through it, so two places can
    never disagree on what "the same config" means."""
    return json.dumps(value, sort_keys=True, default=str)


def short_hash(value: Any, length: int = 64) -> str:
    """sha256 of ``canonical_json(value)``, hex, cut to ``length`` characters."""
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()[:length]


def file_sha256(path: Path) -> str:
    """sha256 of a file, read in 1 MiB blocks (never the whole file in memory)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


FULL_DIGEST_BYTES = 256 << 20
_BLOCK = 1 << 20


def file_digest(path: Path) -> str:
    """A cache's integrity digest: the whole file's sha256 up to ``FULL_DIGEST_BYTES``, beyond
    that the size plus 64 evenly spaced 1 MiB blocks (cheap on multi-GB files; any truncation
    changes the size)."""
    size = Path(path).stat().st_size
    h = hashlib.sha256(str(size).encode())
    with open(path, "rb") as fh:
        if size <= FULL_DIGEST_BYTES:
            for block in iter(lambda: fh.read(_BLOCK), b""):
                h.update(block)
        else:
            for k in range(64):
                fh.seek((size - _BLOCK) * k // 63)
                h.update(fh.read(_BLOCK))
    return h.hexdigest()


def folder_digests(folder: Path) -> dict[str, dict[str, int | str]]:
    """{relative path: {bytes, digest}} of every file under ``folder``."""
    folder = Path(folder)
    return {p.relative_to(folder).as_posix(): {"bytes": p.stat().st_size, "digest": file_digest(p)}
            for p in sorted(folder.rglob("*")) if p.is_file()}


def source_digest(cls: type) -> str:
    """sha256 of the Python source behind a ranker class, so a reviewer can tell which code gave a
    surprising row: the class's module file, or, when the module sits in a subpackage of its
    top-level package (``rbench_rankers.lranker.ranker``), every ``.py`` file of that subpackage and
    of its own subpackages (its helpers change its numbers too: ``rbench_rankers.generative``'s
    backends live in ``generative/backends/``), each named by its path relative to the subpackage.
    "" when the source is not on disk (a class built in a REPL)."""
    import inspect
    import sys

    module = sys.modules.get(cls.__module__)
    try:
        path = Path(inspect.getsourcefile(cls) or "")
    except (TypeError, OSError):
        return ""
    if not path.is_file():
        return ""
    package = (getattr(module, "__package__", None) or "").split(".")
    files = sorted(path.parent.rglob("*.py")) if len(package) > 1 else [path]
    h = hashlib.sha256()
    for f in files:
        h.update(f.relative_to(path.parent).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


# --------------------------------------------------------------------------------------------
# code digests: a version derived from the code, not remembered by a developer
# --------------------------------------------------------------------------------------------


def _without_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return tree


def _module_files(module: str) -> list[Path]:
    """The source files of a module, or of every module of a package (found without importing it)."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(module)
    origin = Path(spec.origin)
    if spec.submodule_search_locations:
        return sorted(origin.parent.glob("*.py"))
    return [origin]


def _top_level(tree: ast.Module, name: str, where: str, listed_in: str) -> ast.AST:
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return node
    raise LookupError(f"{where} has no top-level {name!r} ({listed_in} names it)")


def ast_digest(entries: Sequence[str], listed_in: str = "the digest's entries") -> str:
    """sha256 over the AST, docstrings and comments removed, of ``entries``: each a module, a
    ``module:function`` (or class), or a package (its own ``*.py``, not its subpackages).

    Why the AST: a comment or docstring edit leaves the digest alone, any change to what the code
    does moves it. It is how the evaluation protocol (``rbench.core.protocol``) and a plugin's
    cache keys (LRanker's checkpoints) derive a code version instead of relying on someone to bump
    one. The AST dump differs between Python minor versions, so a digest is one Python's."""
    h = hashlib.sha256()
    for entry in entries:
        module, _, func = entry.partition(":")
        for path in _module_files(module):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            node = _top_level(tree, func, module, listed_in) if func else tree
            h.update(f"{entry}/{path.name}\n".encode())
            h.update(ast.dump(_without_docstrings(node)).encode())
    return h.hexdigest()
