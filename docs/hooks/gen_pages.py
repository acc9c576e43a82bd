"""MkDocs hook: one page per task and per ranker, generated at build time from the registries (the
same data ``rbench tasks --json`` / ``rbench rankers --json`` print), so the pages cannot drift
from the code; and the CLI-commands and measures reference pages, generated from the command
line's definitions and ``rbench.core.measures.FAMILIES``.

- ``on_config`` adds the generated pages to the navigation;
- ``on_files`` adds the task and ranker pages to the build as generated files;
- ``python docs/hooks/gen_pages.py`` writes the reference pages (``COMMITTED``) into ``docs/``:
  they are committed, so that the links to them (``docs/concepts.md``, ``rbench run --help``,
  the README) work on a repository browser too; ``tests/test_docs.py`` fails when they are stale.

Only the rankers that ship with rbench get a page: a third party's plugin installed where the
docs are built gets one only when the builder asks (``RBENCH_DOCS_PLUGINS=1``), so a build never
lists someone else's plugin as shipped.

Nothing machine-local goes into a page: data presence and prepared sizes (which depend on the
machine that builds the docs) are left out on purpose.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import os
import sys
import textwrap
from functools import lru_cache
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def _field_help(cls: type) -> dict[str, str]:
    """``name -> help`` for a dataclass: the trailing ``# comment`` of each field's line, or the
    string literal right below the field (an attribute docstring)."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    lines = source.splitlines()
    out: dict[str, str] = {}
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    for i, node in enumerate(body):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        name = node.target.id
        last = lines[(node.end_lineno or node.lineno) - 1]
        comment = _trailing_comment(last)
        if comment:
            out[name] = comment
        elif i + 1 < len(body):
            nxt = body[i + 1]
            if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str):
                out[name] = " ".join(nxt.value.value.split())
    # fields inherited from a dataclass base
    for base in cls.__mro__[1:]:
        if dataclasses.is_dataclass(base):
            for k, v in _field_help(base).items():
                out.setdefault(k, v)
    return out


