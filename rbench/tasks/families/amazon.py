"""Readers for the McAuley lab's Amazon review data, with memory bounded for the 66M-review
Clothing release.

Formats read (each exactly as published):

- 2014 / 2018 reviews, ``reviews_<Cat>_5.json.gz`` (2014) or ``<Cat>_5.json.gz`` (2018): one
  JSON object per line with ``reviewerID``, ``asin``, ``overall``, ``unixReviewTime`` (seconds).
- 2014 metadata, ``meta_<Cat>.json.gz``: one *Python literal* dict per line
  (``{'asin': '...', 'title': '...', 'categories': [[...]], 'brand': ...}``); the 2018 release
  writes the same records as JSON, with ``category`` (one flat list) instead of ``categories``.
- 2023 reviews, ``<Cat>.jsonl.gz``: ``user_id``, ``parent_asin``, ``rating``, ``timestamp``
  (milliseconds); 2023 metadata, ``meta_<Cat>.jsonl.gz``: ``parent_asin``, ``title``, ``store``,
  ``categories`` (one flat list), and many fields that are not read.

Choices written down:

1. Every review is one implicit interaction; ratings are not read (the paper's sequential
   setting, and RecBole's for these datasets). Only the order of timestamps matters.
2. 2023 reviews are keyed by ``parent_asin`` (the product, not its colour/size variant ``asin``),
   as the 2023 release's own benchmark splits and its metadata are; 2014/2018 by ``asin``.
3. Reviews are parsed by pyarrow's streaming JSON reader in blocks of ``BLOCK_BYTES`` with an
   explicit schema of the three fields needed; review texts, images, votes are skipped by the
   parser and never materialised. Each block's user and item ids are dictionary-encoded at once;
   only int32 codes and the per-block dictionaries are kept (unified at the end), so memory is
   ~16 bytes per review plus the distinct id strings, never a Python object per review.
4. The fast reader's errors carry no line number. When it fails (or a field is null or empty),
   the file is scanned again line by line with ``json`` to name the first bad line and field.
   That scan happens only on the error path.
5. Metadata is kept only for items that occur in the interactions (the 2014 Toys meta file
   lists ~336k items, its 5-core only 11,924). 2014/2018 meta lines are parsed (``json``, then
   ``ast.literal_eval``) only when the ``asin`` that a regular expression finds first is needed.
   A line that repeats an item: the first one wins.
6. Item text = title, then ``Categories: <path>`` (a hierarchy joined by " > "; the several
   paths of a 2014 record joined by "; ", repeated paths dropped), then ``Brand: x`` (2014/2018)
   or ``Store: x`` (2023); parts joined by ". ", empty parts left out. Titles are kept as
   written (HTML entities such as ``&amp;`` included). An item with no meta line, or an empty
   title, is titled ``item <id>``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from rbench.core.errors import DataError
from rbench.core.inputs import JsonSyntaxError, parse_json, require_regular
from rbench.tasks.building import iter_lines, parse_json_object

BLOCK_BYTES = 16 << 20  # bytes of JSON text parsed per block (one line must fit in a block)


@dataclass(frozen=True)
class ReviewFormat:
    """Field names of one release's review records."""

    user: str
    item: str
    ts: str
    label: str


FORMAT_2014 = ReviewFormat("reviewerID", "asin", "unixReviewTime", "Amazon 2014/2018 reviews")
FORMAT_2023 = ReviewFormat("user_id", "parent_asin", "timestamp", "Amazon 2023 reviews")


@dataclass
class Reviews:
    """Interactions as codes: ``user[i]`` indexes ``user_names``, ``item[i]`` ``item_names``.

    Both name arrays are unique and sorted as text (byte order of UTF-8 = code point order)."""

    user: np.ndarray  # int64
    item: np.ndarray  # int64
    ts: np.ndarray  # float64, file order
    user_names: pa.Array
    item_names: pa.Array

    def __len__(self) -> int:
        return len(self.user)


@dataclass
class ItemMeta:
    """Titles and texts aligned with the ``item_names`` they were read for."""

    titles: pa.Array
    texts: pa.Array
    has_meta: np.ndarray  # bool: a meta line was found for the item


