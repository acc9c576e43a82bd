"""RBench tasks: declarative specs (``spec``), the checked registry (``registry``) and one loader
module per data family."""

from rbench.tasks.registry import TASKS, get_task, list_tasks, load_task
from rbench.tasks.spec import PROMPTS, Source, TaskSpec

__all__ = ["PROMPTS", "Source", "TASKS", "TaskSpec", "get_task", "list_tasks", "load_task"]
