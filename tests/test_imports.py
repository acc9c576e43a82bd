"""The import graph of ``rbench``: no circles, no upward imports, nothing found by strings.

The graph is read from the source (``ast``), so imports inside functions count as much as the
ones at the top of a file: a lazy import that closes a circle is still a circle, it only fails
later. Importing ``pkg.mod`` also runs ``pkg/__init__.py``, so package faces get an edge too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1] / "rbench"

# The layers, from the bottom up, and what the ranker plugins may import: declared once, in
# pyproject.toml's [tool.rbench.layers] (a module may import modules of its own layer or of lower
# ones; a new module must be given a layer there; that is the point of listing them).
_TABLE = tomllib.loads((ROOT.parent / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["rbench"]["layers"]
LAYERS: list[tuple[str, ...]] = [tuple(names) for names in _TABLE["order"]]
PLUGIN_IMPORTS: frozenset[str] = frozenset(_TABLE["plugins"])
RANKERS = ROOT.parent / "rankers"


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


PLUGIN_PACKAGES = {"rankers", "rbench_rankers"}  # the folder, and its installed import name


def test_the_contract_imports_no_task_module_and_rbench_never_imports_the_plugins():
    edges = graph()
    assert not {m for m in edges["rbench.api"] if m.startswith("rbench.tasks")}
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PLUGIN_PACKAGES:
                pytest.fail(f"{path} imports the rankers package (plugins are found by entry points)")
            if isinstance(node, ast.Import) and any(a.name.split(".")[0] in PLUGIN_PACKAGES for a in node.names):
                pytest.fail(f"{path} imports the rankers package (plugins are found by entry points)")


def rbench_imports(path: Path, known: set[str]) -> set[str]:
    """The rbench modules a file outside rbench/ imports (``from rbench import x`` counts as
    ``rbench.x`` when x is a module, else as ``rbench``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "rbench"}
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "rbench":
            base = node.module or ""
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names}
    return found


def test_the_ranker_plugins_import_only_the_contract_and_the_toolkit():
    known = set(module_files())
    assert PLUGIN_IMPORTS <= known, f"[tool.rbench.layers] plugins names no module: {PLUGIN_IMPORTS - known}"
    files = sorted(RANKERS.rglob("*.py"))
    assert files, RANKERS
    wrong = {f"{path.relative_to(RANKERS.parent)}: {', '.join(sorted(bad))}" for path in files
             if (bad := rbench_imports(path, known) - PLUGIN_IMPORTS)}
    assert not wrong, ("ranker plugins import only " + ", ".join(sorted(PLUGIN_IMPORTS))
                       + " (re-export what they need from rbench.plugin): " + "; ".join(sorted(wrong)))


def test_the_plugin_check_sees_an_internal_import(tmp_path):
    known = set(module_files())
    path = tmp_path / "sneaky.py"
    path.write_text("def f():\n    from rbench.engine.evaluate import evaluate\n    from rbench import plugin, evaluate\n")
    assert rbench_imports(path, known) == {"rbench.engine.evaluate", "rbench.plugin", "rbench"}


def test_no_task_module_is_found_by_a_string():
    for path in [*ROOT.glob("tasks/**/*.py"), ROOT / "run" / "runner.py"]:
        text = path.read_text(encoding="utf-8")
        assert "import_module" not in text, f"{path}: modules are imported, never looked up by name"