# ------------------------------------------------------------------------------------------
# streaming JSON with line-accurate errors
# ------------------------------------------------------------------------------------------


def _batches(path: Path, schema: pa.Schema, block_bytes: int) -> Iterator[pa.RecordBatch]:
    stream = pa.input_stream(str(path), compression="detect")  # .gz by extension
    read = pj.ReadOptions(block_size=block_bytes, use_threads=True)
    parse = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    if hasattr(pj, "open_json"):  # pyarrow >= 15: streaming
        yield from pj.open_json(stream, read_options=read, parse_options=parse)
    else:  # pragma: no cover - older pyarrow reads the selected columns at once
        yield from pj.read_json(stream, read_options=read, parse_options=parse).to_batches()


def _iter_objects(path: Path) -> Iterator[tuple[int, Any]]:
    # not strict: the review dumps are UTF-8, and a stray byte in a title is not worth refusing
    for lineno, line in iter_lines(path, strict=False):
        if line.strip():
            yield lineno, line


def _line_of_row(path: Path, row: int) -> int | None:
    """Line number of the ``row``-th (0-based) non-blank line: the JSON reader skips blanks."""
    for k, (lineno, _) in enumerate(_iter_objects(path)):
        if k == row:
            return lineno
    return None


_json_object = parse_json_object


def _check_value(obj: dict[str, Any], key: str, kind: str, path: Path, lineno: int) -> None:
    value = obj.get(key)
    if kind == "id":
        if not isinstance(value, str) or not value.strip():
            got = "missing" if key not in obj else f"got {value!r}"
            raise DataError(f"expected a non-empty string id ({got})", path, lineno, key)
    elif kind == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            got = "missing" if key not in obj else f"got {value!r}"
            raise DataError(f"expected a number ({got})", path, lineno, key)
    elif kind == "text":
        if value is not None and not isinstance(value, str):
            raise DataError(f"expected a string or null, got {type(value).__name__}", path, lineno, key)
    elif kind == "list":
        if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise DataError(f"expected a list of strings, got {value!r:.60}", path, lineno, key)


def _raise_first_bad_line(path: Path, checks: dict[str, str], reason: str) -> None:
    """The slow, exact half of the reader: find and name the first line that breaks ``checks``."""
    for lineno, line in _iter_objects(path):
        obj = _json_object(line, path, lineno)
        for key, kind in checks.items():
            _check_value(obj, key, kind, path, lineno)
    raise DataError(f"the JSON reader failed but every line parses on its own ({reason})", path)


def _first_bad_row(batch: pa.RecordBatch, required: tuple[str, ...], ids: tuple[str, ...]) -> int | None:
    """First row of ``batch`` with a null in a required column or an empty/blank string id."""
    bad = None
    for name in required:
        col = batch.column(name)
        flag = pc.is_null(col)
        if name in ids:
            flag = pc.or_(flag, pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(col)), 0))
        flag = pc.fill_null(flag, True)
        bad = flag if bad is None else pc.or_(bad, flag)
    if bad is None or not pc.any(bad).as_py():
        return None
    return int(pc.index(bad, True).as_py())


def _stream(path: Path, schema: pa.Schema, checks: dict[str, str], required: tuple[str, ...],
            ids: tuple[str, ...], block_bytes: int) -> Iterator[pa.RecordBatch]:
    """Record batches whose required columns are non-null and ids non-empty; otherwise a
    DataError naming the first bad line and field (found by the exact scan)."""
    rows = 0
    try:
        for batch in _batches(path, schema, block_bytes):
            bad = _first_bad_row(batch, required, ids)
            if bad is not None:
                _raise_first_bad_line(path, checks, f"row {rows + bad + 1} has a null or empty field")
            rows += batch.num_rows
            yield batch
    except pa.ArrowInvalid as exc:
        _raise_first_bad_line(path, checks, str(exc))
    except (OSError, EOFError) as exc:  # a corrupt or truncated .gz: the exact scan names where
        _raise_first_bad_line(path, checks, str(exc))


