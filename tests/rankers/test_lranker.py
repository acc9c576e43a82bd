"""LRanker with tiny randomly initialised backbones built offline (Qwen3 causal, BERT encoder):
the placeholder injection, the pooling formulas, training, checkpoints, valid-only selection,
test-time scaling through the ranker, and the three ablation switches."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")
pytest.importorskip("sklearn")

from rbench.api import (  # noqa: E402
    PLACEHOLDER,
    PROMPTS,
    RunContext,  # noqa: E402
)
from rbench.core.config import build_config  # noqa: E402
from rbench.core.errors import RBenchError  # noqa: E402
from rbench.engine.scan import scan  # noqa: E402
from rbench_rankers.lranker.config import CPU_PRESET, LRankerConfig  # noqa: E402
from rbench_rankers.lranker.model import LRankerModel, load_backbone, lora_target_names  # noqa: E402
from rbench_rankers.lranker.ranker import LRankerRanker  # noqa: E402
from tests.lranker_testkit import toy_task  # noqa: E402

K = 4


pytestmark = pytest.mark.usefixtures("one_torch_thread")




def cfg_for(path, **kw) -> LRankerConfig:
    base = dict(model=str(path), n_clusters=K, assign_dims=0, epochs=2, n_negatives=15, max_length=64,
                candidate_max_length=16, tts_widths=[2], tts_depths=[0, 1], encode_batch_size=16, lr=1e-3,
                loader_workers=0)
    base.update(kw)
    return LRankerConfig(**base)


def ranker_for(path, tmp_path, **kw) -> LRankerRanker:
    return LRankerRanker(cfg_for(path, **kw), RunContext(cache_dir=tmp_path / "cache", seed=0, show_progress=False))


def prompt(text: str) -> str:
    return PROMPTS["recommendation"].replace("{query}", text)


# ------------------------------------------------------------------------------------------
# placeholder and pooling
# ------------------------------------------------------------------------------------------


def test_placeholder_row_is_replaced_by_projector_output_and_gradients_reach_it(qwen_dir):
    cfg = cfg_for(qwen_dir)
    model = LRankerModel(cfg, load_backbone(cfg), slot_dim=8)
    texts = ["w1 w2 w3", "w4"]
    prompts = [prompt(t) for t in texts]
    seen = {}
    model.backbone.register_forward_pre_hook(lambda mod, args, kw: seen.update(kw), with_kwargs=True)
    soft = model.project(torch.randn(2, K, 8))
    h = model.query_embeddings(prompts, texts, soft)
    batch = model.tokens.queries(prompts, texts, with_placeholder=True)
    x = seen["inputs_embeds"]
    table = model.backbone.get_input_embeddings().weight
    for b in range(2):
        p = int(batch.placeholder[b])
        assert int(batch.input_ids[b, p]) == model.tokens.placeholder_id
        torch.testing.assert_close(x[b, p], soft[b])
        others = [j for j in range(x.shape[1]) if j != p]
        torch.testing.assert_close(x[b, others], table[batch.input_ids[b, others]])
    h.sum().backward()
    lin = model.projector.net[0]
    assert lin.weight.grad is not None and lin.weight.grad.abs().sum() > 0
    # a different soft prompt gives a different query embedding
    with torch.no_grad():
        h2 = model.query_embeddings(prompts, texts, soft.detach() + 1.0)
    assert not torch.allclose(h.detach(), h2)


def _reference_hidden(model: LRankerModel, ids: list[int], soft_at: int | None, soft: torch.Tensor | None):
    x = model.backbone.get_input_embeddings()(torch.tensor([ids]).masked_fill(
        torch.tensor([ids]) == model.tokens.placeholder_id, 0))
    if soft_at is not None:
        x[0, soft_at] = soft
    return model.backbone(inputs_embeds=x, attention_mask=torch.ones(1, len(ids), dtype=torch.long)).last_hidden_state[0]


@pytest.mark.parametrize("kind", ["causal", "encoder"])
@pytest.mark.parametrize("pooling", ["prompt", "query"])
def test_query_pooling_matches_the_formula(qwen_dir, bert_dir, kind, pooling):
    path = qwen_dir if kind == "causal" else bert_dir
    cfg = cfg_for(path, query_pooling=pooling, similarity="dot")
    model = LRankerModel(cfg, load_backbone(cfg), slot_dim=8)
    model.eval()
    tok = model.tokens.tok
    texts = ["w5 w6 w7 w8", "w9"]
    prompts = [prompt(t) for t in texts]
    with torch.no_grad():
        soft = model.project(torch.randn(2, K, 8))
        got = model.query_embeddings(prompts, texts, soft)
    eos = model.tokens.eos_id
    for b, (p, t) in enumerate(zip(prompts, texts)):
        body = tok(p, add_special_tokens=False)["input_ids"]
        lead = [tok.cls_token_id] if kind == "encoder" else []
        ids = lead + body + [eos]
        ph = ids.index(model.tokens.placeholder_id)
        with torch.no_grad():
            hidden = _reference_hidden(model, ids, ph, soft[b])
        if pooling == "prompt":  # every text token except the placeholder, plus <eos>
            rows = [j for j in range(len(lead), len(ids)) if j != ph]
        else:  # the [USER QUERY] tokens plus <eos>
            q = tok(t, add_special_tokens=False)["input_ids"]
            start = next(j for j in range(len(ids)) if ids[j : j + len(q)] == q)
            rows = list(range(start, start + len(q))) + [len(ids) - 1]
        assert ids[-1] == eos and rows[-1] == len(ids) - 1
        torch.testing.assert_close(got[b], hidden[rows].mean(0), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", ["causal", "encoder"])
def test_candidate_pooling_is_mean_of_tokens_and_eos(qwen_dir, bert_dir, kind):
    path = qwen_dir if kind == "causal" else bert_dir
    cfg = cfg_for(path)
    model = LRankerModel(cfg, load_backbone(cfg))
    model.train()  # candidate_embeddings must switch dropout off by itself ...
    tok, eos = model.tokens.tok, model.tokens.eos_id
    texts = ["w3 w4 w5 w6", "w7", ""]
    got = model.candidate_embeddings(texts)
    assert model.training  # ... and restore the mode it found
    model.eval()
    for b, t in enumerate(texts):
        lead = [tok.cls_token_id] if kind == "encoder" else []
        ids = lead + tok(t, add_special_tokens=False)["input_ids"] + [eos]
        with torch.no_grad():
            hidden = _reference_hidden(model, ids, None, None)
        np.testing.assert_allclose(got[b], hidden[len(lead):].mean(0).numpy(), rtol=1e-4, atol=1e-5)


def test_truncation_cuts_the_oldest_query_tokens_only(qwen_dir):
    cfg = cfg_for(qwen_dir, max_length=40, query_pooling="query")
    model = LRankerModel(cfg, load_backbone(cfg))
    tok = model.tokens.tok
    text = " ".join(f"w{i}" for i in range(30))
    batch = model.tokens.queries([prompt(text)], [text], with_placeholder=True)
    ids = batch.input_ids[0].tolist()
    assert len(ids) == 40 and ids[-1] == model.tokens.eos_id and ids.count(model.tokens.placeholder_id) == 1
    template = tok(prompt(""), add_special_tokens=False)["input_ids"]
    kept_query = tok(text, add_special_tokens=False)["input_ids"][-(40 - len(template) - 1):]
    assert ids[: len(ids) - 1] == _splice(template, tok("Query :", add_special_tokens=False)["input_ids"], kept_query)
    assert int(batch.pool_mask[0].sum()) == len(kept_query) + 1
    right = LRankerModel(dataclasses.replace(cfg, query_truncation="right"), model.info).tokens
    ids_r = right.queries([prompt(text)], [text], True).input_ids[0].tolist()
    assert tok("w0", add_special_tokens=False)["input_ids"][0] in ids_r
    with pytest.raises(RBenchError, match="too small for the prompt template"):
        LRankerModel(dataclasses.replace(cfg, max_length=8), model.info).tokens.queries([prompt(text)], [text], True)


def _splice(template: list[int], marker: list[int], query: list[int]) -> list[int]:
    at = next(j for j in range(len(template)) if template[j : j + len(marker)] == marker) + len(marker)
    return template[:at] + query + template[at:]


# ------------------------------------------------------------------------------------------
# training, checkpoints, selection, test-time scaling
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tower", ["shared", "frozen"])
def test_loss_decreases_on_a_toy_task(qwen_dir, tower):
    from rbench_rankers.lranker.aggregation import Aggregator
    from rbench_rankers.lranker.train import PartitionSampler, train

    cfg = cfg_for(qwen_dir, epochs=6, lr=3e-3, candidate_tower=tower, similarity="cosine", temperature=0.1)
    task = toy_task(n_train=60)
    model = LRankerModel(cfg, load_backbone(cfg))
    vec = model.candidate_embeddings(list(task.pool.texts))
    vec /= np.linalg.norm(vec, axis=1, keepdims=True)
    agg = Aggregator("kmeans", K, 0)
    model.attach_projector(vec.shape[1])
    model.add_lora()
    report = train(model, cfg, task.train, vec, PartitionSampler(agg, vec, 10, 0), seed=0,
                   pool_texts=list(task.pool.texts))
    losses = report.loss_per_epoch
    assert report.epochs == 6 and report.steps == 6 * 3 and report.examples_seen == 6 * 60
    assert losses[-1] < 0.7 * losses[0], losses
    # starts near chance: the step's union (20 in-batch positives + 15 sampled, fewer duplicates)
    assert losses[0] == pytest.approx(np.log(report.candidates_per_step), rel=0.3)
    budget = report.budget()
    assert budget["optimizer_steps"] == 18 and budget["examples_seen"] == 360 and budget["trainable_params"] > 0


def test_shared_tower_trains_the_candidate_side_and_frozen_does_not(qwen_dir):
    """candidate_tower=shared: h_c moves with training (LoRA active on candidates); frozen: the
    adapted model's candidate embeddings are never part of the loss."""
    from rbench_rankers.lranker.aggregation import Aggregator
    from rbench_rankers.lranker.train import PartitionSampler, train

    task = toy_task(n_train=40)
    texts = list(task.pool.texts)
    moved = {}
    for tower in ("shared", "frozen"):
        cfg = cfg_for(qwen_dir, epochs=2, lr=3e-3, candidate_tower=tower, lora_targets="layers.0.mlp.down_proj")
        model = LRankerModel(cfg, load_backbone(cfg))
        vec = model.candidate_embeddings(texts)
        model.attach_projector(vec.shape[1])
        model.add_lora()
        before = model.candidate_embeddings(texts, adapted=True)
        train(model, cfg, task.train, vec, PartitionSampler(Aggregator("kmeans", K, 0), vec, 10, 0), seed=0,
              pool_texts=texts)
        after = model.candidate_embeddings(texts, adapted=True)
        base = model.candidate_embeddings(texts, adapted=False)
        np.testing.assert_allclose(base, vec, atol=1e-5)  # the base e(c) never moves (K-means input)
        moved[tower] = float(np.abs(after - before).max())
    # the only LoRA target is in layer 0's MLP, reached by both towers: with the shared tower
    # the candidate loss path adds gradient; both move h_c(adapted), but only shared trains it
    assert moved["shared"] > 0


