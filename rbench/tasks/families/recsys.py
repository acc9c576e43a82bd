"""Sequential recommendation tasks: ml-100k (embedded), Rec-Movie, Rec-Toy, Rec-Clothing (the
full-catalogue protocol), Rec-Music (the same sequences, 20-item lists) and the zero-shot targets
Video Games and Software (the paper's Table 5).

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
   ordered by item id as text. Items without metadata get the text ``item <id>``. That order is
   kept (not the hashed order of ``rbench.tasks.kit``, "Pool order"): it is the catalogue's own,
   fixed before any user is read, so an item's position says what its id says and nothing
   about which user's next item it is; ``tests/tasks/test_pool_order.py`` checks that a ranker of
   positions alone stays at chance.
6. Exclusion (RecBole full-sort): every item the user interacted with before the target is
   removed from that query's ranking, except the target itself (``exclude_history=all``;
   ``window`` excludes only the shown history, ``none`` nothing).
7. Query text (the prompt's [USER QUERY]) = the history titles joined by "; ", oldest first;
   the prompt wraps it in the paper's recommendation template.

Per task (choices the paper leaves open, and why):

- ``rec-movie`` (MovieLens 1M; paper 3,884 candidates / 4,167 queries). Pool = rule 5: the 3,883
  movies of ``movies.dat`` (3,706 of them rated); 3,884 is that plus RecBole's padding id.
  Queries: one test query per user (6,040); the paper's 4,167 is not derivable from the public
  files (every ML-1M user has >= 20 ratings) and is not imitated. Inputs: ``ratings.dat`` +
  ``movies.dat`` (``::``-separated; movies.dat is latin-1: it is decoded as UTF-8 when it is
  valid UTF-8, else as latin-1) or RecBole ``ml-1m.inter/.item``. Both give the same task: a
  movie's title is ``Title (Year)`` and its text ``Title (Year). Genres: A B`` (the genres'
  ``|`` become spaces, as in RecBole's ``genre`` column).
- ``rec-toy`` (Amazon Toys and Games 2014 5-core; paper 11,925 / 19,413). Pool = the items that
  occur in the interactions (11,924; the paper's 11,925 and 19,413 are RecBole's counts with
  one padding row each: 11,924 items, 19,412 users). The meta file's other ~324k items are
  dropped: they were never interacted with in this data. See ``rbench.tasks.families.amazon`` for the
  text of an item. RecBole's ``Amazon_Toys_and_Games.inter`` is the full ratings file, not the
  5-core: with it set ``task.k_core=5`` (RecBole-style iterative user/item filtering).
- ``rec-clothing`` (Amazon Reviews 2023 Clothing_Shoes_and_Jewelry; paper 6,805,462 / 185,925).
  Pool = items in the interactions (keyed by ``parent_asin``); item texts stay in an arrow
  string column above ``rbench.tasks.columns.ARROW_MIN_ROWS`` items. Reading is streamed (``rbench.tasks.families.amazon``).
  The paper's query count is not derivable from the files either; ``task.min_interactions`` and
  ``task.max_train_per_user`` bound the query sets. Every training window costs 8 bytes per
  history item plus its id string; over the 66M-review file that is several GB (not measured
  here), and ``max_train_per_user`` is the knob for smaller machines.
- ``rec-music`` (small scenario; paper 20 candidates / 12,483 queries). Same sequences and
  targets; each query (train, valid, test) gets its own list ``Queries.candidates`` of
  ``negatives + 1`` (20) pool indices: the true next item and ``negatives`` items drawn
  uniformly without replacement from the pool items the user never interacted with over the
  whole kept sequence (so no negative is a past or future item of that user), the positive at a
  uniformly drawn position. Pool = items in the interactions (negatives are items someone
  consumed, so popularity alone cannot spot never-consumed fillers). Draws use one generator per
  split seeded from (run seed, "negatives/<split>"), so training options never change the test
  lists. No exclusion (each query ranks only its own list). Inputs: Amazon CDs and Vinyl
  (2014/2018 5-core json.gz + meta) or any RecBole atomic dataset (one ``*.inter``, optional
  ``.item`` with the same stem; its ``name`` column is the title for Last.fm).
- ``video-games`` and ``software`` (Amazon Reviews 2023 ``Video_Games`` / ``Software``; paper
  25,600 / 94,800 and 17,600 / 146,400). Not tasks of the paper's Table 2 (``paper_row`` None):
  the paper trains on Rec-Toy and tests on them zero-shot (``--variant from-rec-toy``,
  ``rbench.tasks.pools``). The paper's counts are those of the McAuley lab's 5-core subsets of the
  two categories (users = queries, items = candidates), while ``rbench data download`` fetches
  the raw review files (``<cat>.jsonl.gz`` + ``meta_<cat>.jsonl.gz``, as for rec-clothing): so
  these tasks default to ``task.k_core=5`` (``FiveCoreOptions``; iterative, users and items,
  after the (user, item, timestamp) de-duplication). The pool is the items left by the 5-core,
  and every 5-core user has the 3 interactions leave-one-out needs, so each user is one test
  query. ``task.k_core=0`` reads the raw files unfiltered. Not yet checked on the real files:
  the counts rbench gets may differ a little from the paper's rounded ones (how the published
  subsets treat repeated reviews of an item is not documented); ``TaskData.info`` and the
  RunRecord's ``pool_size``/``n_queries`` say what was read.
- Amazon-derived pools (toy, clothing, music, video games, software) are the items in the
  interactions after de-duplication and ``k_core``, before the ``min_interactions`` user filter
  (that filter is an evaluation requirement, not a change of the dataset). MovieLens and
  ml-100k keep rule 5.
- Where several input layouts are present, the original release files win over RecBole atomic
  files; ``data_status`` names the layout it will read.
- ``TaskData.info`` reports what reading did: rows read, duplicates dropped, users dropped for
  too few interactions, items without metadata.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import pyarrow as pa

from rbench.api import Pool, Queries, Ragged, RemoteFile, Source, TaskData, TaskSpec
from rbench.core import paths
from rbench.core.errors import DataError, RBenchError
from rbench.core.inputs import require_regular
from rbench.tasks.columns import HistoryTexts, take_texts, text_column
from rbench.tasks.family import TaskFamily
from rbench.tasks.kit import fingerprint, locate, not_present, seeded_rng


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

    def validate(self) -> None:
        SequentialOptions(self.history_len, self.min_interactions, "none", self.max_train_per_user,
                          self.k_core).validate()
        if self.negatives < 1:
            raise RBenchError("task.negatives must be >= 1")


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
# RecBole atomic files
# ------------------------------------------------------------------------------------------

_TITLE_COLUMNS = ("movie_title", "title", "name", "item_name")


def _data_line(path: Path, row: int) -> int | None:
    """File line of the ``row``-th (0-based) data row of an atomic file (blank lines skipped)."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        fh.readline()
        k = -1
        for lineno, line in enumerate(fh, start=2):
            if line.strip("\r\n"):
                k += 1
                if k == row:
                    return lineno
    return None


