"""Finding, describing and building rankers: the ``rbench.rankers`` entry-point group, a class in a
file or module (``path.py:Class``, ``pkg.mod:Class``), a class or an object handed in from Python.

Built-in rankers register there exactly like third-party ones, so there is one way in. Loading an
entry point imports only the plugin module; plugins keep heavy imports (torch, RecBole,
transformers) inside their methods so that listing rankers stays instant. The contract a ranker
meets (``Ranker``, ``RankerTraits``) and its base class (``BaseRanker``) are in ``rbench.api``;
this module only reads them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from rbench.api import AnyRanker, NoOptions, RunContext
from rbench.core.config import build_config
from rbench.core.errors import RBenchError, unknown

GROUP = "rbench.rankers"


def needs_training(cls: type, config: Any) -> bool:
    """``BaseRanker.needs_training`` of any ranker class: a class without it that has a ``fit``
    is taken to train (refused on a test-only task rather than fitted on nothing)."""
    declared = getattr(cls, "needs_training", None)
    if callable(declared):
        return bool(declared(config))
    return callable(getattr(cls, "fit", None))


def _entry_points() -> dict[str, Any]:
    eps: dict[str, Any] = {}
    for ep in entry_points(group=GROUP):
        eps.setdefault(ep.name, ep)
    return eps


def _load_entry_point(ep: Any) -> Any:
    """``ep.load()``, with the working folder unable to hide the plugin's package: ``python -m``,
    ``python -c`` and notebooks put the working folder first on ``sys.path``, so a user's
    ``rankers.py`` there would be imported in place of a plugin package named ``rankers`` (the
    built-in rankers install as ``rbench_rankers`` so that no such file can take them). When
    the package is not imported yet it is imported with the working folder off the path; when
    the user's module already took its name, that is said in one line."""
    import importlib.util
    import os
    import sys

    module = str(getattr(ep, "module", "") or str(getattr(ep, "value", "")).partition(":")[0])
    top = module.partition(".")[0]
    if "." not in module or not top:
        return ep.load()
    loaded = sys.modules.get(top)
    if loaded is not None:
        if not hasattr(loaded, "__path__"):
            raise RBenchError(f"ranker plugin {ep.name!r} lives in the package {top!r}, but {top!r} is the module "
                              f"{getattr(loaded, '__file__', top)}: rename that file")
        return ep.load()
    cwd = os.path.realpath(os.getcwd())
    here = [p for p in sys.path if os.path.realpath(p or ".") == cwd]
    found = importlib.util.find_spec(top)
    if not here or (found is not None and found.submodule_search_locations is not None):
        return ep.load()
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if p not in here]
    try:
        return ep.load()
    finally:
        sys.path[:] = saved


BUILT_IN_DIST = "rbench"  # the distribution the shipped rankers (rankers/, installed as rbench_rankers) come with


def available_rankers(built_in_only: bool = False) -> list[str]:
    """The registered rankers' names; ``built_in_only``: those that ship with rbench, not a third
    party's plugin installed beside it (the docs list only those unless asked: a build must not
    present someone else's plugin as shipped)."""
    eps = _entry_points()
    return sorted(n for n, ep in eps.items() if not built_in_only or _dist_name(ep) == BUILT_IN_DIST)


def _dist_name(ep: Any) -> str:
    dist = getattr(ep, "dist", None)
    return str(getattr(dist, "name", "") or "")


def load_ranker_class(name: str) -> type:
    eps = _entry_points()
    if name not in eps:
        raise unknown("ranker", name, eps)
    ep = eps[name]
    try:
        cls = _load_entry_point(ep)
    except ImportError as exc:
        raise RBenchError(
            f"ranker {name!r} needs a package that is not installed ({exc}); "
            f"install the matching extra, e.g. pip install 'rbench[recsys]' / '[dense]' / '[lranker]'"
        ) from exc
    except Exception as exc:  # a broken plugin (a wrong class name, an error at import): name it
        raise RBenchError(f"ranker plugin {name!r} ({getattr(ep, 'value', ep)}) cannot be loaded: "
                          f"{type(exc).__name__}: {' '.join(str(exc).split())}") from exc
    if not isinstance(cls, type):
        raise RBenchError(f"ranker plugin {name!r} ({getattr(ep, 'value', ep)}) is not a class")
    return cls