def test_training_steps_are_identical_with_and_without_loader_workers(qwen_dir):
    from rbench_rankers.lranker.aggregation import Aggregator
    from rbench_rankers.lranker.train import PartitionSampler, train

    task = toy_task(n_train=40)
    texts = list(task.pool.texts)
    losses = {}
    for workers in (0, 2):
        cfg = cfg_for(qwen_dir, epochs=2, loader_workers=workers)
        torch.manual_seed(0)
        model = LRankerModel(cfg, load_backbone(cfg))
        vec = model.candidate_embeddings(texts)
        model.attach_projector(vec.shape[1])
        model.add_lora()
        report = train(model, cfg, task.train, vec, PartitionSampler(Aggregator("kmeans", K, 0), vec, 10, 0),
                       seed=0, pool_texts=texts)
        losses[workers] = report.loss_per_epoch
        assert report.data_wait_s >= 0 and report.step_s > 0
    np.testing.assert_allclose(losses[0], losses[2], rtol=1e-5)


def test_training_negatives_never_include_the_querys_history_or_positives():
    from rbench.api import Queries, Ragged
    from rbench_rankers.lranker.train import StepBuilder

    n_pool = 30
    q = Queries(ids=np.array(["a", "b", "c"], dtype=object), texts=["x", "y", "z"],
                positives=Ragged.from_rows([[1], [2], [3]]), grades=Ragged.from_rows([[1.0]] * 3, dtype=np.float64),
                history=Ragged.from_rows([[2, 4, 5], [1, 6], [7]]))
    cfg = LRankerConfig(n_negatives=25, global_info=False, candidate_tower="frozen")
    b = StepBuilder(cfg, q, tokens=_NoTokens(), pool_texts=None, pool_size=n_pool, sampler=None, seed=0)
    for epoch in range(5):
        step = b.for_epoch(epoch, [np.array([0, 1, 2])])[0]
        ids = step.cand_ids
        for row, forbidden in enumerate(([2, 4, 5], [1, 6], [7])):
            allowed = set(ids[step.allowed[row].numpy()].tolist())
            assert not allowed & set(forbidden)
            assert ids[int(step.target[row])] == [1, 2, 3][row]
        assert {1, 2, 3} <= set(ids.tolist())  # in-batch positives are in the union


