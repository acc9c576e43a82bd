"""The checked registry of tasks, built from the task families.

Every task is declared once, in its family's module; the registry only collects them, refuses a
name declared twice, orders them (the embedded default first, then the paper's Table 2 order, then
the rest) and resolves a name to a ``Task`` (spec + family) with a "did you mean" for unknown names.
Bring-your-own tasks (``rbench data import``) are read from disk on each lookup and never shadow
a built-in name.

Another package brings task families the way it brings rankers: through an entry point, in the
group ``rbench.tasks``, naming a ``TaskFamily`` instance (or a class, instantiated without
arguments). They are collected with the built-in families, so their tasks reach ``rbench tasks``,
``rbench run`` and the Python API; a family that cannot be loaded is skipped with one warning
naming its entry point (a broken plugin must not take every command down).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from rbench.api import Pool, TaskData, TaskSpec
from rbench.core import paths
from rbench.core.errors import RBenchError, unknown
from rbench.core.settings import DEFAULT_SEED
from rbench.tasks import fit_positives
from rbench.tasks.families import imported, passages, recsys, routing
from rbench.tasks.family import Task, TaskFamily
from rbench.tasks.sources.provenance import DataSource, read_provenance

GROUP = "rbench.tasks"  # entry-point group of third-party task families
FAMILIES: tuple[TaskFamily, ...] = (recsys.EMBEDDED, recsys.FAMILY, routing.FAMILY, passages.MSMARCO,
                                    passages.ESCI)
IMPORTED: TaskFamily = imported.FAMILY


def plugin_families() -> tuple[TaskFamily, ...]:
    """The task families other packages register in the ``rbench.tasks`` entry-point group."""
    import warnings
    from importlib.metadata import entry_points

    found: list[TaskFamily] = []
    for ep in entry_points(group=GROUP):
        try:
            obj = ep.load()
            family = obj() if isinstance(obj, type) else obj
            if not isinstance(family, TaskFamily):
                raise TypeError(f"{type(family).__name__} is not a rbench.tasks.family.TaskFamily")
            family.specs()  # a family whose specs cannot be listed is as broken as one that cannot load
        except Exception as exc:  # a third party's bug: name it, keep the other tasks working
            warnings.warn(f"task family plugin {ep.name!r} ({ep.value}) skipped: {type(exc).__name__}: "
                          f"{' '.join(str(exc).split())}", stacklevel=2)
            continue
        found.append(family)
    return tuple(found)


def _order(task: Task) -> tuple[int, int]:
    """The embedded default first, then the paper's Table 2 tasks in its order, then the other
    built-in tasks (the zero-shot targets) in declaration order."""
    spec = task.spec
    if spec.embedded:
        return (0, 0)
    return (1, spec.paper_row) if spec.paper_row is not None else (2, 0)


def build(families: tuple[TaskFamily, ...]) -> dict[str, Task]:
    """name -> Task for the families' specs; a name declared twice is an error, not a silent win."""
    found: dict[str, Task] = {}
    for family in families:
        for spec in family.specs():
            if spec.name in found:
                raise RBenchError(f"task {spec.name!r} is declared twice (families "
                                  f"{found[spec.name].family.name!r} and {family.name!r})")
            found[spec.name] = Task(spec, family)
    return dict(sorted(found.items(), key=lambda kv: _order(kv[1])))


BUILTIN: dict[str, Task] = build(FAMILIES + plugin_families())
TASKS: dict[str, TaskSpec] = {name: task.spec for name, task in BUILTIN.items()}


def register(family: TaskFamily) -> None:
    """Add a family's tasks at run time (a notebook, a third-party package). Names stay unique:
    a name that is already registered is refused, never silently replaced."""
    new = build((family,))
    clash = sorted(set(new) & set(BUILTIN))
    if clash:
        raise RBenchError(f"task {clash[0]!r} is already registered (family {BUILTIN[clash[0]].family.name!r})")
    BUILTIN.update(new)
    TASKS.update({name: task.spec for name, task in new.items()})


def paper_tasks() -> tuple[str, ...]:
    """The paper's seven tasks in the order of its Table 2."""
    return tuple(name for name, task in BUILTIN.items() if task.spec.paper_row is not None)


