"""LRanker's GPU settings -- bf16 weights and gradient checkpointing -- exercised on CPU with a tiny
Qwen3 (``gradient_checkpointing=on`` forces it on any device), plus ``cuda``-marked end-to-end
tests that run only where torch sees a GPU (tests/conftest.py skips them elsewhere)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")
pytest.importorskip("sklearn")

from rbench.api import RunContext  # noqa: E402
from rbench.core.errors import RBenchError  # noqa: E402
from rbench_rankers.lranker.config import LRankerConfig  # noqa: E402
from rbench_rankers.lranker.model import LRankerModel, load_backbone  # noqa: E402
from rbench_rankers.lranker.ranker import LRankerRanker  # noqa: E402
from tests.lranker_testkit import toy_task  # noqa: E402

K = 4


pytestmark = pytest.mark.usefixtures("one_torch_thread")



def cfg_for(path, **kw) -> LRankerConfig:
    base = dict(model=str(path), n_clusters=K, assign_dims=0, epochs=1, n_negatives=15, max_length=64,
                candidate_max_length=16, tts_widths=[2], tts_depths=[0, 1], encode_batch_size=16, lr=1e-3,
                loader_workers=0)
    base.update(kw)
    cfg = LRankerConfig(**base)
    cfg.validate()
    return cfg


def checkpointing_flag(module: torch.nn.Module) -> bool:
    """The transformer's own flag (``is_activation_checkpointing`` on transformers 5, else the older
    ``is_gradient_checkpointing``), read on the model a PeftModel wraps."""
    base = module.get_base_model() if hasattr(type(module), "get_base_model") else module
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if hasattr(type(base), name):
            return bool(getattr(base, name))
    return any(getattr(m, "gradient_checkpointing", False) is True for m in module.modules())


def count_checkpoint_calls(module: torch.nn.Module) -> dict[str, int]:
    """Wrap every layer's checkpoint function so a forward that really checkpoints is counted."""
    calls = {"n": 0}
    for m in module.modules():
        fn = getattr(m, "_gradient_checkpointing_func", None)
        if fn is not None and getattr(m, "gradient_checkpointing", False) is True:
            def wrapped(*args, _fn=fn, **kwargs):
                calls["n"] += 1
                return _fn(*args, **kwargs)

            m._gradient_checkpointing_func = wrapped
    return calls


def backbone_weights(model: LRankerModel) -> dict[str, torch.Tensor]:
    """The transformer's own parameters (LoRA adapters excluded)."""
    return {n: p for n, p in model.backbone.named_parameters() if "lora_" not in n}


# ------------------------------------------------------------------------------------------
# CPU: the option itself
# ------------------------------------------------------------------------------------------


def test_gradient_checkpointing_option_auto_is_cuda_only_on_forces_it_and_bools_are_refused(qwen_dir):
    assert LRankerConfig().gradient_checkpointing == "auto"
    states = {}
    for value in ("auto", "on", "off"):
        states[value] = checkpointing_flag(load_backbone(cfg_for(qwen_dir, device="cpu", gradient_checkpointing=value)).model)
    assert states == {"auto": False, "on": True, "off": False}
    with pytest.raises(RBenchError, match="gradient_checkpointing"):
        LRankerConfig(gradient_checkpointing=True).validate()  # type: ignore[arg-type]
    from rbench.rankers import make_ranker

    assert make_ranker("lranker", {"gradient_checkpointing": "on"}).cfg.gradient_checkpointing == "on"
    with pytest.raises(RBenchError, match="auto, on, off"):
        make_ranker("lranker", {"gradient_checkpointing": "true"})


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")  # peft reads it
def test_one_bf16_training_step_with_gradient_checkpointing_on_cpu(qwen_dir):
    """One real optimiser step through ``train.train`` with bf16 weights and checkpointed layers:
    finite loss, LoRA weights moved, the frozen transformer stayed bf16 and untouched."""
    from rbench_rankers.lranker.aggregation import Aggregator
    from rbench_rankers.lranker.train import PartitionSampler, train

    cfg = cfg_for(qwen_dir, device="cpu", dtype="bfloat16", gradient_checkpointing="on", max_steps=1, epochs=1,
                  warmup_ratio=0.0, lora=True, finetune="lora")
    task = toy_task(n_train=20)
    model = LRankerModel(cfg, load_backbone(cfg))
    assert model.info.dtype == torch.bfloat16
    texts = list(task.pool.texts)
    vec = model.candidate_embeddings(texts)
    assert vec.dtype == np.float32 and np.isfinite(vec).all()
    model.attach_projector(vec.shape[1])
    model.make_trainable()
    assert model.has_lora
    assert checkpointing_flag(model.backbone), "gradient checkpointing is not enabled on the backbone"
    calls = count_checkpoint_calls(model.backbone)
    lora_before = {n: p.detach().clone() for n, p in model.backbone.named_parameters() if "lora_" in n}
    frozen_before = {n: p.detach().clone() for n, p in backbone_weights(model).items()}
    assert lora_before and frozen_before

    report = train(model, cfg, task.train, vec, PartitionSampler(Aggregator("kmeans", K, 0), vec, 10, 0), seed=0,
                   pool_texts=texts)

    assert report.steps == 1 and report.examples_seen == cfg.batch_size
    assert len(report.loss_per_epoch) == 1 and np.isfinite(report.loss_per_epoch[0])
    assert report.data_wait_s >= 0 and report.train_wall_s > 0
    # 2 decoder layers, each checkpointed in the forward of the queries and of the candidates
    assert calls["n"] >= 2 * 2, calls
    after = dict(model.backbone.named_parameters())
    moved = [n for n, p in lora_before.items() if not torch.equal(p, after[n].detach())]
    assert moved, "no LoRA weight changed after one step"
    weights = backbone_weights(model)
    assert {p.dtype for p in weights.values()} == {torch.bfloat16}
    assert all(torch.equal(frozen_before[n], p.detach()) for n, p in weights.items())
    assert checkpointing_flag(model.backbone)


