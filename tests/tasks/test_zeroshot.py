"""The paper's zero-shot experiment (Table 5): the video-games and software tasks (Amazon Reviews
2023, 5-core) and the transfer variant ``from-<task>`` (fit on the source, score the target)."""

from __future__ import annotations

import hashlib
import random
from typing import Any, ClassVar

import numpy as np
import pytest

from rbench.api import BaseRanker, Pool, Queries, TaskData
from rbench.audit import reproduce
from rbench.core import paths
from rbench.core.errors import RBenchError
from rbench.results import leaderboard
from rbench.run.runner import RunOptions, make_plan, run
from rbench.tasks import registry
from rbench.tasks.registry import load_task
from tests.helpers import cli, one_line
from tests.tasks.test_tasks_recsys import meta_2023, review_2023, toy_reviews, write_gz, write_toy

CATEGORIES = {"video-games": "Video_Games", "software": "Software"}


def dense_rows(seed: int, n_users: int = 40, n_items: int = 24) -> list[tuple[str, str, int]]:
    """Users with 3..12 interactions over few items, a few exact duplicates: the 5-core drops
    some users and items, and keeps most."""
    rng = random.Random(seed)
    rows = []
    for u in range(n_users):
        for _ in range(rng.randint(3, 12)):
            rows.append((f"AU{u:04d}", f"B{rng.randrange(n_items):05d}", 1_600_000_000_000 + rng.randrange(50) * 1000))
            if rng.random() < 0.05:
                rows.append(rows[-1])
        if u % 4 == 0:  # an item nobody else has: the 5-core drops it
            rows.append((f"AU{u:04d}", f"R{u:05d}", 1_600_000_000_000 + rng.randrange(50) * 1000))
    rng.shuffle(rows)
    return rows


def write_2023(task: str, rows: list[tuple[str, str, int]]) -> None:
    """``<cat>.jsonl.gz`` + ``meta_<cat>.jsonl.gz`` in raw_dir(task), as rbench data download leaves them."""
    d = paths.raw_dir(task)
    d.mkdir(parents=True, exist_ok=True)
    cat = CATEGORIES[task]
    write_gz(d / f"{cat}.jsonl.gz", [review_2023(u, i, ts, k) for k, (u, i, ts) in enumerate(rows)])
    write_gz(d / f"meta_{cat}.jsonl.gz", [meta_2023(i, k) for k, i in enumerate(sorted({r[1] for r in rows}))])


def five_core(rows: list[tuple[str, str, int]], k: int = 5) -> list[tuple[str, str, int]]:
    """The documented filter, re-derived naively: distinct (user, item, ts), then drop users and
    items with fewer than k interactions until none is left to drop."""
    kept = sorted(set(rows))
    while True:
        users: dict[str, int] = {}
        items: dict[str, int] = {}
        for u, i, _ in kept:
            users[u] = users.get(u, 0) + 1
            items[i] = items.get(i, 0) + 1
        left = [r for r in kept if users[r[0]] >= k and items[r[1]] >= k]
        if len(left) == len(kept):
            return kept
        kept = left


ROWS = {"video-games": dense_rows(1), "software": dense_rows(2, n_users=30, n_items=18)}


@pytest.fixture
def zeroshot_data():
    for task, rows in ROWS.items():
        write_2023(task, rows)
    d = paths.raw_dir("rec-toy")
    d.mkdir(parents=True, exist_ok=True)
    write_toy(d, toy_reviews())


# ------------------------------------------------------------------------------------------
# the two tasks
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("task", sorted(CATEGORIES))
def test_the_tasks_load_the_2023_files_as_5_core(zeroshot_data, task):
    data = load_task(task)
    kept = five_core(ROWS[task])
    assert 0 < len({r[1] for r in kept}) < len({r[1] for r in ROWS[task]})  # the filter dropped items ...
    assert 0 < len({r[0] for r in kept}) < len({r[0] for r in ROWS[task]})  # ... and users
    assert list(data.pool.ids) == sorted({i for _, i, _ in kept})
    # every 5-core user is a query, but for those whose last item is one they had before: under the
    # default exclude_history=all such a query is left out and counted (recsys rule 6)
    users = {u for u, _, _ in kept}
    dropped = data.info.get("repeat_targets_dropped", {}).get("test", 0)
    assert set(data.test.user_ids) <= users and len(data.test) + dropped == len(users)
    every = load_task(task, {"exclude_history": "none"})  # the repeat-aware protocol keeps them all
    assert sorted(every.test.user_ids) == sorted(users)
    raw = load_task(task, {"k_core": "0"})  # the raw files unfiltered
    assert len(raw.pool) == len({r[1] for r in ROWS[task]})


