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
# pyproject.toml's [tool.rbench.layers]. The layers are the folders of rbench/ (and a few single
# modules at its top): a module's place is its folder, so a new module inside a folder needs no
# edit there; a new folder or top-level module must be given a place (that is the point of listing).
_TABLE = tomllib.loads((ROOT.parent / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["rbench"]["layers"]
ORDER: tuple[str, ...] = tuple(_TABLE["order"])
INNER: tuple[str, ...] = tuple(_TABLE["inner"])
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


def folder(name: str) -> str:
    """A module's place in the layer order: its folder under rbench/ (``rbench.engine.kernels.gemm``
    -> ``rbench.engine``), or itself for a module at the top (``rbench.api``, ``rbench``)."""
    return ".".join(name.split(".")[:2])


def inside(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def upward_imports(edges: dict[str, set[str]], order: tuple[str, ...]) -> list[str]:
    """Every import from a folder to a folder above it (a package's own faces excepted: Python runs
    them first whatever the order)."""
    place = {f: k for k, f in enumerate(order)}
    return sorted(f"{a} ({folder(a)}) -> {b} ({folder(b)})" for a, targets in edges.items() for b in targets
                  if place[folder(b)] > place[folder(a)] and b not in package_parents(a))


def inner_escapes(edges: dict[str, set[str]], inner: tuple[str, ...]) -> list[str]:
    """Every import from a sub-package that ``inner`` puts below its folder to the rest of that folder."""
    return sorted(f"{a} -> {b}" for sub in inner for a, targets in edges.items() if inside(a, sub)
                  for b in targets if folder(b) == folder(sub) and not inside(b, sub) and b not in package_parents(a))


def test_every_folder_has_a_place_and_every_place_exists():
    edges = graph()
    unplaced = sorted({folder(m) for m in edges} - set(ORDER))
    assert not unplaced, f"give these folders or modules a place in pyproject.toml's [tool.rbench.layers] order: {unplaced}"
    stale = sorted(set(ORDER) - {folder(m) for m in edges})
    assert not stale, f"[tool.rbench.layers] order names no folder or module of rbench/: {stale}"
    assert len(set(ORDER)) == len(ORDER), "a folder is listed twice in [tool.rbench.layers] order"
    assert set(INNER) <= set(edges) and all(folder(sub) != sub for sub in INNER), f"inner names no sub-package: {INNER}"


def test_no_import_goes_up_between_folders():
    found = upward_imports(graph(), ORDER)
    assert not found, "imports that run back up between folders: " + "; ".join(found)


def test_the_sub_packages_below_their_folder_import_nothing_else_of_it():
    found = inner_escapes(graph(), INNER)
    assert not found, "inner sub-packages that import the rest of their folder: " + "; ".join(found)


def test_the_layer_checks_see_a_planted_upward_import():
    """The checks themselves: an engine module importing the runner, a kernel importing the engine
    (both planted in a copy of the real graph) and a circle inside one folder are each found."""
    edges = {a: set(b) for a, b in graph().items()}
    assert not upward_imports(edges, ORDER)
    edges["rbench.engine.metrics"].add("rbench.run.runner")
    assert upward_imports(edges, ORDER) == ["rbench.engine.metrics (rbench.engine) -> rbench.run.runner (rbench.run)"]
    edges = {a: set(b) for a, b in graph().items()}
    edges["rbench.engine.kernels.gemm"].add("rbench.engine.metrics")
    assert inner_escapes(edges, INNER) == ["rbench.engine.kernels.gemm -> rbench.engine.metrics"]
    edges = {a: set(b) for a, b in graph().items()}
    assert not circles(without_parents(edges))
    edges["rbench.engine.metrics"].add("rbench.engine.scorers")
    edges["rbench.engine.scorers"].add("rbench.engine.metrics")
    assert ["rbench.engine.metrics", "rbench.engine.scorers"] in circles(without_parents(edges))


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
    path.write_text("def f():\n    from rbench.engine.scan import scan\n    from rbench import plugin, evaluate\n")
    assert rbench_imports(path, known) == {"rbench.engine.scan", "rbench.plugin", "rbench"}


def test_the_plugin_toolkit_keeps_its_old_evaluate_name_as_a_deprecated_alias_of_scan():
    """A third-party plugin written against ``rbench.plugin.evaluate`` (renamed ``scan``, issue 43)
    keeps running and is told the new name; the old name is no public name any more."""
    import rbench.plugin as plugin

    with pytest.warns(DeprecationWarning, match=r"rbench\.plugin\.scan"):
        assert plugin.evaluate is plugin.scan
    assert "scan" in plugin.__all__ and "evaluate" not in plugin.__all__
    with pytest.raises(AttributeError):
        plugin.no_such_name  # noqa: B018


def test_no_task_module_is_found_by_a_string():
    for path in [*ROOT.glob("tasks/**/*.py"), ROOT / "run" / "runner.py"]:
        text = path.read_text(encoding="utf-8")
        assert "import_module" not in text, f"{path}: modules are imported, never looked up by name"
