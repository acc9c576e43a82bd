"""Prefix caching of LRanker query prompts (``rbench_rankers.lranker.prefix``): on a tiny random Qwen3,
h_q from the cached prefix + batched suffixes equals the full forward pass (fp32, 1e-5), with and
without LoRA, for queries of different lengths with several parts each; the ranker uses it for
causal backbones only and gives the same embeddings either way."""

from __future__ import annotations

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
from rbench_rankers.lranker.config import LRankerConfig  # noqa: E402
from rbench_rankers.lranker.model import LRankerModel, load_backbone  # noqa: E402
from rbench_rankers.lranker.prefix import NoPrefix, PrefixCache, supports_prefix_cache  # noqa: E402
from rbench_rankers.lranker.ranker import LRankerRanker  # noqa: E402
from tests.lranker_testkit import toy_task  # noqa: E402

K, SLOT = 4, 8
RAW = {"similarity": "dot"}  # un-normalised h_q


pytestmark = pytest.mark.usefixtures("one_torch_thread")




def cfg_for(path, **kw) -> LRankerConfig:
    base = dict(model=str(path), n_clusters=K, assign_dims=0, epochs=1, n_negatives=15, max_length=64,
                candidate_max_length=16, tts_widths=[2], tts_depths=[0, 1], encode_batch_size=16,
                dtype="float32", device="cpu")
    base.update(kw)
    return LRankerConfig(**base)


def model_for(path, lora: bool, **kw) -> LRankerModel:
    cfg = cfg_for(path, **kw)
    torch.manual_seed(0)
    model = LRankerModel(cfg, load_backbone(cfg), slot_dim=SLOT)
    if lora:
        model.add_lora()
        with torch.no_grad():  # peft starts LoRA B at zero: make the adapters change the output
            for name, p in model.backbone.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.2)
    model.eval()
    return model


QUERY_TEXTS = ["w1", "w2 w3 w4 w5 w6", "w7 w8 w9", " ".join(f"w{i}" for i in range(10, 40)), "w40 w41"]


