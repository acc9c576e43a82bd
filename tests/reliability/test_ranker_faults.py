"""A ranker's fault is named as the ranker's (issue 42, class 8): an exception raised inside its
code, or a contract attribute it lacks, is one line naming the ranker, the call and the cause,
exit 2; ``--debug`` (anywhere on the command line) prints the traceback first
(``rbench.core.faults``). A bug of rbench's own stays an internal error (exit 1)."""

from __future__ import annotations

import textwrap

import pytest

from tests.helpers import cli, one_line

HEAD = """
import numpy as np


class Base:
    name, version = "{name}", "1"
    config = {{}}

    def fit(self, task):
        pass

    def index(self, pool):
        pass

    def score(self, queries, candidates):
        return np.zeros((len(queries), candidates.shape[-1]))
"""

CASES = {
    # writes into the read-only candidates the engine hands over
    "scribbler": ("score", """
class Ranker(Base):
    def score(self, queries, candidates):
        candidates[..., 0] = 0
        return np.zeros((len(queries), candidates.shape[-1]))
""", "read-only"),
    # writes into the read-only pool arrays of index()
    "indexer": ("index", """
class Ranker(Base):
    def index(self, pool):
        np.asarray(pool.ids)[0] = "x"
""", "read-only"),
    "crasher": ("fit", """
class Ranker(Base):
    def fit(self, task):
        raise KeyError("user_id")
""", "KeyError: 'user_id'"),
    "encoder": ("encode_queries", """
class Ranker:
    name, version = "encoder", "1"
    config = {}

    def fit(self, task):
        pass

    def encode_pool(self, pool):
        return np.ones((len(pool), 4), dtype=np.float32)

    def encode_queries(self, queries):
        return 1 / np.zeros(3, dtype=int)[len(queries)]
""", "IndexError"),
}


def _write(tmp_path, name: str, body: str):
    path = tmp_path / f"{name}_ranker.py"
    path.write_text(textwrap.dedent(HEAD.format(name=name)) + textwrap.dedent(body))
    return path


@pytest.mark.parametrize("name", list(CASES))
def test_an_exception_inside_ranker_code_is_one_line_naming_it(capsys, tmp_path, name):
    call, body, cause = CASES[name]
    path = _write(tmp_path, name, body)
    code, _, err = cli(capsys, "run", "-r", f"{path}:Ranker", "-t", "ml-100k", "-q", "--max-queries", "20",
                       "--results-dir", str(tmp_path / "results"))
    line = one_line(err)
    assert code == 2, err
    assert f"ranker '{name}' failed in {call}()" in line and cause in line, line
    assert not (tmp_path / "results").exists() or not list((tmp_path / "results").rglob("*.json"))


def test_debug_keeps_the_traceback(capsys, tmp_path):
    call, body, _ = CASES["crasher"]
    path = _write(tmp_path, "crasher", body)
    code, _, err = cli(capsys, "run", "-r", f"{path}:Ranker", "-t", "ml-100k", "-q", "--max-queries", "20",
                       "--no-write", "--debug")
    assert code == 2 and "Traceback" in err and "raise KeyError" in err and "failed in fit()" in err


def test_a_ranker_without_config_is_named(capsys, tmp_path):
    path = _write(tmp_path, "configless", """
class Ranker:
    name, version = "configless", "1"

    def fit(self, task):
        pass

    def index(self, pool):
        pass

    def score(self, queries, candidates):
        return np.zeros((len(queries), candidates.shape[-1]))
""")
    code, _, err = cli(capsys, "run", "-r", f"{path}:Ranker", "-t", "ml-100k", "-q", "--max-queries", "20",
                       "--no-write")
    line = one_line(err)
    assert code == 2 and "ranker 'configless' lacks 'config'" in line, line


def test_rbench_own_bug_stays_an_internal_error(capsys, tmp_path, monkeypatch):
    """The classification reads where the exception was raised: an exception in the harness's own
    code after a sound ranker scored is rbench's bug (exit 1, with its traceback)."""
    from rbench.run import runner

    def broken(*_a, **_k):
        raise ZeroDivisionError("rbench's own")

    monkeypatch.setattr(runner, "per_query", broken)
    path = _write(tmp_path, "sound", "\nclass Ranker(Base):\n    pass\n")
    code, _, err = cli(capsys, "run", "-r", f"{path}:Ranker", "-t", "ml-100k", "-q", "--max-queries", "20",
                       "--no-write")
    assert code == 1 and "internal error" in err and "ZeroDivisionError" in err and "failed in" not in err
