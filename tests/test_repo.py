"""Repository invariants: CI runs exactly the README's test command; no real data is tracked."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", text, re.S)
    assert block is not None, "README must open with a bash block"
    assert text.index(block.group(0)) < 20, "the commands must come first"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_readme_opens_with_demo_and_test_commands():
    cmds = _readme_commands()
    assert len(cmds) == 2
    assert "rbench run" in cmds[0] and "rbench table" in cmds[0]
    assert "pytest" in cmds[1] and "torch==2.13.0" in cmds[1]


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    assert _readme_commands()[1] in ci.splitlines()


def test_no_real_data_or_weights_tracked():
    try:
        files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return
    bad = [f for f in files.splitlines()
           if re.search(r"\.(inter|item|gguf|safetensors)$|collection\.tsv$|router_data\.csv$|qrels\.txt$", f)]
    assert bad == []


def test_every_package_folder_is_installed():
    """pyproject lists its packages (rankers/ installs as rbench_rankers): a new folder must be added."""
    import tomllib

    setup = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    folders = {v: k for k, v in setup["package-dir"].items()}
    found = set()
    for init in [*(ROOT / "rbench").rglob("__init__.py"), *(ROOT / "rankers").rglob("__init__.py")]:
        parts = init.parent.relative_to(ROOT).parts
        found.add(".".join([folders.get(parts[0], parts[0]), *parts[1:]]))
    assert found == set(setup["packages"])


def test_the_reference_records_are_committed_in_records_and_a_users_runs_are_ignored():
    """``records/`` holds the committed, CLI-generated reference records; ``results/`` is the CLI's
    default output, a user's own runs, and must never be committed (it once was the committed
    folder and collided with ``rbench/results/`` and ``benchmarks/results/``: issue 43)."""
    try:
        files = subprocess.run(["git", "ls-files", "records", "results"], cwd=ROOT, capture_output=True,
                               text=True, check=True).stdout.splitlines()
        ignored = subprocess.run(["git", "check-ignore", "-q", "results/large/ml-100k/pop.json"], cwd=ROOT)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    assert any(f.startswith("records/") and f.endswith(".json") for f in files)
    assert [f for f in files if f.startswith("results/")] == []
    assert ignored.returncode == 0, "results/ (the default --results-dir) must be git-ignored"