# ------------------------------------------------------------------------------------------
# CUDA (skipped without a GPU)
# ------------------------------------------------------------------------------------------


def _cuda_ranker(qwen_dir, tmp_path, **kw) -> LRankerRanker:
    cfg = cfg_for(qwen_dir, **{"epochs": 2, "eval_every": 2, "valid_max_queries": 8, "select_max_queries": 8, **kw})
    return LRankerRanker(cfg, RunContext(cache_dir=tmp_path / "cache", seed=0, show_progress=False))


@pytest.mark.cuda
def test_cuda_fit_and_encode_end_to_end_in_bf16_with_checkpointing(qwen_dir, tmp_path):
    """Defaults on a GPU: device cuda, bf16 weights, gradient checkpointing (auto) during training;
    fit -> encode_pool -> encode (direct and with test-time scaling) gives finite fp32 vectors."""
    task = toy_task(n_train=40, n_valid=8, n_test=8)
    ranker = _cuda_ranker(qwen_dir, tmp_path)
    ranker.fit(task)
    model = ranker._model
    assert model.device.type == "cuda"
    assert {p.dtype for p in backbone_weights(model).values()} == {torch.bfloat16}
    assert checkpointing_flag(model.backbone)
    train_info = ranker.info["train"]
    assert train_info["steps"] == 4 and np.isfinite(train_info["loss_per_epoch"]).all()
    assert [p["step"] for p in train_info["curve"]] == [2, 4]
    vectors = ranker.encode_pool(task.pool)
    assert vectors.shape == (len(task.pool), model.info.hidden) and np.isfinite(vectors).all()
    direct = ranker.encode(task.test, task.pool, vectors, 0, 0)
    scaled = ranker.encode(task.test, task.pool, vectors, 2, 1)
    for out in (direct, scaled):
        assert out.dtype == np.float32 and out.shape == (len(task.test), model.info.hidden)
        assert np.isfinite(out).all()
    assert not np.allclose(direct, scaled)
    assert torch.cuda.max_memory_allocated() > 0


@pytest.mark.cuda
def test_cuda_checkpointing_off_and_fp32_train_too(qwen_dir, tmp_path):
    """The switches still work on a GPU: no checkpointing when off, fp32 weights when asked."""
    task = toy_task(n_train=20, n_valid=8, n_test=8)
    ranker = _cuda_ranker(qwen_dir, tmp_path, gradient_checkpointing="off", dtype="float32", epochs=1,
                          tts_widths=[0], tts_depths=[0])
    ranker.fit(task)
    model = ranker._model
    assert model.device.type == "cuda" and not checkpointing_flag(model.backbone)
    assert {p.dtype for p in backbone_weights(model).values()} == {torch.float32}
    vectors = ranker.encode_pool(task.pool)
    out = ranker.encode(task.test, task.pool, vectors, 0, 0)
    assert np.isfinite(out).all() and ranker.info["train"]["steps"] == 1
