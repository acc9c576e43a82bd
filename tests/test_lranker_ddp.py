"""Data-parallel LRanker training: two CPU processes (gloo) stay in lock-step and their
averaged gradient equals the gradient of the union of their batches."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from tests.lranker_testkit import build_tiny_qwen, toy_task


def _worker(rank: int, size: int, init: str, model_dir: str, out_dir: str) -> None:
    import torch.distributed as dist

    from rankers.lranker.aggregation import Aggregator
    from rankers.lranker.config import LRankerConfig
    from rankers.lranker.model import LRankerModel, load_backbone
    from rankers.lranker.train import PartitionSampler, average_gradients, train

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
    from rankers.lranker.train import rank_rows

    rows = np.arange(11)
    parts = [rank_rows(rows, r, 2) for r in range(2)]
    assert len(parts[0]) == len(parts[1]) == 5
    assert not set(parts[0]) & set(parts[1])
    np.testing.assert_array_equal(rank_rows(rows, 0, 1), rows)


@pytest.mark.slow
def test_launcher_single_process_trains_then_evaluates(tmp_path):
    """The accelerate launcher's code path in one process: train, then rank 0's ordinary run."""
    import json

    from rankers.lranker.launch import main

    model_dir = build_tiny_qwen(tmp_path / "qwen")
    main(["--task", "ml-100k", "--set", f"model={model_dir}", "--set", "epochs=1", "--set", "max_train_queries=16",
          "--set", "select_max_queries=8", "--set", "n_clusters=4", "--set", "assign_dims=0", "--set", "max_length=64",
          "--set", "candidate_max_length=16", "--set", "tts_widths=2", "--set", "tts_depths=0,1", "--set", "device=cpu",
          "--max-queries", "16", "--results-dir", str(tmp_path / "res")])
    (record,) = (tmp_path / "res").rglob("lranker-*.json")
    rec = json.loads(record.read_text())
    assert rec["n_queries"] == 16 and rec["ranker_info"]["loaded_checkpoint"] is True  # trained once, reused
