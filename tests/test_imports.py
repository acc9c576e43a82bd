"""The import graph of ``rbench``: no circles, no upward imports, nothing found by strings.

The graph is read from the source (``ast``), so imports inside functions count as much as the
ones at the top of a file: a lazy import that closes a circle is still a circle, it only fails
later. Importing ``pkg.mod`` also runs ``pkg/__init__.py``, so package faces get an edge too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "rbench"

# Layers from the bottom up: a module may import modules of its own layer or of lower ones.
# A new module must be given a layer here; that is the point of listing them.
LAYERS: list[tuple[str, ...]] = [
    ("rbench.core", "rbench.engine", "rbench.engine.kernels", "rbench.results", "rbench.run", "rbench.cli",
     "rbench.tasks", "rbench.tasks.families",  # the package faces: docstrings only
     "rbench.api", "rbench.engine.kernels.gemm", "rbench.engine.kernels.fused", "rbench.core.errors",
     "rbench.core.paths", "rbench.core.hashing", "rbench.results.significance", "rbench.core.atomic",
     "rbench.core.inputs", "rbench.core.console", "rbench.core.markdown", "rbench.core.protocol"),
    ("rbench.core.config", "rbench.tasks.columns", "rbench.engine.metrics", "rbench.engine.sharded",
     "rbench.engine.fused"),
    ("rbench.engine.evaluate", "rbench.engine.embeddings", "rbench.engine.plugins", "rbench.tasks.family",
     "rbench.tasks.kit"),
    ("rbench.tasks.families.amazon", "rbench.engine.ann", "rbench.engine.distributed", "rbench.engine.runfile"),
    ("rbench.tasks.families.recsys", "rbench.tasks.families.passages", "rbench.tasks.families.routing",
     "rbench.tasks.families.imported", "rbench.tasks.store", "rbench.tasks.sources", "rbench.tasks.pools"),
    ("rbench.tasks.registry", "rbench.results.record", "rbench.engine.rerank", "rbench.results.outputs"),
    ("rbench.results.budget", "rbench.run.runner", "rbench.results.leaderboard", "rbench.results.plots",
     "rbench.cli.data", "rbench.results.report"),
    ("rbench.public",),
    ("rbench.results.reproduce",),
    ("rbench.cli.app", "rbench.cli.__main__", "rbench"),  # the package face re-exports the public API
]


def module_files() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Every rbench module ``name`` imports, anywhere in the file (plus the packages whose
    ``__init__`` such an import runs)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*parts, *([base] if base else [])])
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        for target in targets:
            parts = target.split(".")
            for k in range(1, len(parts) + 1):
                prefix = ".".join(parts[:k])
                if prefix in known and prefix != name and prefix.startswith("rbench"):
                    found.add(prefix)
    return found


def graph() -> dict[str, set[str]]:
    files = module_files()
    known = set(files)
    return {name: imports_of(name, path, known) for name, path in files.items()}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def package_parents(name: str) -> set[str]:
    parts = name.split(".")
    return {".".join(parts[:k]) for k in range(1, len(parts))}


def test_the_reader_sees_function_level_imports_and_circles():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(edges) == [["a", "b", "c"]]
    tree = graph()
    assert "rbench.tasks.store" in tree["rbench.tasks.registry"]  # imported inside load(), still an edge


def without_parents(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph less each module's edges to its own packages: Python runs a package's
    ``__init__`` before any of its modules, so a package face that imports its modules (``rbench``
    re-exporting ``rbench.public``) closes no circle at import time, while any other loop does."""
    return {a: {b for b in targets if b not in package_parents(a)} for a, targets in edges.items()}


def test_no_import_circles():
    found = circles(without_parents(graph()))
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)


def test_every_module_has_a_layer_and_no_import_goes_up():
    layer = {m: k for k, names in enumerate(LAYERS) for m in names}
    edges = graph()
    unplaced = sorted(set(edges) - set(layer))
    assert not unplaced, f"give these modules a layer in tests/test_imports.py: {unplaced}"
    upward = [f"{a} (layer {layer[a]}) -> {b} (layer {layer[b]})" for a, targets in edges.items()
              for b in targets if layer[b] > layer[a] and b not in package_parents(a)]
    assert not upward, "upward imports: " + "; ".join(sorted(upward))


def test_the_contract_imports_no_task_module_and_rbench_never_imports_the_plugins():
    edges = graph()
    assert not {m for m in edges["rbench.api"] if m.startswith("rbench.tasks")}
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "rankers":
                pytest.fail(f"{path} imports the rankers package (plugins are found by entry points)")
            if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "rankers" for a in node.names):
                pytest.fail(f"{path} imports the rankers package (plugins are found by entry points)")


def test_no_task_module_is_found_by_a_string():
    for path in [*ROOT.glob("tasks/**/*.py"), ROOT / "run" / "runner.py"]:
        text = path.read_text(encoding="utf-8")
        assert "import_module" not in text, f"{path}: modules are imported, never looked up by name"