def _sorted_codes(chunks: list[pa.DictionaryArray]) -> tuple[np.ndarray, pa.Array]:
    """Unify per-block dictionaries; return int64 codes into the sorted unique values."""
    unified = pa.chunked_array(chunks).unify_dictionaries()
    dictionary = unified.chunk(0).dictionary
    codes = np.concatenate([c.indices.to_numpy(zero_copy_only=False) for c in unified.chunks]).astype(np.int64)
    order = pc.sort_indices(dictionary).to_numpy()
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order), dtype=np.int64)
    return rank[codes], dictionary.take(pa.array(order))


def read_reviews(path: Path, fmt: ReviewFormat, block_bytes: int = BLOCK_BYTES) -> Reviews:
    """Stream a reviews file into codes (see the module doc for the memory bound)."""
    path = require_regular(path)
    schema = pa.schema([(fmt.user, pa.string()), (fmt.item, pa.string()), (fmt.ts, pa.float64())])
    checks = {fmt.user: "id", fmt.item: "id", fmt.ts: "number"}
    users: list[pa.DictionaryArray] = []
    items: list[pa.DictionaryArray] = []
    times: list[np.ndarray] = []
    for batch in _stream(path, schema, checks, (fmt.user, fmt.item, fmt.ts), (fmt.user, fmt.item), block_bytes):
        if batch.num_rows == 0:
            continue
        users.append(pc.dictionary_encode(batch.column(fmt.user)))
        items.append(pc.dictionary_encode(batch.column(fmt.item)))
        times.append(batch.column(fmt.ts).to_numpy(zero_copy_only=False).astype(np.float64, copy=False))
    if not times:
        raise DataError(f"no reviews (expected JSON lines with {fmt.user}, {fmt.item}, {fmt.ts})", path)
    user, user_names = _sorted_codes(users)
    del users
    item, item_names = _sorted_codes(items)
    return Reviews(user=user, item=item, ts=np.concatenate(times), user_names=user_names, item_names=item_names)


# ------------------------------------------------------------------------------------------
# metadata
# ------------------------------------------------------------------------------------------


def _fallback_titles(item_names: pa.Array) -> pa.Array:
    return pc.binary_join_element_wise("item ", item_names, "")


def _append(text: pa.Array, label: str, value: pa.Array) -> pa.Array:
    """``text + ". <label>: " + value`` where value is non-empty, else ``text``."""
    joined = pc.binary_join_element_wise(text, f". {label}: ", value, "")
    return pc.if_else(pc.greater(pc.utf8_length(value), 0), joined, text)


def _aligned(item_names: pa.Array, pos: np.ndarray, titles: pa.Array, texts: pa.Array) -> ItemMeta:
    """Meta rows found at catalogue positions ``pos`` (first occurrence wins) -> one row per item."""
    n = len(item_names)
    first_pos, first_row = np.unique(pos, return_index=True)
    src = np.full(n, -1, dtype=np.int64)
    src[first_pos] = first_row
    has = src >= 0
    index = pa.array(src, mask=~has)
    fallback = _fallback_titles(item_names)
    t = pc.take(titles, index) if len(titles) else pa.nulls(n, pa.string())
    x = pc.take(texts, index) if len(texts) else pa.nulls(n, pa.string())
    return ItemMeta(titles=pc.coalesce(t, fallback), texts=pc.coalesce(x, fallback), has_meta=has)


def _compose(ids: pa.Array, title: pa.Array, categories: pa.Array, label: str, brand: pa.Array
             ) -> tuple[pa.Array, pa.Array]:
    title = pc.utf8_trim_whitespace(pc.fill_null(title, ""))
    title = pc.if_else(pc.equal(pc.utf8_length(title), 0), _fallback_titles(ids), title)
    text = _append(title, "Categories", pc.fill_null(categories, ""))
    text = _append(text, label, pc.utf8_trim_whitespace(pc.fill_null(brand, "")))
    return title, text


