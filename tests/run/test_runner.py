"""The run path: one plan resolved once, one scoring road, the parsed variant recorded, the config
identity read from the protocol's ``config``, and ``rbench run`` as a launched (multi-process) run."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from rbench import rankers as plugins
from rbench.cli.app import main
from tests.run.test_end_to_end import all_tasks  # noqa: F401  (fixture: every task's raw files)


class _EP:
    def __init__(self, obj):
        self.obj, self.loads = obj, 0

    def load(self):
        self.loads += 1
        return self.obj


def _register(monkeypatch, **classes) -> dict[str, _EP]:
    real = plugins._entry_points
    eps = {name: _EP(cls) for name, cls in classes.items()}
    monkeypatch.setattr(plugins, "_entry_points", lambda: {**real(), **eps})
    return eps


@dataclass
class _Weights:
    alpha: float = 1.0
    tag: str = "plain"


class ProtocolOnly:
    """A plugin written against the ``Ranker`` protocol alone: no BaseRanker, no ``cfg``."""

    name, version = "protocol-only", "1"

    Config = _Weights

    def __init__(self, config=None, context=None):
        config = config or _Weights()
        self.alpha, self.tag = config.alpha, config.tag

    @property
    def config(self):
        return {"alpha": self.alpha, "tag": self.tag}

    def fit(self, task):
        return None

    def index(self, pool):
        return None

    def score(self, queries, candidates):
        cand = candidates if candidates.ndim == 2 else np.broadcast_to(candidates, (len(queries), len(candidates)))
        return np.cos(self.alpha * cand.astype(np.float64))


class CountingEmbeddings:
    """An embedding ranker that counts what it is asked to encode."""

    name, version, config, domains = "counting", "1", {}, ("recommendation",)
    calls = {"pool": 0, "queries": 0, "query_rows": 0}

    def __init__(self, config=None, context=None):
        pass

    def fit(self, task):
        return None

    def _vec(self, n, seed):
        return np.random.default_rng(seed).standard_normal((n, 8)).astype(np.float32)

    def encode_pool(self, pool):
        CountingEmbeddings.calls["pool"] += 1
        return self._vec(len(pool), 0)

    def encode_queries(self, queries):
        CountingEmbeddings.calls["queries"] += 1
        CountingEmbeddings.calls["query_rows"] += len(queries)
        return np.stack([self._vec(1, abs(hash(str(q))) % 2**31)[0] for q in queries.ids])


def test_the_plan_resolves_everything_once(monkeypatch, tmp_path):
    from rbench.run import runner
    from rbench.tasks import family, pools, registry

    eps = _register(monkeypatch, **{"protocol-only": ProtocolOnly})
    counts = {"resolve": 0, "options": 0, "variant": 0}

    def counting(key, fn):
        def wrapped(*a, **k):
            counts[key] += 1
            return fn(*a, **k)
        return wrapped

    resolve = counting("resolve", registry.resolve)
    for module in (registry, runner):
        monkeypatch.setattr(module, "resolve", resolve)
    monkeypatch.setattr(family.Task, "options", counting("options", family.Task.options))
    parse = counting("variant", pools.parse_variant)
    for module in (pools, runner):
        monkeypatch.setattr(module, "parse_variant", parse)
    plan = runner.make_plan(runner.RunOptions(ranker="protocol-only", task="ml-100k", sets={"alpha": "2"},
                                              max_queries=30, results_dir=tmp_path))
    assert counts == {"resolve": 1, "options": 1, "variant": 1} and eps["protocol-only"].loads == 1
    assert plan.ranker_cls is ProtocolOnly and plan.ranker_config == _Weights(alpha=2.0)
    assert plan.variant == pools.Variant("original") and plan.spec.name == "ml-100k"
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.seed = 1  # type: ignore[misc]
    out = runner.execute(plan)
    assert counts == {"resolve": 1, "options": 1, "variant": 1} and eps["protocol-only"].loads == 1
    assert out.record.n_queries == 30 and out.record.ranker["config"] == {"alpha": 2.0, "tag": "plain"}


def test_protocol_only_plugin_gets_a_record_and_a_row_per_set(monkeypatch, capsys, tmp_path):
    """The config hash reads the protocol's ``config``: two ``--set`` values, two RunRecords, two rows."""
    from rbench.results.leaderboard import build

    _register(monkeypatch, **{"protocol-only": ProtocolOnly})
    res = tmp_path / "res"
    for alpha in ("2", "3", "1"):  # 1 is the default
        args = ["run", "-r", "protocol-only", "-t", "ml-100k", "--max-queries", "40", "-q", "--results-dir", str(res)]
        assert main(args + ["--set", f"alpha={alpha}"]) == 0
    capsys.readouterr()
    files = sorted(p.name for p in (res / "large" / "ml-100k").glob("*.json"))
    assert len(files) == 3 and "protocol-only.json" not in files  # max_queries is part of the identity
    recs = [json.loads((res / "large" / "ml-100k" / f).read_text()) for f in files]
    assert sorted(r["run_options"]["non_default"].get("ranker", {}).get("alpha", 1.0) for r in recs) == [1.0, 2.0, 3.0]
    assert len({r["config_hash"] for r in recs}) == 3
    lb = build(res, "large")
    assert sorted(lb.label(r) for r in lb.rows) == ["protocol-only", "protocol-only (alpha=2.0)",
                                                    "protocol-only (alpha=3.0)"]