class _NoTokens:
    def queries(self, prompts, texts, with_placeholder):
        return None

    def candidates(self, texts):
        return None


def test_windows_per_user_keeps_each_users_newest_windows():
    from rbench.api import Queries, Ragged
    from rbench_rankers.lranker.train import training_rows

    users = np.array(["u1"] * 5 + ["u2"] * 2 + ["u3"] * 4, dtype=object)
    n = len(users)
    q = Queries(ids=np.arange(n).astype(str), texts=[""] * n, positives=Ragged.from_rows([[0]] * n),
                grades=Ragged.from_rows([[1.0]] * n, dtype=np.float64), user_ids=users)
    assert training_rows(q, 2).tolist() == [3, 4, 5, 6, 9, 10]
    assert training_rows(q, 0).tolist() == list(range(n))


def test_fit_saves_and_reuses_a_checkpoint(qwen_dir, tmp_path):
    task = toy_task()
    r1 = ranker_for(qwen_dir, tmp_path)
    r1.fit(task)
    ckpt = r1.checkpoint_dir(task)
    assert ckpt.parent == tmp_path / "cache" / "lranker"
    assert {"adapter.safetensors", "projector.safetensors", "meta.json"} <= {p.name for p in ckpt.iterdir()}
    assert not r1.info["loaded_checkpoint"]
    r2 = ranker_for(qwen_dir, tmp_path)
    r2.fit(task)
    assert r2.info["loaded_checkpoint"] and r2.info["train"] == r1.info["train"]
    for r in (r1, r2):
        r.encode_pool(task.pool)
    np.testing.assert_allclose(r1.encode_queries(task.test), r2.encode_queries(task.test), rtol=1e-5, atol=1e-6)
    n_lora = len(_lora_params(r1._model))
    r1.fit(task)  # refitting the same instance loads the checkpoint into a fresh backbone
    assert r1.info["loaded_checkpoint"] and len(_lora_params(r1._model)) == n_lora
    # a training option changes the key; an inference option does not
    assert ranker_for(qwen_dir, tmp_path, lr=5e-4).checkpoint_dir(task) != ckpt
    assert ranker_for(qwen_dir, tmp_path, tts=False, tts_widths=[3]).checkpoint_dir(task) == ckpt
    # the numerics it trains in: bf16 and fp32 trainings of one config never share a checkpoint,
    # and neither do a CPU and a CUDA one ("dtype=auto" resolves by device)
    assert ranker_for(qwen_dir, tmp_path, dtype="bfloat16").checkpoint_dir(task) != ckpt
    assert ranker_for(qwen_dir, tmp_path, dtype="float32").checkpoint_dir(task) == ckpt  # auto on the CPU
    import torch

    if not torch.cuda.is_available():
        assert ranker_for(qwen_dir, tmp_path, device="cuda").checkpoint_dir(task) != ckpt


