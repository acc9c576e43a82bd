"""Rec-Movie, Rec-Toy, Rec-Clothing and Rec-Music loaders on small files written in the exact
published formats, checked against an independent pandas derivation of the documented rule."""

from __future__ import annotations

import gzip
import json
import random
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rbench.api import Ragged
from rbench.core import paths
from rbench.core.errors import DataError, RBenchError
from rbench.engine.scan import validate_queries
from rbench.tasks import text_columns
from rbench.tasks.families import amazon, recsys
from rbench.tasks.registry import data_status, get_task, load_task

H = 20

# ------------------------------------------------------------------------------------------
# the reference: the protocol re-derived with pandas, independently of rbench's code
# ------------------------------------------------------------------------------------------


def reference_sequences(rows: list[tuple[str, str, float]], min_interactions: int = 3) -> dict[str, list[str]]:
    df = pd.DataFrame(rows, columns=["user", "item", "ts"])
    df["order"] = np.arange(len(df))
    df = df.drop_duplicates(["user", "item", "ts"]).sort_values(["user", "ts", "order"], kind="stable")
    seqs = {str(u): [str(i) for i in g["item"]] for u, g in df.groupby("user", sort=False)}
    return {u: s for u, s in seqs.items() if len(s) >= min_interactions}


def check_sequential(task, seqs: dict[str, list[str]], exclusions: bool = True) -> None:
    """Targets, history windows, exclusions and training windows against ``seqs``. One test and
    one valid query per kept user; with exclusions (``all``) those whose target the user had
    before are left out (rule 6), and the excluded set is the whole past."""
    ids = task.pool.ids
    for split, back, name in ((task.test, 1, "test"), (task.valid, 2, "valid")):
        repeats = {u for u, s in seqs.items() if s[-back] in s[:-back]}
        assert list(split.user_ids) == sorted(set(seqs) - repeats if exclusions else set(seqs))
        assert task.info["repeat_targets"][name] == len(repeats)
        validate_queries(split, task.pool)
        for qi, user in enumerate(split.user_ids):
            seq = seqs[user]
            assert ids[split.positives[qi][0]] == seq[-back]
            assert [ids[i] for i in split.history[qi]] == seq[:-back][-H:]
            if exclusions:
                assert {ids[i] for i in split.exclude[qi]} == set(seq[:-back])
    validate_queries(task.train, task.pool)
    want_train = {f"{u}#{t}": (s[t], s[max(0, t - H):t]) for u, s in seqs.items() for t in range(1, len(s) - 2)}
    got_train = {str(q): (ids[task.train.positives[i][0]], [ids[j] for j in task.train.history[i]])
                 for i, q in enumerate(task.train.ids)}
    assert got_train == want_train
    assert max(len(h) for h in task.train.history) <= H


def raw(task: str) -> Path:
    d = paths.raw_dir(task)
    d.mkdir(parents=True, exist_ok=True)
    return d


def write_gz(path: Path, lines: list[str]) -> None:
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")


def random_interactions(n_users: int, n_items: int, seed: int, lo: int = 1, hi: int = 30
                        ) -> list[tuple[str, str, int]]:
    """Users with 1..30 interactions, coarse timestamps (ties), some exact duplicates."""
    rng = random.Random(seed)
    rows = []
    for u in range(n_users):
        for _ in range(rng.randint(lo, hi)):
            rows.append((f"u{u}", f"i{rng.randrange(n_items)}", rng.randrange(20) * 86400))
            if rng.random() < 0.05:
                rows.append(rows[-1])  # the same event twice
    rng.shuffle(rows)
    return rows


# ------------------------------------------------------------------------------------------
# rec-movie: MovieLens 1M .dat and RecBole atomic
# ------------------------------------------------------------------------------------------

MOVIES = [("1", "Toy Story (1995)", "Animation|Children's|Comedy"),
          ("2", "Café au lait (1993)", "Comedy"),  # latin-1 in the original file
          ("3", "City of Lost Children, The (1995)", "Adventure|Sci-Fi"),
          ("4", "Never Rated (1999)", "Drama")]  # in movies.dat, rated by nobody


