"""What a run is, before and after it is resolved: ``RunOptions`` (what the command line or
Python gave), ``World`` (the processes of a launched run) and ``RunPlan`` (everything resolved
once by ``rbench.run.runner.make_plan``, its scoring strategy included).

Why a module of its own: the record's making (``rbench.run.recording``) and the runner both read
a ``RunPlan``; declared below both, it is typed everywhere without an import circle.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rbench.api import TaskSpec
from rbench.core.errors import RBenchError
from rbench.core.settings import MAX_TOPK, RunSettings
from rbench.run.rerank import RerankPlan
from rbench.run.strategies import Strategy
from rbench.tasks.family import Task
from rbench.tasks.pools import Variant


@dataclass(frozen=True, kw_only=True)
class RunOptions(RunSettings):
    """What the command line gave (names and option strings), before anything is resolved."""

    ranker: Any  # a registered name, file.py:Class / module:Class, a ranker class or object
    task: Any  # a task name, or a resolved rbench.tasks.family.Task
    variant: str = "original"
    sets: dict[str, str] = field(default_factory=dict)
    rerank_from: str | None = None  # --rerank-from: first-stage ranker name or run:PATH (rbench.run.rerank)
    rerank_depth: str | int | None = None  # --rerank-depth: N >= 1 or 'all' (default: the ranker's, else 100)
    force: bool = False  # --force: run an exhaustive rerank above the pair budget

    def __post_init__(self) -> None:
        """The user's ``--topk`` is capped here, not in ``RunSettings``: the plan's own top-k is
        widened past it by the tied candidates a run file needs (``rbench.engine.runfile.run_width``)."""
        super().__post_init__()
        if self.topk > MAX_TOPK:  # the pool size is not known yet; the engine's top-k arrays are (queries, topk)
            raise RBenchError(f"--topk must be at most {MAX_TOPK:,} (lines per query in the run file), got {self.topk:,}")


@dataclass(frozen=True)
class World:
    """The processes of one run. ``torchrun`` and ``accelerate launch`` start each process with
    LOCAL_RANK and WORLD_SIZE (and RANK) set: such a run is ``launched``. A plain run is a world
    of one."""

    rank: int = 0
    local_rank: int = 0
    size: int = 1
    launched: bool = False

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> World:
        env = os.environ if env is None else env
        if "LOCAL_RANK" not in env or "WORLD_SIZE" not in env:
            return cls()
        local = int(env["LOCAL_RANK"])
        return cls(rank=int(env.get("RANK", local)), local_rank=local, size=int(env["WORLD_SIZE"]), launched=True)

    @property
    def main(self) -> bool:
        """The process that scores, prints and writes the RunRecord."""
        return self.rank == 0


@dataclass(frozen=True, kw_only=True)
class RunPlan(RunSettings):
    """One run, resolved once by ``make_plan``: what ``execute`` and everything below it receive."""

    task: Task  # the spec and the family that loads it
    task_options: Any  # the task's typed options (None: it has none)
    ranker: str  # the plugin's name (entry point)
    ranker_cls: type
    ranker_config: Any  # the ranker's typed options: its Config with --set applied
    variant: Variant
    world: World = World()
    rerank: RerankPlan | None = None  # the two-stage protocol (None: an ordinary run)
    ranker_source: str = "entry-point"  # where the class came from (RankerRef.source)
    ranker_obj: Any = None  # a ready-made ranker object handed in from Python (used as it is)
    source: Task | None = None  # the transfer variant's source task (fitted on; None: the task itself)
    strategy: Strategy  # how the test queries are scored, chosen once (``choose``)

    @property
    def spec(self) -> TaskSpec:
        return self.task.spec
