"""Bad targets, options and rankers that used to end in exit 1 (a traceback, often after the
whole run) or a silent exit 0 (issue 29): each is one line naming the thing and exit 2, found
before the work starts.

Choices: ``--topk`` above ``MAX_TOPK`` is refused (the pool size is unknown when options are
parsed; a run file of more lines per query than that is no ranking anyone reads); a ranker
class whose ``__init__`` takes no ``config``/``context`` is built without them (README's own
example is such a class); a ranker's ``score`` may return anything numpy converts, a torch
tensor included (detached), else one line naming the ranker.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import rbench
from rbench.core.errors import RankerOutputError, RBenchError
from tests.helpers import cli, make_pool, make_queries, one_line

ROOT = Path(__file__).resolve().parents[2]


def _forbid(monkeypatch, module, name: str, what: str) -> None:
    """Calling ``module.name`` fails the test: what is checked must be checked before ``what``."""

    def refuse(*_a, **_k):
        raise AssertionError(f"{what} before the check")

    monkeypatch.setattr(module, name, refuse)


@pytest.fixture
def no_loading(monkeypatch):
    """Loading the task fails the test: what is checked must be checked before it."""
    from rbench.run import runner

    _forbid(monkeypatch, runner, "load", "the task was loaded")


# --------------------------------------------------------------------------------------------
# 1. targets: a folder where the RunRecord goes
# --------------------------------------------------------------------------------------------


def test_a_folder_where_the_record_goes_is_refused_before_loading(capsys, tmp_path, no_loading):
    (tmp_path / "large" / "ml-100k" / "pop.json").mkdir(parents=True)
    code, _, err = cli(capsys, "run", "-r", "pop", "-t", "ml-100k", "-q", "--results-dir", str(tmp_path))
    assert code == 2 and "pop.json" in one_line(err) and "folder" in err


# --------------------------------------------------------------------------------------------
# 2. RBENCH_HOME under a regular file
# --------------------------------------------------------------------------------------------


def test_rbench_home_under_a_file_is_one_line(capsys, tmp_path, monkeypatch):
    blocker = tmp_path / "hostname"
    blocker.write_text("x")
    monkeypatch.setenv("RBENCH_HOME", str(blocker / "x"))
    code, _, err = cli(capsys, "run", "-r", "pop", "-t", "ml-100k", "-q", "--no-write")
    line = one_line(err)
    assert code == 2 and "RBENCH_HOME" in line and f"{blocker} is a file" in line


# --------------------------------------------------------------------------------------------
# 3. output paths of reproduce, data qrels, plot
# --------------------------------------------------------------------------------------------


def test_reproduce_output_that_is_a_file_is_refused_before_running(capsys, tmp_path, monkeypatch):
    from rbench.audit import reproduce

    _forbid(monkeypatch, reproduce, "run", "the experiment ran")
    target = tmp_path / "tables"
    target.write_text("keep me")
    code, _, err = cli(capsys, "reproduce", "smoke", "-q", "--results-dir", str(tmp_path / "r"), "-o", str(target))
    assert code == 2 and "--output" in one_line(err) and str(target) in err
    assert target.read_text() == "keep me"


def test_qrels_output_under_a_file_is_refused_before_loading(capsys, tmp_path, monkeypatch):
    from rbench.tasks import registry

    _forbid(monkeypatch, registry, "load", "the task was loaded")
    blocker = tmp_path / "f"
    blocker.write_text("x")
    code, _, err = cli(capsys, "data", "qrels", "ml-100k", "-o", str(blocker / "x"))
    assert code == 2 and f"{blocker} is a file" in one_line(err)


def test_plot_output_not_a_png_is_refused(capsys, tmp_path):
    code, _, err = cli(capsys, "plot", "scaling", "-t", "ml-100k", "-r", "pop", "--results-dir", str(tmp_path),
                       "-o", str(tmp_path / "x.txt"))
    assert code == 2 and ".png" in one_line(err) and "--output" in err
    assert not (tmp_path / "x.txt").exists()


# --------------------------------------------------------------------------------------------
# 4. --topk beyond any ranking anyone reads
# --------------------------------------------------------------------------------------------


def test_a_huge_topk_is_refused_before_any_work(capsys, tmp_path, no_loading):
    code, _, err = cli(capsys, "run", "-r", "pop", "-t", "ml-100k", "-q", "--results-dir", str(tmp_path),
                       "--topk", str(10**9))
    assert code == 2 and "--topk" in one_line(err) and "at most" in err


# --------------------------------------------------------------------------------------------
# 5. rbench.evaluate(task=...) of the wrong kind
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("task", [None, 3, "data"])
def test_evaluate_says_what_task_takes(task):
    if task == "data":
        from rbench.api import TaskData

        task = object.__new__(TaskData)
    with pytest.raises(RBenchError, match="task") as info:
        rbench.evaluate("pop", task=task)
    assert "name" in str(info.value) and type(task).__name__ in str(info.value)


# --------------------------------------------------------------------------------------------
# 6. what a ranker returns: converted where numpy can take it, else one line
# --------------------------------------------------------------------------------------------


class _TensorScores:
    name, version, config = "tensorish", "1", {}

    def fit(self, task):
        pass

    def index(self, pool):
        pass

    def score(self, queries, candidates):
        import torch

        rows = np.array(np.broadcast_to(candidates, (len(queries), candidates.shape[-1])))
        return torch.as_tensor(rows, dtype=torch.float32) * torch.ones(1, requires_grad=True)


class _ListVectors:
    name, version, config = "listy", "1", {}

    def fit(self, task):
        pass

    def index(self, pool):
        pass

    def encode_pool(self, pool):
        return [[float(i), 1.0] for i in range(len(pool))]

    def encode_queries(self, queries):
        return [[1.0, 0.0] for _ in range(len(queries))]


class _DictScores(_TensorScores):
    name = "dicty"

    def score(self, queries, candidates):
        return {"scores": 1}


def _small():
    return make_queries([[1], [4]]), make_pool(6)


def test_a_tensor_that_requires_grad_is_scored():
    pytest.importorskip("torch")
    from rbench.engine.scan import scan

    queries, pool = _small()
    result = scan(_TensorScores(), queries, pool, topk=3)
    assert list(result.topk_index[0]) == [5, 4, 3]


def test_vectors_given_as_lists_are_scored():
    from rbench.engine.scan import scan

    queries, pool = _small()
    result = scan(_ListVectors(), queries, pool, topk=2)
    assert list(result.topk_index[0]) == [5, 4]


def test_scores_numpy_cannot_take_name_the_ranker():
    from rbench.engine.scan import scan

    queries, pool = _small()
    with pytest.raises(RankerOutputError, match="dicty"):
        scan(_DictScores(), queries, pool)


# --------------------------------------------------------------------------------------------
# 7. loading and building rankers
# --------------------------------------------------------------------------------------------


def _readme_ranker(tmp_path: Path) -> Path:
    """README's ``LastItemMarkov`` block, written to a file as a user would (its class only)."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```python\n(.*?class LastItemMarkov.*?)```", text, re.S).group(1)
    code = block.split("\nmine = ")[0]
    path = tmp_path / "my_rankers.py"
    path.write_text(code)
    return path


