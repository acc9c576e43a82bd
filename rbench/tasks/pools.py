"""Candidate-pool variants of the paper's appendix: ``mixed``, ``shift`` and ``scaled:N``.

The paper trains on the original task and changes only the candidates seen at test time; so does
``apply_variant``: ``train``/``valid`` and their indices are untouched, ``train_pool`` is set to
the original pool (what ``fit`` sees through ``TaskData.fit_pool``), and only ``pool`` and the
test split's pool indices (positives, history, exclusions) change.

- ``mixed`` ("extremely irrelevant candidates"): the test pool is the union of the Rec-Movie,
  Rec-Toy, MS MARCO and ESCI pools plus the task's own.
- ``shift`` ("candidate distribution shift"): Rec-Movie + Rec-Toy for recommendation tasks,
  MS MARCO + ESCI for passage and product tasks (other domains have no shift partner).
- ``scaled:N``: the pool grows to exactly ``N`` candidates; the ``N - |own|`` added items are drawn
  uniformly without replacement (seeded by the run seed) from the union of the other tasks'
  pools (Rec-Movie, Rec-Toy, MS MARCO, ESCI, Rec-Clothing).

Which task donates to which variant is a fact of that task (``TaskSpec.donates``); shift keeps
to the same kind of domain (``SHIFT_DOMAINS``). The runner hands the donors in (``Donors``: the
candidate specs in registry order and a lookup of their pools), so this module never loads a task.

Choices written down:

1. Donor pools come from the runner (the registry, default task options, the run's seed); a donor
   whose data is not present (or fails to load) is left out and named, with the reason, in
   ``info["variant_skipped"]``; the sources used are in ``info["variant_sources"]`` (the task's
   own first). A variant left with no donor at all is refused: it would be the original pool
   under another name. Tests hand in small synthetic pools (``Donors.of``).
2. Ids stay unique across sources: donor ids become ``<task>:<id>``; the task's own ids are kept
   as they are, so rankers that map test candidates to what they learned by id (popularity,
   RecBole) find every training item. A collision (an own id already spelled ``<donor>:<id>``)
   is an error. ``Pool.domains`` names each candidate's source task.
3. Candidate order: the merged pool is shuffled, so that no ranker or tie rule that looks at
   pool positions can tell the task's own items from the added ones. For ``mixed``/``shift`` the
   order depends only on the task and the variant (not on the run seed: one fixed pool per task,
   whose candidate embeddings are cached once); for ``scaled:N`` the draw and the order come from
   the run seed.
4. Items that are the same thing in two sources (a movie in both MovieLens releases) stay two
   candidates with their own ids; only the task's own item counts as the positive.
5. The small scenario (a 20-item list per query) has no pool to vary: refused.
6. A lazy text column (a memory-mapped pool) stays lazy: the merged pool then reads texts
   through ``MergedTexts`` instead of copying them.

The transfer variant ``from-<source>`` (the paper's zero-shot Table 5: trained on Rec-Toy, tested
on Video Games and Software) is the other way round: the test side is the task's own (pool,
test queries, exclusions, untouched), the fit side is another task's (``train``, ``valid``,
``train_pool``, ``train_spec`` from the source, loaded by the runner with its default options and
the run's seed). ``transfer`` only joins the two; which source is allowed (a known task of the
same domain, not the task itself) and which rankers may be scored that way (``transfers`` on the
ranker class, ``rbench.api.BaseRanker``) is decided when the run is planned
(``rbench.run.runner.make_plan``). ``info`` names the source and its fingerprint, and sets
``original_fingerprint`` to the task's own pool, so a ``from-<source>`` table's Δ is the change
against the same ranker trained on the task itself.

Pools built from positives, and distractors (``pool_prior_info``, ``draw_distractors``): where a
task's pool is gathered from its own queries' judged candidates (``TaskSpec.pool_from_positives``:
ESCI's one positive per query, MS MARCO ``pool=all``, an imported corpus that is mostly
positives), the train/valid positives ``fit`` is handed are much of the pool and almost never a
test answer, so "those last" beats chance with no skill (the ``prior`` floor). Each such load
records the shares in ``info`` (``pool_positive_share``: the pool's candidates that are some
query's positive; ``pool_fit_positive_share``: a train or valid query's), and ``distractors``
draws candidates that are no query's positive from the rest of the collection, seeded.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import warnings
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rbench.api import Pool, Queries, Ragged, TaskData, TaskSpec
from rbench.core.errors import RBenchError
from rbench.tasks.text_columns import MergedTexts

SHIFT_DOMAINS: dict[str, tuple[str, ...]] = {"recommendation": ("recommendation",),
                                             "passage": ("passage", "product"), "product": ("passage", "product")}
ID_SEP = ":"
KINDS = ("original", "mixed", "shift", "scaled:N", "from-TASK")
TRANSFER_PREFIX = "from-"
# an imported corpus counts as built from positives when at least this share of it is some query's
# positive: pushing them last (``prior``) then gains ~1/(1 - share) over chance (1.1x here, 10x at 0.9)
POSITIVE_SHARE_FLAG = 0.1



@dataclass(frozen=True)
class Donors:
    """The tasks a variant may draw candidates from (in registry order) and a lookup of a donor's
    pool (None, LookupError or RBenchError: not available, left out and named)."""

    specs: tuple[TaskSpec, ...]
    lookup: Callable[[str], Pool | TaskData | None]

    @classmethod
    def of(cls, specs: Sequence[TaskSpec], pools: Mapping[str, Pool | TaskData]) -> Donors:
        return cls(tuple(specs), pools.get)

    def names(self, kind: str, spec: TaskSpec) -> list[str]:
        """Donor task names for variant ``kind`` of ``spec`` (never the task itself)."""
        domains = SHIFT_DOMAINS.get(spec.domain, ()) if kind == "shift" else None
        return [s.name for s in self.specs if kind in s.donates and s.name != spec.name
                and (domains is None or s.domain in domains)]


@dataclass(frozen=True)
class Variant:
    kind: str  # original | mixed | shift | scaled | transfer
    n: int | None = None
    source: str = ""  # transfer: the task the ranker is fitted on (its name as given)

    @property
    def label(self) -> str:
        if self.kind == "transfer":
            return f"{TRANSFER_PREFIX}{self.source}"
        return f"scaled:{self.n}" if self.kind == "scaled" else self.kind


def parse_variant(text: str) -> Variant:
    """A variant's text (``--variant``) as a ``Variant``; only the spelling is checked here (a
    transfer's source task is resolved by the runner, which knows the registry)."""
    raw = (text or "original").strip()
    if raw in ("original", "mixed", "shift"):
        return Variant(raw)
    if raw.startswith(TRANSFER_PREFIX):
        source = raw[len(TRANSFER_PREFIX):].strip()
        if not source:
            raise RBenchError(f"variant {raw!r}: expected from-TASK, the task the ranker is trained on, "
                              "e.g. from-rec-toy")
        return Variant("transfer", source=source)
    m = re.fullmatch(r"scaled[:=]([0-9][0-9_,]*)", raw)
    if m:
        n = int(m.group(1).replace(",", "").replace("_", ""))
        if n <= 0:
            raise RBenchError(f"variant {raw!r}: N must be positive")
        return Variant("scaled", n)
    if raw.startswith("scaled"):
        raise RBenchError(f"variant {raw!r}: expected scaled:N with N the pool size, e.g. scaled:100000")
    from rbench.core.errors import unknown

    raise unknown("variant", raw, KINDS)


