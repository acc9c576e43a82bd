"""``rbench tasks`` and ``rbench rankers``: what can be run, from the registries."""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.table import Table
from rich.text import Text

from rbench.api import TaskSpec
from rbench.cli.common import bytes_text, count_text, out
from rbench.core.console import styled
from rbench.core.errors import RBenchError


def task_rows(with_protocol: bool = False) -> list[dict[str, Any]]:
    """One row per task: its spec's facts, the state of its data (raw files, downloads, the
    prepared cache). What ``rbench tasks`` and ``rbench data list`` print, as a table or JSON."""
    from rbench.tasks.registry import data_status, list_tasks
    from rbench.tasks.store import prepared_sizes

    rows = []
    for spec in list_tasks():
        present, detail = data_status(spec)
        prepared = prepared_sizes(spec)
        rows.append({"name": spec.name, "title": spec.title, "scenario": spec.scenario, "domain": spec.domain,
                     "paper_candidates": spec.paper_candidates, "paper_queries": spec.paper_queries,
                     "prepared_pool": prepared["pool"] if prepared else None,
                     "prepared_queries": prepared["queries"] if prepared else None,
                     "prepared": prepared, "downloads": _download_state(spec),
                     "data_present": present, "data": detail, "license": spec.license,
                     "sources": [{"name": s.name, "url": s.url, "license": s.license} for s in spec.sources],
                     "description": spec.description, "pool_from_positives": spec.pool_from_positives,
                     "protocol": (spec.protocol or _protocol_doc(spec)) if with_protocol else "",
                     "prompt": spec.prompt, "how_to_get": spec.how_to_get})
    return rows


def tasks_cmd(as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON.")) -> None:
    """List the tasks: the paper's sizes, and the state of their data (raw files, downloads,
    the prepared cache). ``rbench data list`` prints the same."""
    rows = task_rows(with_protocol=as_json)
    if as_json:
        print(json.dumps(rows, indent=2, default=str))
        return
    table = Table(title="rbench tasks")
    for col in ("task", "scenario", "domain", "paper cand. / queries", "prepared pool / queries", "downloads",
                "disk", "data"):
        table.add_column(col, justify="right" if col.startswith(("paper", "prepared", "disk")) else "left",
                         no_wrap=True)
    for r in rows:
        s = r["prepared"]
        prepared = (f"{s['pool']:,} / {s['queries']:,}" + (f" ({s['entries']} entries)" if s["entries"] > 1 else "")
                    if s else "–")
        data = Text("present", style="green") if r["data_present"] else Text("missing", style="yellow")
        table.add_row(r["name"], r["scenario"], r["domain"],
                      f"{count_text(r['paper_candidates'])} / {count_text(r['paper_queries'])}", prepared, r["downloads"],
                      bytes_text(s["bytes_all"]) if s else "–", data)
    out.print(table)
    for r in rows:
        if not r["data_present"]:
            out.print(styled((str(r["name"]), "yellow"), f": {r['data']}"), soft_wrap=True)


def _download_state(spec: TaskSpec) -> str:
    from rbench.tasks.sources.downloads import downloads_dir

    if spec.embedded:
        return "ships with a package"
    if not spec.downloads:
        return "no direct URL"
    folder = downloads_dir(spec.name)
    want = spec.downloads
    have = [rf for rf in want if (folder / rf.filename).is_file()]
    partial = [rf for rf in want if (folder / (rf.filename + ".part")).is_file()]
    state = f"{len(have)}/{len(want)} files"
    return state + (f", {len(partial)} partial" if partial else "")


def _protocol_doc(spec) -> str:
    from rbench.tasks.registry import resolve

    return resolve(spec).family.doc.strip()


def rankers_cmd(as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON.")) -> None:
    """List the installed ranker plugins (entry-point group ``rbench.rankers``) and their options."""
    from rbench.rankers import available_rankers, describe_ranker, load_ranker_class

    rows = []
    for name in available_rankers():
        try:
            cls = load_ranker_class(name)
        except RBenchError as exc:
            rows.append({"name": name, "available": False, "error": str(exc)})
            continue
        rows.append({"name": name, "available": True, **describe_ranker(cls)})
    if as_json:
        print(json.dumps(rows, indent=2, default=str))
        return
    table = Table(title="rbench rankers")
    for col in ("ranker", "version", "applies to", "options (defaults)", "description"):
        table.add_column(col)
    for r in rows:
        if not r["available"]:
            table.add_row(r["name"], "", "", "", Text(str(r["error"]), style="yellow"))
            continue
        opts = ", ".join(f"{o['name']}={o['default']}" for o in r["options"])
        table.add_row(r["name"], str(r["version"]), ", ".join(r["domains"]), opts, r["description"])
    out.print(table)
    for r in rows:  # generative rankers: the prompt they send (a two-candidate passage example)
        for message in r.get("prompt") or ():
            out.print(styled((str(r["name"]), "bold"), " prompt ", (str(message.get("role")), "cyan"), ": "
                             + " ".join(str(message.get("content", "")).split())), soft_wrap=True)
    for r in rows:  # presets (--set model=NAME) with the prompts they use
        for preset, spec in (r.get("presets") or {}).items():
            out.print(styled((str(r["name"]), "bold"), " preset ", (preset, "cyan"),
                             ": " + ", ".join(f"{k}={v!r}" for k, v in spec.items())))