def _trailing_comment(line: str) -> str:
    """The ``# comment`` at the end of a code line (a ``#`` inside a string literal is not one)."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "#":
            return line[i + 1:].strip()
    return ""


def _cell(value: Any) -> str:
    """A Markdown table cell: code for values, pipes and newlines escaped."""
    if isinstance(value, str):
        text = value if value and value.strip() == value else json.dumps(value)
    else:
        text = json.dumps(value, default=str)
    return "`" + " ".join(text.split()).replace("`", "'") + "`"  # pipes inside a code span need no escape


def _text(value: str) -> str:
    """One line for a table cell or a paragraph: pipes escaped, and ``<``/``>`` outside code spans
    escaped (help texts write placeholders such as ``<stem>``, which Markdown would read as HTML)."""
    parts = " ".join(str(value).split()).split("`")  # a pipe inside a code span needs no escape
    return "`".join(p if i % 2 else p.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
                    for i, p in enumerate(parts))


def _options_table(fields: list[dict[str, Any]], helps: dict[str, str], prefix: str = "") -> list[str]:
    if not fields:
        return ["This one takes no options.", ""]
    ranged = any(f.get("range") for f in fields)  # a number's declared range (rbench.core.ranges)
    rows = (["| option | type | default | range | what it does |", "|---|---|---|---|---|"] if ranged
            else ["| option | type | default | what it does |", "|---|---|---|---|"])
    for f in fields:
        span = f" {_cell(f['range']) if f.get('range') else ''} |" if ranged else ""
        rows.append(f"| `{prefix}{f['name']}` | {_cell(str(f['type']))} | {_cell(f['default'])} |{span}"
                    f" {_text(helps.get(f['name'], ''))} |")
    return [*rows, ""]


def _docstring(obj: Any) -> str:
    doc = inspect.getdoc(obj) or ""
    return doc.strip()


# --------------------------------------------------------------------------------------------
# tasks
# --------------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _tasks() -> list[tuple[str, str]]:
    """(name, page text) for every registered task."""
    from rbench.tasks.registry import list_tasks, resolve

    pages = []
    for spec in list_tasks():
        task = resolve(spec)
        lines = [f"# {spec.name}: {spec.title}", "", _text(spec.description), "",
                 "| | |", "|---|---|",
                 f"| scenario | `{spec.scenario}` |",
                 f"| domain | `{spec.domain}` |",
                 f"| the paper's candidates per query / pool | {_num(spec.paper_candidates)} |",
                 f"| the paper's queries | {_num(spec.paper_queries)} |",
                 f"| the paper's Table 2 row | {spec.paper_row if spec.paper_row is not None else '– (not a task of the paper)'} |",
                 f"| donates candidates to | {', '.join(f'`{d}`' for d in spec.donates) or '–'} |",
                 f"| data ships inside an installed package | {'yes' if spec.embedded else 'no'} |",
                 f"| pool built from the queries' positives | {_pool_prior(spec.pool_from_positives)} |",
                 f"| license | {_text(spec.license)} |",
                 f"| task family | `{task.family.name}` |",
                 "", "## How to get the data", "", _text(spec.how_to_get), ""]
        lines += ["## Sources", ""]
        if not spec.sources:
            lines += ["None declared.", ""]
        for s in spec.sources:
            lines.append(f"- **{_text(s.name)}** — <{s.url}> — license: {_text(s.license)}"
                         + (f" — {_text(s.note)}" if s.note else ""))
            for rf in s.files:
                bits = [f"`{rf.filename}`"]
                if rf.size:
                    bits.append(f"{rf.size:,} bytes")
                bits.append(f"sha256 `{rf.sha256}`" if rf.sha256 else "no published checksum (the first seen is recorded)")
                lines.append("    - " + ", ".join(bits) + "".join(f" <{u}>" for u in rf.urls[:1]))
        lines.append("")
        kind = task.family.options_type(spec)
        lines += ["## Options", "", "Set with `--set task.KEY=VALUE` (CLI) or `task_options={...}` "
                  "(`rbench.evaluate`); the defaults are the paper's settings.", ""]
        if kind is None:
            lines += _options_table([], {})
        else:
            fields = [{"name": f.name, "type": _type_name(f.type), "default": _default(f)}
                      for f in dataclasses.fields(kind)]
            lines += _options_table(fields, _field_help(kind), prefix="task.")
        protocol = spec.protocol or _docstring(type(task.family))
        module_doc = _docstring(inspect.getmodule(type(task.family)))
        if protocol or module_doc:
            lines += ["## Protocol", "", "Every choice the paper leaves open, as the task and its family write it "
                      "(`rbench tasks --json` prints the first part):", ""]
            lines += [_as_text_block(doc) + "\n" for doc in (protocol, module_doc) if doc]
        lines += ["## Prompt", "", "What LLM rankers read (`{query}` is replaced by the query text):", "",
                  f"```text\n{spec.prompt}\n```", ""]
        pages.append((spec.name, "\n".join(lines)))
    return pages


def _pool_prior(flag: bool) -> str:
    """The ``pool_from_positives`` cell: what it means for the task's tables."""
    if not flag:
        return "no"
    return ("yes (default pool): train/valid positives are much of it, so they are left out of every test "
            "ranking (`task.exclude_fit_positives`, default true) and the `prior` floor (them last) is shown "
            "beside `pop` and `random` ([Pools built from positives](../data.md#pools-built-from-positives))")


def _num(n: int | None) -> str:
    return f"{n:,}" if n else "–"


def _type_name(t: Any) -> str:
    return t if isinstance(t, str) else getattr(t, "__name__", str(t))


def _default(f: dataclasses.Field) -> Any:  # type: ignore[type-arg]
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return None


def _as_text_block(doc: str) -> str:
    """A docstring shown as written (reST markup is not Markdown): an indented-free text block."""
    return "```text\n" + textwrap.dedent(doc).strip().replace("```", "'''") + "\n```"


