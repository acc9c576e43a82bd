"""The sequential-recommendation protocol: options, leave-one-out splits with sliding training
windows, exclusions, and the small scenario's sampled candidate lists (the rules in
``rbench.tasks.families.recsys``'s docstring).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd
import pyarrow as pa

from rbench.api import Pool, Queries, Ragged, TaskData, TaskSpec
from rbench.core.errors import DataError, RBenchError
from rbench.core.settings import DEFAULT_SEED
from rbench.tasks.building import fingerprint, seeded_rng
from rbench.tasks.text_columns import HistoryTexts, take_texts


@dataclass
class SequentialOptions:
    """Options of the sequential-recommendation protocol (paper values as defaults)."""

    history_len: int = 20
    min_interactions: int = 3
    exclude_history: Literal["all", "window", "none"] = "all"
    max_train_per_user: int = 0  # 0 = every sliding window (the paper's setting)
    k_core: int = 0  # > 0: iteratively drop users and items with fewer interactions (RecBole-style)

    def validate(self) -> None:
        if self.history_len < 1:
            raise RBenchError("task.history_len must be >= 1")
        if self.min_interactions < 3:
            raise RBenchError("task.min_interactions must be >= 3 (train, valid and test targets)")
        if self.max_train_per_user < 0 or self.k_core < 0:
            raise RBenchError("task.max_train_per_user and task.k_core must be >= 0")


@dataclass
class SmallListOptions:
    """Rec-Music: the sequential protocol with a per-query list of ``negatives + 1`` items."""

    history_len: int = 20
    min_interactions: int = 3
    max_train_per_user: int = 0
    k_core: int = 0
    negatives: int = 19  # the paper's 20-candidate lists
    # "catalogue": any item but the positive (the default: the draw never looks at the user);
    # "unseen": only items the user never had (the leaky artifact, kept for comparison: being in
    # the user's history then marks the positive; module doc, rule 8)
    negatives_from: Literal["catalogue", "unseen"] = "catalogue"

    def validate(self) -> None:
        SequentialOptions(self.history_len, self.min_interactions, "none", self.max_train_per_user,
                          self.k_core).validate()
        if self.negatives < 1:
            raise RBenchError("task.negatives must be >= 1")
        if self.negatives_from not in ("catalogue", "unseen"):
            raise RBenchError(f"task.negatives_from must be 'catalogue' or 'unseen', not {self.negatives_from!r}")


@dataclass
class FiveCoreOptions(SequentialOptions):
    """The sequential protocol on raw Amazon Reviews 2023 files whose paper counts are the 5-core
    subset's (video-games, software): ``k_core`` defaults to 5 (module doc)."""

    k_core: int = 5


Options = SequentialOptions | SmallListOptions


def _options_key(opts: Options) -> str:
    """The options as they enter the task fingerprint. Fields added later appear only when they
    differ from their default, so fingerprints of earlier results stay valid."""
    if type(opts) is not SequentialOptions:
        return repr(opts)
    base = ("history_len", "min_interactions", "exclude_history", "max_train_per_user")
    parts = [f"{k}={getattr(opts, k)!r}" for k in base]
    parts += [f"{f.name}={getattr(opts, f.name)!r}" for f in dataclasses.fields(opts)
              if f.name not in base and getattr(opts, f.name) != f.default]
    return f"SequentialOptions({', '.join(parts)})"


# ------------------------------------------------------------------------------------------
# the protocol, on integer codes
# ------------------------------------------------------------------------------------------


@dataclass
class Catalogue:
    """The candidate items: ids sorted as text, titles (for histories) and texts (for the pool)."""

    ids: np.ndarray  # object (str)
    titles: Any  # object array or ArrowTextColumn
    texts: Any
    has_meta: np.ndarray | None = None  # bool per item

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, idx: np.ndarray) -> Catalogue:
        return Catalogue(self.ids[idx], take_texts(self.titles, idx), take_texts(self.texts, idx),
                         self.has_meta[idx] if self.has_meta is not None else None)


@dataclass
class CodedInteractions:
    """Interactions in file order as codes: ``user`` into ``user_names`` (sorted as text),
    ``item`` into the catalogue."""

    user: np.ndarray  # int64
    item: np.ndarray  # int64
    ts: np.ndarray  # float64
    user_names: Any  # np.ndarray (object) or pa.Array

    def __len__(self) -> int:
        return len(self.user)


@dataclass
class SequenceSplit:
    """Per-user ordered item sequences as one flat array (pool indices) + offsets."""

    users: np.ndarray  # user ids (str), one per sequence
    seqs: Ragged


