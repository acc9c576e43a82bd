"""RankLLaMA on a tiny random Llama built here (no downloads): input format, last-token score,
padding invariance, a LoRA adapter merged as peft does, and a smoke test on the offline
SmolLM2-135M GGUF when it is present."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from rbench.core.errors import RBenchError  # noqa: E402
from rbench.rankers import load_ranker_class, ranker_config  # noqa: E402
from rbench_rankers.rankllama import RankLlamaRanker  # noqa: E402
from tests.lranker_testkit import _word_tokenizer, toy_task  # noqa: E402

SMOLLM = Path("~/.cache/rbench-models/SmolLM2-135M-Instruct.Q4_1.gguf").expanduser()


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    """LlamaForSequenceClassification (1 label) with random weights; eos </s>, bos <s>."""
    from tokenizers import processors
    from transformers import LlamaConfig, LlamaForSequenceClassification

    dest = tmp_path_factory.mktemp("tiny-llama")
    tk, _ = _word_tokenizer(["[PAD]", "[UNK]", "<s>", "</s>"])
    bos = tk.token_to_id("<s>")
    tk.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                      special_tokens=[("<s>", bos)])
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", bos_token="<s>", eos_token="</s>")
    tok.save_pretrained(dest)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, num_labels=1,
                      pad_token_id=None)
    torch.manual_seed(0)
    LlamaForSequenceClassification(cfg).save_pretrained(dest)
    return dest


def _ranker(base, adapter="", **sets):
    cls = RankLlamaRanker
    return cls(config=ranker_config(cls, {"base": str(base), "adapter": str(adapter), "device": "cpu", **sets}))


def test_registered_with_its_depth():
    cls = load_ranker_class("rankllama")
    assert cls is RankLlamaRanker and cls.pairwise is True
    assert cls.default_depth == 200 and cls.rerank_depth == 200
    cfg = cls.Config()
    assert cfg.base == "meta-llama/Llama-2-7b-hf" and cfg.adapter == "castorini/rankllama-v1-7b-lora-passage"


def test_input_format_and_last_token_score(llama_dir, one_torch_thread):
    r = _ranker(llama_dir, batch_size=4)
    model, tok = r.load()
    enc = r.inputs(["w1 w2"], ["w3 w4 w5"])
    toks = tok.convert_ids_to_tokens(enc["input_ids"][0])
    # the toy vocabulary has "query" but not "document"
    assert toks == ["<s>", "query", ":", "w1", "w2", "</s>", "<s>", "[UNK]", ":", "w3", "w4", "w5", "</s>"]
    s = r.score_pairs(["w1 w2"], ["w3 w4 w5"])
    with torch.inference_mode():
        ref = model(**enc).logits[0, 0]  # HF's own pooling on an unpadded input: the last token
    assert s[0] == pytest.approx(float(ref), rel=1e-4, abs=1e-5)


def test_scores_do_not_depend_on_padding(llama_dir, one_torch_thread):
    task = toy_task(n_pool=16, n_test=3)
    r1, r8 = _ranker(llama_dir, batch_size=1), _ranker(llama_dir, batch_size=8)
    r1.index(task.pool)
    r8.index(task.pool)
    cand = np.array([0, 5, 9, 15])
    s1, s8 = r1.score(task.test, cand), r8.score(task.test, cand)
    assert s1.shape == (3, 4) and np.isfinite(s1).all()
    np.testing.assert_allclose(s1, s8, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(r8.score(task.test, np.broadcast_to(cand, (3, 4)).copy()), s8, rtol=1e-5, atol=1e-6)


def test_lora_adapter_is_merged(llama_dir, tmp_path, one_torch_thread):
    peft = pytest.importorskip("peft")
    from transformers import AutoModelForSequenceClassification

    base = AutoModelForSequenceClassification.from_pretrained(str(llama_dir), num_labels=1)
    torch.manual_seed(1)
    lora = peft.get_peft_model(base, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                     task_type="SEQ_CLS", init_lora_weights=False))
    lora.save_pretrained(tmp_path / "adapter")
    plain = _ranker(llama_dir).score_pairs(["w1"], ["w2 w3"])
    r = _ranker(llama_dir, tmp_path / "adapter")
    adapted = r.score_pairs(["w1"], ["w2 w3"])
    assert r.info["adapter_path"] and not np.allclose(plain, adapted)
    model, _ = r.load()
    with torch.inference_mode():
        ref = lora.merge_and_unload().eval()(**r.inputs(["w1"], ["w2 w3"])).logits[0, 0]
    assert adapted[0] == pytest.approx(float(ref), rel=1e-4, abs=1e-5)


def test_missing_model_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    r = RankLlamaRanker()
    with pytest.raises(RBenchError) as err:
        r.load()
    assert "meta-llama/Llama-2-7b-hf" in str(err.value) and "\n" not in str(err.value)
    assert "/path/to/model" in str(err.value)


@pytest.mark.slow
def test_smollm2_gguf_smoke(one_torch_thread):
    pytest.importorskip("gguf")
    if not SMOLLM.exists():
        pytest.skip("SmolLM2-135M GGUF absent (../shared/tools/get-offline-models.sh)")
    task = toy_task(n_pool=6, n_test=2)
    r = _ranker("smollm2-135m", max_length=64)
    r.index(task.pool)
    s = r.score(task.test, np.arange(3))
    assert s.shape == (2, 3) and np.isfinite(s).all()
    assert r.info["gguf_file"] == SMOLLM.name


def test_lora_fit_trains_adapter_and_merges(llama_dir, one_torch_thread):
    """fit=true: a LoRA over the projections + head, listwise loss over (1 positive + negatives)
    groups; the merged model scores differently and the budget is recorded."""
    task = toy_task(n_pool=30, n_train=24, n_test=4)
    r = _ranker(llama_dir, fit="true", train_steps="4", train_batch_size="6", negatives="2", lora_r="4",
                lora_alpha="8", lr="5e-3", max_length="64")
    r.index(task.pool)
    before = r.score(task.test, np.arange(10))
    r.fit(task)
    after = r.score(task.test, np.arange(10))
    b = r.info["training_budget"]
    assert b["optimizer_steps"] == 4 and b["queries_seen"] == 8 and b["examples_seen"] == 24
    assert b["loss"] == "listwise" and b["trainable_params"] > 0
    assert not hasattr(r._model, "peft_config")  # merged back into a plain model
    assert np.isfinite(after).all() and not np.allclose(before, after)


@pytest.mark.cuda
def test_cuda_scores_match_cpu_and_default_to_bf16(llama_dir):
    """fp32 on CUDA scores as on the CPU; ``dtype=auto`` loads bf16 on CUDA, whose scores stay
    within bf16's precision of the fp32 ones."""
    task = toy_task(n_pool=16, n_test=3)
    cand = np.array([0, 5, 9, 15])
    cpu = _ranker(llama_dir, batch_size=4)
    cpu.index(task.pool)
    ref = cpu.score(task.test, cand)
    fp32 = _ranker(llama_dir, batch_size=4, device="cuda", dtype="float32")
    fp32.index(task.pool)
    np.testing.assert_allclose(fp32.score(task.test, cand), ref, rtol=1e-3, atol=1e-4)
    bf16 = _ranker(llama_dir, batch_size=4, device="cuda")
    bf16.index(task.pool)
    got = bf16.score(task.test, cand)
    assert bf16.info["dtype"] == "bfloat16" and bf16.info["device"].startswith("cuda")
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, ref, rtol=0.05, atol=0.05 * float(np.abs(ref).max()))
