"""``dense`` presets (multilingual-e5-large, KaLM-mini-instruct, Qwen3-Embedding-0.6B): their
prompts and pooling, last-token pooling on a tiny model, and the offline one-line error."""

from __future__ import annotations

import numpy as np
import pytest

from rbench.core.errors import RBenchError
from rbench.rankers import ranker_config
from rbench_rankers.dense import PRESETS, DenseRanker, describe_presets, known_defaults, preset_model


def test_presets_prompts_and_pooling():
    p = describe_presets()
    assert p == DenseRanker.presets
    e5 = p["multilingual-e5-large"]
    assert (e5["model"], e5["pooling"], e5["normalize"], e5["query_prompt"], e5["passage_prompt"]) == (
        "intfloat/multilingual-e5-large", "mean", True, "query: ", "passage: ")
    q3 = p["qwen3-embedding-0.6b"]
    assert q3["model"] == "Qwen/Qwen3-Embedding-0.6B" and q3["pooling"] == "last" and q3["normalize"] is True
    assert q3["query_prompt"].startswith("Instruct: ") and q3["query_prompt"].endswith("\nQuery:")
    assert q3["passage_prompt"] == ""
    kalm = p["kalm-mini-instruct"]
    assert kalm["model"].startswith("HIT-TMG/KaLM-embedding") and kalm["pooling"] == "mean"
    assert kalm["query_prompt"].startswith("Instruct: ") and kalm["query_prompt"].endswith(" \n Query: ")
    assert preset_model("Qwen3-Embedding-0.6B") == "Qwen/Qwen3-Embedding-0.6B"
    assert preset_model("/some/folder") == "/some/folder"
    assert known_defaults("/models/Qwen3-Embedding-0.6B").pooling == "last"  # a local copy keeps its family
    assert set(PRESETS) == set(p)


def test_preset_settings_follow_the_table():
    r = DenseRanker(config=ranker_config(DenseRanker, {"model": "qwen3-embedding-0.6b"}))

    class _R:
        path = None

    s = r._settings(_R())
    assert s["pooling"] == "last" and s["normalize"] is True and s["query_prompt"].startswith("Instruct:")
    r2 = DenseRanker(config=ranker_config(DenseRanker, {"model": "multilingual-e5-large", "query_prompt": ""}))
    assert r2._settings(_R())["query_prompt"] == ""  # an explicit prompt wins


def test_last_token_pooling_left_and_right_padding():
    torch = pytest.importorskip("torch")
    from rbench_rankers.dense import last_token

    hidden = torch.arange(2 * 4 * 3, dtype=torch.float32).reshape(2, 4, 3)
    right = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    left = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    assert torch.equal(last_token(hidden, right), torch.stack([hidden[0, 1], hidden[1, 3]]))
    assert torch.equal(last_token(hidden, left), torch.stack([hidden[0, 3], hidden[1, 3]]))


def test_last_token_encoder_on_tiny_qwen(qwen_dir, one_torch_thread):
    torch = pytest.importorskip("torch")
    from transformers import AutoModel, AutoTokenizer

    r = DenseRanker(config=ranker_config(DenseRanker, {"model": str(qwen_dir), "pooling": "last", "normalize": "true",
                                                       "device": "cpu", "batch_size": "2"}))
    enc = r.encoder()
    texts = ["w1 w2 w3 w4", "w5", "w6 w7"]
    vecs = enc(texts)
    tok = AutoTokenizer.from_pretrained(str(qwen_dir))
    model = AutoModel.from_pretrained(str(qwen_dir)).eval()
    with torch.inference_mode():
        for t, v in zip(texts, vecs):
            h = model(**tok([t], return_tensors="pt")).last_hidden_state[0, -1]
            np.testing.assert_allclose(v, torch.nn.functional.normalize(h, dim=-1).numpy(), rtol=1e-4, atol=1e-5)


def test_unloadable_preset_is_one_line(monkeypatch, tmp_path):
    pytest.importorskip("huggingface_hub")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    r = DenseRanker(config=ranker_config(DenseRanker, {"model": "kalm-mini-instruct"}))
    with pytest.raises(RBenchError) as err:
        r.encoder()
    msg = str(err.value)
    assert "HIT-TMG/KaLM-embedding-multilingual-mini-instruct-v1" in msg and "--set model=/path/to/model" in msg
    assert "\n" not in msg