def _every_line_has_fields(path: Path, ncol: int, chunk_bytes: int = 1 << 23) -> bool:
    """True when every non-blank data line has exactly ``ncol - 1`` tabs. Counted on raw bytes
    in chunks (numpy), because pandas pads short lines with "" and, when the first data line is
    one field longer than the header, silently shifts every column into the index."""
    with open(path, "rb") as fh:
        fh.readline()
        rest = b""
        while True:
            chunk = fh.read(chunk_bytes)
            data = rest + chunk
            cut = len(data) if not chunk else data.rfind(b"\n") + 1
            block, rest = data[:cut], data[cut:]
            if block:
                a = np.frombuffer(block, dtype=np.uint8)
                ends = np.flatnonzero(a == 10)
                if not chunk and a[-1] != 10:
                    ends = np.append(ends, len(a))
                starts = np.concatenate([[0], ends[:-1] + 1])
                tabs = np.concatenate([[0], np.cumsum(a == 9, dtype=np.int64)])
                count = tabs[ends] - tabs[starts]
                length = ends - starts
                cr = (length > 0) & (a[np.maximum(ends - 1, 0)] == 13)
                nonblank = (length - cr) > 0
                if (count[nonblank] != ncol - 1).any():
                    return False
            if not chunk:
                return True


def _fold_column(header: list[str]) -> int:
    """Where surplus tab-separated parts of a line go: a tab inside a free-text field. The title
    column when there is one (Last.fm ``name:token``), else the last ``token_seq`` column."""
    names = [h.split(":", 1)[0] for h in header]
    for col in _TITLE_COLUMNS:
        if col in names:
            return names.index(col)
    seqs = [i for i, h in enumerate(header) if h.endswith("token_seq")]
    return seqs[-1] if seqs else len(header) - 1


