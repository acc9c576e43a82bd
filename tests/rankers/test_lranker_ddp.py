"""Data-parallel LRanker training: two CPU processes (gloo) stay in lock-step and their
averaged gradient equals the gradient of the union of their batches."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from tests.lranker_testkit import build_tiny_qwen, toy_task


def _worker(rank: int, size: int, init: str, model_dir: str, out_dir: str) -> None:
    import torch.distributed as dist

    from rbench_rankers.lranker.aggregation import Aggregator
    from rbench_rankers.lranker.config import LRankerConfig
    from rbench_rankers.lranker.model import LRankerModel, load_backbone
    from rbench_rankers.lranker.train import PartitionSampler, average_gradients, train

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=size)
    # 1) gradient averaging
    p = torch.nn.Parameter(torch.zeros(3))
    p.grad = torch.full((3,), float(rank + 1))
    average_gradients([p])
    np.save(f"{out_dir}/grad{rank}.npy", p.grad.numpy())
    # 2) two training steps on the tiny model: parameters identical on both ranks afterwards
    cfg = LRankerConfig(model=model_dir, n_clusters=4, assign_dims=0, epochs=1, n_negatives=7, max_length=64,
                        candidate_max_length=16, batch_size=8, lr=1e-3, max_train_queries=32)
    task = toy_task(n_train=40)
    torch.manual_seed(0)
    model = LRankerModel(cfg, load_backbone(cfg))
    vec = model.candidate_embeddings(list(task.pool.texts))
    vec /= np.linalg.norm(vec, axis=1, keepdims=True)
    model.attach_projector(vec.shape[1])
    model.add_lora()
    report = train(model, cfg, task.train, vec, PartitionSampler(Aggregator("kmeans", 4, 0), vec, 10, 0), seed=0,
                   pool_texts=list(task.pool.texts))
    flat = torch.cat([q.detach().flatten() for q in model.trainable_parameters()]).numpy()
    np.save(f"{out_dir}/params{rank}.npy", flat)
    np.save(f"{out_dir}/steps{rank}.npy", np.array([report.steps, report.queries_per_epoch]))
    dist.destroy_process_group()


@pytest.mark.slow
def test_two_process_training_stays_in_sync(tmp_path):
    model_dir = build_tiny_qwen(tmp_path / "qwen")
    init = f"file://{tmp_path / 'rendezvous'}"
    mp.start_processes(_worker, args=(2, init, str(model_dir), str(tmp_path)), nprocs=2, join=True,
                       start_method="spawn")
    np.testing.assert_array_equal(np.load(tmp_path / "grad0.npy"), [1.5, 1.5, 1.5])
    np.testing.assert_array_equal(np.load(tmp_path / "grad1.npy"), [1.5, 1.5, 1.5])
    p0, p1 = np.load(tmp_path / "params0.npy"), np.load(tmp_path / "params1.npy")
    np.testing.assert_allclose(p0, p1, rtol=0, atol=1e-6)  # replicas never diverge
    # each rank saw half of the 32 queries per epoch: 16 queries in 2 steps of 8
    assert np.load(tmp_path / "steps0.npy").tolist()[0] == 2


def test_rank_rows_partition_an_epoch():
    from rbench_rankers.lranker.train import rank_rows

    rows = np.arange(11)
    parts = [rank_rows(rows, r, 2) for r in range(2)]
    assert len(parts[0]) == len(parts[1]) == 5
    assert not set(parts[0]) & set(parts[1])
    np.testing.assert_array_equal(rank_rows(rows, 0, 1), rows)


@pytest.mark.slow
def test_rbench_run_launched_trains_distributed_then_evaluates(tmp_path, monkeypatch, capsys):
    """``rbench run`` as one process of a launched run (``torchrun``/``accelerate launch`` set
    LOCAL_RANK and WORLD_SIZE): LRanker trains with torch.distributed up, process 0 saves the
    checkpoint and then scores with the trained model and writes the RunRecord."""
    import json
    import socket

    import torch.distributed as dist

    from rbench.cli.app import main
    from rbench_rankers.lranker import train as train_module

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for key, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(port)}.items():
        monkeypatch.setenv(key, value)
    seen = []
    real_world = train_module.world
    monkeypatch.setattr(train_module, "world", lambda: (seen.append(dist.is_initialized()), real_world())[1])
    model_dir = build_tiny_qwen(tmp_path / "qwen")
    sets = [f"model={model_dir}", "epochs=1", "max_train_queries=16", "select_max_queries=8", "n_clusters=4",
            "assign_dims=0", "max_length=64", "candidate_max_length=16", "tts_widths=2", "tts_depths=0,1",
            "device=cpu"]
    code = main(["run", "--ranker", "lranker", "--task", "ml-100k", *[a for s in sets for a in ("--set", s)],
                 "--max-queries", "16", "-q", "--results-dir", str(tmp_path / "res")])
    capsys.readouterr()
    assert code == 0 and seen and all(seen)  # training saw the process group
    assert not dist.is_initialized()  # left before scoring
    (record,) = (tmp_path / "res").rglob("lranker-*.json")
    rec = json.loads(record.read_text())
    assert rec["n_queries"] == 16 and rec["ranker_info"]["loaded_checkpoint"] is False  # trained in this run
    assert (Path(rec["ranker_info"]["checkpoint"]) / "meta.json").exists()  # rank 0 saved it
