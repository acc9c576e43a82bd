"""TIGER: unique semantic IDs, exact tree scoring equal to candidate-by-candidate teacher forcing,
beam mode's ordering, and learning a synthetic sequential pattern end to end (tiny T5, tiny pool)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("sklearn")

from rbench.api import Pool, Queries, Ragged, RunContext, TaskData, TaskSpec  # noqa: E402
from rbench.engine.metrics import aggregate, per_query  # noqa: E402
from rbench.engine.scan import scan  # noqa: E402
from rbench_rankers.tiger import TigerOptions, TigerRanker  # noqa: E402
from rbench_rankers.tiger import quantiser as Q  # noqa: E402
from rbench_rankers.tiger.model import DEPTH_SCALE, TreeScorer, Trie, Vocab, build_t5, encoder_inputs  # noqa: E402

SPEC = TaskSpec(name="toyseq", title="toy", scenario="large", domain="recommendation", description="",
                paper_candidates=None, paper_queries=None, sources=(), license="", how_to_get="")
TINY = {"d_model": 64, "d_ff": 128, "num_layers": 2, "num_decoder_layers": 2, "num_heads": 4, "d_kv": 16,
        "dropout": 0.0}


def _clustered(n: int, d: int = 16, seed: int = 0) -> np.ndarray:
    """Embeddings in a few tight clusters, so residual codes share prefixes and collide."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((5, d)) * 3
    return (centres[rng.integers(0, 5, n)] + 0.3 * rng.standard_normal((n, d))).astype(np.float32)


# ------------------------------------------------------------------------------ quantiser


@pytest.mark.parametrize("method", ["rq-kmeans", "rq-vae"])
def test_quantiser_ids_unique_and_reproduced(method, one_torch_thread):
    x = _clustered(300)
    sids = Q.fit(x, method, levels=3, codebook_size=8, seed=0, vae_epochs=30)
    assert sids.codes.shape == (300, 4)
    assert len(np.unique(sids.codes, axis=0)) == 300  # every item its own ID
    assert (sids.codes[:, :3] < 8).all() and sids.collision_size >= sids.codes[:, 3].max() + 1
    np.testing.assert_array_equal(sids.quantise(x), sids.codes[:, :3])  # encode reproduces the IDs
    again = Q.SemanticIds.from_arrays(method, sids.arrays(), {})  # the cache round trip
    np.testing.assert_array_equal(again.quantise(x), sids.codes[:, :3])
    # new items continue their group's collision numbering: still unique against the old IDs
    # (while the collision vocabulary lasts: a short RQ-VAE run may fill whole groups)
    new, shared = sids.extend(x[:20] + 1e-4)
    assert shared == 0 or method == "rq-vae"
    if shared == 0:
        assert len(np.unique(np.vstack([sids.codes, new]), axis=0)) == 320


def test_paper_sized_codebooks_on_a_small_pool():
    x = _clustered(40, seed=3)
    sids = Q.fit_rq_kmeans(x, 3, 256, seed=0)  # more codes than points: one cluster per point
    assert len(np.unique(sids.codes, axis=0)) == 40
    assert sids.collision_size == 256


# ------------------------------------------------------------------------------ exact scoring


def _brute_force(model, ids, mask, tokens: np.ndarray) -> np.ndarray:
    """log p(ID) of every candidate by plain teacher forcing through the HF forward pass."""
    out = np.zeros((len(ids), len(tokens)))
    with torch.no_grad():
        for b in range(len(ids)):
            lab = torch.from_numpy(tokens)
            logits = model(input_ids=ids[b : b + 1].expand(len(tokens), -1),
                           attention_mask=mask[b : b + 1].expand(len(tokens), -1), labels=lab).logits
            lp = torch.log_softmax(logits.double(), dim=-1).gather(2, lab[:, :, None]).squeeze(2)
            out[b] = lp.sum(dim=1).numpy()
    return out


