"""Issue 29, mutation testing: one small test per planted mutation that the suite let through
(``benchmarks/mutants.py`` plants each alone; every test here fails with its mutation planted and
passes on the real code)."""

from __future__ import annotations

import numpy as np
import pytest

from rbench.api import TaskData
from rbench.engine.scan import scan
from rbench.run import rerank
from tests.helpers import TableRanker, make_pool, make_queries

# ------------------------------------------------------------------------------------------
# engine
# ------------------------------------------------------------------------------------------


def test_many_positives_count_tied_candidates_as_tied_not_higher():
    """e4: with more than 8 positives the engine counts by sorting and binary search; a candidate
    tied with a positive must count as tied (``C - hi``), not as higher (``C - lo``)."""
    n = 30
    table = np.zeros((1, n))
    table[0, :10] = 0.5  # the 10 positives
    table[0, 10:15] = 0.5  # 5 non-positives tied with them
    table[0, 15:20] = 0.9  # 5 above
    q = make_queries([list(range(10))], candidates=np.arange(n)[None, :])
    res = scan(TableRanker(table), q, make_pool(n), topk=0)
    # pessimistic: after the 5 above, the 5 tied and the positives placed before it
    assert sorted(res.ranks.values.tolist()) == list(range(11, 21))
    assert res.equal.tolist() == [5] * 10 and res.higher.tolist() == [5] * 10


def test_a_zero_grade_is_refused():
    """e8: a positive's grade must be in (0, MAX_GRADE]: a zero grade (a judged-irrelevant
    document listed as a positive) is a DataError naming the query, never evaluated."""
    from rbench.core.errors import DataError

    q = make_queries([[1], [2]], grades=[[1.0], [0.0]])
    with pytest.raises(DataError, match="q1"):
        scan(TableRanker(np.zeros((2, 5))), q, make_pool(5), topk=0)


# ------------------------------------------------------------------------------------------
# rerank
# ------------------------------------------------------------------------------------------


def _task_data(test=None) -> TaskData:
    from rbench.tasks.registry import resolve

    spec = resolve("ml-100k").spec
    q = make_queries([[1], [2, 3]])
    return TaskData(spec=spec, pool=make_pool(10), train=q, valid=q, test=test if test is not None else q, info={})


def test_rerank_cache_key_depends_on_the_evaluated_queries():
    """r6: the stage-1 cache key holds the evaluated queries (--max-queries, other positives)."""
    a = rerank.cache_key("bm25", "1", {}, _task_data(), "original", 100, seed=0)
    other = _task_data(make_queries([[1], [2, 4]]))
    assert a != rerank.cache_key("bm25", "1", {}, other, "original", 100, seed=0)
    fewer = _task_data(make_queries([[1]]))
    assert a != rerank.cache_key("bm25", "1", {}, fewer, "original", 100, seed=0)


def test_first_stage_recall_is_the_fraction_of_positives_inside_the_depth():
    """r2: ``first_stage_recall@depth`` is the mean over queries of the fraction of each query's
    positives inside stage 1's top-N (recall), not the share of queries with any inside."""
    from rbench.engine.scan import scan as engine_scan
    from tests.engine.test_rerank import _data, _plan, _score, _table_class, _tables

    data = _data()
    s, r = _tables(2)
    S, R = _table_class(s, "table-s"), _table_class(r, "table-r")
    depth = 5
    _, info, _ = _score(_plan(S, depth), R(), data)
    stage1 = engine_scan(S(), data.test, data.pool, topk=0)
    inside = (stage1.ranks.values <= depth).astype(float)
    per_q = np.add.reduceat(inside, data.test.positives.offsets[:-1]) / data.test.positives.lengths()
    assert ((per_q > 0) & (per_q < 1)).any()  # a query with some, not all, of its positives inside
    assert info["first_stage_recall@depth"] == pytest.approx(per_q.mean())


# ------------------------------------------------------------------------------------------
# results: what --overwrite only-missing keeps
# ------------------------------------------------------------------------------------------


def _pop():
    from rbench.rankers import load_ranker_class

    return load_ranker_class("pop")()


def _recorded(ranker) -> dict:
    from rbench.core.config import plain_config
    from rbench.core.hashing import source_digest

    return {"name": "pop", "version": str(ranker.version), "config": plain_config(ranker.config),
            "source_sha256": source_digest(type(ranker))}


def test_same_ranker_needs_the_same_version():
    """s3: a record of another ranker version is not this ranker's."""
    from rbench.run.runner import _same_ranker

    r = _pop()
    assert _same_ranker(_recorded(r), r)
    assert not _same_ranker({**_recorded(r), "version": str(r.version) + ".old"}, r)


