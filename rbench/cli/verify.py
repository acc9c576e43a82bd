"""``rbench verify``: recompute RunRecords' metrics from their run files and the tasks' qrels."""

from __future__ import annotations

from pathlib import Path

import typer

from rbench.cli.common import out


def verify_cmd(
    paths: list[Path] = typer.Argument(..., help="RunRecords (*.json) or folders of them (searched recursively)."),
    rerun: bool = typer.Option(False, "--rerun", help="Also run each record's ranker again (nothing written) and "
                               "compare, where a rerun can give the same bits (rbench.audit.verify)."),
) -> None:
    """Recompute every metric of each RunRecord from its run file and the task's qrels (and check
    its per-query file and sha256s): one line per record, OK, MISMATCH (the metric, stored vs
    recomputed) or SKIP (why it could not be checked here). Exit 1 on any mismatch; 2 on bad input
    (a path that is not a record or a folder, a malformed record)."""
    from rbench.audit.verify import MISMATCH, SKIP, record_files, verify_record

    files = record_files(paths)
    if not files:
        from rbench.core.errors import RBenchError

        raise RBenchError(f"no RunRecords (*.json) under {', '.join(map(str, paths))}")
    counts = {"OK": 0, MISMATCH: 0, SKIP: 0}
    for path in files:
        verdict = verify_record(path, rerun=rerun)
        counts[verdict.status] += 1
        out.print(verdict.line(), soft_wrap=True, highlight=False, markup=False)
    out.print(f"{len(files)} records: {counts['OK']} OK, {counts[MISMATCH]} MISMATCH, {counts[SKIP]} SKIP "
              "(metrics recomputed to 1e-9: float sums; see docs/guides/verify.md)", soft_wrap=True, highlight=False)
    if counts[MISMATCH]:
        raise typer.Exit(1)