# --------------------------------------------------------------------------------------------
# donors
# --------------------------------------------------------------------------------------------


def _resolve_donors(names: Sequence[str], own: str, lookup: Callable[[str], Any]
                    ) -> tuple[dict[str, Pool], dict[str, str]]:
    found: dict[str, Pool] = {}
    skipped: dict[str, str] = {}
    for name in names:
        if name == own:
            continue
        try:
            got = lookup(name)
        except (RBenchError, LookupError) as exc:
            skipped[name] = str(exc) or "not available"
            continue
        if got is None:
            skipped[name] = "not available"
            continue
        pool = got.pool if isinstance(got, TaskData) else got
        if isinstance(got, TaskData) and got.spec.scenario == "small":
            skipped[name] = "small-scenario task (per-query lists, no shared pool)"
            continue
        found[name] = pool
    return found, skipped


# --------------------------------------------------------------------------------------------
# merged pools
# --------------------------------------------------------------------------------------------


@dataclass
class _Source:
    name: str
    pool: Pool
    take: np.ndarray | None = None  # local indices used (None: all, in order)

    def __len__(self) -> int:
        return len(self.pool) if self.take is None else len(self.take)

    def local(self) -> np.ndarray:
        return np.arange(len(self.pool), dtype=np.int64) if self.take is None else self.take