def test_trained_candidate_vectors_are_cached_by_the_weights_not_the_checkpoint_name(qwen_dir, tmp_path):
    from rbench_rankers.lranker.ranker import weights_digest

    task = toy_task()
    r = ranker_for(qwen_dir, tmp_path)
    r.fit(task)
    ckpt = r.checkpoint_dir(task)
    assert r._checkpoint_id == weights_digest(ckpt) and len(r._checkpoint_id) == 32
    keys: list[dict] = []
    real = r._cached_vectors
    r._cached_vectors = lambda pool, which, enc: keys.append(which) or real(pool, which, enc)
    trained = r.encode_pool(task.pool)
    assert keys == [{"tower": "trained", "weights": r._checkpoint_id}]
    # the same weights under another directory name: the same digest (and so the same cached h_c)
    twin = tmp_path / "twin"
    twin.mkdir()
    for f in ckpt.glob("*.safetensors"):
        (twin / f.name).write_bytes(f.read_bytes())
    assert weights_digest(twin) == r._checkpoint_id
    # a checkpoint replaced in place under its old name: another digest, so h_c is encoded again
    from safetensors.torch import load_file, save_file

    state = load_file(str(ckpt / "adapter.safetensors"))  # LoRA: the candidate tower's weights
    save_file({k: v + 0.05 for k, v in state.items()}, str(ckpt / "adapter.safetensors"))
    r2 = ranker_for(qwen_dir, tmp_path)
    r2.fit(task)
    assert r2.info["loaded_checkpoint"] and r2.checkpoint_dir(task) == ckpt
    assert r2._checkpoint_id != r._checkpoint_id
    assert not np.allclose(r2.encode_pool(task.pool), trained)


def test_length_sorted_encoding_batches_similar_lengths_and_keeps_the_order():
    from rbench_rankers.lranker.ranker import length_sorted

    rng = np.random.default_rng(0)
    texts = [" ".join(["w"] * int(n)) for n in rng.integers(1, 60, size=50)]
    batches: list[list[int]] = []

    def encode(batch):
        batches.append([len(t) for t in batch])
        return np.array([[len(t), t.count("w")] for t in batch], dtype=np.float32)

    out = length_sorted(encode, texts, 8)
    np.testing.assert_array_equal(out[:, 0], [len(t) for t in texts])  # rows back in input order
    flat = [n for b in batches for n in b]
    assert flat == sorted(flat, reverse=True) and [len(b) for b in batches] == [8] * 6 + [2]