@pytest.mark.parametrize("lora", [False, True])
def test_prefix_cached_h_q_equals_the_full_forward_pass(qwen_dir, lora):
    model = model_for(qwen_dir, lora)
    assert supports_prefix_cache(model)
    prompts = [PROMPTS["recommendation"].replace("{query}", t) for t in QUERY_TEXTS]
    lengths = model.tokens.queries(prompts, QUERY_TEXTS, True).attention_mask.sum(1)
    assert len(set(lengths.tolist())) == len(QUERY_TEXTS)  # all different lengths
    rng = np.random.default_rng(0)
    # several parts per query, queries interleaved and repeated; one query has a single part
    rows = np.array([0, 0, 0, 1, 1, 2, 3, 3, 3, 3, 4, 1, 0])
    soft = model.project(torch.as_tensor(rng.normal(0, 1, (len(rows), K, SLOT)), dtype=torch.float32))
    with torch.no_grad():
        full = model.query_embeddings([prompts[r] for r in rows], [QUERY_TEXTS[r] for r in rows], soft)
        cache = PrefixCache(model, prompts, QUERY_TEXTS, capacity=8, prefix_batch=2)
        cached = cache.encode(rows, soft)
        # a second round reuses the stored prefixes: no new prefix pass, same result
        again = cache.encode(rows[::-1].copy(), soft.flip(0))
        # a KV budget of one part per suffix batch: same result
        one = PrefixCache(model, prompts, QUERY_TEXTS, kv_budget=1).encode(rows, soft)
    np.testing.assert_allclose(cached.numpy(), full.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(again.numpy(), full.flip(0).numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(one.numpy(), full.numpy(), rtol=1e-5, atol=1e-5)
    assert cache.stats["prefix_rows"] == len(QUERY_TEXTS)
    assert cache.stats["suffix_rows"] == 2 * len(rows)
    # prefix + suffix are the whole prompt; the suffix (placeholder, instruction, <eos>) is the
    # same tail for every query, the prefix holds the query
    for r, e in cache.entries.items():
        assert e.kv.shape[3] + len(e.suffix_ids) == int(lengths[r])
    assert len({len(e.suffix_ids) for e in cache.entries.values()}) == 1
    assert cache.stats["prefix_tokens"] + sum(len(cache.entries[r].suffix_ids) for r in range(5)) == int(lengths.sum())
    # different soft vectors really give different h_q (the suffix sees them)
    assert not torch.allclose(cached[0], cached[1])


@pytest.mark.parametrize("pooling", ["prompt", "query"])
def test_prefix_cache_evicts_and_recomputes_identically(qwen_dir, pooling):
    model = model_for(qwen_dir, False, query_pooling=pooling, **RAW)
    prompts = [PROMPTS["recommendation"].replace("{query}", t) for t in QUERY_TEXTS]
    rows = np.arange(len(QUERY_TEXTS)).repeat(2)
    soft = model.project(torch.randn(len(rows), K, SLOT))
    with torch.no_grad():
        full = model.query_embeddings([prompts[r] for r in rows], [QUERY_TEXTS[r] for r in rows], soft)
        cache = PrefixCache(model, prompts, QUERY_TEXTS, capacity=2)
        a = cache.encode(rows, soft)
        assert len(cache.entries) == 2
        b = cache.encode(rows, soft)
    np.testing.assert_allclose(a.numpy(), full.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-6, atol=1e-6)


def test_prompt_without_prefix_is_refused(qwen_dir):
    model = model_for(qwen_dir, False)
    texts = ["w1 w2"]
    cache = PrefixCache(model, [PLACEHOLDER + " w1 w2 recommend"], texts)
    with pytest.raises(NoPrefix):
        cache.encode(np.array([0]), model.project(torch.randn(1, K, SLOT)))


def test_encoder_backbone_falls_back_to_the_full_pass(bert_dir, qwen_dir, tmp_path, monkeypatch):
    bert = model_for(bert_dir, False)
    assert not supports_prefix_cache(bert)
    assert not supports_prefix_cache(model_for(qwen_dir, False, global_info=False))

    def boom(*a, **k):
        raise AssertionError("the prefix cache must not be used")

    monkeypatch.setattr(PrefixCache, "encode", boom)
    task = toy_task()
    r = LRankerRanker(cfg_for(bert_dir, width=2, depth=1),
                      RunContext(cache_dir=tmp_path / "cache", seed=0, show_progress=False))
    r.fit(task)
    r.encode_pool(task.pool)
    assert r.encode_queries(task.test).shape[0] == len(task.test)


def test_ranker_embeddings_are_the_same_with_and_without_the_prefix_cache(qwen_dir, tmp_path):
    task = toy_task()
    r = LRankerRanker(cfg_for(qwen_dir, width=2, depth=2),
                      RunContext(cache_dir=tmp_path / "cache", seed=0, show_progress=False))
    r.fit(task)
    vec = r.encode_pool(task.pool)
    calls, prefixed = [], []
    orig, orig_prefixes = PrefixCache.encode, PrefixCache._prefixes

    def spy(self, rows, soft):
        calls.append(len(rows))
        return orig(self, rows, soft)

    def spy_prefixes(self, rows):
        prefixed.extend(rows)
        return orig_prefixes(self, rows)

    PrefixCache.encode, PrefixCache._prefixes = spy, spy_prefixes
    try:
        cached = r.encode(task.test, task.pool, vec, 2, 2)
    finally:
        PrefixCache.encode, PrefixCache._prefixes = orig, orig_prefixes
    # causal backbone: the cache is used, E^(0) and both rounds of 2 parts in 3 calls, and each
    # query's prefix runs once for all 1 + 2 + 2 of its embeddings
    assert sum(calls) == 5 * len(task.test) and len(calls) == 3
    assert sorted(prefixed) == list(range(len(task.test)))
    assert r._prefix_sessions.cache is None  # dropped when the call ends
    r.cfg.tts_prefix_cache = False
    full = r.encode(task.test, task.pool, vec, 2, 2)
    np.testing.assert_allclose(cached, full, rtol=1e-5, atol=1e-5)
