"""Issue 43 item 3: the ranker contract is one declared thing.

Every attribute the harness reads from a ranker class or object is declared on the protocols of
``rbench.api`` (``Ranker``, ``EmbeddingRanker``, ``RankerTraits``: ``RANKER_ATTRIBUTES``). A spy
ranker records every attribute that rbench's own code looks up on it (on the class, through a
metaclass, and on the object) during runs of each kind: plain ``score`` and dense
(``encode_pool``/``encode_queries``) rankers on a recommendation task (ml-100k, exclusions) and a
routing task, a two-stage run (``--rerank-from pop``), a CLI run of a registered plugin, its
``rbench verify --rerun`` and ``rbench rankers``. A read of anything undeclared fails the test with its name.

A second, static check reads rbench's source for ``getattr``/``hasattr`` with a literal name on an
object named as a ranker (``ranker``, ``cls``, ``ranker_cls``, ``instance``, ``x.ranker``, ...):
it also covers paths no CPU test runs (a GPU scan, Ray shards).

Planted bugs it catches (each checked by planting it): the runner reading an undeclared
``getattr(cls, "uses_gpu", False)`` in ``plan_run``; the scorer reading
``getattr(ranker, "batch_hint", None)`` (``test_every_read_is_declared`` and
``test_no_undeclared_read_in_the_source``); ``RANKER_ATTRIBUTES`` losing a protocol's methods
(``test_the_declared_set_is_the_protocols``).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rbench
from rbench import rankers as discovery
from rbench.api import RANKER_ATTRIBUTES, BaseRanker, EmbeddingRanker, Ranker, RankerTraits
from tests.helpers import cli
from tests.tasks.test_tasks_routing import write_routing_task

READS: set[str] = set()  # attributes rbench's code looked up on a spy (class or object)


def _note(name: str) -> None:
    """Record ``name`` when the lookup comes from rbench's own code (the harness), not the spy's."""
    if name.startswith("_"):
        return  # Python's own (``__class__``, ``__dict__``, ``__init__`` via the type, ...)
    caller = sys._getframe(2).f_globals.get("__name__", "")
    if caller == "rbench" or caller.startswith("rbench."):
        READS.add(name)


class Recording(type):
    """A metaclass that notes every class-attribute lookup (``getattr(cls, "transfers")``)."""

    def __getattribute__(cls, name: str) -> Any:
        _note(name)
        return super().__getattribute__(name)


class Spy(metaclass=Recording):
    """A popularity ranker (train positives counted) that notes every attribute looked up on it."""

    name, version = "contract-spy", "1"
    config: dict = {}

    def __getattribute__(self, name: str) -> Any:
        _note(name)
        return object.__getattribute__(self, name)

    def fit(self, task) -> None:
        self.counts = np.bincount(task.train.positives.values, minlength=len(task.fit_pool)).astype(np.float64) + 1

    def index(self, pool) -> None:
        return None

    def score(self, queries, candidates):
        c = self.counts[candidates] if len(self.counts) > int(candidates.max()) else candidates.astype(np.float64)
        return np.broadcast_to(c, (len(queries), len(candidates))).copy() if candidates.ndim == 1 else c


class VectorSpy(Spy):
    name = "contract-vector-spy"

    def encode_pool(self, pool):
        return np.stack([self.counts[: len(pool)], np.ones(len(pool))], axis=1)

    def encode_queries(self, queries):
        return np.tile([1.0, 0.0], (len(queries), 1))


class _EP:
    def __init__(self, name: str, obj: type) -> None:
        self.name, self.obj, self.value = name, obj, f"tests:{obj.__name__}"

    def load(self) -> type:
        return self.obj


@pytest.fixture
def registered(monkeypatch):
    """The spies as installed plugins (``rbench rankers``, ``rbench run -r contract-spy``)."""
    real = discovery._entry_points
    monkeypatch.setattr(discovery, "_entry_points",
                        lambda: {**real(), Spy.name: _EP(Spy.name, Spy), VectorSpy.name: _EP(VectorSpy.name, VectorSpy)})


def test_the_declared_set_is_the_protocols():
    """What each protocol declares is in the set; ``BaseRanker`` holds the traits' defaults."""
    for proto in (Ranker, EmbeddingRanker, RankerTraits):
        declared = set(proto.__annotations__) | {n for n in vars(proto) if not n.startswith("_")}
        assert declared <= RANKER_ATTRIBUTES, proto.__name__
    assert {"score", "fit", "index", "encode_pool", "encode_queries", "set_dependent", "score_tolerance",
            "transfers", "needs_training", "rerank_depth", "pairwise", "presets", "config", "label", "info"} <= RANKER_ATTRIBUTES
    assert "counts" not in RANKER_ATTRIBUTES  # (the spy's own state is not contract)
    # BaseRanker holds the defaults of the class-level traits a ranker commonly leaves alone
    assert {"description", "domains", "Config", "transfers", "set_dependent", "score_tolerance", "pairwise",
            "needs_training"} <= set(dir(BaseRanker))


