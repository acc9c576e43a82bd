"""Re-run the runs that RunRecords describe, with the CLI, into the folder they came from.

    python benchmarks/rerun_records.py records/large/ml-100k/pop.json ...   # run them
    python benchmarks/rerun_records.py --print records/**/*.json            # only print the commands

Each record becomes one ``rbench run`` command: its ranker, task, variant, seed, test-query
sample, its whole effective ranker and task config (``--set``), two-stage spec (``--rerank-from``,
``--rerank-depth``), the measures it asked for by name (``--measure``) and results folder (the record's path minus ``<scenario>/<task>/<file>``).
``--overwrite only-missing`` re-runs exactly the records that are stale (another evaluation
protocol, ranker code, config or data) and keeps the rest. This is how the committed reference
records (``records/``) are regenerated when ``rbench.core.protocol.PROTOCOL_VERSION`` moves.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return ",".join(_value(x) for x in v)
    return str(v)


def _asked_measures(metrics: dict[str, Any]) -> list[str]:
    """The measures a record's run asked for by name (``--measure``): its metrics beyond the
    defaults every record holds, that parse as measures (a rerank's ``-dropped`` ones do not)."""
    from rbench.core.errors import RBenchError
    from rbench.core.measures import parse_measure
    from rbench.engine.metrics import RECORD_MEASURES

    asked = []
    for name in metrics:
        try:
            measure = str(parse_measure(name))
        except RBenchError:
            continue
        if measure not in RECORD_MEASURES:
            asked.append(measure)
    return asked


def command(path: Path) -> list[str]:
    """The ``rbench run`` arguments that produce the record at ``path``."""
    rec = json.loads(path.read_text(encoding="utf-8"))
    ranker = rec["ranker"]
    argv = ["run", "-r", ranker.get("source") or ranker["name"], "-t", rec["task"]]
    if rec.get("variant") not in (None, "", "original"):
        argv += ["--variant", rec["variant"]]
    non_default = rec.get("run_options", {}).get("non_default") or {}
    # the whole effective config, not its diff from the defaults of the day: a default that
    # changed since would otherwise run another configuration
    for key, value in sorted((ranker.get("config") or non_default.get("ranker") or {}).items()):
        argv += ["--set", f"{key}={_value(value)}"]
    for key, value in sorted((rec.get("task_options") or non_default.get("task") or {}).items()):
        argv += ["--set", f"task.{key}={_value(value)}"]
    if rec.get("seed"):
        argv += ["--seed", str(rec["seed"])]
    if rec.get("run_options", {}).get("max_queries"):
        argv += ["--max-queries", str(rec["run_options"]["max_queries"])]
    rerank = rec.get("rerank") or {}
    if rerank:
        first = rerank["first_stage"]
        argv += ["--rerank-from", first.get("source") or first["name"], "--rerank-depth", str(rerank["depth"])]
        for key, value in sorted((non_default.get("rerank", {}).get("first_stage_options") or {}).items()):
            argv += ["--set", f"first_stage.{key}={_value(value)}"]
    argv += [arg for name in _asked_measures(rec.get("metrics") or {}) for arg in ("--measure", name)]
    results_dir = path.parents[2]  # <results>/<scenario>/<task>/<record>.json
    argv += ["--results-dir", str(results_dir), "--overwrite", "only-missing", "--quiet"]
    return argv


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("records", nargs="+", type=Path)
    parser.add_argument("--print", action="store_true", help="print the commands, run nothing")
    args = parser.parse_args(argv)
    commands = [command(p) for p in args.records if not p.name.endswith((".perquery.csv.gz", ".run.gz"))]
    for cmd in commands:
        print("rbench " + shlex.join(cmd), flush=True)
        if not args.print:
            from rbench.cli.app import main as rbench_main

            code = rbench_main(cmd)
            if code:
                print(f"exit {code}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