def test_readme_ranker_class_runs_from_the_cli(capsys, tmp_path):
    path = _readme_ranker(tmp_path)
    code, out, err = cli(capsys, "run", "-r", f"{path}:LastItemMarkov", "-t", "ml-100k", "-q", "--max-queries", "50",
                         "--results-dir", str(tmp_path / "results"), "--json")
    assert code == 0, err
    assert '"name": "markov"' in out


def test_readme_ranker_class_runs_from_python(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("my_rankers_readme", _readme_ranker(tmp_path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rec = rbench.evaluate(module.LastItemMarkov, "ml-100k", max_queries=50)
    assert rec.ranker["name"] == "markov" and 0 <= rec.metrics["RR"] <= 1


def test_a_ranker_init_raising_value_error_is_one_line(capsys, tmp_path, no_loading):
    path = tmp_path / "bad_init.py"
    path.write_text(textwrap.dedent("""
        class Picky:
            name = "picky"
            def __init__(self, config=None, context=None):
                raise ValueError("needs a GPU with 80 GB")
            def score(self, queries, candidates):
                return None
    """))
    code, _, err = cli(capsys, "run", "-r", f"{path}:Picky", "-t", "ml-100k", "-q", "--results-dir", str(tmp_path))
    line = one_line(err)
    assert code == 2 and "picky" in line and "needs a GPU with 80 GB" in line


def test_a_ranker_file_calling_sys_exit_is_one_line(capsys, tmp_path):
    path = tmp_path / "exits.py"
    path.write_text("import sys\nsys.exit(0)\n")
    code, _, err = cli(capsys, "run", "-r", f"{path}:Anything", "-t", "ml-100k", "-q", "--results-dir", str(tmp_path))
    assert code == 2 and "exited while being imported" in one_line(err) and str(path) in err


def test_a_rankers_py_in_the_working_folder_does_not_hide_the_builtins(tmp_path):
    (tmp_path / "rankers.py").write_text("raise RuntimeError('the user file was imported')\n")
    code = ("import sys; from rbench.rankers import load_ranker_class; "
            "print(load_ranker_class('pop').__module__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "rbench_rankers.floors"