def test_same_ranker_needs_the_same_source_digest():
    """s4: a record written by other ranker code (source sha256) is not this ranker's."""
    from rbench.run.runner import _same_ranker

    r = _pop()
    assert not _same_ranker({**_recorded(r), "source_sha256": "0" * 64}, r)
    assert not _same_ranker({k: v for k, v in _recorded(r).items() if k != "source_sha256"}, r)


def _write_record(tmp_path, *, fingerprint="fp", version=None, non_default=None, run_file="", topk=0, at=None):
    import rbench
    from rbench.results.record import RunRecord, config_hash, per_query_bytes, record_path, write_run
    from rbench.run.recording import task_key
    from rbench.run.runner import RunOptions, make_plan

    plan = make_plan(RunOptions(ranker="pop", task="ml-100k", results_dir=tmp_path, overwrite="only-missing",
                                topk=topk))
    # an older record: another rbench version and, where records carry one, an older evaluation protocol
    fields = RunRecord.__dataclass_fields__
    stale = {"protocol": fields["protocol"].default - 1} if version and "protocol" in fields else {}
    rec = RunRecord(task="ml-100k", variant="original", scenario=plan.spec.scenario, task_fingerprint=fingerprint,
                    ranker={"name": "pop", "version": "1", "config": {}}, seed=0, n_queries=2,
                    metrics={"nDCG@10": 0.5, "RR": 0.5, "R@10": 1.0, "R@100": 1.0}, timings={}, peak_rss_bytes=0,
                    rbench_version=version or rbench.__version__, task_info={},
                    run_options={"non_default": non_default or {}}, run_file=run_file, **stale)
    path = record_path(plan.results_dir, plan.spec.scenario, task_key(plan.spec.name, plan.variant), plan.ranker,
                       config_hash(at) if at else "")
    values = {m: np.array([0.5, 0.5]) for m in ("nDCG@10", "RR", "R@10", "R@100")}
    write_run(rec, path, per_query_bytes(np.array(["q0", "q1"]), values, np.ones(2, dtype=int)))
    return plan


def test_only_missing_reruns_on_other_data(tmp_path):
    """s1: a record of another task fingerprint (other data) is run again."""
    from rbench.run.recording import RecordSlot
    from rbench.run.runner import _existing

    plan = _write_record(tmp_path)
    assert _existing(plan, RecordSlot.of(plan, {}), "fp") is not None
    assert _existing(plan, RecordSlot.of(plan, {}), "other-fp") is None


def test_only_missing_reruns_under_another_rbench_version(tmp_path):
    """s2: a record written by an older rbench (another version; where records carry the
    evaluation protocol, an older protocol) is run again."""
    from rbench.run.recording import RecordSlot
    from rbench.run.runner import _existing

    plan = _write_record(tmp_path, version="0.0.1-old")
    assert _existing(plan, RecordSlot.of(plan, {}), "fp") is None


def test_only_missing_reruns_under_other_run_options(tmp_path):
    """s6: a record whose non-default run options are not this run's is run again, even when it
    sits where this run's record would (a copied or renamed file)."""
    from rbench.run.recording import RecordSlot
    from rbench.run.runner import _existing

    plan = _write_record(tmp_path, non_default={"max_queries": 12}, at={"max_queries": 12})
    assert _existing(plan, RecordSlot.of(plan, {"max_queries": 12}), "fp") is not None
    plan = _write_record(tmp_path, non_default={"max_queries": 13}, at={"max_queries": 12})
    assert _existing(plan, RecordSlot.of(plan, {"max_queries": 12}), "fp") is None


def test_only_missing_reruns_when_a_run_file_is_wanted_and_missing(tmp_path):
    """s7: a run that writes a run file (--topk > 0) does not keep a record without one."""
    from rbench.run.recording import RecordSlot
    from rbench.run.runner import _existing

    plan = _write_record(tmp_path, topk=100)
    assert _existing(plan, RecordSlot.of(plan, {}), "fp") is None


# ------------------------------------------------------------------------------------------
# leaderboard and significance
# ------------------------------------------------------------------------------------------