def _ids_of(src: _Source, prefix: bool) -> np.ndarray:
    ids = np.asarray(src.pool.ids, dtype=object)
    if src.take is not None:
        ids = ids[src.take]
    if not prefix:
        return np.asarray([str(x) for x in ids], dtype=object)
    head = src.name + ID_SEP
    return np.asarray([head + str(x) for x in ids], dtype=object)


# A fixed tag, not a module path: issue 30's package move rewrote it ("rbench.pools" became
# "rbench.tasks.pools") and every variant's fingerprint moved with no change to its data, so the
# committed ml-100k~mixed/~scaled records could no longer be verified. Never rename it.
VARIANT_FINGERPRINT_TAG = "rbench.pools v1"


def _fingerprint(label: str, sources: list[_Source], order_seed: Sequence[int]) -> str:
    h = hashlib.sha256(f"{VARIANT_FINGERPRINT_TAG}|{label}|{list(order_seed)}".encode())
    for s in sources:
        h.update(f"|{s.name}|{s.pool.fingerprint or s.pool.name}|{len(s.pool)}".encode())
        if s.take is not None:
            h.update(np.ascontiguousarray(s.take, dtype=np.int64).tobytes())
    return h.hexdigest()


def merge_pools(label: str, sources: list[_Source], order_seed: Sequence[int]) -> tuple[Pool, np.ndarray]:
    """Merge ``sources`` (the task's own first, all of it) into one shuffled pool.

    Returns the pool and ``own_map``: new position of each of the own pool's candidates.
    """
    lengths = np.array([len(s) for s in sources], dtype=np.int64)
    total = int(lengths.sum())
    src = np.repeat(np.arange(len(sources), dtype=np.int64), lengths)
    loc = np.concatenate([s.local() for s in sources]) if total else np.zeros(0, dtype=np.int64)
    perm = np.random.default_rng(np.random.SeedSequence(list(order_seed))).permutation(total)
    inverse = np.empty(total, dtype=np.int64)
    inverse[perm] = np.arange(total, dtype=np.int64)

    ids = np.concatenate([_ids_of(s, prefix=k > 0) for k, s in enumerate(sources)])[perm]
    import pandas as pd

    index = pd.Index(ids)
    if index.has_duplicates:
        dup = index[index.duplicated()][0]
        raise RBenchError(f"variant {label}: candidate id {dup!r} occurs twice after prefixing donor ids "
                          f"with '<task>{ID_SEP}'; rename the task's items")
    columns = [s.pool.texts for s in sources]
    new_src, new_loc = src[perm], loc[perm]
    if all(isinstance(c, (np.ndarray, list)) for c in columns):
        texts: Any = np.empty(total, dtype=object)
        for k, c in enumerate(columns):
            rows = np.flatnonzero(new_src == k)
            texts[rows] = np.asarray(c, dtype=object)[new_loc[rows]]
    else:
        texts = MergedTexts(columns, new_src, new_loc)
    domains = np.asarray([s.name for s in sources], dtype=object)[new_src]
    pool = Pool(ids=ids, texts=texts, domains=domains, name=f"{sources[0].pool.name or sources[0].name}~{label}",
                fingerprint=_fingerprint(label, sources, order_seed))
    return pool, inverse[: len(sources[0])]


def _remap(r: Ragged | None, mapping: np.ndarray) -> Ragged | None:
    if r is None:
        return None
    return Ragged(np.array(r.offsets, dtype=np.int64), mapping[np.asarray(r.values, dtype=np.int64)])