def test_sampled_validation_is_the_exact_one_over_a_whole_pool_sample_and_encodes_only_its_sample(
        qwen_dir, tmp_path):
    from rbench_rankers.lranker.ranker import sampled_mrr

    task = toy_task()
    r = ranker_for(qwen_dir, tmp_path)
    r.fit(task)
    valid, pool = task.valid, task.pool
    exact = r._validator(task)()
    vec = r._current_vectors(pool)
    E0 = r.direct(valid, pool, vec)
    assert sampled_mrr(E0, vec, valid, np.arange(len(pool))) == pytest.approx(exact, abs=1e-12)
    # with a sample, only the sample and the validation positives are encoded again
    r.cfg.valid_pool_sample = 10
    model = r._ensure_model()
    seen: list[str] = []
    real = model.candidate_embeddings
    model.candidate_embeddings = lambda texts, adapted=False: seen.extend(texts) or real(texts, adapted=adapted)
    value = r._validator(task)()
    expected = np.union1d(np.sort(np.random.default_rng([r.seed, 0x7A11D]).choice(len(pool), 10, replace=False)),
                          valid.positives.values)
    assert sorted(seen) == sorted(pool.text_batch(expected)) and len(seen) < len(pool)
    assert 0.0 < value <= 1.0 and value >= exact - 1e-12  # fewer competitors: never a worse rank


def test_the_checkpoint_code_version_is_derived_from_the_training_code(tmp_path, monkeypatch):
    from rbench.core import hashing
    from rbench_rankers.lranker import ranker as lr

    assert lr.LRankerRanker.version == lr.CODE_VERSION == hashing.ast_digest(lr.CHECKPOINT_CODE)[:12]
    assert {"rbench_rankers.lranker.train", "rbench_rankers.lranker.model"} <= set(lr.CHECKPOINT_CODE)
    train = Path(hashing._module_files("rbench_rankers.lranker.train")[0]).read_text(encoding="utf-8")
    real = hashing._module_files

    def with_train(text: str) -> str:
        copy = tmp_path / "train.py"
        copy.write_text(text, encoding="utf-8")
        monkeypatch.setattr(hashing, "_module_files",
                            lambda m: [copy] if m == "rbench_rankers.lranker.train" else real(m))
        return hashing.ast_digest(lr.CHECKPOINT_CODE)[:12]

    assert with_train(train + "\n# a comment\n") == lr.CODE_VERSION
    assert with_train(train + "\nSTEP_FACTOR = 2\n") != lr.CODE_VERSION  # a code change moves the key


def test_selection_uses_valid_only_and_tts_matches_direct_at_depth_zero(qwen_dir, tmp_path, monkeypatch):
    task = toy_task()
    # Eq. 10's dot product: on this toy data its TTS gain is significant, so selection leaves direct
    r = ranker_for(qwen_dir, tmp_path, tts_widths=[2, 3], tts_depths=[0, 1, 2], tts_min_part_factor=0,
                   similarity="dot", learn_temperature=False, temperature=0.15)
    seen: list[str] = []
    orig = LRankerRanker._encode_rows

    def spy(self, queries, rows, slots):
        seen.extend(str(queries.ids[int(i)]) for i in rows)
        return orig(self, queries, rows, slots)

    monkeypatch.setattr(LRankerRanker, "_encode_rows", spy)
    r.fit(task)
    assert seen and all(s.startswith("v") for s in seen)  # no test (s*) query was encoded in fit
    tts = r.info["tts"]
    assert tts["selected_on"] == "valid" and tts["n_queries"] == len(task.valid)
    assert [(row["width"], row["depth"]) for row in tts["table"]] == [(0, 0), (2, 1), (2, 2), (3, 1), (3, 2)]
    assert (r.width, r.depth) in [(row["width"], row["depth"]) for row in tts["table"]]
    best = max(row["RR"] for row in tts["table"])
    assert [row for row in tts["table"] if (row["width"], row["depth"]) == (r.width, r.depth)][0]["RR"] == best

    vec = r.encode_pool(task.pool)
    E0 = r.direct(task.test, task.pool, vec)
    np.testing.assert_array_equal(r.encode(task.test, task.pool, vec, 3, 0), E0)
    out = r.tts(task.test, vec, E0, 2, 2)
    np.testing.assert_allclose(r.encode(task.test, task.pool, vec, 2, 2), out.embeddings.mean(0), rtol=1e-5, atol=1e-6)
    # survivors shrink 40 -> 2 parts of 20 keep 10 each -> 20 -> 2 x 5 -> 10
    assert out.trace[0]["survivors"] == [20] * len(task.test) and out.trace[1]["survivors"] == [10] * len(task.test)
    # the engine scores what encode_queries returns: mean(E^(0..d)) for the selected (k, d)
    res = scan(r, task.test, task.pool)
    Q = r.encode(task.test, task.pool, vec, r.width, r.depth)
    s = Q @ vec.T
    pos = task.test.positives.values
    ranks = 1 + (s > s[np.arange(len(pos)), pos][:, None]).sum(1)
    np.testing.assert_array_equal(res.ranks.values, ranks)