def movie_ratings(seed: int = 3) -> list[tuple[str, str, int]]:
    rng = random.Random(seed)
    rows = []
    for u in range(1, 13):
        n = 2 if u == 5 else rng.randint(3, 28)  # user 5 has too few ratings
        for _ in range(n):
            rows.append((str(u), rng.choice("123"), 978300000 + rng.randrange(40)))
    rows.append(rows[0])  # a duplicate line
    return rows


def distinct_movie_ratings(seed: int = 3, n_movies: int = 40) -> list[tuple[str, str, int]]:
    """As ML-1M: each user rates a movie at most once (movies beyond ``MOVIES`` have no
    metadata), so no test or validation target is a movie its user had before and the default
    ``exclude_history=all`` keeps every query. ``movie_ratings`` rates three movies over and over:
    the repeat-aware protocol's fixture."""
    rng = random.Random(seed)
    rows = []
    for u in range(1, 13):
        n = 2 if u == 5 else rng.randint(3, 28)  # user 5 has too few ratings
        for m in rng.sample(range(1, n_movies + 1), n):
            rows.append((str(u), str(m), 978300000 + rng.randrange(40)))
    return rows


def write_ml1m_dat(d: Path, rows) -> None:
    with open(d / "ratings.dat", "w", encoding="ascii") as fh:
        for u, m, ts in rows:
            fh.write(f"{u}::{m}::{(int(m) % 5) + 1}::{ts}\n")
    with open(d / "movies.dat", "w", encoding="latin-1") as fh:
        for m, title, genres in MOVIES:
            fh.write(f"{m}::{title}::{genres}\n")


def write_ml1m_atomic(d: Path, rows) -> None:
    with open(d / "ml-1m.inter", "w", encoding="utf-8") as fh:
        fh.write("user_id:token\titem_id:token\trating:float\ttimestamp:float\n")
        for u, m, ts in rows:
            fh.write(f"{u}\t{m}\t{(int(m) % 5) + 1}\t{ts}\n")
    with open(d / "ml-1m.item", "w", encoding="utf-8") as fh:
        fh.write("item_id:token\tmovie_title:token_seq\trelease_year:token\tgenre:token_seq\n")
        for m, title, genres in MOVIES:
            fh.write(f"{m}\t{title[:-7]}\t{title[-5:-1]}\t{genres.replace('|', ' ')}\n")


def test_rec_movie_dat_latin1_and_protocol():
    rows = movie_ratings()
    write_ml1m_dat(raw("rec-movie"), rows)
    assert (raw("rec-movie") / "movies.dat").read_bytes().count(b"Caf\xe9") == 1  # really latin-1
    present, detail = data_status(get_task("rec-movie"))
    assert present and "ratings.dat" in detail and "movies.dat" in detail
    # three rated movies: every validation target is one its user had before; exclusions would
    # leave no query (rule 6), so the repeat-aware protocol is read here
    with pytest.raises(DataError, match="every validation target"):
        load_task("rec-movie")
    task = load_task("rec-movie", {"exclude_history": "none"})
    assert list(task.pool.ids) == ["1", "2", "3", "4"]  # every movie of movies.dat, unrated ones too
    i2 = list(task.pool.ids).index("2")
    assert task.pool.texts[i2] == "Café au lait (1993). Genres: Comedy"
    assert task.pool.texts[0] == "Toy Story (1995). Genres: Animation Children's Comedy"
    seqs = reference_sequences([(u, m, float(t)) for u, m, t in rows])
    assert "5" not in seqs and task.info["n_users_dropped"] == 1 and task.info["n_duplicates"] >= 1
    check_sequential(task, seqs, exclusions=False)
    assert "Café au lait (1993)" in " ".join(task.test.texts[i] for i in range(len(task.test)))


