"""Issue 43 item 6: what a new user trips over.

- ``--help`` shows text in square brackets as written: typer renders help through rich, which read
  ``[ir-datasets]`` as a style and dropped it (``pip install 'rbench'``); every help text of every
  command is checked against its rendered ``--help``;
- ``--set k=50`` on a ranker class that declares no options says so, and where typed options are
  explained, instead of ``options:`` and an empty list;
- ``rbench table`` says where it wrote when it chose the place itself (``leaderboards/`` in the
  current folder), and ``-o -`` prints the table to stdout without writing a file (ranx's way).

Planted bugs caught (each checked by planting it): ``main`` calling ``app(...)`` without
``escape_help`` (``test_help_keeps_square_brackets``); ``ranker_config`` without its no-options
line (``test_set_on_a_class_without_options_says_how_to_declare_them``); ``-o -`` taken as a
file name (``test_table_to_stdout_writes_no_file``).
"""

from __future__ import annotations

import re

import pytest
import typer

from rbench.cli.app import app
from tests.helpers import cli, one_line
from tests.results.test_compare import _write


def _leaves(cmd, path):
    subs = getattr(cmd, "commands", None)
    if subs:
        for name, sub in subs.items():
            yield from _leaves(sub, [*path, name])
    else:
        yield path, cmd


def _squash(text: str) -> str:
    return re.sub(r"[\s│╭╮╰╯─]+", "", text)


def test_help_keeps_square_brackets(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    root = typer.main.get_command(app)
    checked = 0
    for path, cmd in _leaves(root, []):
        texts = [p.help for p in cmd.params if getattr(p, "help", None)] + [cmd.help or ""]
        bracketed = [b for t in texts for b in re.findall(r"\S*\[[^\]\s]+\]\S*", t)]
        if not bracketed:
            continue
        code, out, err = cli(capsys, *path, "--help")
        assert code == 0, err
        shown = _squash(out)
        for b in bracketed:
            assert _squash(b) in shown, f"rbench {' '.join(path)} --help drops {b!r}"
            checked += 1
    assert checked >= 3  # rbench[ir-datasets], rbench[hf], REPO[:CONFIG], ... (the check ran)
    code, out, _ = cli(capsys, "data", "import", "--help")
    assert "pip install 'rbench[ir-datasets]'" in " ".join(out.split())


PLAIN = """
import numpy as np


class Plain:
    name, version = "plain", "1"
    config = {}

    def __init__(self, k=10):
        self.k = k

    def fit(self, task):
        pass

    def index(self, pool):
        pass

    def score(self, queries, candidates):
        return np.zeros((len(queries), candidates.shape[-1]))
"""


def test_set_on_a_class_without_options_says_how_to_declare_them(capsys, tmp_path):
    (tmp_path / "plain.py").write_text(PLAIN)
    code, _, err = cli(capsys, "run", "-r", f"{tmp_path / 'plain.py'}:Plain", "-t", "ml-100k", "--set", "k=50",
                       "--results-dir", str(tmp_path / "res"))
    line = one_line(err)
    assert code == 2 and "takes no options (--set k=50)" in line and "Config" in line
    assert "Typed options" in line and "options: " not in line
    code, _, err = cli(capsys, "run", "-r", "bm25", "-t", "ml-100k", "--set", "kk=1")  # a class with options
    assert code == 2 and "unknown option 'kk'" in one_line(err) and "k1" in one_line(err)


@pytest.fixture
def records(tmp_path):
    res = tmp_path / "results"
    _write(res, "pop", [0.5, 0.25, 1.0])
    _write(res, "bm25", [1.0, 0.5, 1.0])
    return res


def test_table_to_stdout_writes_no_file(capsys, records, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(capsys, "table", "-s", "large", "--results-dir", str(records), "-f", "csv", "-o", "-")
    assert code == 0, err
    assert out.splitlines()[0].startswith("ranker,task,") and len(out.splitlines()) == 3
    assert not (tmp_path / "-").exists() and not (tmp_path / "-.csv").exists()
    assert not (tmp_path / "leaderboards").exists()


def test_table_says_where_its_default_output_went(capsys, records, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(capsys, "table", "-s", "large", "--results-dir", str(records))
    assert code == 0, err
    text = " ".join(out.split())
    assert (tmp_path / "leaderboards" / "large.md").is_file()
    assert f"written: leaderboards/large.md (the default --output: leaderboards/ in {tmp_path}" in text
    code, out, _ = cli(capsys, "table", "-s", "large", "--results-dir", str(records), "-o", str(tmp_path / "x.md"))
    assert code == 0 and "the default --output" not in out  # said only where rbench chose the place


def test_every_docs_page_a_message_names_exists():
    """Help texts and messages send users to ``docs/...md`` (``rbench run --help`` to
    docs/reference/measures.md): each must be a file of the repository, where a reader of the
    message can open it, not a page that exists only in the built site."""
    from pathlib import Path

    import rbench

    root = Path(rbench.__file__).resolve().parents[1]
    named = {m for path in (root / "rbench").rglob("*.py")
             for m in re.findall(r"docs/[A-Za-z0-9_/.-]+\.md", path.read_text(encoding="utf-8"))}
    assert "docs/reference/measures.md" in named and len(named) >= 5
    missing = sorted(m for m in named if not (root / m).is_file())
    assert not missing, f"messages name docs pages that are not in the repository: {missing}"
