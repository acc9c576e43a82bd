"""The "Add a task" guide (docs/guides/add-a-task.md, moved there from README.md) runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
ADD_A_TASK = ROOT / "docs" / "guides" / "add-a-task.md"


def section_blocks(title: str, path: Path = README) -> list[str]:
    """The ```python blocks of the ``## title`` section of ``path`` (README.md by default)."""
    text = path.read_text(encoding="utf-8")
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return re.findall(r"```python\n(.*?)```", text[start:end if end >= 0 else len(text)], flags=re.S)


def page_blocks(path: Path) -> list[str]:
    """Every ```python block of a docs page, in order."""
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.S)


@pytest.fixture
def private_registry(monkeypatch):
    from rbench.tasks import registry

    monkeypatch.setattr(registry, "BUILTIN", dict(registry.BUILTIN))
    monkeypatch.setattr(registry, "TASKS", dict(registry.TASKS))
    return registry


def test_adding_a_task_to_an_existing_family_is_one_spec(private_registry, capsys):
    blocks = page_blocks(ADD_A_TASK)
    assert len(blocks) == 2
    exec(compile(blocks[0], "add-a-task.md:1", "exec"), {})
    assert "not present: rbench data download rec-games" in capsys.readouterr().out
    task = private_registry.resolve("rec-games")
    assert task.family.name == "recsys" and task.spec.downloads[0].filename == "reviews_Video_Games_5.json.gz"
    with pytest.raises(Exception, match="already registered"):
        exec(compile(blocks[0], "add-a-task.md:1", "exec"), {})


def test_a_new_family_is_one_module_and_its_registration(private_registry, capsys):
    exec(compile(page_blocks(ADD_A_TASK)[1], "add-a-task.md:2", "exec"), {})
    assert capsys.readouterr().out.split() == ["8", "32", "4", "4"]
    data = private_registry.load_task("colours", seed=0)
    assert data.pool.fingerprint and data.test.positives.values.max() < 8
    assert "colours" not in private_registry.paper_tasks()