def read_atomic(path: Path, required: Sequence[str] = ()) -> pd.DataFrame:
    """Read a RecBole atomic file (tab-separated, header ``name:type``); columns renamed to
    their bare names. All columns are read as text; callers convert what they need."""
    path = require_regular(path)  # a FIFO named *.inter would block every open below
    with open(path, encoding="utf-8", errors="replace") as fh:
        header = fh.readline().rstrip("\n").rstrip("\r")
    if not header:
        raise DataError("empty file (expected a header line like 'user_id:token<TAB>item_id:token')", path, 1)
    fields = header.split("\t")
    names = [h.split(":", 1)[0] for h in fields]
    bad = [h for h in fields if ":" not in h]
    if bad:
        raise DataError(f"header field {bad[0]!r} is not of the form name:type", path, 1)
    missing = [r for r in required if r not in names]
    if missing:
        raise DataError(f"missing column(s) {', '.join(missing)}; header has {', '.join(names)}", path, 1)
    rows: list[list[str]] = []
    ncol = len(names)
    if _every_line_has_fields(path, ncol):  # then the C parser reads it exactly as written
        return pd.read_csv(path, sep="\t", header=None, skiprows=1, names=names, index_col=False, dtype=str,
                           quoting=3, keep_default_na=False, na_filter=False, engine="c", encoding="utf-8",
                           encoding_errors="replace")
    # a tab inside a text field or a short line: read line by line, folding or naming the line
    j = _fold_column(fields)
    with open(path, encoding="utf-8", errors="replace") as fh:
        fh.readline()
        for lineno, line in enumerate(fh, start=2):
            line = line.rstrip("\n").rstrip("\r")
            if not line:
                continue
            parts = line.split("\t")
            if len(parts) > ncol:
                surplus_parts = parts[j + 1 : j + 1 + len(parts) - ncol]
                if any(x.strip().startswith(("http://", "https://")) for x in surplus_parts):
                    # a tab inside a title is plausible; a URL inside one is a column the header lacks
                    raise DataError(f"the header names {ncol} columns ({', '.join(names)}) but this line has "
                                    f"{len(parts)}, and the extra field is a URL: add the missing column to the "
                                    "header", path, lineno)
                surplus = len(parts) - ncol
                parts = parts[:j] + [" ".join(parts[j : j + surplus + 1])] + parts[j + surplus + 1 :]
            if len(parts) < ncol:
                raise DataError(f"expected {ncol} tab-separated fields ({', '.join(names)}), got {len(parts)}",
                                path, lineno, names[len(parts)])
            rows.append(parts)
    return pd.DataFrame(rows, columns=names)


def _require_values(df: pd.DataFrame, path: Path, columns: Sequence[str]) -> None:
    for col in columns:
        empty = (df[col].str.strip() == "").to_numpy()
        if empty.any():
            row = int(np.flatnonzero(empty)[0])
            raise DataError("empty value (expected an id)", path, _data_line(path, row), col)


def interactions_from_atomic(inter_path: Path) -> pd.DataFrame:
    """``.inter`` -> DataFrame(user, item, ts) with file order preserved."""
    df = read_atomic(inter_path, required=("user_id", "item_id"))
    ts_col = "timestamp" if "timestamp" in df.columns else None
    if ts_col is None:
        raise DataError("no timestamp column: sequential tasks need interaction times", inter_path, 1, "timestamp")
    _require_values(df, Path(inter_path), ("user_id", "item_id"))
    ts = pd.to_numeric(df[ts_col], errors="coerce")
    if ts.isna().any():
        row = int(np.flatnonzero(ts.isna().to_numpy())[0])
        raise DataError(f"not a number: {df[ts_col].iloc[row]!r}", inter_path, _data_line(Path(inter_path), row),
                        "timestamp")
    return pd.DataFrame({"user": df["user_id"].astype(str), "item": df["item_id"].astype(str),
                         "ts": ts.astype(np.float64)})


def items_from_atomic(item_path: Path | None) -> pd.DataFrame:
    """``.item`` -> DataFrame(item, title, text). Title = first title-like column (+ year)."""
    if item_path is None or not Path(item_path).exists():
        return pd.DataFrame({"item": [], "title": [], "text": []})
    df = read_atomic(item_path, required=("item_id",))
    title_col = next((c for c in _TITLE_COLUMNS if c in df.columns), None)
    fallback = "item " + df["item_id"].astype(str)
    title = df[title_col].astype(str).str.strip() if title_col else fallback
    title = title.where(title != "", fallback)
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
# MovieLens 1M .dat files
# ------------------------------------------------------------------------------------------

_RATING_FIELDS = ("UserID", "MovieID", "Rating", "Timestamp")