def test_the_spy_notes_only_the_harness():
    """The recorder itself: a harness read is noted, the spy's own reads are not."""
    READS.clear()
    spy = Spy()
    spy.counts = np.ones(3)
    spy.score(np.zeros(2), np.arange(3))  # the spy reads self.counts: not the harness
    assert "counts" not in READS
    discovery.needs_training(Spy, None)  # the harness reads needs_training, then fit
    assert {"needs_training", "fit"} <= READS


def test_every_read_is_declared(capsys, registered, tmp_path):
    READS.clear()
    routing = write_routing_task()
    for cls in (Spy, VectorSpy):
        for task in ("ml-100k", routing):
            rbench.evaluate(cls, task, max_queries=30)
        rbench.evaluate(cls(), "ml-100k", max_queries=20)  # a ready-made object
    rbench.evaluate(Spy, "ml-100k", max_queries=30, rerank_from="pop", rerank_depth=10)  # two-stage
    code, _, err = cli(capsys, "run", "-r", VectorSpy.name, "-t", "ml-100k", "--max-queries", "20",
                         "--results-dir", str(tmp_path))
    assert code == 0, err
    code, out, err = cli(capsys, "verify", str(tmp_path), "--rerun")  # reruns the record: reads the class again
    assert code == 0 and "OK" in out, out + err
    code, out, err = cli(capsys, "rankers", "--json")
    assert code == 0 and Spy.name in out, err
    # the spy was really read (score/encode paths, the scorer's and runner's optional attributes)
    assert {"score", "fit", "index", "encode_pool", "encode_queries", "set_dependent", "score_tolerance", "domains",
            "Config", "rerank_depth", "pairwise", "version", "presets"} <= READS
    undeclared = sorted(READS - RANKER_ATTRIBUTES)
    assert not undeclared, (f"the harness reads {undeclared} from rankers, which rbench.api's protocols "
                            f"(Ranker, EmbeddingRanker, RankerTraits) do not declare")


RANKERISH = {"ranker", "cls", "ranker_cls", "instance", "first"}  # how rbench names a ranker class or object


def test_no_undeclared_read_in_the_source():
    """Every ``getattr(<ranker>, "name", ...)``/``hasattr`` in rbench/ names a declared attribute."""
    root = Path(rbench.__file__).parent
    found, bad = 0, []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2):
                continue
            obj, key = node.args[0], node.args[1]
            name = obj.id if isinstance(obj, ast.Name) else obj.attr if isinstance(obj, ast.Attribute) else ""
            if name not in RANKERISH or not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                continue
            found += 1
            if not key.value.startswith("_") and key.value not in RANKER_ATTRIBUTES:
                bad.append(f"{path.relative_to(root.parent)}:{node.lineno}: {name}.{key.value}")
    assert found >= 20  # (the scan sees the harness's reads)
    assert not bad, f"reads of ranker attributes rbench.api does not declare: {bad}"