def reindex_queries(q: Queries, mapping: np.ndarray) -> Queries:
    """Pool indices of ``q`` (positives, history, exclusions, candidates) through ``mapping``."""
    return dataclasses.replace(
        q, positives=_remap(q.positives, mapping), history=_remap(q.history, mapping),
        exclude=_remap(q.exclude, mapping),
        candidates=mapping[np.asarray(q.candidates, dtype=np.int64)] if q.candidates is not None else None,
    )


# --------------------------------------------------------------------------------------------
# the variants
# --------------------------------------------------------------------------------------------


def _seed_words(*parts: Any) -> list[int]:
    return [zlib.crc32(str(p).encode()) for p in parts]


def _draw(label: str, own: Pool, found: dict[str, Pool], n: int, seed: int) -> list[_Source]:
    names = list(found)
    need = n - len(own)
    available = sum(len(found[k]) for k in names)
    if need < 0:
        raise RBenchError(f"variant {label}: the original pool already has {len(own):,} candidates; "
                          f"N must be at least that (scaled variants only grow the pool)")
    if need > available:
        raise RBenchError(f"variant {label}: needs {need:,} extra candidates but the other prepared pools "
                          f"({', '.join(names)}) hold {available:,}; the largest possible N is "
                          f"{len(own) + available:,}")
    rng = np.random.default_rng(np.random.SeedSequence([int(seed) & 0xFFFFFFFF, *_seed_words("scaled-draw", n)]))
    chosen = np.sort(rng.choice(available, size=need, replace=False)) if need else np.zeros(0, dtype=np.int64)
    bounds = np.concatenate([[0], np.cumsum([len(found[k]) for k in names])])
    out = []
    for k, name in enumerate(names):
        lo, hi = np.searchsorted(chosen, [bounds[k], bounds[k + 1]])
        if hi > lo:
            out.append(_Source(name, found[name], (chosen[lo:hi] - bounds[k]).astype(np.int64)))
    return out


def transfer(data: TaskData, source: TaskData) -> TaskData:
    """``data``'s test side (pool, test queries) with ``source``'s fit side (train, valid, pool,
    spec): the transfer variant ``from-<source>`` (module doc). Refuses what would not be a
    transfer: the task itself, another domain, data that is already a variant."""
    spec, src = data.spec, source.spec
    label = f"{TRANSFER_PREFIX}{src.name}"
    if src.name == spec.name:
        raise RBenchError(f"variant {label}: the source is the task itself; run --variant original")
    if src.domain != spec.domain:
        raise RBenchError(f"variant {label}: {src.name!r} is a {src.domain} task and {spec.name!r} a "
                          f"{spec.domain} task; transfer needs a source of the same domain")
    for d in (data, source):
        if d.train_pool is not None or d.variant not in ("", "original"):
            raise RBenchError(f"variant {label}: task {d.spec.name!r} is already the {d.variant!r} variant")
    info = {**data.info, "variant": label, "transfer_source": src.name,
            "source_fingerprint": source.fingerprint, "source_pool_size": len(source.pool),
            "original_fingerprint": data.pool.fingerprint}
    return dataclasses.replace(data, train=source.train, valid=source.valid, train_pool=source.pool,
                               train_spec=src, variant=label, info=info)