def _decode(path: Path) -> str:
    """UTF-8 when the bytes are valid UTF-8, else latin-1 (the original ML-1M files)."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def read_ml_ratings(path: Path) -> pd.DataFrame:
    """``ratings.dat`` (``UserID::MovieID::Rating::Timestamp``) -> DataFrame(user, item, ts)."""
    path = Path(path)
    users: list[str] = []
    items: list[str] = []
    times: list[int] = []
    text = _decode(path)
    if text.strip() and not text.endswith(("\n", "\r")):
        last = len(text.splitlines())
        raise DataError("the file ends in the middle of a line (no newline after the last rating): it looks "
                        "cut short; download or copy it again", path, last)
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split("::")
        if len(parts) != 4:
            field = _RATING_FIELDS[len(parts)] if len(parts) < 4 else None
            raise DataError(f"expected 4 '::'-separated fields (UserID::MovieID::Rating::Timestamp), "
                            f"got {len(parts)}", path, lineno, field)
        for name, value, kind in zip(_RATING_FIELDS, parts, (int, int, float, int), strict=True):
            try:
                kind(value)
            except ValueError:
                raise DataError(f"expected {'an integer' if kind is int else 'a number'}, got {value!r}",
                                path, lineno, name) from None
        users.append(parts[0].strip())
        items.append(parts[1].strip())
        times.append(int(parts[3]))
    if not users:
        raise DataError("no ratings", path)
    return pd.DataFrame({"user": users, "item": items, "ts": np.asarray(times, dtype=np.float64)})


def read_ml_movies(path: Path) -> pd.DataFrame:
    """``movies.dat`` (``MovieID::Title (Year)::Genre|Genre``) -> DataFrame(item, title, text)."""
    path = Path(path)
    items: list[str] = []
    titles: list[str] = []
    texts: list[str] = []
    for lineno, line in enumerate(_decode(path).splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split("::")
        if len(parts) < 3:
            raise DataError(f"expected 3 '::'-separated fields (MovieID::Title::Genres), got {len(parts)}",
                            path, lineno, ("MovieID", "Title", "Genres")[len(parts)])
        movie, title, genres = parts[0].strip(), "::".join(parts[1:-1]).strip(), parts[-1].strip()
        try:
            int(movie)
        except ValueError:
            raise DataError(f"expected an integer, got {movie!r}", path, lineno, "MovieID") from None
        title = title or f"item {movie}"
        genres = " ".join(g.strip() for g in genres.split("|") if g.strip())
        items.append(movie)
        titles.append(title)
        texts.append(f"{title}. Genres: {genres}" if genres else title)
    return pd.DataFrame({"item": items, "title": titles, "text": texts})


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


def _unique_without(values: np.ndarray, starts: np.ndarray, lengths: np.ndarray, drop: np.ndarray) -> Ragged:
    """Row i = sorted unique values[starts[i]:starts[i]+lengths[i]] minus drop[i] (vectorised
    ``np.setdiff1d`` per row)."""
    n = len(starts)
    offs = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offs[1:])
    qid = np.repeat(np.arange(n, dtype=np.int64), lengths)
    v = values[np.repeat(starts - offs[:-1], lengths) + np.arange(offs[-1])]
    order = np.lexsort((v, qid))
    q, v = qid[order], v[order]
    keep = np.ones(len(v), dtype=bool)
    keep[1:] = (q[1:] != q[:-1]) | (v[1:] != v[:-1])
    keep &= v != drop[q]
    q, v = q[keep], v[keep]
    out = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(q, minlength=n), out=out[1:])
    return Ragged(out, v.astype(np.int64, copy=False))


def _exclusions(seqs: Ragged, targets: np.ndarray, seq_rows: np.ndarray, positives: np.ndarray,
                history: Ragged, mode: str) -> Ragged | None:
    if mode == "none":
        return None
    if mode == "window":
        return _unique_without(history.values, history.offsets[:-1], history.lengths(), positives)
    return _unique_without(seqs.values, seqs.offsets[seq_rows], targets, positives)


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
    """(len(rows), k) distinct items per row, none of them an item of that row's user.

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