def _names(names: Any, idx: np.ndarray) -> np.ndarray:
    if isinstance(names, (pa.Array, pa.ChunkedArray)):
        return np.asarray(names.take(pa.array(idx)).to_pylist(), dtype=object)
    return np.asarray(names, dtype=object)[idx]


def _first_occurrences(user: np.ndarray, item: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Rows (ascending) that are the first in file order of their (user, item, ts) triple."""
    n = len(user)
    order = np.lexsort((np.arange(n), item, ts, user))
    u, i, t = user[order], item[order], ts[order]
    dup = np.zeros(n, dtype=bool)
    dup[1:] = (u[1:] == u[:-1]) & (i[1:] == i[:-1]) & (t[1:] == t[:-1])
    return np.sort(order[~dup])


def _k_core(user: np.ndarray, item: np.ndarray, k: int, n_users: int, n_items: int) -> np.ndarray:
    """Mask of interactions left when users and items with < k interactions are dropped, repeated
    until none is (RecBole's ``user/item_inter_num_interval = [k, inf)``)."""
    keep = np.ones(len(user), dtype=bool)
    while True:
        uc = np.bincount(user[keep], minlength=n_users)
        ic = np.bincount(item[keep], minlength=n_items)
        bad = keep & ((uc[user] < k) | (ic[item] < k))
        if not bad.any():
            return keep
        keep &= ~bad


def _sequences(user: np.ndarray, item: np.ndarray, ts: np.ndarray, user_names: Any, n_users: int,
               min_interactions: int) -> SequenceSplit:
    order = np.lexsort((np.arange(len(user)), ts, user))  # stable ties
    items = item[order].astype(np.int64, copy=False)
    counts = np.bincount(user[order], minlength=n_users)
    offsets = np.zeros(n_users + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    keep = np.flatnonzero(counts >= min_interactions)
    return SequenceSplit(users=_names(user_names, keep), seqs=Ragged(offsets, items).take(keep))


def order_sequences(inter: pd.DataFrame, item_index: dict[str, int], min_interactions: int) -> SequenceSplit:
    """Rules 1-3 on a DataFrame(user, item, ts) whose items are keys of ``item_index``."""
    codes, users = pd.factorize(inter["user"], sort=True)
    items = inter["item"].map(item_index).to_numpy(np.int64)
    user = codes.astype(np.int64)
    ts = inter["ts"].to_numpy(np.float64)
    rows = _first_occurrences(user, items, ts)
    return _sequences(user[rows], items[rows], ts[rows], np.asarray(users, dtype=object), len(users),
                      min_interactions)


def _windows(seqs: Ragged, targets: np.ndarray, seq_rows: np.ndarray, history_len: int) -> Ragged:
    """History windows: for (row r, position t) the items seqs[r][max(0,t-H):t]."""
    starts = seqs.offsets[seq_rows]
    lo = np.maximum(targets - history_len, 0)
    lengths = targets - lo
    offsets = np.zeros(len(targets) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    idx = np.repeat(starts + lo - offsets[:-1], lengths) + np.arange(offsets[-1])
    return Ragged(offsets, seqs.values[idx])


def _slices(values: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row id, value) of every element of the rows values[starts[i]:starts[i]+lengths[i]]."""
    n = len(starts)
    offs = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offs[1:])
    qid = np.repeat(np.arange(n, dtype=np.int64), lengths)
    return qid, values[np.repeat(starts - offs[:-1], lengths) + np.arange(offs[-1])]


def _unique_rows(values: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> Ragged:
    """Row i = sorted unique values[starts[i]:starts[i]+lengths[i]] (vectorised ``np.unique`` per row)."""
    n = len(starts)
    qid, v = _slices(values, starts, lengths)
    order = np.lexsort((v, qid))
    q, v = qid[order], v[order]
    keep = np.ones(len(v), dtype=bool)
    keep[1:] = (q[1:] != q[:-1]) | (v[1:] != v[:-1])
    q, v = q[keep], v[keep]
    out = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(q, minlength=n), out=out[1:])
    return Ragged(out, v.astype(np.int64, copy=False))


def _had_before(seqs: Ragged, seq_rows: np.ndarray, targets: np.ndarray, positives: np.ndarray) -> np.ndarray:
    """Per query: is its target an item the user had earlier in the sequence (a repeat)?"""
    qid, v = _slices(seqs.values, seqs.offsets[seq_rows], targets)
    return np.bincount(qid[v == positives[qid]], minlength=len(targets)) > 0


def _exclusions(seqs: Ragged, targets: np.ndarray, seq_rows: np.ndarray, history: Ragged, mode: str) -> Ragged | None:
    """The items removed from each query's ranking: a function of the query's input alone (rule
    6): the user's whole past before the target (``all``), the shown window (``window``) or
    nothing. The target is never consulted, so the excluded set cannot point at it."""
    if mode == "none":
        return None
    if mode == "window":
        return _unique_rows(history.values, history.offsets[:-1], history.lengths())
    return _unique_rows(seqs.values, seqs.offsets[seq_rows], targets)


def _in_rows(rows: Ragged, x: np.ndarray) -> np.ndarray:
    """Per row i: does ``rows[i]`` hold ``x[i]``?"""
    qid = rows.row_ids()
    return np.bincount(qid[rows.values == x[qid]], minlength=len(x)) > 0


# ------------------------------------------------------------------------------------------
# small lists (rec-music)
# ------------------------------------------------------------------------------------------


def _in_sorted(keys: np.ndarray, q: np.ndarray) -> np.ndarray:
    pos = np.minimum(np.searchsorted(keys, q), len(keys) - 1)
    return keys[pos] == q


def _first_in_row(m: np.ndarray) -> np.ndarray:
    order = np.argsort(m, axis=1, kind="stable")
    s = np.take_along_axis(m, order, axis=1)
    first_sorted = np.ones_like(s, dtype=bool)
    first_sorted[:, 1:] = s[:, 1:] != s[:, :-1]
    first = np.empty_like(first_sorted)
    np.put_along_axis(first, order, first_sorted, axis=1)
    return first


@dataclass
class UserItems:
    """Every kept user's distinct items as sorted keys ``row * n_items + item``."""

    keys: np.ndarray
    n_items: int

    @classmethod
    def of(cls, seqs: Ragged, n_items: int) -> UserItems:
        return cls(np.unique(seqs.row_ids() * n_items + seqs.values), n_items)

    def count(self, n_rows: int) -> np.ndarray:
        return np.bincount(self.keys // self.n_items, minlength=n_rows)

    def of_row(self, r: int) -> np.ndarray:
        lo, hi = np.searchsorted(self.keys, [r * self.n_items, (r + 1) * self.n_items])
        return self.keys[lo:hi] - r * self.n_items


def sample_negatives(rng: np.random.Generator, rows: np.ndarray, seen: UserItems, k: int) -> np.ndarray:
    """(len(rows), k) distinct items per row, none of them an item ``seen`` lists for that row
    (``small_lists``: the query's positive alone, or with ``negatives_from=unseen`` every item of
    its user).

    Vectorised rejection sampling in rounds (draw 2k+8 per pending row, keep the first k valid in
    draw order); a row still short after the rounds is finished exactly from its complement."""
    n, n_items = len(rows), seen.n_items
    out = np.full((n, k), -1, dtype=np.int64)
    pending = np.arange(n)
    for _ in range(6):
        if len(pending) == 0:
            break
        draws = rng.integers(0, n_items, size=(len(pending), 2 * k + 8))
        cand = np.concatenate([out[pending], draws], axis=1)
        ok = cand >= 0
        ok &= ~_in_sorted(seen.keys, rows[pending, None] * n_items + np.maximum(cand, 0))
        ok &= _first_in_row(cand)
        rank = np.cumsum(ok, axis=1)
        take = ok & (rank <= k)
        new = np.full((len(pending), k), -1, dtype=np.int64)
        r, c = np.nonzero(take)
        new[r, rank[r, c] - 1] = cand[r, c]
        out[pending] = new
        pending = pending[take.sum(axis=1) < k]
    for i in pending:
        have = out[i][out[i] >= 0]
        allowed = np.setdiff1d(np.arange(n_items), np.concatenate([seen.of_row(int(rows[i])), have]))
        need = k - len(have)
        out[i] = np.concatenate([have, rng.choice(allowed, size=need, replace=False)])
    return out


def small_lists(rng: np.random.Generator, rows: np.ndarray, positives: np.ndarray, seen: UserItems | None,
                negatives: int, n_items: int) -> np.ndarray:
    """(n, negatives + 1) candidate lists: the positive at a uniformly drawn position. Negatives:
    ``negatives`` distinct items drawn uniformly from the catalogue without the positive
    (``seen`` None), or also without every item of the user (``seen``: ``negatives_from=unseen``)."""
    n = len(rows)
    if seen is None:  # the positive is the only item a query forbids (its keys are sorted: q * n + item)
        negs = sample_negatives(rng, np.arange(n), UserItems(np.arange(n) * n_items + positives, n_items),
                                negatives)
    else:
        negs = sample_negatives(rng, rows, seen, negatives)
    where = rng.integers(0, negatives + 1, size=n)
    lists = np.empty((n, negatives + 1), dtype=np.int64)
    slot = np.ones((n, negatives + 1), dtype=bool)
    slot[np.arange(n), where] = False
    lists[slot] = negs.ravel()
    lists[np.arange(n), where] = positives
    return lists


# ------------------------------------------------------------------------------------------
# building a task
# ------------------------------------------------------------------------------------------


def build_from_codes(spec: TaskSpec, inter: CodedInteractions, catalogue: Catalogue, options: Options | None,
                     source: str = "", *, compact: bool = False, seed: int = DEFAULT_SEED,
                     info: dict[str, Any] | None = None) -> TaskData:
    """Apply the protocol to coded interactions. ``compact``: the pool is the items left in the
    interactions after de-duplication and ``k_core`` (Amazon tasks), not the whole catalogue."""
    opts = options or SequentialOptions()
    if len(inter) == 0:
        raise DataError("no interactions", source or None)
    n_users = len(inter.user_names)
    rows = _first_occurrences(inter.user, inter.item, inter.ts)
    n_dups = len(inter) - len(rows)
    user, item, ts = inter.user[rows], inter.item[rows], inter.ts[rows]
    if opts.k_core > 0:
        keep = _k_core(user, item, opts.k_core, n_users, len(catalogue))
        user, item, ts = user[keep], item[keep], ts[keep]
        if len(user) == 0:
            raise DataError(f"no interactions left after the {opts.k_core}-core filter", source or None)
    if compact:
        used = np.zeros(len(catalogue), dtype=bool)
        used[item] = True
        kept_items = np.flatnonzero(used)
        item = (np.cumsum(used) - 1)[item]
        catalogue = catalogue.take(kept_items)

    split = _sequences(user, item, ts, inter.user_names, n_users, opts.min_interactions)
    if len(split.users) == 0:
        raise DataError(f"no user has >= {opts.min_interactions} interactions", source or None)
    seqs = split.seqs
    n = seqs.lengths()
    rows_all = np.arange(len(n))
    titles, texts = catalogue.titles, catalogue.texts
    pool_ids = np.asarray(catalogue.ids, dtype=object)
    pool = Pool(ids=pool_ids, texts=texts, name=spec.name)
    negatives = getattr(opts, "negatives", 0)
    exclude_mode = getattr(opts, "exclude_history", "none") if not negatives else "none"
    unseen_only = negatives > 0 and getattr(opts, "negatives_from", "catalogue") == "unseen"
    seen = UserItems.of(seqs, len(catalogue)) if unseen_only else None
    if negatives and len(catalogue) - 1 < negatives:
        raise DataError(f"the pool has {len(catalogue)} items: fewer than {negatives} besides the positive "
                        "to sample negatives from", source or None)
    if seen is not None:
        free = len(catalogue) - seen.count(len(split.users))
        short = np.flatnonzero(free < negatives)
        if len(short):
            u = short[0]
            raise DataError(f"user {split.users[u]!r} interacted with {len(catalogue) - free[u]} of the "
                            f"{len(catalogue)} items: fewer than {negatives} are left to sample negatives from "
                            "(task.negatives_from=unseen)", source or None)
    repeats: dict[str, int] = {}
    dropped: dict[str, int] = {}

    def make(rows: np.ndarray, targets: np.ndarray, qids: np.ndarray, split_name: str) -> Queries:
        positives = seqs.values[seqs.offsets[rows] + targets].astype(np.int64)
        history = _windows(seqs, targets, rows, opts.history_len)
        exclude = _exclusions(seqs, targets, rows, history, exclude_mode) if split_name != "train" else None
        if split_name != "train":
            repeats[split_name] = int(_had_before(seqs, rows, targets, positives).sum())
        if exclude is not None:  # rule 6: a target the user already had cannot be excluded and the answer
            hit = _in_rows(exclude, positives)
            dropped[split_name] = int(hit.sum())
            if hit.any():
                kept = np.flatnonzero(~hit)
                rows, targets, qids, positives = rows[kept], targets[kept], qids[kept], positives[kept]
                history, exclude = history.take(kept), exclude.take(kept)
        candidates = small_lists(seeded_rng(seed, f"negatives/{split_name}"), rows, positives, seen,
                                 negatives, len(catalogue)) if negatives else None
        ones = np.ones(len(rows), dtype=np.float64)
        offs = np.arange(len(rows) + 1, dtype=np.int64)
        return Queries(
            ids=qids,
            texts=HistoryTexts(history, titles),
            prompts=HistoryTexts(history, titles, spec.prompt),
            positives=Ragged(offs, positives),
            grades=Ragged(offs.copy(), ones),
            history=history,
            candidates=candidates,
            exclude=exclude,
            user_ids=split.users[rows],
        )

    test = make(rows_all, n - 1, split.users.astype(str), "test")
    valid = make(rows_all, n - 2, np.char.add(split.users.astype(str), "#valid"), "valid")
    # training windows: positions 1 .. n-3 of every user
    n_train = np.maximum(n - 3, 0)
    if opts.max_train_per_user > 0:
        n_train = np.minimum(n_train, opts.max_train_per_user)
    tr_rows = np.repeat(rows_all, n_train)
    # the last max_train_per_user positions before the validation target (all when 0)
    first = (n - 2) - n_train
    tr_targets = np.repeat(first, n_train) + (np.arange(n_train.sum()) - np.repeat(np.cumsum(n_train) - n_train, n_train))
    tr_ids = np.char.add(np.char.add(split.users[tr_rows].astype(str), "#"), tr_targets.astype(str))
    train = make(tr_rows, tr_targets, tr_ids, "train")

    if len(test) == 0 or len(valid) == 0:
        raise DataError(f"every {'test' if len(test) == 0 else 'validation'} target is an item its user "
                        f"had before, and task.exclude_history={exclude_mode} removes those queries: use "
                        "task.exclude_history=none (the repeat-aware protocol)", source or None)
    extra = (test.candidates, valid.candidates) if negatives else ()
    pool.fingerprint = fingerprint(spec.name, pool_ids, texts, test.positives.values, test.history.values,
                                    valid.positives.values, _options_key(opts), *extra)
    n_meta = int(catalogue.has_meta.sum()) if catalogue.has_meta is not None else None
    task_info = {"n_users": int(len(split.users)), "n_interactions": int(n.sum()), "n_items": len(pool),
                 "source": source, "protocol": "leave-one-out, sliding windows (rbench.tasks.families.recsys)",
                 "n_rows_read": len(inter), "n_duplicates": n_dups,
                 "n_users_dropped": int(np.count_nonzero(np.bincount(user, minlength=n_users))) - len(split.users)}
    if n_meta is not None:
        task_info["n_items_without_metadata"] = len(pool) - n_meta
    if negatives:
        task_info["list_size"] = negatives + 1
        task_info["negatives_from"] = getattr(opts, "negatives_from", "catalogue")
    task_info["repeat_targets"] = repeats  # per split: targets the user had before (rule 6)
    if exclude_mode != "none":
        task_info["repeat_targets_dropped"] = dropped  # per split: queries left out for it (rule 6)
    task_info.update(info or {})
    return TaskData(spec=spec, pool=pool, train=train, valid=valid, test=test, info=task_info)


def build_sequential_task(spec: TaskSpec, inter: pd.DataFrame, items: pd.DataFrame,
                          options: Options | None = None, source: str = "", *,
                          catalogue: Literal["all", "interacted"] = "all", seed: int = DEFAULT_SEED,
                          info: dict[str, Any] | None = None) -> TaskData:
    """Apply the protocol above to interactions (user, item, ts) and item metadata."""
    if len(inter) == 0:
        raise DataError("no interactions", source or None)
    ids = pd.Index(pd.concat([items["item"], inter["item"]]).astype(str).unique()).sort_values()
    meta = items.drop_duplicates("item").set_index("item")
    titles = meta["title"].reindex(ids)
    texts = meta["text"].reindex(ids)
    missing = titles.isna().to_numpy()
    fallback = pd.Series([f"item {x}" for x in ids], index=ids)
    cat = Catalogue(ids=np.asarray(ids, dtype=object),
                    titles=titles.where(~missing, fallback).to_numpy(dtype=object),
                    texts=texts.where(~missing, fallback).to_numpy(dtype=object), has_meta=~missing)
    codes, users = pd.factorize(inter["user"], sort=True)
    coded = CodedInteractions(user=codes.astype(np.int64), item=ids.get_indexer(inter["item"].astype(str)),
                              ts=inter["ts"].to_numpy(np.float64), user_names=np.asarray(users, dtype=object))
    return build_from_codes(spec, coded, cat, options, source, compact=catalogue == "interacted", seed=seed,
                            info=info)