def apply_variant(data: TaskData, variant: Variant | str, seed: int, donors: Donors | None = None) -> TaskData:
    """``data`` with its test pool replaced by the variant (parsed, or its text; module doc).
    The transfer variant needs its source's data: ``transfer``."""
    v = variant if isinstance(variant, Variant) else parse_variant(variant)
    if v.kind == "original":
        return data
    if v.kind == "transfer":
        raise RBenchError(f"variant {v.label}: the source task's data is needed (rbench.tasks.pools.transfer)")
    spec = data.spec
    if data.train_pool is not None or data.variant not in ("", "original"):
        raise RBenchError(f"task {spec.name!r} is already the {data.variant!r} variant")
    if spec.scenario == "small" or data.test.candidates is not None:
        raise RBenchError(f"variant {v.label}: task {spec.name!r} is a small-scenario task (each query ranks "
                          "its own candidate list); pool variants apply to large and ultra tasks only")
    if v.kind == "shift" and spec.domain not in SHIFT_DOMAINS:
        raise RBenchError(f"variant shift: defined for recommendation tasks (rec-movie + rec-toy) and "
                          f"passage/product tasks (msmarco + esci), not for {spec.domain} tasks such as "
                          f"{spec.name!r}")
    if donors is None:
        raise RBenchError(f"variant {v.label}: no donor tasks were handed in (the runner passes the registry's)")
    names = donors.names(v.kind, spec)
    found, skipped = _resolve_donors(names, spec.name, donors.lookup)
    for name, why in skipped.items():
        warnings.warn(f"variant {v.label}: {name} left out ({why})", stacklevel=2)
    if not found and v.kind != "scaled":
        raise RBenchError(f"variant {v.label} of {spec.name!r} needs at least one of "
                          f"{', '.join(n for n in names if n != spec.name)} prepared (rbench data prepare ...); "
                          f"none is: " + "; ".join(f"{k}: {w}" for k, w in skipped.items()))
    own = _Source(spec.name, data.pool)
    if v.kind == "scaled":
        if not found:
            raise RBenchError(f"variant {v.label}: no other prepared pool to draw candidates from (looked for "
                              f"{', '.join(n for n in names if n != spec.name)}); prepare one with "
                              "rbench data prepare TASK")
        sources = [own, *_draw(v.label, data.pool, found, v.n or 0, seed)]
        order_seed = [int(seed) & 0xFFFFFFFF, *_seed_words("scaled-order", spec.name, v.n)]
    else:
        sources = [own, *(_Source(k, p) for k, p in found.items())]
        order_seed = _seed_words(v.kind, spec.name)
    pool, own_map = merge_pools(v.label, sources, order_seed)
    counts = {s.name: len(s) for s in sources}
    info = {**data.info, "variant": v.label, "variant_sources": [s.name for s in sources],
            "variant_counts": counts, "variant_skipped": skipped, "original_pool_size": len(data.pool),
            "original_fingerprint": data.pool.fingerprint}
    return dataclasses.replace(data, pool=pool, test=reindex_queries(data.test, own_map), variant=v.label,
                               train_pool=data.pool, info=info)


# --------------------------------------------------------------------------------------------
# pools built from positives: their shares, and distractors that are nobody's positive
# --------------------------------------------------------------------------------------------


def pool_prior_info(data: TaskData) -> dict[str, Any]:
    """The shares of the pool that are some query's positive (any split) and a train/valid
    query's positive (what ``fit`` is handed): how much a ranker gains by pushing them last."""
    n = max(len(data.pool), 1)
    fit = np.unique(np.concatenate([np.asarray(data.train.positives.values, dtype=np.int64),
                                    np.asarray(data.valid.positives.values, dtype=np.int64)]))
    every = np.unique(np.concatenate([fit, np.asarray(data.test.positives.values, dtype=np.int64)]))
    return {"pool_positive_share": round(len(every) / n, 6), "pool_fit_positive_share": round(len(fit) / n, 6)}


def draw_distractors(universe: np.ndarray, taken: np.ndarray, n: int, seed: int, what: str) -> np.ndarray:
    """``n`` ids of ``universe`` (candidates that are no query's positive) that are not ``taken``
    (already in the pool), drawn without replacement by a stream of their own (seed,
    "distractors"): the same seed and collection give the same distractors, whatever else the
    options change. ``universe`` is sorted first, so the file order of the collection never matters.
    Fewer than ``n`` available is an error naming the most there are."""
    ids = np.asarray(universe, dtype=object)
    ids = np.unique(ids.astype(str)).astype(object)
    free = ids[~np.isin(ids, np.asarray(taken, dtype=object).astype(str))]
    if n > len(free):
        raise RBenchError(f"task.distractors={n:,}: {what} holds only {len(free):,} candidates that are no "
                          f"query's positive and not already in the pool; use at most {len(free):,}")
    if n == 0:
        return free[:0]
    rng = np.random.default_rng(np.random.SeedSequence([int(seed) & 0xFFFFFFFF, *_seed_words("distractors")]))
    return free[np.sort(rng.choice(len(free), size=n, replace=False))]