def small_lists(rng: np.random.Generator, rows: np.ndarray, positives: np.ndarray, seen: UserItems,
                negatives: int) -> np.ndarray:
    """(n, negatives + 1) candidate lists: the positive at a uniformly drawn position."""
    negs = sample_negatives(rng, rows, seen, negatives)
    n = len(rows)
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
                     source: str = "", *, compact: bool = False, seed: int = 0,
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
    seen = UserItems.of(seqs, len(catalogue)) if negatives else None
    if seen is not None:
        free = len(catalogue) - seen.count(len(split.users))
        short = np.flatnonzero(free < negatives)
        if len(short):
            u = short[0]
            raise DataError(f"user {split.users[u]!r} interacted with {len(catalogue) - free[u]} of the "
                            f"{len(catalogue)} items: fewer than {negatives} are left to sample negatives from",
                            source or None)

    def make(rows: np.ndarray, targets: np.ndarray, qids: np.ndarray, split_name: str) -> Queries:
        positives = seqs.values[seqs.offsets[rows] + targets].astype(np.int64)
        history = _windows(seqs, targets, rows, opts.history_len)
        exclude = _exclusions(seqs, targets, rows, positives, history, exclude_mode) \
            if split_name != "train" else None
        candidates = small_lists(seeded_rng(seed, f"negatives/{split_name}"), rows, positives, seen,
                                 negatives) if seen is not None else None
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

    extra = (test.candidates, valid.candidates) if seen is not None else ()
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
    task_info.update(info or {})
    return TaskData(spec=spec, pool=pool, train=train, valid=valid, test=test, info=task_info)