def _imported() -> dict[str, Task]:
    return {spec.name: Task(spec, IMPORTED) for spec in IMPORTED.specs() if spec.name not in BUILTIN}


def resolve(name: str | TaskSpec | Task) -> Task:
    """A task name (or a spec or Task already in hand) -> the Task; unknown names get "did you mean"."""
    if isinstance(name, Task):
        return name
    key = name.name if isinstance(name, TaskSpec) else name
    if key in BUILTIN:
        return BUILTIN[key]
    extra = _imported()
    if key in extra:
        return extra[key]
    folder = imported.imported_root() / key
    if folder.is_dir():  # an imported task whose task.json is damaged: say so, not "unknown task"
        spec = imported.spec_from_json(folder / "task.json")
        raise RBenchError(f"imported task {key!r}: {folder / 'task.json'} names {spec.name!r}; re-import it")
    raise unknown("task", key, list(BUILTIN) + list(extra))


def get_task(name: str) -> TaskSpec:
    return resolve(name).spec


def list_tasks() -> list[TaskSpec]:
    return [t.spec for t in BUILTIN.values()] + [t.spec for t in _imported().values()]


def data_status(task: str | TaskSpec | Task) -> tuple[bool, str]:
    """(present, detail) without loading the data."""
    return resolve(task).status()


def task_options(task: str | TaskSpec | Task, overrides: dict[str, Any] | None) -> Any:
    return resolve(task).options(overrides)


def load(task: Task, options: Any, seed: int = DEFAULT_SEED) -> TaskData:
    """Load a resolved task with its typed options (original pool; variants: ``rbench.tasks.pools``),
    its test split under ``rbench.tasks.fit_positives`` (a pool built from positives: the
    positives ``fit`` is handed are left out of every test ranking)."""
    return fit_positives.exclude(load_prepared(task, options, seed), fit_positives.wanted(options))


def load_prepared(task: Task, options: Any, seed: int = DEFAULT_SEED) -> TaskData:
    """The task as its family builds it (and the prepared cache keeps it), before
    ``fit_positives``: what a pool variant takes a donor's candidates from (the donor's own test
    split is no part of a variant, so its rule never moves a variant's fingerprint)."""
    present, detail = task.status()
    if not present:
        raise RBenchError(f"task {task.name!r}: data {detail}" if detail.startswith("not present")
                          else f"task {task.name!r}: data not present: {detail}")
    if not task.family.cached:  # ships inside an installed package and loads in ~0.5 s
        data = task.family.load(task.spec, options, seed)
    else:
        from rbench.tasks import store  # prepared once, memory-mapped afterwards

        data = store.load_cached(task, options, seed)
    return dataclasses.replace(data, info={**data.info, "data_source": data_source(task).as_info()})


def data_source(task: Task) -> DataSource:
    """What the task was built from: its declared source for data a package ships or an import
    holds (nothing to link), else what the raw folder's provenance note says (``rbench.tasks.sources.provenance``)."""
    if task.spec.embedded or not task.family.links_from:
        return DataSource(task.spec.sources[0].name if task.spec.sources else task.name, own=True,
                          how="imported" if task.family.name == "imported" else "ships with a package")
    return read_provenance(paths.raw_dir(task.name))


def load_task(name: str | TaskSpec | Task, options: dict[str, Any] | None = None, seed: int = DEFAULT_SEED) -> TaskData:
    """Resolve, build options from ``--set task.*`` overrides, and load."""
    task = resolve(name)
    return load(task, task.options(options), seed)


def import_task(name: str, corpus: Any, queries: Any, qrels: Any, scenario: str = "large",
                candidates: Any = None, **kwargs: Any) -> Any:
    """``rbench data import``: a BEIR-layout task under a name no built-in task has."""
    return imported.import_task(name, corpus, queries, qrels, scenario, candidates, reserved=set(BUILTIN), **kwargs)


def donor_pool(seed: int) -> Callable[[str], Pool]:
    """A lookup of built-in tasks' original pools (default options, the run's seed) for the pool
    variants; a task whose data is not present raises LookupError with the reason."""

    def lookup(name: str) -> Pool:
        task = BUILTIN[name]
        present, detail = task.status()
        if not present:
            raise LookupError(detail)
        return load_prepared(task, task.options(None), seed).pool

    return lookup