def test_a_cell_shows_its_newest_record(tmp_path):
    """l4: two records of one cell (e.g. under two config hashes): the newest is shown."""
    from rbench.results.leaderboard import build
    from rbench.results.record import ColumnKey, RowKey, RunRecord, per_query_bytes, record_path, write_run

    for rr, created, stem in ((0.2, "2026-11-20T00:00:00+00:00", ""), (0.4, "2026-11-22T00:00:00+00:00", "abc"),
                              (0.3, "2026-11-21T00:00:00+00:00", "def")):
        values = {m: np.full(4, rr) for m in ("nDCG@10", "RR", "R@10", "R@100")}
        rec = RunRecord(task="ml-100k", variant="original", scenario="large", task_fingerprint="f",
                        ranker={"name": "pop", "version": "1", "config": {}}, seed=0, n_queries=4,
                        metrics={k: float(v.mean()) for k, v in values.items()}, timings={}, peak_rss_bytes=0,
                        created=created, run_options={"non_default": {}})
        write_run(rec, record_path(tmp_path, "large", "ml-100k", "pop", stem),
                  per_query_bytes(np.array([f"q{i}" for i in range(4)]), values, np.ones(4, dtype=int)))
    lb = build(tmp_path, "large")
    assert lb.value(RowKey("pop"), ColumnKey("ml-100k"), "RR") == pytest.approx(0.4)


def test_paired_randomization_is_two_sided_and_never_zero():
    """l6/l7/l8: the p-value is two-sided (p(a, b) == p(b, a)), compares like with like (mean
    differences) and is at least 1 / (n_resamples + 1)."""
    from rbench.results.significance import paired_randomization

    rng = np.random.default_rng(0)
    a = rng.random(30)
    b = a + 0.05 + 0.01 * rng.random(30)  # b better on every query
    p_ab, p_ba = paired_randomization(a, b, n_resamples=2000), paired_randomization(b, a, n_resamples=2000)
    assert p_ab == p_ba == pytest.approx(1 / 2001)
    noise = rng.standard_normal(30) * 0.01
    assert paired_randomization(a, a + noise, n_resamples=2000) > 0.05


# ------------------------------------------------------------------------------------------
# tasks
# ------------------------------------------------------------------------------------------


def test_transfer_takes_the_whole_fit_side_from_the_source():
    """t9: a transfer variant fits on the source's train *and* valid splits (selection on the
    target task's valid split would leak the target into the fit side)."""
    from rbench.tasks import pools
    from tests.tasks.test_pools import task

    data, source = task("rec-toy"), task("rec-movie", n=9)
    out = pools.transfer(data, source)
    assert out.valid is source.valid and out.train is source.train and out.train_pool is source.pool
    assert out.test is data.test and out.pool is data.pool


# ------------------------------------------------------------------------------------------
# rankers' model selection
# ------------------------------------------------------------------------------------------


def _knn_fit(bert_dir, monkeypatch, **sets):
    pytest.importorskip("torch")
    from rbench.tasks.registry import load_task
    from rbench_rankers import routers
    from tests.rankers.test_routers import tiny, toy_rows, write_task

    # every k ties on valid MRR and objective: only the tie rule decides
    monkeypatch.setattr(routers, "valid_measures", lambda s, v, o: {"valid_MRR": 0.5, "valid_objective": 0.5})
    write_task(toy_rows(per_task=20))
    ranker = tiny("router-knn", bert_dir, **sets)
    ranker.fit(load_task("routing-balance"))
    return ranker


def test_knn_router_k_ties_go_to_the_smaller_k(bert_dir, monkeypatch, one_torch_thread):
    """k1: k chosen on valid: MRR, then objective, then the *smaller* k (the simpler model)."""
    r = _knn_fit(bert_dir, monkeypatch)
    ks = [p["k"] for p in r.info["k_selection"]]
    assert len(ks) >= 3 and r.info["k"] == min(ks)


def test_knn_router_k_grid_includes_every_training_query(bert_dir, monkeypatch, one_torch_thread):
    """k2: the k grid is k_grid plus "all training queries" (k = n_train), even when k_grid
    stops below n_train."""
    r = _knn_fit(bert_dir, monkeypatch, k_grid="1,2")
    ks = [p["k"] for p in r.info["k_selection"]]
    assert ks == [1, 2, r.info["n_train"]]


def _tiger_fit(tmp_path, monkeypatch, valid_mrr, seed=0, **opts):
    from rbench.api import RunContext
    from rbench_rankers.tiger import TigerRanker
    from tests.reliability.test_planted_slips import _tiger

    T, base = _tiger()
    import dataclasses

    o = dataclasses.replace(base, **opts)
    seen: list[list[str]] = []
    if valid_mrr is not None:
        values = iter(valid_mrr)

        def scripted(self, valid, pool):
            seen.append([str(x) for x in valid.ids])
            return next(values)

        monkeypatch.setattr(TigerRanker, "_valid_mrr", scripted)
    r = T._FixedEmbeddings(o, RunContext(cache_dir=tmp_path, seed=seed, show_progress=False))
    r.fit(T._toy_task(n_items=12, n_users=10))
    return r, seen