@dataclass(frozen=True)
class RankerRef:
    """A ranker resolved once: the name its records are filed under, its class, where it came
    from (``entry-point``, ``file:/abs/path.py:Class``, ``module:pkg.mod:Class``, ``object``)
    and, for a ready-made object handed in from Python, the object itself."""

    name: str
    cls: type
    source: str
    instance: AnyRanker | None = None


def _is_ranker_class(cls: Any) -> bool:
    return isinstance(cls, type) and (callable(getattr(cls, "score", None))
                                      or callable(getattr(cls, "encode_pool", None)))


def _class_name(cls: type) -> str:
    name = str(getattr(cls, "name", "") or cls.__name__)
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in name) or "ranker"


def _load_from(spec: str) -> RankerRef:
    """``path/to/file.py:Class`` or ``pkg.module:Class``: a ranker class that is not installed."""
    import importlib
    import importlib.util
    import sys

    where, _, attr = spec.rpartition(":")
    path = Path(where).expanduser()
    try:
        if where.endswith(".py") or path.is_file():
            if not path.is_file():
                raise RBenchError(f"--ranker {spec}: no such file {where}")
            mod_name = f"rbench_user_{path.stem}_{abs(hash(str(path.resolve()))) % 10**8}"
            mspec = importlib.util.spec_from_file_location(mod_name, path)
            if mspec is None or mspec.loader is None:
                raise RBenchError(f"--ranker {spec}: {where} cannot be imported as a Python file")
            module = importlib.util.module_from_spec(mspec)
            sys.modules[mod_name] = module  # dataclasses and pickling look modules up by name
            mspec.loader.exec_module(module)
            source = f"file:{path.resolve()}:{attr}"
        else:
            module = importlib.import_module(where)
            source = f"module:{where}:{attr}"
    except RBenchError:
        raise
    except SystemExit as exc:  # sys.exit() in the file would end rbench silently (exit 0): say so
        raise RBenchError(f"--ranker {spec}: ranker file {where} exited while being imported "
                          f"(sys.exit({exc.code!r})); a ranker file must only define its classes") from exc
    except ImportError as exc:
        raise RBenchError(f"--ranker {spec}: cannot import {where} ({exc})") from exc
    except Exception as exc:  # an error while running the file: name it, one line
        raise RBenchError(f"--ranker {spec}: {where} failed to import: {type(exc).__name__}: "
                          f"{' '.join(str(exc).split())}") from exc
    cls = getattr(module, attr, None)
    if cls is None:
        names = [n for n, v in vars(module).items() if _is_ranker_class(v)]
        raise unknown(f"ranker class in {where}", attr, names)
    if not _is_ranker_class(cls):
        raise RBenchError(f"--ranker {spec}: {attr} is not a ranker class (it needs score() or "
                          f"encode_pool()/encode_queries(); see docs/guides/write-a-ranker.md)")
    return RankerRef(_class_name(cls), cls, source)


def resolve_ranker(ranker: str | type | AnyRanker) -> RankerRef:
    """A registered name, ``file.py:Class`` / ``module:Class``, a ranker class or a ranker object
    (anything with ``score`` or ``encode_pool``/``encode_queries``) as one ``RankerRef``."""
    if isinstance(ranker, str):
        if ":" in ranker and ranker not in _entry_points():
            return _load_from(ranker)
        return RankerRef(ranker, load_ranker_class(ranker), "entry-point")
    if isinstance(ranker, type):
        if not _is_ranker_class(ranker):
            raise RBenchError(f"{ranker.__name__} is not a ranker class (it needs score() or "
                              f"encode_pool()/encode_queries())")
        return RankerRef(_class_name(ranker), ranker, f"class:{ranker.__module__}.{ranker.__qualname__}")
    if _is_ranker_class(type(ranker)):
        missing = [m for m in ("fit", "index") if not callable(getattr(ranker, m, None))]
        if not callable(getattr(ranker, "encode_pool", None)) and missing:
            raise RBenchError(f"ranker object {type(ranker).__name__} lacks {' and '.join(m + '()' for m in missing)} (the contract: "
                              f"fit(task), index(pool), score(queries, candidates); see docs/guides/write-a-ranker.md)")
        return RankerRef(_class_name(type(ranker)), type(ranker), "object", instance=ranker)
    raise RBenchError(f"not a ranker: {type(ranker).__name__} (give a registered name, file.py:Class, "
                      f"a ranker class or an object with score())")