def test_the_tasks_are_declared_downloadable_and_not_table_2():
    for task, cat in CATEGORIES.items():
        spec = registry.get_task(task)
        assert [f.filename for f in spec.downloads] == [f"{cat}.jsonl.gz", f"meta_{cat}.jsonl.gz"]
        assert spec.domain == "recommendation" and spec.scenario == "large" and spec.paper_row is None
        assert registry.resolve(task).options(None).k_core == 5
    assert (registry.get_task("video-games").paper_candidates, registry.get_task("video-games").paper_queries) \
        == (25600, 94800)
    assert (registry.get_task("software").paper_candidates, registry.get_task("software").paper_queries) \
        == (17600, 146400)
    assert "video-games" not in registry.paper_tasks() and "software" not in registry.paper_tasks()
    names = list(registry.TASKS)
    assert names[0] == "ml-100k" and names.index("video-games") > names.index("rec-clothing")


# ------------------------------------------------------------------------------------------
# the transfer variant
# ------------------------------------------------------------------------------------------


def text_score(query: str, candidate_id: str, candidate_text: str) -> float:
    """Deterministic and (with distinct ids) tie-free; reads texts, learns nothing per pool."""
    digest = hashlib.sha256(f"{query}\x1f{candidate_id}\x1f{candidate_text}".encode()).digest()
    return int.from_bytes(digest[:7], "big") / float(1 << 56)


class FitRecorder(BaseRanker):
    """Remembers what it was fitted on; scores (query text, candidate text) by a hash."""

    name = "fit-recorder"
    version = "1"
    transfers = True
    fits: ClassVar[list[dict[str, Any]]] = []

    def fit(self, task: TaskData) -> None:
        FitRecorder.fits.append({"spec": task.fit_spec.name, "pool": task.fit_pool.fingerprint,
                                 "train": list(task.train.ids), "valid": list(task.valid.ids)})

    def index(self, pool: Pool) -> None:
        self._pool = pool

    def score(self, queries: Queries, candidates: np.ndarray) -> np.ndarray:
        ids, texts = self._pool.ids, self._pool.texts
        rows = np.broadcast_to(candidates, (len(queries), candidates.shape[-1]))  # shared (1-D) or per query (2-D)
        return np.array([[text_score(q, str(ids[c]), str(texts[c])) for c in row]
                         for q, row in zip(queries.texts, rows, strict=True)])


def recomputed(data: TaskData) -> dict[str, float]:
    """RR and nDCG@10 of ``text_score`` over ``data``'s test queries and pool, computed here."""
    rr, ndcg = [], []
    for i in range(len(data.test)):
        q = data.test.texts[i]
        (pos,) = data.test.positives[i]
        keep = np.ones(len(data.pool), dtype=bool)
        keep[data.test.exclude[i]] = False
        keep[pos] = True
        scores = {c: text_score(q, str(data.pool.ids[c]), str(data.pool.texts[c])) for c in np.flatnonzero(keep)}
        rank = 1 + sum(s > scores[pos] for s in scores.values())
        rr.append(1.0 / rank)
        ndcg.append(1.0 / np.log2(rank + 1) if rank <= 10 else 0.0)
    return {"RR": float(np.mean(rr)), "nDCG@10": float(np.mean(ndcg))}


def test_transfer_fits_on_the_source_and_scores_the_target(zeroshot_data, tmp_path):
    FitRecorder.fits.clear()
    out = run(RunOptions(ranker=FitRecorder, task="video-games", variant="from-rec-toy", results_dir=tmp_path))
    source, target = load_task("rec-toy"), load_task("video-games")
    (fit,) = FitRecorder.fits
    assert fit == {"spec": "rec-toy", "pool": source.pool.fingerprint, "train": list(source.train.ids),
                   "valid": list(source.valid.ids)}
    rec = out.record
    assert (rec.task, rec.variant, rec.task_key) == ("video-games", "from-rec-toy", "video-games~from-rec-toy")
    assert out.path.parent.name == "video-games~from-rec-toy"
    assert rec.task_info["transfer_source"] == "rec-toy"
    assert rec.task_info["source_fingerprint"] == source.fingerprint
    assert rec.task_fingerprint == target.fingerprint and rec.task_info["pool_size"] == len(target.pool)
    assert rec.n_queries == len(target.test) and rec.task_info["n_train"] == len(source.train)
    want = recomputed(target)
    assert rec.metrics["RR"] == pytest.approx(want["RR"], abs=1e-12)
    assert rec.metrics["nDCG@10"] == pytest.approx(want["nDCG@10"], abs=1e-12)
    again = run(RunOptions(ranker=FitRecorder, task="video-games", variant="from-rec-toy", results_dir=tmp_path))
    assert again.skipped and len(FitRecorder.fits) == 1  # the same run is kept, not redone
    lb = leaderboard.build(tmp_path, "large", "from-rec-toy")  # its table, with the paper's Table 5 beside it
    assert [t.task_key for t in lb.tasks] == ["video-games~from-rec-toy"]
    paper = {(m, c.task, metric): v for m, c, metric, v in leaderboard.paper_reference("large", lb.variant, lb.tasks)}
    assert paper[("LRanker", "video-games", "RR")] == 2.61 and paper[("BM25", "video-games", "nDCG@10")] == 0.39