def _tasks_index() -> str:
    from rbench.tasks.registry import list_tasks

    lines = ["# Tasks", "",
             "Generated from the task registry at build time (`rbench tasks` prints the same list, with "
             "whether each task's data is present on your machine). Concepts: [scenarios, pools and "
             "variants](../concepts.md); adding one: [Add a task](../guides/add-a-task.md); where the data "
             "comes from and where it is kept: [Tasks and data](../data.md).", "",
             "| task | title | scenario | domain | paper candidates | paper queries |", "|---|---|---|---|---:|---:|"]
    for spec in list_tasks():
        lines.append(f"| [`{spec.name}`]({spec.name}.md) | {_text(spec.title)} | {spec.scenario} | {spec.domain} "
                     f"| {_num(spec.paper_candidates)} | {_num(spec.paper_queries)} |")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# rankers
# --------------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _rankers() -> list[tuple[str, str, str]]:
    """(name, one-line description, page text) for every ranker that ships with rbench, and every
    installed third-party plugin too when the builder sets ``RBENCH_DOCS_PLUGINS=1``."""
    from rbench.rankers import available_rankers, describe_ranker, load_ranker_class

    pages = []
    for name in available_rankers(built_in_only=not third_party_pages()):
        try:
            cls = load_ranker_class(name)
        except Exception as exc:  # a plugin that cannot load still gets a page saying so
            pages.append((name, "(not loadable here)", f"# {name}\n\nThis plugin could not be loaded: {_text(exc)}\n"))
            continue
        facts = describe_ranker(cls)  # what `rbench rankers --json` prints of it
        description = facts["description"]
        cfg = getattr(cls, "Config", None)
        helps = _field_help(cfg) if cfg is not None and dataclasses.is_dataclass(cfg) else {}
        lines = [f"# {name}", "", _text(description), "",
                 "| | |", "|---|---|",
                 f"| version | `{facts['version']}` |",
                 f"| applies to | {', '.join(f'`{d}`' for d in facts['domains']) or 'every domain'} |",
                 f"| class | `{cls.__module__}.{cls.__qualname__}` |",
                 f"| pairwise (scored through `--rerank-from`) | {'yes' if facts.get('pairwise') else 'no'} |",
                 f"| set-dependent (whole list per call) | {'yes' if getattr(cls, 'set_dependent', False) else 'no'} |",
                 f"| transfers zero-shot (`--variant from-TASK`) | {'yes' if getattr(cls, 'transfers', False) else 'no'} |",
                 "", "```bash", f"rbench run --ranker {name} --task TASK --set KEY=VALUE", "```", "",
                 "## Options", "", "Set with `--set KEY=VALUE` (CLI) or `options={...}` (`rbench.evaluate`); "
                 "the defaults are the paper's settings.", ""]
        lines += _options_table(facts["options"], helps)
        presets = facts.get("presets")
        if presets:
            lines += ["## Presets", "", "`--set model=NAME` picks one; each sets these options:", "",
                      "| preset | settings |", "|---|---|"]
            for preset, spec in presets.items():
                lines.append(f"| `{preset}` | {', '.join(f'`{k}={_text(repr(v))}`' for k, v in spec.items())} |")
            lines.append("")
        doc = _docstring(cls)
        module_doc = _docstring(inspect.getmodule(cls))
        if doc or module_doc:
            lines += ["## Notes", "", "From the plugin's own docstrings:", ""]
            if module_doc:
                lines += [_as_text_block(module_doc), ""]
            if doc and doc != module_doc:
                lines += [_as_text_block(doc), ""]
        pages.append((name, description, "\n".join(lines)))
    return pages