def test_small_scenario_aggregates_each_querys_own_candidates(qwen_dir, tmp_path):
    task = toy_task(candidates=8)
    r = ranker_for(qwen_dir, tmp_path, epochs=1, width=2, depth=1, tts_min_part_factor=0)
    r.fit(task)
    vec = r.encode_pool(task.pool)
    given: list[np.ndarray] = []
    agg = r._agg

    def recording(vectors, seed):
        given.append(np.asarray(vectors))
        return agg(vectors, seed)

    r._agg = recording
    test = task.test.take(np.arange(3))
    r.encode_queries(test)
    base = r._base_vectors(task.pool)  # K-means reads the base e(c), not the trained h_c
    assert not np.allclose(base, vec)
    index = {v.tobytes(): j for j, v in enumerate(base)}
    # E^(0): the query's 8 candidates; round 1: 2 kept subsets of 2 (ceil(4/2)) inside them
    assert [len(g) for g in given] == [8, 8, 8] + [2, 2] * 3
    for i in range(3):
        row = set(test.candidates[i].tolist())
        assert {index[v.tobytes()] for v in given[i]} == row
        for sub in given[3 + 2 * i : 5 + 2 * i]:
            assert {index[v.tobytes()] for v in sub} <= row


def test_query_chunks_give_the_same_embeddings_as_one_batch(qwen_dir, tmp_path, monkeypatch):
    """E^(0) and test-time scaling run in chunks of queries (``tts_chunk``); each query's K-means
    seeds are its own, whatever chunk it falls in (and a chunk derives only its own seeds)."""
    import rbench_rankers.lranker.scaling as scaling

    task = toy_task(candidates=8)
    r = ranker_for(qwen_dir, tmp_path, epochs=1, width=2, depth=1, tts_min_part_factor=0, encode_batch_size=1)
    r.fit(task)
    r.encode_pool(task.pool)
    test = task.test.take(np.arange(5))
    monkeypatch.setattr(scaling, "tts_chunk", lambda cfg: 100)
    whole = r.encode_queries(test)
    monkeypatch.setattr(scaling, "tts_chunk", lambda cfg: 2)
    np.testing.assert_allclose(r.encode_queries(test), whole, rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------------------------------
# ablations
# ------------------------------------------------------------------------------------------


def _lora_params(model) -> list[str]:
    return [n for n, p in model.named_parameters() if "lora_" in n]


def test_full_model_has_lora_on_attention_and_feed_forward(qwen_dir, bert_dir, tmp_path):
    task = toy_task()
    r = ranker_for(qwen_dir, tmp_path, epochs=1)
    r.fit(task)
    names = r._model.lora_names
    for layer in (0, 1):
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"):
            assert any(n.endswith(f"layers.{layer}.self_attn.{proj}") or n.endswith(f"layers.{layer}.mlp.{proj}")
                       for n in names), proj
    trainable = {n for n, p in r._model.named_parameters() if p.requires_grad}
    # LoRA, the projector and the learnable temperature (the default similarity's one scalar)
    assert trainable == set(_lora_params(r._model)) | {n for n in trainable if n.startswith("projector.")} | {"log_scale"}
    assert any(n.startswith("projector.") for n in trainable)
    bert = load_backbone(cfg_for(bert_dir)).model
    bert_targets = lora_target_names(bert)
    assert any(n.endswith("attention.self.query") for n in bert_targets)
    assert any(n.endswith("intermediate.dense") for n in bert_targets)
    assert not any("pooler" in n for n in bert_targets)


def test_ablation_global_info_false_drops_placeholder_and_projector(qwen_dir, tmp_path):
    task = toy_task()
    r = ranker_for(qwen_dir, tmp_path, epochs=1, global_info=False)
    r.fit(task)
    m = r._model
    assert m.projector is None
    # LoRA and the learnable temperature (the default similarity's one scalar), no projector
    assert {n for n, p in m.named_parameters() if p.requires_grad} == set(_lora_params(m)) | {"log_scale"}
    texts = list(task.test.texts[:2])
    batch = m.tokens.queries([prompt(t) for t in texts], texts, with_placeholder=False)
    assert not (batch.input_ids == m.tokens.placeholder_id).any()
    full = m.tokens.queries([prompt(t) for t in texts], texts, with_placeholder=True)
    assert batch.input_ids.shape[1] == full.input_ids.shape[1] - 1  # exactly the one token is gone
    assert (r.width, r.depth) == (0, 0) and "global_info" in r.info["tts"]["reason"]
    assert r.info["train"]["partitions"].startswith("none")
    ckpt = r.checkpoint_dir(task)
    assert not (ckpt / "projector.safetensors").exists() and (ckpt / "adapter.safetensors").exists()


def test_ablation_lora_false_trains_only_the_projector(qwen_dir, tmp_path):
    task = toy_task()
    r = ranker_for(qwen_dir, tmp_path, epochs=1, lora=False)
    fresh = load_backbone(r.cfg).model.state_dict()
    r.fit(task)
    m = r._model
    assert not _lora_params(m) and m.lora_names == []
    assert {n.split(".")[0] for n, p in m.named_parameters() if p.requires_grad} == {"projector", "log_scale"}
    for name, value in m.backbone.state_dict().items():
        torch.testing.assert_close(value, fresh[name])  # the backbone did not move
    assert r.info["train"]["steps"] > 0
    assert not (r.checkpoint_dir(task) / "adapter.safetensors").exists()


def test_ablation_tts_false_returns_e0_and_reuses_the_checkpoint(qwen_dir, tmp_path):
    task = toy_task()
    full = ranker_for(qwen_dir, tmp_path, epochs=1, width=2, depth=2)
    full.fit(task)
    off = ranker_for(qwen_dir, tmp_path, epochs=1, width=2, depth=2, tts=False)
    off.fit(task)
    assert off.info["loaded_checkpoint"] and (off.width, off.depth) == (0, 0)
    vec = off.encode_pool(task.pool)
    full.encode_pool(task.pool)
    E0 = off.direct(task.test, task.pool, vec)
    np.testing.assert_array_equal(off.encode_queries(task.test), E0)
    np.testing.assert_allclose(full.direct(task.test, task.pool, vec), E0, rtol=1e-5, atol=1e-6)
    assert not np.allclose(full.encode_queries(task.test), E0)  # the full model does scale


# ------------------------------------------------------------------------------------------
# options, loading, plugin weight
# ------------------------------------------------------------------------------------------


def test_paper_defaults_and_cpu_preset():
    c = LRankerConfig()
    assert (c.model, c.n_clusters, c.assign_dims, c.temperature, c.lr, c.batch_size, c.epochs) == (
        "Qwen/Qwen3-0.6B", 20, 128, 0.05, 1e-4, 20, 15)  # temperature: see the similarity default
    assert (c.lora_r, c.lora_alpha, c.lora_dropout, c.grad_clip, c.n_partitions, c.warmup_ratio) == (
        32, 64, 0.1, 0.5, 10, 0.1)
    assert (c.beta1, c.beta2, c.weight_decay) == (0.9, 0.999, 0.01)
    assert max(c.tts_depths) == 5 and max(c.tts_widths) == 10 and c.aggregation == "kmeans"
    cpu = build_config(LRankerConfig, {"preset": "cpu", "epochs": "5"}, owner="lranker")
    assert cpu.epochs == 5  # an explicit option wins over the preset
    assert all(getattr(cpu, k) == v for k, v in CPU_PRESET.items() if k != "epochs")
    with pytest.raises(RBenchError, match="tts_keep"):
        build_config(LRankerConfig, {"tts_keep": "2"}, owner="lranker")


def test_unreachable_hub_model_is_a_user_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(RBenchError, match="--set model=/path/to/dir"):
        load_backbone(LRankerConfig(model="no-such-org/no-such-model-xyz"))


def test_listing_the_plugin_does_not_import_torch():
    code = "import sys, rbench_rankers.lranker.ranker; print(sorted(m for m in ('torch', 'transformers', 'peft', " \
           "'sklearn') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    assert PLACEHOLDER in PROMPTS["recommendation"]


def test_paper_gpu_budget_options_combine():
    """README's paper-time recipe: one (the newest) window per user, the paper's 15 epochs of
    batch 20 -> Rec-Movie's 6,040 users give 15 * 302 = 4,530 steps (the paper: 52 min on one
    A6000); every option is honoured by the schedule and by the row selection."""
    from rbench.api import Queries, Ragged
    from rbench_rankers.lranker.train import schedule, training_rows

    cfg = LRankerConfig(windows_per_user=1)
    assert (cfg.epochs, cfg.batch_size, cfg.lr, cfg.candidate_tower) == (15, 20, 1e-4, "shared")
    # the one measured departure from the paper: Eq. 10's dot / 0.15 saturates on LLM backbones
    assert (cfg.similarity, cfg.learn_temperature, cfg.temperature) == ("cosine", True, 0.05)
    assert schedule(cfg, 6040) == (6040, 302, 4530)
    assert schedule(LRankerConfig(windows_per_user=1, max_steps=1000), 6040)[2] == 1000
    assert schedule(LRankerConfig(max_train_queries=2000), 6040) == (2000, 100, 1500)
    assert schedule(LRankerConfig(), 6040, rank=1, size=4) == (6040, 76, 1140)  # per-rank strides
    users = np.repeat(np.array([f"u{i}" for i in range(50)], dtype=object), 7)
    n = len(users)
    q = Queries(ids=np.arange(n).astype(str), texts=[""] * n, positives=Ragged.from_rows([[0]] * n),
                grades=Ragged.from_rows([[1.0]] * n, dtype=np.float64), user_ids=users)
    rows = training_rows(q, cfg.windows_per_user)
    assert len(rows) == 50 and (rows % 7 == 6).all()  # each user's newest window only


def test_explicit_paper_values_win_over_the_cpu_preset():
    from rbench.core.config import build_config

    cfg = build_config(LRankerConfig, {"preset": "cpu", "similarity": "dot", "learn_temperature": "false",
                                       "temperature": "0.15"}, "lranker")
    assert (cfg.similarity, cfg.learn_temperature, cfg.temperature) == ("dot", False, 0.15)
    assert cfg.model == "all-MiniLM-L6-v2" and cfg.finetune == "full"  # the rest of the preset stays
    plain = build_config(LRankerConfig, {"preset": "cpu"}, "lranker")
    assert (plain.similarity, plain.learn_temperature, plain.temperature) == ("cosine", True, 0.05)
    from rbench.core.config import config_dict

    label = LRankerRanker.label_for(config_dict(cfg))  # the table row names what differs from the preset
    assert label.startswith("lranker (preset=cpu") and "similarity=dot" in label and "temperature=0.15" in label
    assert LRankerRanker.label_for(config_dict(plain)) == "lranker (preset=cpu)"


def test_a_negative_valid_pool_sample_is_one_clear_line():
    from rbench.core.config import build_config

    with pytest.raises(RBenchError, match=r"valid_pool_sample=-1: valid_pool_sample must be at least 0 \(in \[0, 2,147,483,647\]\), got -1"):
        build_config(LRankerConfig, {"valid_pool_sample": "-1"}, owner="lranker")


def test_compile_on_wraps_the_current_backbone_and_changes_nothing(qwen_dir, monkeypatch, tmp_path):
    """``compile=on`` runs the backbone through ``torch.compile`` (here its eager backend: the
    wiring, not inductor's minute of C++), rebuilt when LoRA wraps the backbone; h_q and h_c equal
    the uncompiled model's. Only ``compile=on`` enters the checkpoint key (default keys unchanged)."""

    compiled: list[object] = []
    real = torch.compile

    def eager(module, **kw):
        compiled.append(module)
        return real(module, **{**kw, "backend": "eager"})

    monkeypatch.setattr(torch, "compile", eager)
    texts = ["a b c d", "e f", "g h i"]
    out = {}
    for mode in ("off", "on"):
        cfg = cfg_for(qwen_dir, compile=mode)
        torch.manual_seed(0)
        model = LRankerModel(cfg, load_backbone(cfg))
        model.attach_projector(8)
        before = model.candidate_embeddings(texts)
        model.add_lora()
        model.eval()
        with torch.no_grad():
            h_q = model.query_embeddings([prompt(t) for t in texts], texts, torch.zeros(3, model.info.hidden))
        out[mode] = (before, h_q.numpy(), model.candidate_embeddings(texts, adapted=True))
    # built for the plain backbone, then again for the LoRA-wrapped one (the one in use)
    assert len(compiled) == 2 and compiled[1] is model.backbone and compiled[0] is not model.backbone
    for a, b in zip(out["off"], out["on"]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    task = toy_task(n_train=10)
    keys = {mode: ranker_for(qwen_dir, tmp_path, compile=mode).checkpoint_dir(task).name for mode in ("off", "on")}
    assert keys["off"] == ranker_for(qwen_dir, tmp_path).checkpoint_dir(task).name != keys["on"]
    with pytest.raises(RBenchError, match="compile=yes: expected one of off, on"):
        build_config(LRankerConfig, {"compile": "yes"}, owner="lranker")


def test_length_buckets_give_the_same_candidate_embeddings_and_gradients(qwen_dir):
    """A step's candidates run in length-sorted groups, each padded to its own longest row: the
    same h_c, in the batch's order, and the same gradients (eval mode: no dropout), to rounding."""
    cfg = cfg_for(qwen_dir, candidate_max_length=24)
    torch.manual_seed(0)
    model = LRankerModel(cfg, load_backbone(cfg))
    model.attach_projector(8)
    model.add_lora()
    model.eval()
    rng = np.random.default_rng(0)
    texts = [" ".join(f"w{int(j)}" for j in rng.integers(0, 40, size=int(n))) for n in rng.integers(1, 20, size=13)]
    batch = model.tokens.candidates(texts)
    got = {}
    weight = torch.from_numpy(rng.standard_normal((13, model.info.hidden)).astype(np.float32))
    for buckets in (1, 4):
        model.zero_grad()
        h = model.candidate_tokens_embeddings(batch, buckets)
        (h * weight).sum().backward()  # each row's own weight: a row out of place changes the gradient
        grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        got[buckets] = (h.detach().numpy(), grads)
    np.testing.assert_allclose(got[4][0], got[1][0], rtol=1e-5, atol=1e-6)
    assert len(got[1][1]) == len(got[4][1]) > 0
    for a, b in zip(got[1][1], got[4][1]):
        # (atol: a near-zero entry summed in another order moved 3.8e-6 on a Zen 3; a row out of
        # place moves entries by about their own size, ~1)
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-5)
    widths = sorted(int(x) for x in batch.attention_mask.sum(1))
    assert widths[0] < widths[-1]  # the groups really are shorter than the whole batch
    with pytest.raises(RBenchError, match=r"length_buckets must be at least 1 \(in \[1, "):
        build_config(LRankerConfig, {"length_buckets": "0"}, owner="lranker")
