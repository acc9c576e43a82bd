"""rbench: a benchmark harness for LLM rankers over large candidate pools.

The public Python API (stable names, listed here once): ``evaluate`` one ranker on one task,
``evaluate_many`` rankers x tasks, ``load_task``, ``list_tasks``, ``list_rankers``,
``load_results`` (a DataFrame of RunRecords) and ``table`` (a scenario's leaderboard). They live
in ``rbench.public``, whose module level imports nothing heavy, so ``import rbench`` stays light.
"""

__version__ = "0.1.0"

from rbench.public import (  # noqa: E402  (the version first: rbench.results reads it)
    evaluate,
    evaluate_many,
    list_rankers,
    list_tasks,
    load_results,
    load_task,
    table,
)

__all__ = ["__version__", "evaluate", "evaluate_many", "list_rankers", "list_tasks", "load_results", "load_task",
           "table"]