def test_rec_movie_dat_and_atomic_give_the_same_task(tmp_path):
    rows = movie_ratings(seed=9)
    write_ml1m_dat(raw("rec-movie"), rows)
    dat = load_task("rec-movie", {"exclude_history": "none"})
    for f in ("ratings.dat", "movies.dat"):
        (raw("rec-movie") / f).unlink()
    sub = raw("rec-movie") / "ml-1m"  # a folder holding the files one level down
    sub.mkdir()
    write_ml1m_atomic(sub, rows)
    present, detail = data_status(get_task("rec-movie"))
    assert present and "RecBole atomic" in detail and "ml-1m" in detail
    atomic = load_task("rec-movie", {"exclude_history": "none"})
    assert atomic.fingerprint == dat.fingerprint
    assert list(atomic.pool.texts) == list(dat.pool.texts)


@pytest.mark.parametrize(("line", "field"), [
    ("7::1::4", "Timestamp"),
    ("7::x1::4::978300000", "MovieID"),
    ("7::1::4::soon", "Timestamp"),
])
def test_rec_movie_malformed_ratings_line(line, field):
    d = raw("rec-movie")
    write_ml1m_dat(d, movie_ratings())
    with open(d / "ratings.dat", "a", encoding="ascii") as fh:
        fh.write(line + "\n")
    n_lines = len((d / "ratings.dat").read_text().splitlines())
    with pytest.raises(DataError) as err:
        load_task("rec-movie")
    assert err.value.line == n_lines and err.value.field == field and "ratings.dat" in str(err.value)


def test_rec_movie_partial_and_absent_inputs():
    spec = get_task("rec-movie")
    present, detail = data_status(spec)
    assert not present and detail.startswith("not present: " + spec.how_to_get)
    d = raw("rec-movie")
    write_ml1m_dat(d, movie_ratings())
    (d / "movies.dat").unlink()
    present, detail = data_status(spec)
    assert not present and detail.startswith("not present: ") and "found ratings.dat but not movies.dat" in detail
    with pytest.raises(RBenchError, match="not present"):
        load_task("rec-movie")


# ------------------------------------------------------------------------------------------
# rec-toy: Amazon 2014 5-core reviews + Python-literal meta
# ------------------------------------------------------------------------------------------


def toy_reviews(seed: int = 5) -> list[tuple[str, str, int]]:
    rows = random_interactions(25, 14, seed)
    return [(f"A{u[1:].zfill(3)}X", f"B00{i[1:].zfill(4)}", ts + 1356998400) for u, i, ts in rows]


def review_2014(user: str, asin: str, ts: int) -> str:
    return json.dumps({"reviewerID": user, "asin": asin, "reviewerName": "J. Doe", "helpful": [0, 0],
                       "reviewText": "Fun.\tMy kids loved it", "overall": 5.0, "summary": "Great",
                       "unixReviewTime": ts, "reviewTime": "01 1, 2013"})


def toy_meta_lines(items: list[str]) -> list[str]:
    """Python-literal dicts as in meta_Toys_and_Games.json.gz, plus items outside the 5-core."""
    lines = []
    for k, asin in enumerate(sorted(items) + ["B09999", "B09998"]):
        obj = {"asin": asin, "salesRank": {"Toys & Games": 1000 + k}, "imUrl": "http://x/y.jpg",
               "categories": [["Toys & Games", "Puzzles"], ["Toys & Games", "Puzzles"], ["Games"]],
               "related": {"also_bought": ["B0000000"]}, "title": f"Kid's puzzle {k}", "brand": "Acme"}
        if k == 1:
            del obj["title"]  # title can be missing
        if k == 2:
            continue  # no meta line at all
        lines.append(repr(obj))
    return lines


def write_toy(d: Path, rows) -> None:
    write_gz(d / "reviews_Toys_and_Games_5.json.gz", [review_2014(*r) for r in rows])
    write_gz(d / "meta_Toys_and_Games.json.gz", toy_meta_lines(sorted({r[1] for r in rows})))