@pytest.mark.parametrize("args,says", [
    (["--ranker", "pop"], "ranker 'pop' cannot be fitted on 'rec-toy' and scored on 'video-games'"),
    (["--ranker", "sasrec"], "ranker 'sasrec' cannot be fitted on 'rec-toy'"),
    (["--ranker", "cross-encoder", "--rerank-from", "pop"], "ranker 'pop' cannot be fitted on 'rec-toy'"),
])
def test_a_pool_bound_ranker_is_refused_in_one_line(capsys, args, says):
    code, _, err = cli(capsys, "run", *args, "--task", "video-games", "--variant", "from-rec-toy")
    assert code == 2 and says in one_line(err) and "transfers = False" in err


@pytest.mark.parametrize("variant,says", [
    ("from-rec-tyo", "variant from-rec-tyo: unknown task 'rec-tyo' (did you mean 'rec-toy'?)"),
    ("from-video-games", "the source is the task itself"),
    ("from-msmarco", "'msmarco' is a passage task and 'video-games' a recommendation task"),
    ("from-", "expected from-TASK"),
])
def test_a_bad_source_is_one_line(capsys, variant, says):
    code, _, err = cli(capsys, "run", "--ranker", "bm25", "--task", "video-games", "--variant", variant)
    assert code == 2 and says in one_line(err)


def test_the_plan_resolves_the_source_once():
    plan = make_plan(RunOptions(ranker="bm25", task="software", variant="from-rec-toy"))
    assert plan.variant.kind == "transfer" and plan.variant.label == "from-rec-toy"
    assert plan.source is registry.resolve("rec-toy")
    with pytest.raises(RBenchError, match="did you mean 'rec-toy'"):
        make_plan(RunOptions(ranker="bm25", task="software", variant="from-rectoy"))


def test_the_recipe_plans_both_tasks_with_the_papers_numbers(capsys, tmp_path):
    recipe = reproduce.get("zeroshot")
    tasks = {"video-games", "software"}
    assert all(set(r.tasks) == tasks and r.variant == "from-rec-toy" for r in recipe.runs)
    known = {s.name for s in registry.list_tasks()}
    assert tasks <= known
    paper = reproduce.paper_numbers(recipe)
    for r in recipe.runs:
        for task in tasks:
            assert (r.paper_model, task, "from-rec-toy", "MRR") in paper, (r.ranker, task)
    code, out, _ = cli(capsys, "reproduce", "zeroshot", "--dry-run", "--results-dir", str(tmp_path))
    assert code == 0 and "video-games" in out and "software" in out and "from-rec-toy" in out
    assert "unknown task" not in out


def test_an_lranker_transfer_reuses_the_source_tasks_checkpoint(qwen_dir, tmp_path):
    """The checkpoint is keyed on the task fitted on (``TaskData.fit_spec``): a from-<source> run
    finds the one its source's own run trained, instead of training the same model again."""
    import dataclasses

    from rbench.tasks import pools
    from tests.lranker_testkit import SPEC, toy_task
    from tests.rankers.test_lranker import ranker_for

    source = toy_task()
    target = toy_task(n_pool=30)
    target = dataclasses.replace(target, spec=dataclasses.replace(SPEC, name="toy-target"),
                                 pool=dataclasses.replace(target.pool, fingerprint="toy-target-pool"))
    moved = pools.transfer(target, source)
    ranker = ranker_for(qwen_dir, tmp_path)
    assert moved.fit_spec is source.spec and ranker.checkpoint_dir(moved) == ranker.checkpoint_dir(source)
    assert ranker.checkpoint_dir(moved).name.startswith(f"{SPEC.name}-")