def test_tiger_keeps_the_first_of_tied_best_evaluations(tmp_path, monkeypatch, one_torch_thread):
    """k3: TIGER keeps the earliest evaluation among those tied on the best valid MRR."""
    r, _ = _tiger_fit(tmp_path, monkeypatch, [0.2, 0.5, 0.5, 0.5], max_steps=4, patience=0)
    assert r.info["best_step"] == 2


def test_tiger_validation_subsample_follows_the_seed(tmp_path, monkeypatch, one_torch_thread):
    """k4: the validation subsample (valid_max_queries) is drawn from the run's seed."""
    drawn = []
    for seed in (0, 1, 2):
        _, seen = _tiger_fit(tmp_path / str(seed), monkeypatch, [0.1] * 8, seed=seed, valid_max_queries=4)
        drawn.append(tuple(seen[0]))
    assert len(set(drawn)) > 1


def _lranker_train(qwen_dir, values):
    pytest.importorskip("peft")
    pytest.importorskip("sklearn")
    from rbench_rankers.lranker.aggregation import Aggregator
    from rbench_rankers.lranker.model import LRankerModel, load_backbone
    from rbench_rankers.lranker.train import PartitionSampler, train
    from tests.lranker_testkit import toy_task
    from tests.rankers.test_lranker import K, cfg_for

    cfg = cfg_for(qwen_dir, epochs=4, lr=3e-3, candidate_tower="frozen")
    task = toy_task(n_train=20)
    model = LRankerModel(cfg, load_backbone(cfg))
    vec = model.candidate_embeddings(list(task.pool.texts))
    model.attach_projector(vec.shape[1])
    model.add_lora()
    it, states = iter(values), []

    def validate():
        states.append({k: v.detach().clone() for k, v in model.trainable_state().items()})
        return next(it)

    report = train(model, cfg, task.train, vec, PartitionSampler(Aggregator("kmeans", K, 0), vec, 10, 0), seed=0,
                   pool_texts=list(task.pool.texts), validate=validate)
    return model, report, states


def test_lranker_keeps_the_first_of_tied_best_evaluations(qwen_dir, one_torch_thread):
    """k5: LRanker's checkpoint selection keeps the earliest of the evaluations tied on the best
    valid MRR."""
    _, report, _ = _lranker_train(qwen_dir, [0.2, 0.6, 0.6, 0.1])
    steps = [p["step"] for p in report.curve]
    assert report.best_valid_mrr == 0.6 and report.best_step == steps[1]


def test_lranker_restores_the_best_checkpoint(qwen_dir, one_torch_thread):
    """k6: after training, LRanker's trainable weights are the best evaluation's, not the last."""
    model, report, states = _lranker_train(qwen_dir, [0.2, 0.9, 0.3, 0.1])
    final = model.trainable_state()
    best = states[1]
    assert set(final) == set(best)
    assert all(torch_equal(final[k], best[k]) for k in best)
    assert not all(torch_equal(final[k], states[-1][k]) for k in best)


def torch_equal(a, b) -> bool:
    import torch

    return bool(torch.equal(a.detach().cpu(), b.detach().cpu()))


def _recbole():
    pytest.importorskip("torch")
    pytest.importorskip("recbole")
    import rbench_rankers.recbole as R

    return R


def test_recbole_early_stopping_keeps_the_largest_valid_metric():
    """k8: RecBole's early stopping and best-model choice read MRR@10 (or NDCG@10) as bigger is
    better."""
    from pathlib import Path

    from rbench.rankers import make_ranker

    R = _recbole()
    for name in ("sasrec", "bpr"):
        cfg = make_ranker(name, {}).recbole_config(R.WrittenData(Path("/x"), "k", {}, {}), Path("/run"))
        assert cfg["valid_metric"] == "MRR@10" and cfg["valid_metric_bigger"] is True


def test_recbole_general_training_pairs_are_distinct(tmp_path):
    """k9: a general model (BPR, FM) trains on each (user, item) interaction once, however many
    histories it appears in."""
    R = _recbole()
    from rbench.tasks.families.recsys import load_atomic_dir
    from tests.rankers.test_recbole import SPEC, _ctx, _write_atomic

    _write_atomic(tmp_path)
    task = load_atomic_dir(SPEC, tmp_path, "toy", None)
    got = R.BPRRanker(R.BPROptions(epochs=1), _ctx(tmp_path / "cache")).recbole_splits(task)["train"]
    pairs = list(zip(map(str, got["user"]), got["target"].tolist()))
    assert len(pairs) > 0 and len(pairs) == len(set(pairs))