def test_rec_toy_json_meta_literal_and_protocol():
    rows = toy_reviews()
    write_toy(raw("rec-toy"), rows)
    assert "'asin': " in gzip.open(raw("rec-toy") / "meta_Toys_and_Games.json.gz", "rt").readline()
    present, detail = data_status(get_task("rec-toy"))
    assert present and "reviews_Toys_and_Games_5.json.gz" in detail
    task = load_task("rec-toy")
    items = sorted({r[1] for r in rows})
    assert list(task.pool.ids) == items  # only the interacted items: B09999/B09998 are not candidates
    texts = dict(zip(task.pool.ids, task.pool.texts, strict=True))
    assert texts[items[0]] == ("Kid's puzzle 0. Categories: Toys & Games > Puzzles; Games. Brand: Acme")
    assert texts[items[1]].startswith(f"item {items[1]}. Categories:")  # missing title
    assert texts[items[2]] == f"item {items[2]}"  # missing meta line
    assert task.info["n_items_without_metadata"] == 1
    check_sequential(task, reference_sequences([(u, i, float(t)) for u, i, t in rows]))


@pytest.mark.parametrize(("bad", "field"), [
    ('{"reviewerID": "AX", "asin": "B001", "unixReviewTime": "yesterday"}', "unixReviewTime"),
    ('{"asin": "B001", "overall": 4.0, "unixReviewTime": 1}', "reviewerID"),
    ('{"reviewerID": "AX", "asin": "", "unixReviewTime": 1}', "asin"),
    ('{"reviewerID": "AX", "asin": "B001", "unixReviewTime": 1', None),  # truncated JSON
])
def test_rec_toy_malformed_review_line(bad, field):
    rows = toy_reviews()
    d = raw("rec-toy")
    write_toy(d, rows)
    lines = [review_2014(*r) for r in rows]
    lines.insert(7, bad)
    write_gz(d / "reviews_Toys_and_Games_5.json.gz", lines)
    with pytest.raises(DataError) as err:
        load_task("rec-toy")
    assert err.value.line == 8 and err.value.field == field
    assert "reviews_Toys_and_Games_5.json.gz" in str(err.value)


def test_rec_toy_malformed_meta_line_of_a_needed_item():
    rows = toy_reviews()
    d = raw("rec-toy")
    write_toy(d, rows)
    lines = toy_meta_lines(sorted({r[1] for r in rows}))
    lines.insert(2, "{'asin': 'B0NOTNEEDED', 'title': 'broken too")  # never parsed: not in the 5-core
    lines.insert(4, "{'asin': '" + rows[0][1] + "', 'title': 'broken")
    write_gz(d / "meta_Toys_and_Games.json.gz", lines)
    with pytest.raises(DataError) as err:
        load_task("rec-toy")
    assert err.value.line == 5 and "meta_Toys_and_Games.json.gz" in str(err.value)


def test_k_core_matches_a_naive_loop():
    rows = toy_reviews(seed=11)
    rows += [(rows[k][0], f"B0RARE{k}", 1356998400 + k) for k in range(3)]  # items seen once
    rows += [("AZZZ", f"B0SOLO{k % 2}", 1356998400 + k) for k in range(6)]  # goes once its items go
    d = raw("rec-toy") / "recbole"
    d.mkdir(parents=True)
    with open(d / "Amazon_Toys_and_Games.inter", "w") as fh:
        fh.write("user_id:token\titem_id:token\trating:float\ttimestamp:float\n")
        fh.writelines(f"{u}\t{i}\t5.0\t{t}\n" for u, i, t in rows)
    with open(d / "Amazon_Toys_and_Games.item", "w") as fh:
        fh.write("item_id:token\ttitle:token\tbrand:token\n")
        fh.writelines(f"{i}\tThing\t{i}\tAcme\n" for i in sorted({r[1] for r in rows}))  # a tab in a title
    df = pd.DataFrame(rows, columns=["user", "item", "ts"]).drop_duplicates()
    while True:  # naive iterative 5-core
        uc, ic = df["user"].value_counts(), df["item"].value_counts()
        small = df["user"].map(uc).lt(5) | df["item"].map(ic).lt(5)
        if not small.any():
            break
        df = df[~small]
    assert 0 < df["item"].nunique() < len({r[1] for r in rows}) - 4  # the filter does something here
    assert "AZZZ" not in set(df["user"])  # removed only by the second round
    task = load_task("rec-toy", {"k_core": "5"})
    assert list(task.pool.ids) == sorted(df["item"].unique())
    assert task.pool.texts[0] == f"Thing {task.pool.ids[0]}. Brand: Acme"
    check_sequential(task, reference_sequences(list(df.itertuples(index=False, name=None))))
    assert task.fingerprint != load_task("rec-toy").fingerprint


