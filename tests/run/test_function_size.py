"""Every function of the engine (``rbench/engine``, kernels included) and of the run pipeline
(``rbench/run``: ``execute`` and the strategies) fits on one screen: at most ``LIMIT`` lines,
decorators and docstring included, with no list of exceptions. A function that grows past it is
split where it grows (docs/reference/development.md: the pipeline)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 60
FOLDERS = ("rbench/engine", "rbench/run")


def too_long(source: str, limit: int = LIMIT) -> list[tuple[str, int]]:
    """(name, lines) of every function or method of ``source`` longer than ``limit`` lines."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            lines = (node.end_lineno or node.lineno) - start + 1
            if lines > limit:
                out.append((node.name, lines))
    return out


def test_the_count_sees_a_long_function_and_its_decorators():
    body = "\n".join(f"    x{i} = {i}" for i in range(LIMIT - 1))
    assert too_long(f"def f():\n{body}\n") == []  # LIMIT lines: fits
    assert too_long(f"@staticmethod\ndef f():\n{body}\n") == [("f", LIMIT + 1)]
    assert too_long(f"class C:\n    def m(self):\n    {body.replace(chr(10), chr(10) + '    ')}\n        y = 0\n") \
        == [("m", LIMIT + 1)]


def test_engine_and_run_functions_fit_on_a_screen():
    files = [p for folder in FOLDERS for p in sorted((ROOT / folder).rglob("*.py"))]
    assert any(p.name == "runner.py" for p in files) and any(p.name == "scan.py" for p in files)
    long = {f"{p.relative_to(ROOT)}:{name}": n for p in files for name, n in too_long(p.read_text())}
    assert long == {}, f"functions over {LIMIT} lines (split them): {long}"
