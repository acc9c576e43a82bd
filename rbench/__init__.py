"""rbench: a benchmark harness for LLM rankers over large candidate pools.

The public Python API (stable names, listed here once): ``evaluate`` one ranker on one task,
``evaluate_many`` rankers x tasks, ``load_task``, ``list_tasks``, ``list_rankers``,
``load_results`` (a DataFrame of RunRecords, or of their per-query values), ``table`` (a
scenario's leaderboard) and ``compare`` (every pair of runs on one task, tested). They live
in ``rbench.public``, whose module level imports nothing heavy, so ``import rbench`` stays light.
"""

import os as _os

from rbench.core.version import __version__  # declared in core: the store and the records read it from below

# OpenBLAS (numpy's BLAS) keeps its worker threads spinning for ~0.1 s of CPU after every call
# (2^28 cycles, its default), on the cores that the engine's numba scan (rbench.engine.fused) needs
# right after each GEMM: on 2 cores that cost ~7% of a d = 128 exact evaluation with top-100
# (benchmarks/engine_scale.py). A short spin (2^4 cycles, then the threads sleep) unless the user
# chose one; OpenBLAS reads it when it loads, so it applies when rbench is imported before numpy
# (the CLI always is; elsewhere export OPENBLAS_THREAD_TIMEOUT=4).
_os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

from rbench.public import (  # noqa: E402  (after OPENBLAS_THREAD_TIMEOUT is set)
    compare,
    evaluate,
    evaluate_many,
    list_rankers,
    list_tasks,
    load_results,
    load_task,
    table,
)

__all__ = ["__version__", "compare", "evaluate", "evaluate_many", "list_rankers", "list_tasks", "load_results",
           "load_task", "table"]