def _rankers_index() -> str:
    lines = ["# Rankers", "",
             "Generated from the `rbench.rankers` entry points of the rankers that ship with rbench at "
             "build time (`rbench rankers` prints the same, with any third-party plugin you installed). An overview of what each built-in ranker is and how it follows the paper: "
             "[Rankers overview](../rankers-overview.md); writing one: [Write a ranker](../guides/write-a-ranker.md).",
             "", "| ranker | description |", "|---|---|"]
    for name, description, _ in _rankers():
        lines.append(f"| [`{name}`]({name}.md) | {_text(description)} |")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------


def _cli_page() -> str:
    import typer

    from rbench.cli.app import app

    root = typer.main.get_command(app)  # click's objects (typer may vendor click: duck-typed below)
    lines = ["# CLI commands", "",
             "Generated from the command line's own definitions by `python docs/hooks/gen_pages.py` (`rbench COMMAND --help` "
             "prints the same). Exit codes and the common patterns: [CLI](cli.md).", ""]

    def walk(cmd: Any, path: list[str]) -> None:
        subs = getattr(cmd, "commands", None)
        if subs:
            if len(path) > 1:
                lines.extend([f"## `{' '.join(path)}`", "", _text(cmd.help or ""), ""])
            for sub_name in subs:
                walk(subs[sub_name], [*path, sub_name])
            return
        level = "###" if len(path) > 2 else "##"
        lines.extend([f"{level} `{' '.join(path)}`", "", _text(cmd.help or ""), ""])
        params = [p for p in cmd.params if p.name != "help"]
        if params:
            lines.extend(["| argument / option | default | help |", "|---|---|---|"])
            for p in params:
                if getattr(p, "param_type_name", "") == "argument":
                    names = f"`{(p.name or '').upper()}`"
                else:
                    names = " / ".join(f"`{o}`" for o in [*p.opts, *p.secondary_opts])
                default = None if callable(p.default) else p.default
                shown = "–" if default in (None, (), []) else _cell(default)
                help_text = _text(getattr(p, "help", "") or "")
                lines.append(f"| {names} | {'required' if p.required else shown} | {help_text} |")
            lines.append("")

    walk(root, ["rbench"])
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# measures
# --------------------------------------------------------------------------------------------


