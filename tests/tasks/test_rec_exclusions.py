"""Recommendation exclusions and small-list negatives never look at the answer (issue 40, item 2).

On synthetic data where 40% of users' last (and second-to-last) item is a repeat of an earlier
one, the probe "the user's history first, then popularity" (``tests/tasks/history_first.py``)
must gain nothing beyond what repeats give: with ``exclude_history=all`` the repeat queries are
left out and the probe is exactly at popularity's level; on the small lists its gain on repeat
targets is the one that negatives drawn blind to the user predict.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

import rbench
from rbench.core import paths
from rbench.core.errors import RBenchError
from rbench.engine.scan import validate_queries
from rbench.tasks.registry import load_task
from tests.tasks.history_first import HistoryFirst
from tests.tasks.test_tasks_recsys import write_atomic_music

N_ITEMS = 150
N_USERS = 400
REPEAT_SHARE = 0.4


def repeat_sequences(seed: int = 3, max_len: int = 14) -> dict[str, list[int]]:
    """Users with 8..max_len items; the earlier items distinct and popularity-skewed; the last two
    are each, for 40% of users, a uniformly drawn earlier item (a repeat), else a new item."""
    rng = random.Random(seed)
    weights = [1.0 / (k + 1) ** 0.7 for k in range(N_ITEMS)]
    seqs = {}
    for u in range(N_USERS):
        past: list[int] = []
        while len(past) < rng.randint(6, max_len - 2):
            i = rng.choices(range(N_ITEMS), weights)[0]
            if i not in past:
                past.append(i)
        for _ in range(2):  # valid target, then test target
            if rng.random() < REPEAT_SHARE:
                past.append(rng.choice(past))
            else:
                past.append(rng.choice([i for i in range(N_ITEMS) if i not in past]))
        seqs[f"u{u:03d}"] = past
    return seqs


def write_rec_movie(seqs: dict[str, list[int]]) -> None:
    d = paths.raw_dir("rec-movie")
    d.mkdir(parents=True, exist_ok=True)
    with open(d / "ml-1m.inter", "w", encoding="utf-8") as fh:
        fh.write("user_id:token\titem_id:token\trating:float\ttimestamp:float\n")
        fh.writelines(f"{u}\t{i}\t4\t{t}\n" for u, s in seqs.items() for t, i in enumerate(s))
    with open(d / "ml-1m.item", "w", encoding="utf-8") as fh:
        fh.write("item_id:token\tmovie_title:token_seq\trelease_year:token\tgenre:token_seq\n")
        fh.writelines(f"{i}\tFilm {i}\t1990\tDrama\n" for i in range(N_ITEMS))


def write_rec_music(seqs: dict[str, list[int]]) -> None:
    """The sequences as a RecBole atomic Last.fm-style dataset, every item in the items file."""
    rows = [(u, f"i{i}", t) for u, s in seqs.items() for t, i in enumerate(s)]
    write_atomic_music(paths.raw_dir("rec-music"), rows, N_ITEMS)


def per_query_rr(ranker, task: str, **task_options: str) -> tuple[dict[str, float], rbench.RunRecord]:
    rec = rbench.evaluate(ranker, task, task_options=task_options)
    return dict(zip(rec.per_query["query_id"].astype(str), rec.per_query["RR"], strict=True)), rec


def repeat_users(seqs: dict[str, list[int]], back: int) -> set[str]:
    """Users whose target ``back`` from the end (1 = test, 2 = valid) is in their earlier items."""
    return {u for u, s in seqs.items() if s[-back] in s[:-back]}


# ------------------------------------------------------------------------------------------
# full-catalogue tasks: exclusions
# ------------------------------------------------------------------------------------------


def test_exclusion_all_drops_repeat_targets_and_history_first_is_popularity():
    seqs = repeat_sequences()
    write_rec_movie(seqs)
    rep_test, rep_valid = repeat_users(seqs, 1), repeat_users(seqs, 2)
    assert 0.3 < len(rep_test) / N_USERS < 0.5  # the data really has ~40% repeats

    task = load_task("rec-movie")
    ids = task.pool.ids
    for split, back, rep in ((task.test, 1, rep_test), (task.valid, 2, rep_valid)):
        validate_queries(split, task.pool)
        assert set(split.user_ids) == set(seqs) - rep  # a repeat target's query is left out
        for qi, user in enumerate(split.user_ids):  # the excluded set: the whole past, as the input says
            assert {int(ids[i]) for i in split.exclude[qi]} == set(seqs[user][:-back])
    assert task.info["repeat_targets"] == {"valid": len(rep_valid), "test": len(rep_test)}
    assert task.info["repeat_targets_dropped"] == {"valid": len(rep_valid), "test": len(rep_test)}

    probe, rec = per_query_rr(HistoryFirst, "rec-movie")
    pop, _ = per_query_rr("pop", "rec-movie")
    assert rec.task_info["repeat_targets_dropped"] == {"valid": len(rep_valid), "test": len(rep_test)}
    assert rec.n_queries == N_USERS - len(rep_test)
    assert probe == pop  # every history item is excluded: the probe ranks what popularity ranks

    # the repeat-aware protocol keeps every query; there the probe earns the repeats, and nothing
    # is dropped or excluded
    probe_none, rec_none = per_query_rr(HistoryFirst, "rec-movie", exclude_history="none")
    assert rec_none.n_queries == N_USERS and "repeat_targets_dropped" not in rec_none.task_info
    assert rec_none.task_info["repeat_targets"]["test"] == len(rep_test)
    # there the positive of a repeat is among the (<= 13) history items the probe puts first
    assert all(probe_none[u] >= 1 / len(set(seqs[u][:-1])) - 1e-9 for u in rep_test)  # per-query files round


def test_exclusion_window_drops_only_targets_in_the_shown_window():
    seqs = repeat_sequences(seed=5, max_len=30)
    write_rec_movie(seqs)
    h = 5
    task = load_task("rec-movie", {"exclude_history": "window", "history_len": str(h)})
    in_window = {u for u, s in seqs.items() if s[-1] in s[-1 - h:-1]}
    assert in_window != repeat_users(seqs, 1)  # some repeats come from before the window
    assert set(task.test.user_ids) == set(seqs) - in_window
    ids = task.pool.ids
    for qi, user in enumerate(task.test.user_ids):
        assert {int(ids[i]) for i in task.test.exclude[qi]} == set(seqs[user][-1 - h:-1])
    assert task.info["repeat_targets_dropped"]["test"] == len(in_window)
    assert task.info["repeat_targets"]["test"] == len(repeat_users(seqs, 1))


def test_only_repeat_targets_is_refused_in_one_line():
    seqs = {f"u{u}": [u % 7, (u + 1) % 7, (u + 2) % 7, u % 7] for u in range(20)}
    write_rec_movie(seqs)
    with pytest.raises(RBenchError, match="exclude_history=none"):
        load_task("rec-movie")
    assert len(load_task("rec-movie", {"exclude_history": "none"}).test) == 20


# ------------------------------------------------------------------------------------------
# small lists (rec-music): negatives
# ------------------------------------------------------------------------------------------


def _history_negatives(task) -> tuple[np.ndarray, np.ndarray]:
    """Per test query: how many of its list's negatives are in the shown history, and how many
    a uniform draw from the catalogue (minus the positive) puts there on average."""
    c, pos, n = task.test.candidates, task.test.positives.values, len(task.pool)
    seen, expected = [], []
    for qi in range(len(task.test)):
        hist = set(task.test.history[qi].tolist())
        seen.append(sum(1 for j in c[qi] if j != pos[qi] and j in hist))
        others = len(hist - {int(pos[qi])})
        expected.append((c.shape[1] - 1) * others / (n - 1))
    return np.array(seen), np.array(expected)


def test_small_list_negatives_are_drawn_blind_to_the_user():
    seqs = repeat_sequences()
    write_rec_music(seqs)
    task = load_task("rec-music", seed=1)
    assert task.info["negatives_from"] == "catalogue"
    seen, expected = _history_negatives(task)
    # history items turn up among the negatives as often as chance puts them there (a sum of
    # ~thousand Bernoulli draws: 4 standard deviations)
    assert abs(seen.sum() - expected.sum()) < 4 * np.sqrt(expected.sum()), (seen.sum(), expected.sum())
    for split in (task.train, task.valid, task.test):
        c, pos = split.candidates, split.positives.values
        assert ((c == pos[:, None]).sum(axis=1) == 1).all()  # the positive once, never as a negative
        assert all(len(set(row)) == c.shape[1] for row in c.tolist())

    # the old draw, kept as a named option: no negative is ever an item of the user
    leaky = load_task("rec-music", {"negatives_from": "unseen"}, seed=1)
    assert leaky.info["negatives_from"] == "unseen"
    assert _history_negatives(leaky)[0].sum() == 0
    assert leaky.fingerprint != task.fingerprint


def test_history_first_on_small_lists_gains_only_what_repeats_give():
    seqs = repeat_sequences()
    write_rec_music(seqs)
    task = load_task("rec-music", seed=1)
    rep = repeat_users(seqs, 1)
    assert task.info["repeat_targets"]["test"] == len(rep) and "repeat_targets_dropped" not in task.info
    probe, _ = per_query_rr(HistoryFirst, "rec-music")
    pop, _ = per_query_rr("pop", "rec-music")
    # a new target: the history items in its list can only push it down
    assert all(probe[u] <= pop[u] for u in seqs if u not in rep)
    # a repeat target is uniform among its user's (distinct) past items, so among the 1 + B
    # history items of its list it is the j-th most popular with probability 1/(1+B): the probe's
    # expected RR is H(1+B)/(1+B), with B drawn as blind negatives draw it (19 of the 149 others)
    rng = np.random.default_rng(0)
    predicted = []
    for u in rep:
        others = len(set(seqs[u][:-1])) - 1
        b = rng.hypergeometric(others, N_ITEMS - 1 - others, 19, size=4000)
        predicted.append(np.mean([sum(1.0 / j for j in range(1, k + 2)) / (k + 1) for k in b]))
    got = np.mean([probe[u] for u in rep])
    assert abs(got - np.mean(predicted)) < 0.06, (got, np.mean(predicted))
    assert got < 0.9  # with the leaky draw the probe puts every repeat target first (RR 1.0)


def test_history_first_is_an_oracle_for_repeats_only_under_the_leaky_option():
    seqs = repeat_sequences()
    write_rec_music(seqs)
    probe, _ = per_query_rr(HistoryFirst, "rec-music", negatives_from="unseen")
    assert all(probe[u] == 1.0 for u in repeat_users(seqs, 1))


def test_bad_negatives_from_is_refused():
    write_rec_music(repeat_sequences())
    with pytest.raises(RBenchError, match="negatives_from"):
        load_task("rec-music", {"negatives_from": "history"})