def test_variant_is_parsed_once_and_recorded_by_its_label(all_tasks, capsys, tmp_path):  # noqa: F811
    """``scaled=1_00``, ``scaled=100`` and ``scaled:100`` are one variant: one path, one label."""
    res = tmp_path / "res"
    paths = []
    for text in ("scaled=1_00", "scaled=100", "scaled:100"):
        assert main(["run", "-r", "random", "-t", "rec-movie", "--variant", text, "--json",
                     "--results-dir", str(res)]) == 0
        rec = json.loads(capsys.readouterr().out)
        assert rec["variant"] == "scaled:100" and rec["task_info"]["pool_size"] == 100
        paths.append(sorted(p.relative_to(res) for p in res.rglob("*.json")))
    assert paths[0] == paths[1] == paths[2] == [Path("large/rec-movie~scaled-100/random.json")]
    assert main(["run", "-r", "random", "-t", "rec-movie", "--variant", "scaled=1_0x", "--results-dir", str(res)]) == 2


def test_one_scoring_road_encodes_once(monkeypatch, tmp_path):
    """The pool and every query are encoded once per run; the ANN measurement reuses them."""
    pytest.importorskip("faiss")
    from rbench.run.runner import RunOptions, run

    _register(monkeypatch, counting=CountingEmbeddings)
    opts = {"ranker": "counting", "task": "ml-100k", "results_dir": tmp_path, "max_queries": 300, "write": False,
            "batch_size": 64}
    CountingEmbeddings.calls.update(pool=0, queries=0, query_rows=0)
    plain = run(RunOptions(**opts))
    assert CountingEmbeddings.calls == {"pool": 1, "queries": 5, "query_rows": 300}
    CountingEmbeddings.calls.update(pool=0, queries=0, query_rows=0)
    with_ann = run(RunOptions(**opts, ann="flat"))
    assert CountingEmbeddings.calls == {"pool": 1, "queries": 5, "query_rows": 300}
    assert with_ann.record.metrics == plain.record.metrics
    assert with_ann.record.ranker_info["ann"]["recall@100_vs_exact"] == pytest.approx(1.0)
    assert plain.result.topk_index.shape == (300, 100)  # the default top-100 (the run file's)
    assert run(RunOptions(**opts, topk=0)).result.topk_index.shape == (300, 0)  # none asked for: none kept
    top = run(RunOptions(**opts, topk=10))
    assert top.result.topk_index.shape == (300, 10) and top.record.metrics == plain.record.metrics


def test_world_comes_from_the_launcher_environment():
    from rbench.run.runner import World

    assert World.from_env({}) == World() and World().main and not World().launched
    w = World.from_env({"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4"})
    assert (w.rank, w.local_rank, w.size, w.launched, w.main) == (3, 1, 4, True, False)


@dataclass
class _Device:
    device: str = "auto"


class FitRecorder:
    """Writes, from inside ``fit``, which process of which torch.distributed world fitted."""

    name, version, domains = "fit-recorder", "1", ("recommendation",)
    Config = _Device
    out_dir = ""

    def __init__(self, config=None, context=None):
        self.device = (config or _Device()).device

    @property
    def config(self):
        return {"device": self.device}

    def fit(self, task):
        import torch.distributed as dist

        rank, size = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (-1, 0)
        Path(FitRecorder.out_dir, f"fit-{rank}-of-{size}").write_text(self.device)

    def index(self, pool):
        return None

    def score(self, queries, candidates):
        cand = candidates if candidates.ndim == 2 else np.broadcast_to(candidates, (len(queries), len(candidates)))
        return -cand.astype(np.float64)


def _launched_process(rank: int, size: int, port: int, out_dir: str, home: str) -> None:
    """One process of ``torchrun --nproc_per_node SIZE -m rbench.cli run ...``: the environment a
    launcher sets, then the ordinary CLI."""
    import os

    import torch

    torch.set_num_threads(1)
    os.environ.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(size),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RBENCH_HOME": home})
    real = plugins._entry_points
    plugins._entry_points = lambda: {**real(), "fit-recorder": _EP(FitRecorder)}
    FitRecorder.out_dir = out_dir
    code = main(["run", "-r", "fit-recorder", "-t", "ml-100k", "--max-queries", "20", "-q",
                 "--results-dir", str(Path(out_dir) / "res")])
    Path(out_dir, f"exit-{rank}").write_text(str(code))


@pytest.mark.slow
def test_rbench_run_under_a_launcher_fits_everywhere_and_records_once(tmp_path, _isolated_home):
    """``rbench run`` as a launched run (what replaced ``rankers/lranker/launch.py``): torch.distributed
    is up during every process's ``fit``, each process gets its own device, process 0 alone writes
    the RunRecord."""
    torch = pytest.importorskip("torch")
    import socket

    import torch.multiprocessing as mp

    if torch.cuda.is_available():
        pytest.skip("checks the CPU (gloo) device choice")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(_launched_process, args=(2, port, str(tmp_path), str(_isolated_home)), nprocs=2,
                       join=True, start_method="spawn")
    assert [(tmp_path / f"exit-{r}").read_text() for r in range(2)] == ["0", "0"]
    assert sorted(p.name for p in tmp_path.glob("fit-*")) == ["fit-0-of-2", "fit-1-of-2"]
    assert (tmp_path / "fit-1-of-2").read_text() == "cpu"  # a launched process's own device
    (record,) = (tmp_path / "res").rglob("*.json")
    rec = json.loads(record.read_text())
    assert rec["run_options"]["world_size"] == 2 and rec["n_queries"] == 20
    assert rec["ranker"]["config"] == {"device": "cpu"}
