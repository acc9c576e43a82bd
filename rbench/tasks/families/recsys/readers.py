"""The recommendation tasks' file readers: RecBole atomic files and the MovieLens releases,
each value checked where it is read (one line naming the file, row and field).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from rbench.core.errors import DataError
from rbench.core.inputs import require_regular

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