def read_meta_2023(path: Path, item_names: pa.Array, block_bytes: int = BLOCK_BYTES) -> ItemMeta:
    """2023 ``meta_<Cat>.jsonl[.gz]`` -> titles/texts for ``item_names`` (arrow, no Python lists)."""
    path = require_regular(path)
    schema = pa.schema([("parent_asin", pa.string()), ("title", pa.string()), ("store", pa.string()),
                        ("categories", pa.list_(pa.string()))])
    checks = {"parent_asin": "id", "title": "text", "store": "text", "categories": "list"}
    ids, titles, texts = [], [], []
    # every meta row's title/text is kept (as arrow strings) until one lookup against the
    # catalogue at the end: one hash table instead of one per block
    for batch in _stream(path, schema, checks, ("parent_asin",), ("parent_asin",), block_bytes):
        cats = pc.binary_join(batch.column("categories"), " > ")
        title, text = _compose(batch.column("parent_asin"), batch.column("title"), cats, "Store",
                               batch.column("store"))
        ids.append(batch.column("parent_asin"))
        titles.append(title)
        texts.append(text)
    if not ids:
        return _aligned(item_names, np.zeros(0, dtype=np.int64), pa.array([], pa.string()), pa.array([], pa.string()))
    all_ids = pa.concat_arrays(ids)
    where = pc.index_in(all_ids, value_set=item_names)  # one hash table over the catalogue
    found = pc.is_valid(where)
    rows = np.flatnonzero(found.to_numpy(zero_copy_only=False))
    pos = where.filter(found).to_numpy(zero_copy_only=False).astype(np.int64)
    take = pa.array(rows)
    return _aligned(item_names, pos, pa.concat_arrays(titles).take(take), pa.concat_arrays(texts).take(take))


_ASIN_RE = re.compile(r"""['"]asin['"]\s*:\s*['"]([^'"]*)['"]""")


def _literal(line: str, path: Path, lineno: int) -> dict[str, Any]:
    """A meta line as JSON (2018) or, when it is not JSON at all, a Python literal (2014); JSON
    over ``rbench.core.inputs``' limits is refused, never retried as a literal."""
    try:
        obj = parse_json(line, path, lineno)
    except JsonSyntaxError:
        try:
            obj = ast.literal_eval(line.strip())
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            raise DataError("neither JSON nor a Python dict literal", path, lineno) from None
    if not isinstance(obj, dict):
        raise DataError(f"expected an object/dict, got {type(obj).__name__}", path, lineno)
    return obj


def _category_text(obj: dict[str, Any], path: Path, lineno: int) -> str:
    raw = obj.get("categories", obj.get("category"))
    if raw is None or raw == "":
        return ""
    if not isinstance(raw, list):
        raise DataError(f"expected a list, got {type(raw).__name__}", path, lineno, "categories")
    paths = raw if raw and all(isinstance(p, list) for p in raw) else [raw]  # 2014 nested / 2018 flat
    seen: list[str] = []
    for p in paths:
        if not all(isinstance(c, str) for c in p):
            raise DataError("expected category names (strings)", path, lineno, "categories")
        joined = " > ".join(c.strip() for c in p if c.strip())
        if joined and joined not in seen:
            seen.append(joined)
    return "; ".join(seen)


def read_meta_2014(path: Path, item_names: pa.Array) -> ItemMeta:
    """2014 (Python literal) or 2018 (JSON) ``meta_<Cat>.json[.gz]`` for ``item_names``."""
    path = require_regular(path)
    needed = {name: i for i, name in enumerate(item_names.to_pylist())}
    pos: list[int] = []
    titles: list[str] = []
    texts: list[str] = []
    for lineno, line in _iter_objects(path):
        m = _ASIN_RE.search(line)
        if m is not None and m.group(1) not in needed:
            continue
        obj = _literal(line, path, lineno)
        asin = obj.get("asin")
        if not isinstance(asin, str) or not asin:
            raise DataError(f"expected a non-empty string id, got {asin!r}", path, lineno, "asin")
        if asin not in needed:
            continue
        for key in ("title", "brand"):
            if obj.get(key) is not None and not isinstance(obj[key], str):
                raise DataError(f"expected a string, got {type(obj[key]).__name__}", path, lineno, key)
        title = (obj.get("title") or "").strip() or f"item {asin}"
        parts = [title]
        cats = _category_text(obj, path, lineno)
        if cats:
            parts.append(f"Categories: {cats}")
        brand = (obj.get("brand") or "").strip()
        if brand:
            parts.append(f"Brand: {brand}")
        pos.append(needed[asin])
        titles.append(title)
        texts.append(". ".join(parts))
    return _aligned(item_names, np.asarray(pos, dtype=np.int64), pa.array(titles, pa.string()),
                    pa.array(texts, pa.string()))
