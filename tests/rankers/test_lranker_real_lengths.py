"""LRanker steps at the data's lengths (issue 44 item 4): ``length_buckets`` > 1 runs a step's query
prompts and candidates in length-sorted groups, each padded only to its own longest row, and
encodes identical candidate rows once; ``gradient_checkpointing=auto`` checkpoints a CUDA step only
when its activations need the memory.

Without dropout (eval mode) the real-length step is the padded step to rounding: the loss within
1e-5 relative and every gradient tensor within 1e-4 of its largest entry (fp32 products of other
shapes sum in other orders), on a causal
(Qwen3) and an encoder (BERT) backbone. Planted bugs (rows returned out of order, a query's soft
prompt given to another row, duplicates not mapped back) break these equalities.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from rbench_rankers.lranker import model as lmodel  # noqa: E402
from rbench_rankers.lranker.model import LRankerModel, load_backbone  # noqa: E402
from rbench_rankers.lranker.train import StepInputs, step_loss  # noqa: E402
from tests.rankers.test_lranker import cfg_for, prompt  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")
K = 4


def _words(rng, n_rows, lo, hi):
    return [" ".join(f"w{int(j)}" for j in rng.integers(0, 40, size=int(n))) for n in rng.integers(lo, hi, size=n_rows)]


def _model(path, **kw):
    cfg = cfg_for(path, n_clusters=K, candidate_max_length=24, max_length=64, **kw)
    torch.manual_seed(0)
    model = LRankerModel(cfg, load_backbone(cfg))
    model.attach_projector(8)
    model.add_lora()
    model.eval()  # no dropout: the two paths must compute the same function
    return model


def _step(model, rng, n_q=9, n_c=23):
    """A step whose prompts and candidates vary in length; three candidates repeat others' texts."""
    texts = _words(rng, n_q, 1, 30)
    cands = _words(rng, n_c, 1, 20)
    cands[5], cands[11], cands[17] = cands[0], cands[3], cands[0]
    q = model.tokens.queries([prompt(t) for t in texts], texts, with_placeholder=True)
    c = model.tokens.candidates(cands)
    target = torch.from_numpy(rng.choice([i for i in range(n_c) if i not in (5, 11, 17)], n_q, replace=False))
    allowed = torch.from_numpy(rng.random((n_q, n_c)) < 0.8)
    allowed[torch.arange(n_q), target] = True
    slots = torch.from_numpy(rng.standard_normal((n_q, K, 8)).astype(np.float32))
    return StepInputs(np.arange(n_q), q, slots, np.arange(n_c), c, target, allowed)


def _loss_and_grads(model, inputs, buckets):
    model.cfg = dataclasses.replace(model.cfg, length_buckets=buckets)
    model.zero_grad()
    loss = step_loss(model, inputs, None)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return float(loss.detach()), grads


@pytest.mark.parametrize("backbone", ["qwen_dir", "bert_dir"])
def test_a_real_length_step_is_the_padded_step(backbone, request):
    model = _model(request.getfixturevalue(backbone))
    inputs = _step(model, np.random.default_rng(0))
    rows = {"n": 0}
    forward = model.hidden_states

    def counted(batch, soft):
        rows["n"] += int(batch.attention_mask.sum())  # real tokens: padding excluded
        rows["padded"] = rows.get("padded", 0) + int(batch.input_ids.numel())
        return forward(batch, soft)

    model.hidden_states = counted
    padded = _loss_and_grads(model, inputs, 1)
    cost_padded = dict(rows)
    rows.clear()
    rows["n"] = 0
    real = _loss_and_grads(model, inputs, 4)
    assert abs(real[0] - padded[0]) <= 1e-5 * max(1.0, abs(padded[0]))
    assert padded[1].keys() == real[1].keys() and len(padded[1]) > 4
    for name, g in padded[1].items():
        assert (real[1][name] - g).abs().max() <= 1e-4 * g.abs().max(), name
    assert rows["padded"] < cost_padded["padded"]  # less padding computed
    assert rows["n"] < cost_padded["n"]  # the repeated candidates' tokens ran once


def test_bucketed_queries_keep_each_rows_soft_prompt(qwen_dir):
    """h_q with groups equals h_q in one padded batch, row by row (the soft prompt is per row)."""
    model = _model(qwen_dir)
    rng = np.random.default_rng(1)
    texts = _words(rng, 10, 1, 30)
    batch = model.tokens.queries([prompt(t) for t in texts], texts, with_placeholder=True)
    soft = torch.from_numpy(rng.standard_normal((10, model.info.hidden)).astype(np.float32))
    with torch.no_grad():
        one = model.query_tokens_embeddings(batch, soft, 1)
        four = model.query_tokens_embeddings(batch, soft, 4)
        shuffled = model.query_tokens_embeddings(batch, soft.flip(0), 4)
    np.testing.assert_allclose(four.numpy(), one.numpy(), rtol=1e-5, atol=1e-6)
    assert not np.allclose(shuffled.numpy(), one.numpy(), atol=1e-4)  # the soft prompt matters per row


def test_checkpointing_switches_per_step_without_changing_the_step(qwen_dir):
    """Layers checkpointed or not: the same loss and gradients; ``set_checkpointing`` really switches."""
    from tests.rankers.test_lranker_gpu import count_checkpoint_calls

    model = _model(qwen_dir, gradient_checkpointing="on")
    model.train()
    for m in model.modules():  # dropout off, checkpointing still active (it needs training mode)
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    inputs = _step(model, np.random.default_rng(2))
    calls = count_checkpoint_calls(model.backbone)
    out = {}
    for on in (True, False):
        assert lmodel.set_checkpointing(model.backbone, on) > 0
        calls["n"] = 0
        out[on] = _loss_and_grads(model, inputs, 1)
        assert (calls["n"] > 0) == on
    assert out[True][0] == pytest.approx(out[False][0], rel=1e-6)
    for name, g in out[True][1].items():
        np.testing.assert_allclose(out[False][1][name].numpy(), g.numpy(), rtol=1e-5, atol=1e-7, err_msg=name)


def test_auto_checkpointing_decides_by_the_steps_activations():
    """Qwen3-0.6B in bf16 on an 80 GB card: a step at the data's lengths (~9,800 tokens) fits
    without checkpointing, one padded to the maximum lengths (47,872 tokens) does not."""
    qwen = type("C", (), dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28))()
    budget = lmodel.ACTIVATION_BUDGET * 80e9
    assert lmodel.activation_bytes(qwen, 9_800, torch.bfloat16) < budget
    assert lmodel.activation_bytes(qwen, 47_872, torch.bfloat16) > budget
    assert lmodel.activation_bytes(qwen, 100, torch.float32) == 2 * lmodel.activation_bytes(qwen, 100, torch.bfloat16)


def test_groups_run_only_when_they_save_padding(qwen_dir):
    """Rows of one length run as one call (groups would save nothing); rows of varied lengths run
    in ``buckets`` calls."""
    model = _model(qwen_dir)
    calls = {"n": 0}
    forward = model.hidden_states

    def counted(batch, soft):
        calls["n"] += 1
        return forward(batch, soft)

    model.hidden_states = counted
    rng = np.random.default_rng(3)
    alike = model.tokens.candidates([" ".join(f"w{i + j}" for j in range(4)) for i in range(12)])  # distinct rows
    varied = model.tokens.candidates(_words(rng, 12, 1, 20))
    with torch.no_grad():
        model.candidate_tokens_embeddings(alike, 3)
        assert calls["n"] == 1
        model.candidate_tokens_embeddings(varied, 3)
        assert calls["n"] == 1 + 3
