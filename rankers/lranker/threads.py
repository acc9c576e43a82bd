"""Whether this process may enter numba's parallel regions.

numba's GNU OpenMP threading layer terminates a forked child that enters a parallel region once
the parent has used it ("fork() called from a process already using GNU OpenMP, this is unsafe").
Training's DataLoader workers are such children (``loader_workers``, 2 by default), and the
engine's kernels have used OpenMP in the parent before the workers fork. There the kernels of
``kmeans_many`` and ``elimination`` run their sets one after the other instead (a training step's
20 partitions: no loss), with the same results.
"""

from __future__ import annotations

import os
import sys

_PID = os.getpid()


def parallel_ok() -> bool:
    """False in a torch DataLoader worker and in any process forked after this module's import."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.utils.data.get_worker_info() is not None:
        return False
    return os.getpid() == _PID