def _measures_page() -> str:
    """The measures rbench computes, from ``rbench.core.measures.FAMILIES`` (the parser's own
    registry) and ``rbench.engine.metrics`` (the defaults every record holds, the tie rule)."""
    from rbench.core.measures import ALIASES, FAMILIES, NOT_RANK_BASED
    from rbench.engine.metrics import RECORD_MEASURES, TIE_RULE

    lines = ["# Measures", "",
             "Generated from the measure registry (`rbench.core.measures.FAMILIES`) by `python docs/hooks/gen_pages.py`. Every "
             "RunRecord holds the paper's defaults, " + ", ".join(f"`{m}`" for m in RECORD_MEASURES)
             + " (`RR` is the paper's MRR); more are asked for by name, in "
             "[ir_measures](https://ir-measur.es/)' syntax:", "",
             "```bash",
             "rbench run -r bm25 -t ml-100k --measure P@5 --measure 'AP(rel=2)@100'",
             "rbench table -s large --measure P@5",
             "```", "",
             "or `rbench.evaluate(..., measures=[\"P@5\", \"AP(rel=2)@100\"])` and "
             "`rbench.table(..., measures=[\"P@5\"])` in Python.", "",
             "## How they are computed", "",
             "The engine hands over each positive's exact 1-based rank over the **whole pool** (or the "
             "query's whole candidate list), never a truncated list, so every measure below is exact: it "
             "is a function of the relevant documents' ranks alone. Ties are resolved first (" + _text(TIE_RULE)
             + "). The semantics are ir_measures' (trec_eval's), and `tests/engine/test_measures.py` checks "
             "every family against the `ir_measures` package on random tie-heavy, graded data:", "",
             "- `NAME@K` cuts the ranking at K; `NAME` alone reads the whole ranking.",
             "- `NAME(rel=N)` counts a positive as relevant only when its grade is at least N; grades below "
             "N are non-relevant for that measure. Without `rel` every positive is relevant (ir_measures' "
             "default `rel=1` on the integer grades trec_eval reads; `rel=1` is written without it, as "
             "ir_measures does).",
             "- A query with no relevant document scores 0 and still counts in the mean (trec_eval `-c`).",
             "- Values are fractions in [0, 1] in the record; tables show %.", "",
             "| measure | cutoff | `rel` | trec_eval | definition (per query) |", "|---|---|---|---|---|"]
    for f in FAMILIES.values():
        cutoff = "required" if f.cutoff_required else "optional"
        lines.append(f"| `{f.name}` | {cutoff} | {'yes' if f.takes_rel else 'no'} | `{f.trec_eval}` "
                     f"| {_text(f.definition)} |")
    lines += ["", "Other names ir_measures accepts for them: "
              + ", ".join(f"`{a}` = `{n}`" for a, n in ALIASES.items()) + ". A record's `metrics` key is the "
              "canonical spelling (`str()` of the parsed `Measure`, as ir_measures prints it): `MRR@10` is "
              "stored as `RR@10`.", "",
              "## Refused", "",
              "A name outside the table is refused in one line naming what is expected (exit 2). Measures "
              "that are not a function of the positives' ranks are refused with their reason:", ""]
    lines += [f"- `{name}`: {_text(why)}." for name, why in NOT_RANK_BASED.items()]
    lines += ["", "## Records and `--overwrite`", "",
              "Requested measures are stored in the RunRecord's `metrics` (and columns of its per-query "
              "file) after the defaults; they never change the ranking, the defaults or the record's "
              "identity (its file name and config hash). With `--overwrite only-missing` (the default), an "
              "existing record that lacks a requested measure is **run again** (the per-query ranks behind "
              "it are not kept, so it cannot be filled in) and rewritten with the defaults and the measures "
              "that run asked for; a record that holds them all is kept. `--overwrite never` keeps a record "
              "whatever it lacks. `rbench table --measure M` shows M's column; a run whose record lacks it "
              "shows `n/r`, with a note under the table.", ""]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# mkdocs events
# --------------------------------------------------------------------------------------------


def on_config(config: Any) -> Any:
    nav = config.get("nav")
    if nav is None:
        return config
    for entry in nav:
        if not isinstance(entry, dict):
            continue
        key, value = next(iter(entry.items()))
        if key == "Tasks" and isinstance(value, list):
            value.extend({name: f"tasks/{name}.md"} for name, _ in _tasks())
        elif key == "Rankers" and isinstance(value, list):
            value.extend({name: f"rankers/{name}.md"} for name, _, _ in _rankers())
    return config


def on_files(files: Files, config: Any) -> Files:
    generated = {"tasks/index.md": _tasks_index(), "rankers/index.md": _rankers_index()}
    generated.update({f"tasks/{name}.md": text for name, text in _tasks()})
    generated.update({f"rankers/{name}.md": text for name, _, text in _rankers()})
    for path, text in generated.items():
        files.append(File.generated(config, path, content=text))
    return files


# --------------------------------------------------------------------------------------------
# committed reference pages
# --------------------------------------------------------------------------------------------

DOCS = Path(__file__).resolve().parents[1]
STALE_HINT = "python docs/hooks/gen_pages.py"  # the command that rewrites them


def third_party_pages() -> bool:
    """Whether the builder asked for pages of third-party ranker plugins too."""
    return os.environ.get("RBENCH_DOCS_PLUGINS", "") not in ("", "0")


def committed_pages() -> dict[str, str]:
    """The generated pages kept in ``docs/`` (path under docs/ -> text): linked from pages and help
    texts that are read outside the built site."""
    note = f"<!-- generated by {STALE_HINT}: do not edit; tests/test_docs.py checks it is fresh -->\n"
    return {"reference/cli-commands.md": note + _cli_page(), "reference/measures.md": note + _measures_page()}


def main() -> int:
    for rel, text in committed_pages().items():
        path = DOCS / rel
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            print(f"wrote docs/{rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
