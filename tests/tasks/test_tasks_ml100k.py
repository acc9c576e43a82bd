"""The embedded default task follows the documented Rec-Movie protocol, checked against an
independent pandas re-derivation from the raw RecBole files."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from rbench.tasks.families.recsys import recbole_example_dir
from rbench.tasks.registry import load_task


@pytest.fixture(scope="module")
def task():
    return load_task("ml-100k")


@pytest.fixture(scope="module")
def raw():
    d = recbole_example_dir("ml-100k")
    inter = pd.read_csv(d / "ml-100k.inter", sep="\t")
    inter.columns = ["user", "item", "rating", "ts"]
    inter["order"] = np.arange(len(inter))
    return inter.sort_values(["user", "ts", "order"], kind="stable")


def test_sizes(task):
    assert len(task.pool) == 1682
    assert len(task.test) == len(task.valid) == 943
    # one rating per (user, item): no target is a repeat, so exclusions leave every query in
    assert task.info["repeat_targets"] == task.info["repeat_targets_dropped"] == {"valid": 0, "test": 0}
    assert len(task.train) == 100000 - 3 * 943  # positions 1..n-3 of every user


def test_targets_history_and_exclusions(task, raw):
    seqs = {str(u): [str(i) for i in g["item"]] for u, g in raw.groupby("user")}
    for qi in range(0, 943, 37):
        user = str(task.test.user_ids[qi])
        seq = seqs[user]
        assert task.pool.ids[task.test.positives[qi][0]] == seq[-1]
        assert [task.pool.ids[i] for i in task.test.history[qi]] == seq[-21:-1]
        assert task.pool.ids[task.valid.positives[qi][0]] == seq[-2]
        assert [task.pool.ids[i] for i in task.valid.history[qi]] == seq[-22:-2]
        excluded = {task.pool.ids[i] for i in task.test.exclude[qi]}
        assert excluded == set(seq[:-1])  # the whole past (rule 6)
        assert task.test.positives[qi][0] not in set(task.test.exclude[qi])
    # no training window targets a valid/test position
    train_users = task.train.user_ids
    for qi in range(0, 943, 101):
        user = task.test.user_ids[qi]
        n = len(seqs[str(user)])
        assert (train_users == user).sum() == n - 3


def test_texts_and_prompts(task):
    assert task.pool.texts[task.pool.ids.tolist().index("1")].startswith("Toy Story (1995). Genres: Animation")
    q = task.test.texts[0]
    assert q.count("; ") == 19
    p = task.test.prompts[0]
    assert p.startswith("Task: Recommendation\n\nQuery: " + q) and "<|embedding|>" in p


def test_options_change_the_protocol():
    t = load_task("ml-100k", {"history_len": "5", "exclude_history": "none"})
    assert t.test.history.lengths().max() == 5 and t.test.exclude is None
    assert t.fingerprint != load_task("ml-100k").fingerprint