# ------------------------------------------------------------------------------------------
# rec-clothing: Amazon Reviews 2023, streamed
# ------------------------------------------------------------------------------------------


def review_2023(user: str, item: str, ts: int, k: int) -> str:
    return json.dumps({"rating": float(1 + k % 5), "title": "Nice", "text": f"Fits well. {'x' * (k % 40)}",
                       "images": [], "asin": f"{item}V{k % 3}", "parent_asin": item, "user_id": user,
                       "timestamp": ts, "helpful_vote": k % 4, "verified_purchase": k % 2 == 0})


def meta_2023(item: str, k: int) -> str:
    return json.dumps({"main_category": "AMAZON FASHION", "title": f"Dress {k}" if k % 9 else "",
                       "average_rating": 4.1, "rating_number": 12, "features": ["Cotton"],
                       "description": [], "price": None if k % 2 else 19.99, "images": [{"large": "u"}],
                       "videos": [], "store": None if k % 5 == 0 else f"Brand{k % 7}",
                       "categories": [] if k % 4 == 0 else ["Clothing, Shoes & Jewelry", "Women", "Dresses"],
                       "details": {"Department": "womens"} if k % 2 else {"Size": 3},
                       "parent_asin": item, "bought_together": None})


def clothing_rows(n_lines: int, seed: int) -> list[tuple[str, str, int]]:
    rng = np.random.default_rng(seed)
    users = rng.zipf(1.6, n_lines) % (n_lines // 8)
    items = rng.zipf(1.4, n_lines) % (n_lines // 3)
    ts = 1_500_000_000_000 + rng.integers(0, 400, n_lines) * 1000
    return [(f"AG{u:026d}", f"B{i:09d}", int(t)) for u, i, t in zip(users, items, ts, strict=True)]


def test_rec_clothing_streamed_50k_lines(monkeypatch):
    rows = clothing_rows(50_000, seed=2)
    d = raw("rec-clothing")
    write_gz(d / "Clothing_Shoes_and_Jewelry.jsonl.gz", [review_2023(*r, k) for k, r in enumerate(rows)])
    items = sorted({r[1] for r in rows})
    meta_items = items[::2] + [f"Z{k:09d}" for k in range(500)]  # half covered, plus items never reviewed
    write_gz(d / "meta_Clothing_Shoes_and_Jewelry.jsonl.gz", [meta_2023(it, k) for k, it in enumerate(meta_items)])
    monkeypatch.setattr(amazon, "BLOCK_BYTES", 1 << 20)  # several blocks: dictionaries must be unified
    task = load_task("rec-clothing", {"max_train_per_user": "5"})
    assert list(task.pool.ids) == items
    assert task.info["n_items_without_metadata"] == len(items) - len(items[::2])
    seqs = reference_sequences([(u, i, float(t)) for u, i, t in rows])
    ids = task.pool.ids
    assert list(task.test.user_ids) == sorted(u for u, s in seqs.items() if s[-1] not in s[:-1])
    for qi in range(0, len(task.test), 97):
        seq = seqs[task.test.user_ids[qi]]
        assert ids[task.test.positives[qi][0]] == seq[-1]
        assert [ids[i] for i in task.test.history[qi]] == seq[:-1][-H:]
        assert {ids[i] for i in task.test.exclude[qi]} == set(seq[:-1])
    assert len(task.train) == sum(min(len(s) - 3, 5) for s in seqs.values())
    texts = dict(zip(ids, task.pool.texts, strict=True))
    assert texts[meta_items[1]] == "Dress 1. Categories: Clothing, Shoes & Jewelry > Women > Dresses. Store: Brand1"
    assert texts[meta_items[0]] == f"item {meta_items[0]}"  # empty title, no categories, null store
    assert texts[items[1]] == f"item {items[1]}"  # no meta line

    # the arrow text column (used from ARROW_TEXTS_MIN items on) is the same task; the loader is
    # called directly (load_task may answer from the prepared-data cache)
    spec, opts = get_task("rec-clothing"), recsys.SequentialOptions(max_train_per_user=5)
    plain = recsys.FAMILY.load(spec, opts, 0)
    monkeypatch.setattr(text_columns, "ARROW_MIN_ROWS", 0)
    arrow = recsys.FAMILY.load(spec, opts, 0)
    assert isinstance(arrow.pool.texts, text_columns.ArrowTextColumn) and isinstance(plain.pool.texts, np.ndarray)
    assert arrow.fingerprint == plain.fingerprint == task.fingerprint
    assert arrow.test.texts[3] == plain.test.texts[3]
    assert list(arrow.pool.texts[[0, 5]]) == list(plain.pool.texts[[0, 5]])


def test_reviews_reader_keeps_no_python_object_per_review(tmp_path):
    rows = clothing_rows(30_000, seed=4)
    path = tmp_path / "Clothing_Shoes_and_Jewelry.jsonl.gz"
    write_gz(path, [review_2023(*r, k) for k, r in enumerate(rows)])
    tracemalloc.start()
    reviews = amazon.read_reviews(path, amazon.FORMAT_2023, block_bytes=1 << 20)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # codes and times: ~35 bytes per review at the peak (measured); one tuple of two id strings
    # per review is ~240 (measured), a str alone >= 49
    assert peak < 100 * len(rows), peak
    names_u = np.asarray(reviews.user_names.to_pylist())
    names_i = np.asarray(reviews.item_names.to_pylist())
    assert list(names_u) == sorted(set(names_u)) and list(names_i) == sorted(set(names_i))
    assert list(zip(names_u[reviews.user], names_i[reviews.item], reviews.ts.astype(int), strict=True)) == rows


def test_rec_clothing_malformed_line_and_atomic_layout():
    rows = clothing_rows(2_000, seed=6)
    d = raw("rec-clothing")
    lines = [review_2023(*r, k) for k, r in enumerate(rows)]
    lines[1500] = lines[1500].replace('"user_id": ', '"user": ')
    lines.insert(10, "")  # blank lines do not shift the reported line
    write_gz(d / "Clothing_Shoes_and_Jewelry.jsonl.gz", lines)
    write_gz(d / "meta_Clothing_Shoes_and_Jewelry.jsonl.gz", [meta_2023(rows[0][1], 1)])
    with pytest.raises(DataError) as err:
        load_task("rec-clothing")
    assert err.value.line == 1502 and err.value.field == "user_id"


# ------------------------------------------------------------------------------------------
# rec-music: 20-item lists
# ------------------------------------------------------------------------------------------


def write_atomic_music(d: Path, rows, n_items: int) -> None:
    d.mkdir(parents=True, exist_ok=True)
    with open(d / "radio.inter", "w", encoding="utf-8") as fh:
        fh.write("user_id:token\titem_id:token\tweight:float\ttimestamp:float\n")
        fh.writelines(f"{u}\t{i}\t1\t{t}\n" for u, i, t in rows)
    with open(d / "radio.item", "w", encoding="utf-8") as fh:
        fh.write("item_id:token\tname:token\turl:token\tpicture_url:token\n")
        for k in range(n_items):
            name = "Sigur Rós" if k == 0 else ("AC\tDC" if k == 1 else f"Band {k}")  # a tab in a name
            fh.write(f"i{k}\t{name}\thttp://www.last.fm/music/{k}\thttp://img/{k}.jpg\n")


def check_lists(task, seqs: dict[str, list[str]], size: int, unseen: bool = False) -> None:
    ids = task.pool.ids
    for split in (task.test, task.valid, task.train):
        c = split.candidates
        assert c.shape == (len(split), size) and split.exclude is None
        validate_queries(split, task.pool)  # positive exactly once
        pos = split.positives.values
        assert ((c == pos[:, None]).sum(axis=1) == 1).all()
        assert all(len(set(row)) == size for row in c.tolist())  # distinct items
        for qi in range(len(split)):
            negs = [ids[j] for j in c[qi] if j != pos[qi]]
            assert ids[pos[qi]] not in negs
            if unseen:
                assert not set(seqs[str(split.user_ids[qi])]) & set(negs)  # never an item of the user


def test_rec_music_atomic_lists_and_seed():
    rows = random_interactions(30, 60, seed=8, lo=2, hi=25)
    write_atomic_music(raw("rec-music") / "radio", rows, 62)
    present, detail = data_status(get_task("rec-music"))
    assert present and "radio.inter" in detail and "radio.item" in detail
    a = load_task("rec-music", seed=1)
    seqs = reference_sequences([(u, i, float(t)) for u, i, t in rows])
    check_sequential(a, seqs, exclusions=False)
    check_lists(a, seqs, 20)
    assert list(a.pool.ids) == sorted({r[1] for r in rows})  # interacted items (i60, i61 never are)
    names = dict(zip(a.pool.ids, a.pool.texts, strict=True))
    assert names["i0"] == "Sigur Rós" and names["i1"] == "AC DC"
    positions = np.argmax(a.test.candidates == a.test.positives.values[:, None], axis=1)
    assert len(set(positions.tolist())) > 5  # the positive is not always in the same slot
    b = load_task("rec-music", seed=1)
    assert np.array_equal(a.test.candidates, b.test.candidates) and a.fingerprint == b.fingerprint
    c = load_task("rec-music", seed=2)
    assert not np.array_equal(a.test.candidates, c.test.candidates) and a.fingerprint != c.fingerprint
    # the test lists do not depend on training options (their own random stream)
    d = load_task("rec-music", {"max_train_per_user": "1"}, seed=1)
    assert np.array_equal(a.test.candidates, d.test.candidates) and len(d.train) < len(a.train)
    e = load_task("rec-music", {"negatives": "4"}, seed=1)
    check_lists(e, seqs, 5)


def test_rec_music_too_few_items_for_negatives():
    rows = [(f"u{u}", f"i{(2 * u + k) % 8}", k) for u in range(3) for k in range(4)]  # 4 of 8 items each
    write_atomic_music(raw("rec-music"), rows, 8)
    with pytest.raises(DataError, match="pool has 8 items: fewer than 19"):
        load_task("rec-music")
    seqs = reference_sequences([(u, i, float(t)) for u, i, t in rows])
    check_lists(load_task("rec-music", {"negatives": "7"}), seqs, 8)  # the whole pool
    with pytest.raises(DataError, match="fewer than 5 are left"):
        load_task("rec-music", {"negatives": "5", "negatives_from": "unseen"})
    task = load_task("rec-music", {"negatives": "4", "negatives_from": "unseen"})  # exactly the 4 never had
    check_lists(task, seqs, 5, unseen=True)


def test_sample_negatives_finishes_dense_users_exactly():
    seqs = Ragged.from_rows([list(range(0, 95)), [3, 4]])  # user 0 leaves only 5 free items
    seen = recsys.UserItems.of(seqs, 100)
    rng = np.random.default_rng(0)
    out = recsys.sample_negatives(rng, np.array([0, 0, 1]), seen, 5)
    assert sorted(out[0]) == sorted(out[1]) == [95, 96, 97, 98, 99]
    assert not {3, 4} & set(out[2]) and len(set(out[2])) == 5


def test_rec_music_amazon_cds_layout():
    rows = [(f"A{u}", f"C{int(i[1:]):03d}", t) for u, i, t in random_interactions(20, 40, seed=12, lo=3)]
    d = raw("rec-music")
    write_gz(d / "reviews_CDs_and_Vinyl_5.json.gz", [review_2014(*r) for r in rows])
    items = sorted({r[1] for r in rows})
    with open(d / "meta_CDs_and_Vinyl.json", "w") as fh:  # the 2018 layout: strict JSON, flat category
        fh.writelines(json.dumps({"asin": i, "title": f"Album {i}", "category": ["CDs & Vinyl", "Jazz"],
                                  "brand": "Blue Note"}) + "\n" for i in items)
    present, detail = data_status(get_task("rec-music"))
    assert present and "Amazon 2014/2018 CDs_and_Vinyl" in detail
    task = load_task("rec-music", seed=0)
    assert task.pool.texts[0] == f"Album {items[0]}. Categories: CDs & Vinyl > Jazz. Brand: Blue Note"
    check_lists(task, reference_sequences([(u, i, float(t)) for u, i, t in rows]), 20)


# ------------------------------------------------------------------------------------------
# RecBole atomic quirks
# ------------------------------------------------------------------------------------------


def test_atomic_short_row_and_bad_timestamp_name_the_line(tmp_path):
    p = tmp_path / "x.inter"
    p.write_text("user_id:token\titem_id:token\ttimestamp:float\n1\t2\t3\n\n4\t5\tlate\n")
    with pytest.raises(DataError) as err:
        recsys.interactions_from_atomic(p)
    assert err.value.line == 4 and err.value.field == "timestamp"
    p.write_text("user_id:token\titem_id:token\ttimestamp:float\n1\t2\t3\n4\n")
    with pytest.raises(DataError) as err:
        recsys.interactions_from_atomic(p)
    assert err.value.line == 3 and err.value.field in ("item_id", "timestamp")


def test_ml100k_fingerprint_is_unchanged():
    """Committed ml-100k results carry this fingerprint; extending the options must not move it."""
    import json as _json

    rec = Path(__file__).resolve().parents[2] / "records" / "large" / "ml-100k" / "pop.json"
    if not rec.exists():
        pytest.skip("no committed ml-100k result")
    assert load_task("ml-100k").fingerprint == _json.loads(rec.read_text())["task_fingerprint"]


# ------------------------------------------------------------------------------------------
# real data (../shared)
# ------------------------------------------------------------------------------------------


@pytest.mark.shared
def test_lastfm_as_rec_music(shared_data):
    src = shared_data / "rec-music-lastfm"
    if not (src / "lastfm.inter").exists():
        pytest.skip("rec-music-lastfm not in ../shared/data")
    raw("rec-music")
    (paths.raw_dir("rec-music") / "lastfm").symlink_to(src, target_is_directory=True)
    present, detail = data_status(get_task("rec-music"))
    assert present and "lastfm.inter" in detail
    task = load_task("rec-music", seed=0)
    inter = pd.read_csv(src / "lastfm.inter", sep="\t")
    inter.columns = ["user", "item", "weight", "ts"]
    seqs = reference_sequences([(str(u), str(i), float(t)) for u, i, t in
                                inter[["user", "item", "ts"]].itertuples(index=False, name=None)])
    print(f"\nLast.fm as rec-music: pool {len(task.pool):,}, queries train/valid/test "
          f"{len(task.train):,}/{len(task.valid):,}/{len(task.test):,}; info {task.info}")
    assert len(task.test) == len(task.valid) == len(seqs) > 1000
    assert len(task.pool) == inter["item"].nunique()  # every artist listened to (de-duplication keeps them)
    assert task.info["n_rows_read"] == len(inter) == 64286
    assert task.test.candidates.shape == (len(seqs), 20)
    check_sequential(task, seqs, exclusions=False)
    check_lists(task, seqs, 20)
    assert "Sigur Rós" in set(task.pool.texts)
