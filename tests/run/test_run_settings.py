"""Run settings are declared once (``rbench.core.settings.RunSettings``): the options of ``rbench
run`` and the Python signatures (``plan_run``, ``evaluate``, ``run_outcome``) are held against its
fields, so an option added, renamed or given another default in one place alone fails here."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from rbench import public
from rbench.cli.run import run_cmd
from rbench.core.settings import DEFAULT_SEED, DEFAULTS, RunSettings, help_of
from rbench.run.runner import RunOptions

# the options of ``rbench run`` that are not run settings: what to run (names, --set) and how to print
CLI_ONLY = {"rankers", "tasks", "variants", "sets", "no_write", "as_json", "quiet"}
FLAGS = {"measures": "--measure"}  # a repeated option is named in the singular
REPEATED = {"measures"}
RUN_OPTIONS = {f.name for f in dataclasses.fields(RunOptions)} - {f.name for f in dataclasses.fields(RunSettings)}


def _cli_options() -> dict[str, object]:
    return {name: p.default for name, p in inspect.signature(run_cmd).parameters.items()}


def test_every_run_setting_is_a_cli_option_with_its_default_and_help():
    options = _cli_options()
    for f in dataclasses.fields(RunSettings):
        if f.name == "write":  # written by default; the flag is its negation
            assert options["no_write"].default is False
            continue
        assert f.name in options, f"RunSettings.{f.name} has no option in rbench run"
        opt = options[f.name]
        assert FLAGS.get(f.name, f"--{f.name.replace('_', '-')}") in opt.param_decls, f.name
        # a repeatable option's default is None (typer's), read as the setting's empty tuple
        assert opt.default == (None if f.name in REPEATED else getattr(DEFAULTS, f.name)), f.name
        assert opt.help == help_of(f.name), f.name


def test_every_cli_option_is_a_run_setting_or_declared_cli_only():
    options = set(_cli_options())
    settings = {f.name for f in dataclasses.fields(RunSettings)}
    assert options - settings - RUN_OPTIONS - CLI_ONLY == set()


@pytest.mark.parametrize("fn", [public.plan_run, public.evaluate])
def test_python_signatures_take_run_settings_with_their_defaults(fn):
    params = inspect.signature(fn).parameters
    settings = {f.name for f in dataclasses.fields(RunSettings)}
    for name, p in params.items():
        if name in settings and name != "results_dir":  # results_dir=None: write nothing (the CLI's --no-write)
            assert p.default == getattr(DEFAULTS, name), f"{fn.__name__}({name}=...)"
    assert params["seed"].default == DEFAULT_SEED


def test_run_outcome_passes_its_options_to_plan_run():
    """``run_outcome`` declares no setting of its own: every keyword goes to ``plan_run``."""
    params = inspect.signature(public.run_outcome).parameters
    assert [p.kind for p in params.values()][-1] is inspect.Parameter.VAR_KEYWORD
    assert set(params) - {"ranker", "task", "progress", "kwargs"} == set()


def test_the_task_domains_are_written_once():
    """``rbench.api.Domain`` names the five domains; anywhere else they are read from ``DOMAINS``,
    never written out again (a sixth domain is then added in one place)."""
    import ast
    from pathlib import Path
    from typing import get_args

    from rbench.api import DOMAINS, Domain

    assert DOMAINS == get_args(Domain) and len(DOMAINS) == 5
    root = Path(__file__).resolve().parents[2]
    written = []
    for path in sorted((root / "rbench").rglob("*.py")) + sorted((root / "rankers").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                names = {e.value for e in node.elts if isinstance(e, ast.Constant)}
                if set(DOMAINS) <= names:
                    written.append(f"{path.relative_to(root)}:{node.lineno}")
    assert written == [f"rbench/api.py:{_domain_line(root)}"], written


def _domain_line(root) -> int:
    text = (root / "rbench" / "api.py").read_text().splitlines()
    return next(i for i, line in enumerate(text, 1) if line.startswith("Domain = Literal["))