@pytest.fixture(scope="module")
def tiny_setup(one_torch_thread):
    x = _clustered(40, seed=1)
    sids = Q.fit_rq_kmeans(x, 3, 4, seed=0)  # 4 codes a level: shared prefixes and collisions
    vocab = Vocab((4, 4, 4, sids.collision_size), user_buckets=5)
    tokens = vocab.tokens(sids.codes)
    model = build_t5(vocab, **TINY, seed=0).eval()
    rng = np.random.default_rng(0)
    hists = [rng.integers(0, 40, int(rng.integers(0, 6))) for _ in range(3)]  # one may be empty
    ids, mask = encoder_inputs(tokens, hists, ["u1", "u2", None], vocab, max_history=4)
    return model, torch.from_numpy(ids), torch.from_numpy(mask), tokens


def test_tree_scoring_equals_brute_force(tiny_setup):
    model, ids, mask, tokens = tiny_setup
    scorer = TreeScorer(model)
    trie = Trie.build(tokens)
    assert len(trie.token[1]) < len(tokens)  # the tree really shares prefixes
    with torch.no_grad():
        cross, bias = scorer.encode(ids, mask)
        tree = scorer.exact(trie, cross, bias)
    brute = _brute_force(model, ids, mask, tokens)
    np.testing.assert_allclose(tree, brute, atol=2e-4, rtol=0)
    # a subset of the pool (per-query candidate lists) gives the same numbers
    sub = np.array([3, 17, 5, 39])
    with torch.no_grad():
        part = scorer.exact(Trie.build(tokens[sub]), cross, bias)
    np.testing.assert_allclose(part, brute[:, sub], atol=2e-4, rtol=0)


def test_beam_mode_exact_inside_the_beam_prefix_order_outside(tiny_setup):
    model, ids, mask, tokens = tiny_setup
    scorer = TreeScorer(model)
    trie = Trie.build(tokens)
    with torch.no_grad():
        cross, bias = scorer.encode(ids, mask)
        exact = scorer.exact(trie, cross, bias)
        wide = scorer.beam(trie, cross, bias, beam_size=10_000)  # a beam holding everything = exact
        narrow = scorer.beam(trie, cross, bias, beam_size=3)
    np.testing.assert_allclose(wide - 4 * DEPTH_SCALE, exact, atol=2e-4, rtol=0)
    full = narrow > 3.5 * DEPTH_SCALE  # depth 4 (a whole ID) + a log-likelihood far above -DEPTH_SCALE / 2
    assert full.any() and (~full).any()
    np.testing.assert_allclose(narrow[full] - 4 * DEPTH_SCALE, exact[full], atol=2e-4, rtol=0)
    for b in range(len(exact)):  # the beam's top-3 are the 3 best IDs among those it reached ...
        top_beam = np.argsort(-narrow[b])[:3]
        assert full[b, top_beam].all()
        # ... and every item outside is ranked below every fully scored one
        assert narrow[b, ~full[b]].max() < narrow[b, full[b]].min()


# ------------------------------------------------------------------------------ end to end


def _toy_task(n_items: int = 24, n_users: int = 80, seed: int = 0) -> TaskData:
    """Every user walks the catalogue: the next item is always the previous one + 1."""
    rng = np.random.default_rng(seed)
    split: dict[str, dict[str, list]] = {s: {"h": [], "p": [], "u": []} for s in ("train", "valid", "test")}
    for u in range(n_users):
        start = int(rng.integers(0, n_items))
        seq = [(start + t) % n_items for t in range(8)]
        for t in range(1, 6):
            split["train"]["h"].append(seq[:t]), split["train"]["p"].append([seq[t]]), split["train"]["u"].append(u)
        for name, t in (("valid", 6), ("test", 7)):
            split[name]["h"].append(seq[:t]), split[name]["p"].append([seq[t]]), split[name]["u"].append(u)

    def queries(name: str) -> Queries:
        s = split[name]
        n = len(s["p"])
        return Queries(ids=np.array([f"{name}{i}" for i in range(n)], dtype=object), texts=["" for _ in range(n)],
                       positives=Ragged.from_rows(s["p"]), grades=Ragged.from_rows([[1.0]] * n, dtype=np.float64),
                       history=Ragged.from_rows(s["h"]), exclude=Ragged.from_rows(s["h"]) if name != "train" else None,
                       user_ids=np.array([f"u{u}" for u in s["u"]], dtype=object))

    pool = Pool(ids=np.array([f"i{i}" for i in range(n_items)], dtype=object),
                texts=np.array([f"item {i}" for i in range(n_items)], dtype=object), name="toyseq",
                fingerprint=f"toyseq-{n_items}")
    return TaskData(SPEC, pool, queries("train"), queries("valid"), queries("test"))


