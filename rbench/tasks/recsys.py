"""Sequential recommendation tasks (the paper's Rec-Movie / Rec-Toy / Rec-Clothing protocol).

The exact rule, applied identically to every recommendation task (the paper gives the window
length and leave-one-out; the rest is RecBole's standard practice and written down here):

1. Interactions are de-duplicated on (user, item, timestamp); re-interactions at other times stay.
2. Each user's interactions are ordered by timestamp; ties keep file order (stable sort).
3. Users with fewer than ``min_interactions`` (3) interactions are dropped: leave-one-out needs a
   training, a validation and a test target.
4. Test target = the user's last item; validation target = the second-to-last; training samples =
   every earlier position t >= 1 (sliding windows). Each sample's history is the up-to
   ``history_len`` (20) items right before its target, oldest first.
5. Candidate pool = every item of the catalogue (items file plus any item seen in interactions),
   ordered by item id as text. Items without metadata get the text ``item <id>``.
6. Exclusion (RecBole full-sort): every item the user interacted with before the target is
   removed from that query's ranking, except the target itself (``exclude_history=all``;
   ``window`` excludes only the shown history, ``none`` nothing).
7. Query text (the prompt's [USER QUERY]) = the history titles joined by "; ", oldest first;
   the prompt wraps it in the paper's recommendation template.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from rbench.api import Pool, Queries, Ragged, TaskData
from rbench.errors import DataError, RBenchError
from rbench.tasks.spec import TaskSpec


@dataclass
class SequentialOptions:
    """Options of the sequential-recommendation protocol (paper values as defaults)."""

    history_len: int = 20
    min_interactions: int = 3
    exclude_history: Literal["all", "window", "none"] = "all"
    max_train_per_user: int = 0  # 0 = every sliding window (the paper's setting)

    def validate(self) -> None:
        if self.history_len < 1:
            raise RBenchError("task.history_len must be >= 1")
        if self.min_interactions < 3:
            raise RBenchError("task.min_interactions must be >= 3 (train, valid and test targets)")


# ------------------------------------------------------------------------------------------
# lazy text columns
# ------------------------------------------------------------------------------------------


class HistoryTexts(Sequence):
    """Query texts rendered on access from the history indices, so a million training windows
    do not become a million long strings in memory."""

    def __init__(self, history: Ragged, titles: np.ndarray, template: str | None = None) -> None:
        self.history, self.titles, self.template = history, titles, template

    def __len__(self) -> int:
        return len(self.history)

    def __getitem__(self, i: Any) -> Any:  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        text = "; ".join(self.titles[self.history[int(i)]])
        return self.template.replace("{query}", text) if self.template else text


# ------------------------------------------------------------------------------------------
# RecBole atomic files
# ------------------------------------------------------------------------------------------


def read_atomic(path: Path, required: Sequence[str] = ()) -> pd.DataFrame:
    """Read a RecBole atomic file (tab-separated, header ``name:type``); columns renamed to
    their bare names. All columns are read as text; callers convert what they need."""
    path = Path(path)
    if not path.exists():
        raise DataError("file not found", path)
    with open(path, encoding="utf-8", errors="replace") as fh:
        header = fh.readline().rstrip("\n").rstrip("\r")
    if not header:
        raise DataError("empty file (expected a header line like 'user_id:token<TAB>item_id:token')", path, 1)
    names = [h.split(":", 1)[0] for h in header.split("\t")]
    bad = [h for h in header.split("\t") if ":" not in h]
    if bad:
        raise DataError(f"header field {bad[0]!r} is not of the form name:type", path, 1)
    missing = [r for r in required if r not in names]
    if missing:
        raise DataError(f"missing column(s) {', '.join(missing)}; header has {', '.join(names)}", path, 1)
    rows: list[list[str]] = []
    ncol = len(names)
    try:
        df = pd.read_csv(path, sep="\t", header=0, names=names, dtype=str, quoting=3,
                         keep_default_na=False, na_filter=False, engine="c", encoding="utf-8",
                         encoding_errors="replace", on_bad_lines="error")
        return df
    except pd.errors.ParserError:
        pass  # fall back to a line-by-line read that can name the bad line
    with open(path, encoding="utf-8", errors="replace") as fh:
        fh.readline()
        for lineno, line in enumerate(fh, start=2):
            line = line.rstrip("\n").rstrip("\r")
            if not line:
                continue
            parts = line.split("\t")
            if len(parts) > ncol:
                # a tab inside a free-text column: fold the surplus into the last text column
                text_cols = [i for i, h in enumerate(header.split("\t")) if h.endswith(("token_seq", "token"))]
                j = text_cols[-1] if text_cols else ncol - 1
                surplus = len(parts) - ncol
                parts = parts[:j] + [" ".join(parts[j : j + surplus + 1])] + parts[j + surplus + 1 :]
            if len(parts) < ncol:
                raise DataError(f"expected {ncol} tab-separated fields ({', '.join(names)}), got {len(parts)}",
                                path, lineno, names[len(parts)] if len(parts) < ncol else None)
            rows.append(parts)
    return pd.DataFrame(rows, columns=names)


def interactions_from_atomic(inter_path: Path) -> pd.DataFrame:
    """``.inter`` -> DataFrame(user, item, ts) with file order preserved."""
    df = read_atomic(inter_path, required=("user_id", "item_id"))
    ts_col = "timestamp" if "timestamp" in df.columns else None
    if ts_col is None:
        raise DataError("no timestamp column: sequential tasks need interaction times", inter_path, 1, "timestamp")
    ts = pd.to_numeric(df[ts_col], errors="coerce")
    if ts.isna().any():
        line = int(np.flatnonzero(ts.isna().to_numpy())[0]) + 2
        raise DataError(f"not a number: {df[ts_col].iloc[line - 2]!r}", inter_path, line, "timestamp")
    return pd.DataFrame({"user": df["user_id"].astype(str), "item": df["item_id"].astype(str),
                         "ts": ts.astype(np.float64)})


def items_from_atomic(item_path: Path | None) -> pd.DataFrame:
    """``.item`` -> DataFrame(item, title, text). Title = first title-like column (+ year)."""
    if item_path is None or not Path(item_path).exists():
        return pd.DataFrame({"item": [], "title": [], "text": []})
    df = read_atomic(item_path, required=("item_id",))
    title_col = next((c for c in ("movie_title", "title", "name", "item_name") if c in df.columns), None)
    title = df[title_col].astype(str).str.strip() if title_col else df["item_id"].map(lambda x: f"item {x}")
    year = df["release_year"].astype(str).str.strip() if "release_year" in df.columns else None
    if year is not None:
        title = title.where(year == "", title + " (" + year + ")")
    text = title.copy()
    for col, label in (("class", "Genres"), ("genre", "Genres"), ("categories", "Categories"),
                       ("brand", "Brand"), ("sales_type", "Type")):
        if col in df.columns:
            extra = df[col].astype(str).str.strip()
            text = text.where(extra == "", text + ". " + label + ": " + extra)
    return pd.DataFrame({"item": df["item_id"].astype(str), "title": title, "text": text})


# ------------------------------------------------------------------------------------------
# the protocol
# ------------------------------------------------------------------------------------------


def _fingerprint(*parts: Any) -> str:
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, np.ndarray):
            h.update(str(part.dtype).encode())
            h.update(np.ascontiguousarray(part).tobytes() if part.dtype != object else
                     "\x1f".join(map(str, part)).encode())
        else:
            h.update(str(part).encode())
        h.update(b"\x1e")
    return h.hexdigest()


@dataclass
class SequenceSplit:
    """Per-user ordered item sequences as one flat array (pool indices) + offsets."""

    users: np.ndarray  # user ids (str), one per sequence
    seqs: Ragged


def order_sequences(inter: pd.DataFrame, item_index: dict[str, int], min_interactions: int) -> SequenceSplit:
    inter = inter.drop_duplicates(subset=["user", "item", "ts"], keep="first")
    user_codes, users = pd.factorize(inter["user"], sort=True)
    order = np.lexsort((np.arange(len(inter)), inter["ts"].to_numpy(), user_codes))  # stable ties
    items = inter["item"].map(item_index).to_numpy(np.int64)[order]
    user_sorted = user_codes[order]
    counts = np.bincount(user_sorted, minlength=len(users))
    offsets = np.zeros(len(users) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    seqs = Ragged(offsets, items)
    keep = np.flatnonzero(counts >= min_interactions)
    return SequenceSplit(users=np.asarray(users, dtype=object)[keep], seqs=seqs.take(keep))


def _windows(seqs: Ragged, targets: np.ndarray, seq_rows: np.ndarray, history_len: int) -> Ragged:
    """History windows: for (row r, position t) the items seqs[r][max(0,t-H):t]."""
    starts = seqs.offsets[seq_rows]
    lo = np.maximum(targets - history_len, 0)
    lengths = targets - lo
    offsets = np.zeros(len(targets) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    idx = np.repeat(starts + lo - offsets[:-1], lengths) + np.arange(offsets[-1])
    return Ragged(offsets, seqs.values[idx])


def _exclusions(seqs: Ragged, targets: np.ndarray, seq_rows: np.ndarray, positives: np.ndarray,
                history: Ragged, mode: str) -> Ragged | None:
    if mode == "none":
        return None
    if mode == "window":
        rows = [np.setdiff1d(history[i], positives[i : i + 1]) for i in range(len(targets))]
        return Ragged.from_rows(rows)
    starts = seqs.offsets[seq_rows]
    rows = []
    for i in range(len(targets)):
        past = seqs.values[starts[i] : starts[i] + targets[i]]
        rows.append(np.setdiff1d(past, positives[i : i + 1]))  # unique, positive kept rankable
    return Ragged.from_rows(rows)


def build_sequential_task(spec: TaskSpec, inter: pd.DataFrame, items: pd.DataFrame,
                          options: SequentialOptions | None = None, source: str = "") -> TaskData:
    """Apply the protocol above to interactions (user, item, ts) and item metadata."""
    opts = options or SequentialOptions()
    if len(inter) == 0:
        raise DataError("no interactions", source or None)
    catalogue = pd.Index(pd.concat([items["item"], inter["item"]]).astype(str).unique()).sort_values()
    item_index = {item: i for i, item in enumerate(catalogue)}
    meta = items.drop_duplicates("item").set_index("item")
    titles = meta["title"].reindex(catalogue)
    texts = meta["text"].reindex(catalogue)
    missing = titles.isna().to_numpy()
    fallback = pd.Series([f"item {x}" for x in catalogue], index=catalogue)
    titles = titles.where(~missing, fallback).to_numpy(dtype=object)
    texts = texts.where(~missing, fallback).to_numpy(dtype=object)

    split = order_sequences(inter, item_index, opts.min_interactions)
    if len(split.users) == 0:
        raise DataError(f"no user has >= {opts.min_interactions} interactions", source or None)
    seqs = split.seqs
    n = seqs.lengths()
    rows_all = np.arange(len(n))
    pool_ids = np.asarray(catalogue, dtype=object)
    pool = Pool(ids=pool_ids, texts=texts, name=spec.name)

    def make(rows: np.ndarray, targets: np.ndarray, qids: np.ndarray, lazy_texts: bool) -> Queries:
        positives = seqs.values[seqs.offsets[rows] + targets]
        history = _windows(seqs, targets, rows, opts.history_len)
        exclude = _exclusions(seqs, targets, rows, positives, history, opts.exclude_history) \
            if not lazy_texts else None
        ones = np.ones(len(rows), dtype=np.float64)
        offs = np.arange(len(rows) + 1, dtype=np.int64)
        return Queries(
            ids=qids,
            texts=HistoryTexts(history, titles),
            prompts=HistoryTexts(history, titles, spec.prompt),
            positives=Ragged(offs, positives.astype(np.int64)),
            grades=Ragged(offs.copy(), ones),
            history=history,
            exclude=exclude,
            user_ids=split.users[rows],
        )

    test = make(rows_all, n - 1, split.users.astype(str), lazy_texts=False)
    valid = make(rows_all, n - 2, np.char.add(split.users.astype(str), "#valid"), lazy_texts=False)
    # training windows: positions 1 .. n-3 of every user
    n_train = np.maximum(n - 3, 0)
    if opts.max_train_per_user > 0:
        n_train = np.minimum(n_train, opts.max_train_per_user)
    tr_rows = np.repeat(rows_all, n_train)
    # the last max_train_per_user positions before the validation target (all when 0)
    first = (n - 2) - n_train
    tr_targets = np.repeat(first, n_train) + (np.arange(n_train.sum()) - np.repeat(np.cumsum(n_train) - n_train, n_train))
    tr_ids = np.char.add(np.char.add(split.users[tr_rows].astype(str), "#"), tr_targets.astype(str))
    train = make(tr_rows, tr_targets, tr_ids, lazy_texts=True)

    pool.fingerprint = _fingerprint(spec.name, pool_ids, texts, test.positives.values, test.history.values,
                                    valid.positives.values, repr(opts))
    info = {"n_users": int(len(split.users)), "n_interactions": int(n.sum()), "n_items": len(pool),
            "source": source, "protocol": "leave-one-out, sliding windows (rbench.tasks.recsys)"}
    return TaskData(spec=spec, pool=pool, train=train, valid=valid, test=test, info=info)


# ------------------------------------------------------------------------------------------
# ml-100k (embedded default)
# ------------------------------------------------------------------------------------------


def recbole_example_dir(name: str = "ml-100k") -> Path:
    import importlib.util

    found = importlib.util.find_spec("recbole")
    if found is None or not found.submodule_search_locations:
        raise RBenchError("task 'ml-100k' reads MovieLens 100K from the recbole package: "
                          "pip install 'rbench[recsys]'")
    path = Path(list(found.submodule_search_locations)[0]) / "dataset_example" / name
    if not (path / f"{name}.inter").exists():
        raise RBenchError(f"recbole is installed but {path / (name + '.inter')} is missing")
    return path


def load_atomic_dir(spec: TaskSpec, directory: Path, stem: str, options: SequentialOptions | None) -> TaskData:
    inter = interactions_from_atomic(directory / f"{stem}.inter")
    item_path = directory / f"{stem}.item"
    items = items_from_atomic(item_path if item_path.exists() else None)
    return build_sequential_task(spec, inter, items, options, source=str(directory))


def load_ml100k(spec: TaskSpec, options: SequentialOptions | None, seed: int = 0) -> TaskData:
    return load_atomic_dir(spec, recbole_example_dir("ml-100k"), "ml-100k", options)
