"""The task-family protocol: what the registry, the prepared-data store, downloads and the CLI
may ask of a data family — nothing else of a family is reached from outside it.

A family (sequential recommendation, routing, MS MARCO, ESCI, imported BEIR tasks) declares its
tasks as ``TaskSpec`` objects (one declaration per task, holding every fact about it) and knows
how to find, check and load their data. Families are registered as objects
(``rbench.tasks.registry.FAMILIES``); nothing is found through module-path strings.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rbench.api import TaskData, TaskSpec
from rbench.core import paths
from rbench.core.config import build_config
from rbench.core.errors import RBenchError


class TaskFamily:
    """One data family. Subclasses set ``name`` and ``doc`` and implement ``specs``, ``check``
    and ``load``; the defaults fit a family whose raw files live in ``raw_dir(task)``."""

    name: str = ""
    doc: str = ""  # the family's protocol notes (``rbench tasks --json`` shows them)
    cached: bool = True  # loaded data is prepared once and memory-mapped afterwards (rbench.tasks.store)
    links_from: bool = True  # ``rbench data prepare TASK --from DIR`` links DIR into raw_dir(task)

    def specs(self) -> tuple[TaskSpec, ...]:
        raise NotImplementedError

    def options_type(self, spec: TaskSpec) -> type | None:
        """The dataclass of ``--set task.key=value`` options, or None when the task has none."""
        return None

    def test_only(self, spec: TaskSpec, options: Any) -> bool:
        """Whether the task with these options has a test split only (every query evaluated, no
        train split: a zero-shot collection), known before loading: the runner then refuses a
        ranker that needs training data (``rbench.rankers.needs_training``)."""
        return False

    def inputs(self, spec: TaskSpec) -> list[Path]:
        """Where the task's raw inputs live: the prepared cache keys on their contents."""
        return [paths.raw_dir(spec.name)]

    def check(self, spec: TaskSpec) -> tuple[bool, str]:
        """(present, detail) without loading; may raise RBenchError for an ambiguous folder."""
        raw = paths.raw_dir(spec.name)
        if raw.exists() and any(raw.iterdir()):
            return True, str(raw)
        return False, f"not present: {spec.how_to_get}"

    def status(self, spec: TaskSpec) -> tuple[bool, str]:
        """``check`` that reports an ambiguous folder instead of raising: ``rbench tasks`` lists
        every task and must not stop at one bad folder (loading still raises the full error)."""
        try:
            return self.check(spec)
        except RBenchError as exc:
            return False, f"not present: {spec.how_to_get} ({exc}) [looked in {paths.raw_dir(spec.name)}]"

    def load(self, spec: TaskSpec, options: Any, seed: int) -> TaskData:
        raise NotImplementedError


@dataclass(frozen=True)
class Task:
    """A resolved task: its spec and the family that serves it (what the runner passes down)."""

    spec: TaskSpec
    family: TaskFamily

    @property
    def name(self) -> str:
        return self.spec.name

    def options(self, overrides: dict[str, Any] | None = None) -> Any:
        """Typed task options from ``--set task.key=value`` overrides (paper values as defaults)."""
        kind = self.family.options_type(self.spec)
        if kind is None:
            if overrides:
                raise RBenchError(f"task {self.name!r} has no options (got {', '.join(overrides)})")
            return None
        return build_config(kind, overrides, owner=f"task {self.name!r}")

    def status(self) -> tuple[bool, str]:
        return self.family.status(self.spec)