def ranker_options(cls: type) -> list[dict[str, Any]]:
    """Each option of ``cls``'s ``Config``: name, type, default and, for a number, its declared
    range in words (``rbench.core.ranges``; '' when it declares none)."""
    import typing

    from rbench.core.ranges import numeric_kind, type_text

    cfg_cls = getattr(cls, "Config", NoOptions)
    try:
        hints = typing.get_type_hints(cfg_cls, include_extras=True)
    except Exception:  # a plugin's annotation that does not resolve: shown as written
        hints = {}
    out = []
    for f in dataclasses.fields(cfg_cls):
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else None
        )
        kind, rng = numeric_kind(hints.get(f.name))
        shown = type_text(hints[f.name]) if kind is not None else str(f.type)
        out.append({"name": f.name, "type": shown, "default": default,
                    "range": (rng.text(kind is int) if rng is not None else "") if kind is not None else ""})
    return out


def describe_ranker(cls: type) -> dict[str, Any]:
    """What ``rbench rankers --json`` prints of a ranker class and its generated docs page shows:
    version, one-line description (its ``description``, else its docstring's first line), domains,
    options, and where declared its presets, ``pairwise`` and a generative ranker's prompt on a
    two-candidate example. One place, so the listing and the docs cannot differ."""
    doc = (cls.__doc__ or "").strip().split("\n")[0]
    presets = getattr(cls, "presets", None)
    example = getattr(cls, "prompt_example", None)
    return {"version": getattr(cls, "version", ""), "description": getattr(cls, "description", "") or doc,
            "domains": list(getattr(cls, "domains", ())), "options": ranker_options(cls),
            **({"presets": presets} if presets else {}),
            **({"pairwise": True} if getattr(cls, "pairwise", False) else {}),
            **({"prompt": example()} if callable(example) else {})}


def ranker_config(cls: type, overrides: dict[str, Any] | None = None, name: str = "") -> Any:
    """The typed options of ranker class ``cls``: its ``Config`` with ``--set`` overrides checked
    and parsed (the defaults when there are none). A class that declares no options is told how
    to declare them, instead of an empty list of the options it has."""
    owner = f"ranker {name or getattr(cls, 'name', cls.__name__)!r}"
    options = getattr(cls, "Config", NoOptions)
    if overrides and not dataclasses.fields(options):
        given = ", ".join(f"{k}={v}" for k, v in overrides.items())
        raise RBenchError(f"{owner} takes no options (--set {given}): --set sets the fields of the ranker class's "
                          f"Config dataclass, and {cls.__name__} declares none; see 'Typed options' in "
                          f"docs/guides/write-a-ranker.md")
    return build_config(options, overrides, owner=owner)


def _accepted(cls: type) -> set[str]:
    """Which of ``config`` and ``context`` ``cls``'s ``__init__`` takes: a plain class with no
    ``__init__`` of its own (README's ``LastItemMarkov``) takes neither."""
    import inspect

    wanted = {"config", "context"}
    try:
        params = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):  # no signature to read (a C type): build it the plugin way
        return wanted
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return wanted
    return wanted & {p.name for p in params if p.kind is not p.POSITIONAL_ONLY}


def build_ranker(cls: type, config: Any, context: RunContext | None, name: str = "") -> AnyRanker:
    """An instance of ranker class ``cls``: with its typed options and run context as far as its
    ``__init__`` takes them (by keyword), without when it takes neither. An error its ``__init__`` raises (a
    missing GPU, a bad option it checks itself) is the user's to fix: one line naming it."""
    label = name or getattr(cls, "name", "") or cls.__name__
    try:
        given = {"config": config, "context": context}
        built: AnyRanker = cls(**{k: v for k, v in given.items() if k in _accepted(cls)})
        return built
    except ValueError as exc:
        raise RBenchError(f"ranker {label!r} could not be built: {type(exc).__name__}: "
                          f"{' '.join(str(exc).split())}") from exc


def default_config(cls: type, context: RunContext | None = None) -> dict[str, Any]:
    """What the protocol's ``config`` of a ranker built with default options reports: the
    reference a run's own ``config`` is compared with to find its non-default options."""
    return dict(build_ranker(cls, ranker_config(cls), context).config or {})


def make_ranker(name: str, overrides: dict[str, Any] | None = None,
                context: RunContext | None = None) -> AnyRanker:
    """Instantiate ranker ``name`` with ``--set`` overrides checked against its ``Config``."""
    cls = load_ranker_class(name)
    return build_ranker(cls, ranker_config(cls, overrides, name), context, name)