def build_sequential_task(spec: TaskSpec, inter: pd.DataFrame, items: pd.DataFrame,
                          options: Options | None = None, source: str = "", *,
                          catalogue: Literal["all", "interacted"] = "all", seed: int = 0,
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


# ------------------------------------------------------------------------------------------
# input layouts, data_status and loaders
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """One accepted set of input files. ``{stem}`` in a metadata name is the interactions file's
    name without its extension (RecBole's pairing of ``x.inter`` with ``x.item``)."""

    kind: Literal["ml-dat", "atomic", "amazon14", "amazon23"]
    label: str
    interactions: tuple[str, ...]  # names or globs; the first that exists wins
    metadata: tuple[str, ...]
    meta_required: bool = True


@dataclass
class Found:
    layout: Layout
    directory: Path
    interactions: Path
    metadata: Path | None


def _first(d: Path, patterns: Sequence[str], stem: str = "") -> Path | None:
    for pattern in patterns:
        pattern = pattern.replace("{stem}", stem)
        if any(ch in pattern for ch in "*?["):
            hits = sorted(p for p in d.glob(pattern) if p.is_file())
            if len(hits) > 1:
                raise RBenchError(f"{d}: several files match {pattern} ({', '.join(p.name for p in hits)}); keep one")
            if hits:
                return hits[0]
        elif (d / pattern).is_file():
            return d / pattern
    return None


def _match(d: Path, layouts: Sequence[Layout], partial: bool = False) -> Found | None:
    for layout in layouts:
        inter = _first(d, layout.interactions)
        if inter is None:
            continue
        stem = inter.name[: -len(".inter")] if inter.name.endswith(".inter") else inter.stem
        meta = _first(d, layout.metadata, stem)
        if meta is not None or not layout.meta_required or partial:
            return Found(layout, d, inter, meta)
    return None


# ------------------------------------------------------------------------------------------
# the tasks: one declaration each (spec, sources, input layouts, pool rule)
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecSpec(TaskSpec):
    """A recommendation task: the common spec plus the input layouts it accepts (the original
    release first) and its pool rule (``all``: every catalogue item; ``interacted``: items that
    occur in the interactions)."""

    layouts: tuple[Layout, ...] = ()
    pool_rule: Literal["all", "interacted"] = "interacted"
    options_type: type | None = None  # its ``--set task.*`` dataclass (None: by scenario)


_AMAZON14 = "https://cseweb.ucsd.edu/~jmcauley/datasets/amazon/links.html"
_AMAZON_LICENSE = "Amazon review data (McAuley lab): research use; see the dataset page"
_SNAP14 = "https://snap.stanford.edu/data/amazon/productGraph/categoryFiles"
_AMZ23 = "https://mcauleylab.ucsd.edu/public_datasets/data/amazon_2023/raw"
_AMZ23_MIRROR = "https://datarepo.eng.ucsd.edu/mcauley_group/data/amazon_2023/raw"
_MOVIELENS_LICENSE = "GroupLens MovieLens license (research use, no redistribution)"


def _amazon14_files(cat: str) -> tuple[RemoteFile, ...]:
    return (
        RemoteFile(f"reviews_{cat}_5.json.gz", (f"{_SNAP14}/reviews_{cat}_5.json.gz",),
                   note="Amazon 2014 5-core reviews (McAuley lab); no published checksum"),
        RemoteFile(f"meta_{cat}.json.gz", (f"{_SNAP14}/meta_{cat}.json.gz",),
                   note="Amazon 2014 item metadata (McAuley lab); no published checksum"),
    )


def _amazon23_files(cat: str) -> tuple[RemoteFile, ...]:
    return (
        RemoteFile(f"{cat}.jsonl.gz", (f"{_AMZ23}/review_categories/{cat}.jsonl.gz",
                                       f"{_AMZ23_MIRROR}/review_categories/{cat}.jsonl.gz"),
                   note="Amazon Reviews 2023 (McAuley lab); no published checksum"),
        RemoteFile(f"meta_{cat}.jsonl.gz", (f"{_AMZ23}/meta_categories/meta_{cat}.jsonl.gz",
                                            f"{_AMZ23_MIRROR}/meta_categories/meta_{cat}.jsonl.gz"),
                   note="Amazon Reviews 2023 item metadata; no published checksum"),
    )


def _amazon23_layout(cat: str) -> Layout:
    return Layout("amazon23", "Amazon Reviews 2023", (f"{cat}.jsonl.gz", f"{cat}.jsonl"),
                  (f"meta_{cat}.jsonl.gz", f"meta_{cat}.jsonl"))


def _amazon23_atomic(cat: str) -> Layout:
    return Layout("atomic", "RecBole atomic", (f"{cat}.inter", f"Amazon_{cat}.inter"), ("{stem}.item",))


def _amazon14_layout(cat: str) -> Layout:
    return Layout("amazon14", f"Amazon 2014/2018 {cat} 5-core",
                  (f"reviews_{cat}_5.json.gz", f"reviews_{cat}_5.json", f"{cat}_5.json.gz", f"{cat}_5.json"),
                  (f"meta_{cat}.json.gz", f"meta_{cat}.json"))


ML100K = TaskSpec(
    name="ml-100k",
    title="Rec-Movie protocol on MovieLens 100K (embedded default)",
    scenario="large",
    domain="recommendation",
    description="Sequential recommendation over the full MovieLens 100K catalogue, read from the "
    "copy that ships inside the installed `recbole` package (no download).",
    paper_candidates=None,
    paper_queries=None,
    sources=(Source("MovieLens 100K (RecBole atomic files)", "https://grouplens.org/datasets/movielens/100k/",
                    "GroupLens research license: no redistribution", note="read from recbole/dataset_example/ml-100k"),),
    license=_MOVIELENS_LICENSE,
    how_to_get="pip install 'rbench[recsys]' (the data ships inside recbole)",
    embedded=True,
)


def _zero_shot_target(name: str, cat: str, title: str, candidates: int, queries: int) -> RecSpec:
    """A target of the paper's zero-shot Table 5 (trained on Rec-Toy): an Amazon Reviews 2023
    category, 5-core by default, the whole catalogue as the pool; not a Table 2 task."""
    return RecSpec(
        name=name,
        title=f"{title} (zero-shot target)",
        scenario="large",
        domain="recommendation",
        description=f"Sequential recommendation on Amazon Reviews 2023 {cat} (5-core), full catalogue; "
        "the paper's zero-shot target (trained on Rec-Toy: --variant from-rec-toy).",
        paper_candidates=candidates,
        paper_queries=queries,
        sources=(Source(f"Amazon Reviews 2023: {cat}", "https://amazon-reviews-2023.github.io/",
                        _AMAZON_LICENSE, files=_amazon23_files(cat)),),
        license=_AMAZON_LICENSE,
        how_to_get=f"rbench data download {name}, or --from DIR ({cat}.jsonl.gz + meta_{cat}.jsonl.gz, "
        "or RecBole atomic)",
        layouts=(_amazon23_layout(cat), _amazon23_atomic(cat)),
        options_type=FiveCoreOptions,
    )

SPECS: tuple[RecSpec, ...] = (
    RecSpec(
        name="rec-music",
        title="Rec-Music",
        scenario="small",
        domain="recommendation",
        description="Sequential music recommendation, each query with its own 20-item list: the true next "
        "item + 19 seeded negatives the user never interacted with (IRanker's setting).",
        paper_candidates=20,
        paper_queries=12483,
        sources=(Source("Amazon CDs and Vinyl (2014/2018)", _AMAZON14, _AMAZON_LICENSE,
                        files=_amazon14_files("CDs_and_Vinyl")),
                 Source("any RecBole atomic dataset, e.g. Last.fm", "https://recbole.io/dataset_list.html",
                        "per dataset")),
        license=_AMAZON_LICENSE,
        how_to_get="rbench data download rec-music, or rbench data prepare rec-music --from DIR "
        "(RecBole atomic .inter/.item or Amazon reviews/meta json.gz)",
        paper_row=1,
        layouts=(_amazon14_layout("CDs_and_Vinyl"),
                 Layout("atomic", "RecBole atomic", ("*.inter",), ("{stem}.item",), meta_required=False)),
    ),
    RecSpec(
        name="rec-movie",
        title="Rec-Movie",
        scenario="large",
        domain="recommendation",
        description="Sequential recommendation on MovieLens 1M, full catalogue as the pool.",
        paper_candidates=3884,
        paper_queries=4167,
        sources=(Source("MovieLens 1M", "https://files.grouplens.org/datasets/movielens/ml-1m.zip",
                        "GroupLens research license: no redistribution",
                        files=(RemoteFile("ml-1m.zip", ("https://files.grouplens.org/datasets/movielens/ml-1m.zip",),
                                          sha256="a6898adb50b9ca05aa231689da44c217cb524e7ebd39d264c56e2832f2c54e20",
                                          extract=True,
                                          note="MovieLens 1M (GroupLens); md5 c4d9eecfca2ab87c1945afe126590906"),)),),
        license=_MOVIELENS_LICENSE,
        how_to_get="rbench data download rec-movie, or --from DIR with ratings.dat/movies.dat or ml-1m.inter/.item",
        paper_row=3,
        donates=("mixed", "shift", "scaled"),
        layouts=(Layout("ml-dat", "MovieLens 1M .dat", ("ratings.dat",), ("movies.dat",)),
                 Layout("atomic", "RecBole atomic", ("ml-1m.inter",), ("ml-1m.item",))),
        pool_rule="all",
    ),
    RecSpec(
        name="rec-toy",
        title="Rec-Toy",
        scenario="large",
        domain="recommendation",
        description="Sequential recommendation on Amazon Toys and Games (2014, 5-core), full catalogue.",
        paper_candidates=11925,
        paper_queries=19413,
        sources=(Source("Amazon Toys and Games 5-core + metadata (2014)", _AMAZON14, _AMAZON_LICENSE,
                        files=_amazon14_files("Toys_and_Games")),),
        license=_AMAZON_LICENSE,
        how_to_get="rbench data download rec-toy, or rbench data prepare rec-toy --from DIR "
        "(reviews_Toys_and_Games_5.json.gz + "
        "meta_Toys_and_Games.json.gz, or RecBole Amazon_Toys_and_Games.inter/.item)",
        paper_row=4,
        donates=("mixed", "shift", "scaled"),
        layouts=(_amazon14_layout("Toys_and_Games"),
                 Layout("atomic", "RecBole atomic", ("Amazon_Toys_and_Games.inter",), ("{stem}.item",))),
    ),
    RecSpec(
        name="rec-clothing",
        title="Rec-Clothing",
        scenario="ultra",
        domain="recommendation",
        description="Sequential recommendation on Amazon Clothing, Shoes and Jewelry (2023) with the "
        "whole ~6.8M-item catalogue as the pool.",
        paper_candidates=6805462,
        paper_queries=185925,
        sources=(Source("Amazon Reviews 2023: Clothing_Shoes_and_Jewelry", "https://amazon-reviews-2023.github.io/",
                        _AMAZON_LICENSE, files=_amazon23_files("Clothing_Shoes_and_Jewelry")),),
        license=_AMAZON_LICENSE,
        how_to_get="rbench data download rec-clothing, or --from DIR (Clothing_Shoes_and_Jewelry.jsonl.gz + "
        "meta_Clothing_Shoes_and_Jewelry.jsonl.gz, or RecBole atomic)",
        paper_row=7,
        donates=("scaled",),
        layouts=(_amazon23_layout("Clothing_Shoes_and_Jewelry"), _amazon23_atomic("Clothing_Shoes_and_Jewelry")),
    ),
    *(_zero_shot_target(name, cat, title, cands, queries) for name, cat, title, cands, queries in (
        ("video-games", "Video_Games", "Video Games", 25600, 94800),
        ("software", "Software", "Software", 17600, 146400))),
)


# ------------------------------------------------------------------------------------------
# finding, checking and loading
# ------------------------------------------------------------------------------------------


def find_inputs(spec: RecSpec) -> Found | None:
    """The input files of a task in ``raw_dir(task)`` or in exactly one of its subfolders."""
    d = locate(paths.raw_dir(spec.name), lambda p: _match(p, spec.layouts) is not None)
    return _match(d, spec.layouts) if d is not None else None


def _amazon_task(spec: RecSpec, found: Found, options: Options | None, seed: int) -> TaskData:
    from rbench.tasks.families import amazon

    fmt = amazon.FORMAT_2023 if found.layout.kind == "amazon23" else amazon.FORMAT_2014
    reviews = amazon.read_reviews(found.interactions, fmt)
    assert found.metadata is not None
    read_meta = amazon.read_meta_2023 if found.layout.kind == "amazon23" else amazon.read_meta_2014
    meta = read_meta(found.metadata, reviews.item_names)
    cat = Catalogue(ids=np.asarray(reviews.item_names.to_pylist(), dtype=object), titles=text_column(meta.titles),
                    texts=text_column(meta.texts), has_meta=meta.has_meta)
    coded = CodedInteractions(reviews.user, reviews.item, reviews.ts, reviews.user_names)
    del reviews
    return build_from_codes(spec, coded, cat, options, str(found.directory), compact=True, seed=seed,
                            info={"layout": found.layout.label})


class RecommendationFamily(TaskFamily):
    """Rec-Music, Rec-Movie, Rec-Toy, Rec-Clothing, Video Games and Software: raw files in ``raw_dir(task)``, read in
    whichever of the spec's layouts is found, then the protocol of this module."""

    name = "recsys"
    doc = __doc__ or ""

    def __init__(self, specs: tuple[RecSpec, ...] = SPECS) -> None:
        self._specs = specs

    def specs(self) -> tuple[TaskSpec, ...]:
        return self._specs

    def options_type(self, spec: TaskSpec) -> type:
        declared = spec.options_type if isinstance(spec, RecSpec) else None
        return declared or (SmallListOptions if spec.scenario == "small" else SequentialOptions)

    def check(self, spec: TaskSpec) -> tuple[bool, str]:
        assert isinstance(spec, RecSpec)
        raw = paths.raw_dir(spec.name)
        found = find_inputs(spec)
        if found is None:
            partial = _match(raw, spec.layouts, partial=True) if raw.is_dir() else None
            note = ""
            if partial is not None:
                stem = partial.interactions.name.removesuffix(".inter")
                wanted = " or ".join(m.replace("{stem}", stem) for m in partial.layout.metadata)
                note = f"found {partial.interactions.name} but not {wanted}"
            return not_present(spec, raw, note)
        files = found.interactions.name + (f", {found.metadata.name}" if found.metadata else
                                           " (no .item file: items are titled 'item <id>')")
        return True, f"{found.layout.label}: {files} in {found.directory}"

    def load(self, spec: TaskSpec, options: Any, seed: int) -> TaskData:
        """Read whichever layout ``find_inputs`` finds and apply the protocol with the task's pool rule."""
        assert isinstance(spec, RecSpec)
        options = options or self.options_type(spec)()
        found = find_inputs(spec)
        if found is None:
            raise RBenchError(f"task {spec.name!r}: data {self.status(spec)[1]}")
        info = {"layout": found.layout.label}
        if found.layout.kind == "ml-dat":
            assert found.metadata is not None
            return build_sequential_task(spec, read_ml_ratings(found.interactions), read_ml_movies(found.metadata),
                                         options, str(found.directory), catalogue=spec.pool_rule, seed=seed,
                                         info=info)
        if found.layout.kind == "atomic":
            return build_sequential_task(spec, interactions_from_atomic(found.interactions),
                                         items_from_atomic(found.metadata), options, str(found.directory),
                                         catalogue=spec.pool_rule, seed=seed, info=info)
        return _amazon_task(spec, found, options, seed)


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


class EmbeddedFamily(TaskFamily):
    """ml-100k: MovieLens 100K read from inside the installed ``recbole`` package. It loads in
    about half a second, so it is not cached, and there is no raw folder to fill."""

    name = "recsys-embedded"
    doc = __doc__ or ""
    cached = False
    links_from = False

    def specs(self) -> tuple[TaskSpec, ...]:
        return (ML100K,)

    def options_type(self, spec: TaskSpec) -> type:
        return SequentialOptions

    def inputs(self, spec: TaskSpec) -> list[Path]:
        return [recbole_example_dir(spec.name)]

    def check(self, spec: TaskSpec) -> tuple[bool, str]:
        import importlib.util

        ok = importlib.util.find_spec("recbole") is not None
        return ok, ("inside installed recbole" if ok else "install rbench[recsys] (recbole ships it)")

    def load(self, spec: TaskSpec, options: Any, seed: int) -> TaskData:
        return load_atomic_dir(spec, recbole_example_dir(spec.name), spec.name, options)


FAMILY = RecommendationFamily()
EMBEDDED = EmbeddedFamily()
