"""Train LRanker on several GPUs (data parallel) and evaluate it, through ``accelerate``.

    accelerate launch --multi_gpu --num_processes 4 -m rankers.lranker.launch \\
        --task esci --set epochs=15 [--set key=value ...] [--seed 0] [--results-dir results]

Every process trains on its stride of each epoch (gradients averaged over processes, see
``rankers.lranker.train``); rank 0 writes the checkpoint, then runs the ordinary ``rbench run``
path, which finds that checkpoint (``fit`` skips training when a matching one exists) and
evaluates on one device, writing the RunRecord. ``batch_size`` is per process: the paper's global
batch of 20 on 4 GPUs is ``--set batch_size=5``. The single-process ``rbench run --ranker lranker``
stays the default and the tested path on CPU machines.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rbench import paths
from rbench.api import RunContext
from rbench.config import parse_assignments
from rbench.plugins import make_ranker
from rbench.runner import RunOptions, run, split_sets
from rbench.tasks.registry import load_task


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m rankers.lranker.launch")
    ap.add_argument("--task", required=True)
    ap.add_argument("--set", action="append", default=[], dest="sets")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--results-dir", type=Path, default=Path("results"))
    ap.add_argument("--max-queries", type=int, default=None)
    args = ap.parse_args(argv)

    from accelerate import Accelerator

    acc = Accelerator()  # initialises torch.distributed from the launcher's environment
    sets = parse_assignments(args.sets)
    sets.setdefault("device", str(acc.device))
    task_sets, ranker_sets = split_sets(sets)
    data = load_task(args.task, task_sets, seed=args.seed)
    ranker = make_ranker("lranker", ranker_sets, RunContext(cache_dir=paths.cache_dir(), seed=args.seed,
                                                              show_progress=acc.is_main_process))
    ranker.fit(data)  # distributed training; rank 0 saves the checkpoint
    acc.wait_for_everyone()
    if acc.is_main_process:
        outcome = run(RunOptions(ranker="lranker", task=args.task, sets=sets, seed=args.seed,
                                 max_queries=args.max_queries, results_dir=args.results_dir))
        print(f"RunRecord: {outcome.path}  metrics: {outcome.record.metrics}")
    acc.wait_for_everyone()


if __name__ == "__main__":
    main()