class _FixedEmbeddings(TigerRanker):
    """No text encoder in unit tests: items get fixed random embeddings (so IDs carry no order)."""

    def embeddings(self, pool):
        return _clustered(len(pool), seed=7)


def test_learns_a_synthetic_sequential_pattern(tmp_path: Path, one_torch_thread):
    task = _toy_task(n_users=60)
    opts = TigerOptions(codebook_size=4, levels=2, user_buckets=0, max_history=5, batch_size=32, lr=3e-3,
                        max_steps=200, eval_every=100, patience=0, valid_max_queries=20, **TINY)
    r = _FixedEmbeddings(opts, RunContext(cache_dir=tmp_path, seed=0, show_progress=False))
    r.fit(task)
    res = scan(r, task.test, task.pool, topk=0)
    rr = aggregate(per_query(res.ranks, task.test.grades))["RR"]
    assert rr > 0.6, rr  # random over ~17 rankable items: ~0.2
    info = r.info
    assert info["scoring"] == "exact" and info["training_budget"]["optimizer_steps"] == 200
    assert len(info["training_curve"]) == 2 and info["best_valid_MRR"] > 0.6
    # cached: a second ranker reuses the IDs and the weights and scores the same
    r2 = _FixedEmbeddings(opts, RunContext(cache_dir=tmp_path, seed=0, show_progress=False))
    r2.fit(task)
    assert r2.info["reused"] and r2.info["semantic_ids"]["cached"]
    res2 = scan(r2, task.test, task.pool, topk=0)
    np.testing.assert_array_equal(res.ranks.values, res2.ranks.values)
    # per-query candidate lists (small scenario): the same scores as the whole-pool ranking
    test = task.test.take(np.arange(12))
    cand = np.stack([np.sort(np.concatenate([test.positives[i], np.setdiff1d(
        np.arange(5 * (i % 4), 5 * (i % 4) + 6), test.positives[i])[:5]])) for i in range(len(test))])
    small = Queries(ids=test.ids, texts=test.texts, positives=test.positives, grades=test.grades,
                    history=test.history, user_ids=test.user_ids, candidates=cand)
    r.index(task.pool)
    whole = r.score(test, np.arange(len(task.pool)))
    got = r.score(small, cand)
    np.testing.assert_allclose(got, np.take_along_axis(whole, cand, axis=1), atol=1e-4, rtol=0)


def test_unseen_candidates_get_ids_from_the_same_quantiser(tmp_path: Path, one_torch_thread):
    task = _toy_task(n_items=12, n_users=10)
    opts = TigerOptions(codebook_size=4, levels=2, user_buckets=0, max_history=5, batch_size=16,
                        max_steps=2, eval_every=2, **TINY)
    r = _FixedEmbeddings(opts, RunContext(cache_dir=tmp_path, seed=0, show_progress=False))
    r.fit(task)
    mixed = Pool(ids=np.concatenate([task.pool.ids, np.array(["other:a", "other:b", "other:c"], dtype=object)]),
                 texts=np.array([f"t{i}" for i in range(15)], dtype=object), name="mixed", fingerprint="mixed-15")
    r.index(mixed)
    assert r.info["unseen_candidates"] == 3
    np.testing.assert_array_equal(r._tokens[:12], r._fit_tokens)
    s = r.score(task.test, np.arange(15))
    assert s.shape == (len(task.test), 15) and np.isfinite(s).all()


def test_options_preset_and_validation():
    cpu = TigerOptions(preset="cpu")
    assert cpu.num_layers == 2 and cpu.max_steps < TigerOptions().max_steps
    from rbench.core.errors import RBenchError
    from rbench.rankers import ranker_config

    cfg = ranker_config(TigerRanker, {"preset": "cpu", "num_layers": "4"})
    assert cfg.num_layers == 4 and cfg.d_ff == 512
    with pytest.raises(RBenchError):
        ranker_config(TigerRanker, {"codebook_size": "0"})
