"""Two-stage reranking with exact full-pool metrics: ``rbench run --ranker R --rerank-from S
--rerank-depth N``.

Stage 1 is an ordinary engine evaluation of ranker S over the whole pool (exclusions applied):
each query's top-N and the exact (pessimistic) rank of every positive. It is cached under
``paths.harness_dir("rerank")`` (the harness's own folder: never the rankers' ``cache_dir`` or under
it, since the file holds positives' ranks; docs/reference/contract.md), keyed by S's name, version and config, the pool's fingerprint, the
variant, N, the seed and the evaluated queries. Stage 1 may also come from a TREC run file
(``--rerank-from run:PATH``, gzipped or plain ``qid Q0 docid rank score tag``).

Stage 2 scores each query's top-N list with R through the engine's per-query candidate path
(same pessimistic tie rule). Lists of different lengths (a small-scenario list shorter than N, a
pool smaller than N after exclusions) are not padded: queries are grouped by list length and each
group is one rectangular engine call, so listwise rankers see the real list and nothing is
counted twice.

The final ranking is the reranked top-N, then the rest of the pool in stage-1 order:

- a positive inside the top-N gets its stage-2 rank (1..N);
- a positive outside keeps its exact stage-1 rank (>= N+1), plus the number of the query's
  top-N positives that stage 1 had tied with it and placed after it (only possible when a tie
  straddles the cut; otherwise nothing is added).

So full-pool RR, nDCG@10 and recall stay exact: nothing is dropped. The values BEIR, MTEB and
rank_llm report (every positive below the depth counts as not retrieved) are stored beside them as
``<metric>-dropped`` (``RR-dropped``, ``nDCG@10-dropped``, ``R@10-dropped``, ``R@100-dropped``).

A run file as stage 1: its documents are mapped to pool indices (an unknown id is an error naming
the file and line); its order is by score, descending (as trec_eval reads it), ties by the engine's
rule; excluded documents are removed. Pool candidates missing from the file rank after all of the
file's candidates; where among themselves is unknown, so a positive there is placed pessimistically
after every file candidate and every other missing candidate (several missing positives take the
last positions, in the engine's tie order). Run-file stage 1 is not cached (reading it is cheap).

``--rerank-depth all`` is exhaustive: R scores every pair (stage 1 plays no part in the metrics).
Above ``PAIR_BUDGET`` pairs it is refused, with the pair count and a time estimate from a warm-up
batch, unless forced (``--force``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rbench.api import Pool, Queries, Ragged, TaskData
from rbench.core import paths
from rbench.core.atomic import atomic_write_bytes
from rbench.core.errors import DataError, RBenchError, unknown
from rbench.core.hashing import short_hash
from rbench.core.inputs import require_regular
from rbench.core.settings import DEFAULTS
from rbench.engine.metrics import MEASURES, aggregate, per_query
from rbench.engine.scan import EvalResult, scan
from rbench.engine.scorers import make_scorer
from rbench.results.paired import p_value
from rbench.run.strategies import Job, Scan, Scored, Strategy, exhaustive

PAIR_BUDGET = 2_000_000  # exhaustive reranking above this many pairs needs --force
MAX_DEPTH = 100_000  # --rerank-depth's cap (as --topk's): deeper lists are 'all' (with its pair budget)
DEFAULT_DEPTH = 100  # when --rerank-depth is left out (a ranker may set ``rerank_depth``)
RUN_PREFIX = "run:"
FIRST_PREFIX = "first."  # --set first.key=value: an option of the first-stage ranker
DROPPED = "-dropped"
CACHE_VERSION = 1


@dataclass(frozen=True)
class RerankPlan:
    """``--rerank-from`` / ``--rerank-depth`` resolved once (part of the ``RunPlan``)."""

    source: str  # as given: a ranker name or run:PATH
    depth: int | None  # None: exhaustive ('all')
    ranker: str | None = None  # the first-stage ranker (None: a run file)
    ranker_cls: type | None = None
    ranker_config: Any = None
    run_file: Path | None = None
    force: bool = False
    pair_budget: int = PAIR_BUDGET

    @property
    def stage_name(self) -> str:
        return self.ranker if self.ranker is not None else Path(self.run_file or "").name

    @property
    def tag(self) -> str:
        """How a row names the protocol: ``bm25@100``."""
        return f"{self.stage_name}@{'all' if self.depth is None else self.depth}"


def parse_depth(value: Any, default: int) -> int | None:
    """``--rerank-depth``: a whole number >= 1, or 'all' (None)."""
    if value is None:
        return default
    if isinstance(value, str) and value.strip().lower() == "all":
        return None
    try:
        text = str(value).strip()
        if text.isascii() and text.isdigit() and len(text) > 20:
            raise RBenchError(f"--rerank-depth must be at most {MAX_DEPTH:,} (or 'all'), got a {len(text):,}-digit number")
        depth = int(text) if not isinstance(value, bool) and text.isascii() else None
    except ValueError:
        depth = None
    if depth is None or depth < 1:
        raise RBenchError(f"--rerank-depth must be a whole number >= 1 or 'all', got {value!r}")
    if depth > MAX_DEPTH:  # the (queries, depth) lists are allocated before the pool's size caps them
        raise RBenchError(f"--rerank-depth must be at most {MAX_DEPTH:,} (or 'all'), got {depth:,}")
    return depth


def make_rerank_plan(rerank_from: str | None, rerank_depth: Any, first_sets: dict[str, str], ranker_cls: type,
                     domain: str, force: bool = False, pair_budget: int = PAIR_BUDGET) -> RerankPlan | None:
    """Resolve the rerank options (None: an ordinary run). Unknown rankers, missing run files and
    bad depths fail here, before any data is loaded."""
    from rbench.rankers import available_rankers, load_ranker_class, ranker_config

    if rerank_from is None:
        if rerank_depth is not None:
            raise RBenchError("--rerank-depth needs --rerank-from (the first-stage ranker or run:PATH)")
        if first_sets:
            raise RBenchError(f"--set {next(iter(first_sets))}=... sets a first-stage option: it needs --rerank-from")
        return None
    depth = parse_depth(rerank_depth, int(getattr(ranker_cls, "rerank_depth", DEFAULT_DEPTH)))
    if rerank_from.startswith(RUN_PREFIX):
        path = Path(rerank_from[len(RUN_PREFIX):]).expanduser()
        if not path.exists() and not path.is_symlink():
            raise RBenchError(f"--rerank-from {rerank_from}: no such run file")
        try:  # a regular file only: a FIFO or a device (/dev/zero) would hang or never end
            require_regular(path)
        except DataError as exc:
            raise RBenchError(f"--rerank-from {rerank_from}: {exc.reason}") from None
        if first_sets:
            raise RBenchError("--set first.* sets a first-stage ranker's option; a run file has none")
        return RerankPlan(rerank_from, depth, run_file=path, force=force, pair_budget=pair_budget)
    names = available_rankers()
    if rerank_from not in names:
        raise unknown("--rerank-from ranker", rerank_from, [*names, "run:PATH"])
    cls = load_ranker_class(rerank_from)
    domains = getattr(cls, "domains", None)
    if domains and domain not in domains:
        raise RBenchError(f"first-stage ranker {rerank_from!r} does not apply to {domain} tasks "
                          f"(it applies to: {', '.join(domains)})")
    return RerankPlan(rerank_from, depth, ranker=rerank_from, ranker_cls=cls,
                      ranker_config=ranker_config(cls, first_sets, rerank_from), force=force, pair_budget=pair_budget)


def identity(rp: RerankPlan, context: Any = None, sha256: str = "") -> dict[str, Any]:
    """The rerank spec as the run's config hash sees it (so a rerank run never shares a plain
    run's RunRecord file)."""
    out: dict[str, Any] = {"from": rp.stage_name, "depth": "all" if rp.depth is None else rp.depth}
    if rp.run_file is not None:
        out["run_sha256"] = sha256
    else:
        from rbench.core.config import non_default, plain_config
        from rbench.rankers import default_config

        cfg = rp.ranker_cls(config=rp.ranker_config, context=context).config  # type: ignore[misc]
        diff = non_default(plain_config(cfg), plain_config(default_config(rp.ranker_cls, context)))
        if diff:
            out["first_config"] = diff
    return out


# --------------------------------------------------------------------------------------------
# stage 1
# --------------------------------------------------------------------------------------------


@dataclass
class Stage1:
    """Each query's top-N (pool indices, stage-1 order), every positive's exact stage-1 rank
    (aligned with ``queries.positives.values``) and how many candidates each query ranks."""

    lists: Ragged
    ranks: np.ndarray
    n_ranked: np.ndarray
    info: dict[str, Any]


def _lists_from_topk(idx: np.ndarray) -> Ragged:
    keep = idx >= 0
    offsets = np.zeros(len(idx) + 1, dtype=np.int64)
    np.cumsum(keep.sum(axis=1), out=offsets[1:])
    return Ragged(offsets, idx[keep].astype(np.int64))


def _queries_digest(test: Queries) -> str:
    """The evaluated queries (ids, positives, grades, exclusions, candidate lists) as one hash."""
    h = hashlib.sha256(json.dumps(np.asarray(test.ids).astype(str).tolist()).encode())
    parts = [test.positives.offsets, test.positives.values, test.grades.values]
    if test.exclude is not None:
        parts += [test.exclude.offsets, test.exclude.values]
    if test.candidates is not None:
        parts.append(test.candidates)
    for part in parts:
        h.update(np.ascontiguousarray(part).tobytes())
    return h.hexdigest()


def cache_key(name: str, version: str, config: Any, data: TaskData, variant: str, depth: int, seed: int) -> str:
    from rbench.core.config import plain_config

    payload = {"v": CACHE_VERSION, "name": name, "version": str(version), "config": plain_config(config),
               "fingerprint": data.fingerprint, "variant": variant, "depth": depth, "seed": seed,
               "queries": _queries_digest(data.test),
               # a transfer's stage 1 is fitted on its source: that data counts too
               **({"source": data.info.get("source_fingerprint")} if data.train_spec is not None else {})}
    return short_hash(payload, 24)


def _save(path: Path, st: Stage1) -> None:
    buf = io.BytesIO()
    np.savez(buf, offsets=st.lists.offsets, values=st.lists.values, ranks=st.ranks, n_ranked=st.n_ranked,
             info=np.array(json.dumps(st.info, default=str)))
    atomic_write_bytes(path, buf.getvalue())


def _load(path: Path, n_pos: int) -> Stage1 | None:
    try:
        with np.load(path, allow_pickle=False) as z:
            st = Stage1(Ragged(z["offsets"], z["values"]), z["ranks"], z["n_ranked"], json.loads(str(z["info"])))
    except Exception as exc:  # a damaged cache entry is recomputed, never trusted
        warnings.warn(f"rerank cache {path} unreadable ({type(exc).__name__}): recomputing stage 1", stacklevel=2)
        return None
    return st if len(st.ranks) == n_pos else None


def _forget_old_cache() -> None:
    """Remove the stage-1 files rbench versions before issue 40 wrote inside the rankers' cache
    folder (``cache_dir()/rerank``): they hold positives' ranks, which no ranker may find there."""
    old = paths.cache_dir("rerank")
    if not old.is_dir():
        return
    for f in old.glob("*.npz"):
        f.unlink(missing_ok=True)
    try:
        old.rmdir()
    except OSError:  # something else lives there: left alone
        pass




def _n_ranked(test: Queries, pool: Pool) -> np.ndarray:
    """Candidates each query ranks: its list (or the pool) minus its exclusions."""
    n = len(test)
    sizes = np.full(n, len(pool), dtype=np.int64) if test.candidates is None \
        else np.full(n, test.candidates.shape[1], dtype=np.int64)
    if test.exclude is not None:
        for i in range(n):
            ex = np.unique(test.exclude[i])
            sizes[i] -= len(ex) if test.candidates is None else int(np.isin(test.candidates[i], ex).sum())
    return sizes


def read_run_file(path: Path, data: TaskData, depth: int, batch_size: int = DEFAULTS.batch_size,
                  chunk_size: int = DEFAULTS.chunk_size) -> Stage1:
    """Stage 1 from a TREC run file (see the module docstring for the order and the missing
    candidates), read by the one reader of run files (``rbench.engine.runfile.read_run``)."""
    from rbench.core.hashing import file_sha256
    from rbench.engine.runfile import read_run

    test, pool = data.test, data.pool
    row_of = {str(q): i for i, q in enumerate(test.ids)}
    per = read_run(path, test.ids, pool.ids, test.candidates, test.exclude)
    lists = Ragged.from_rows([list(p) for p in per])
    scores = {(i, d): s for i, p in enumerate(per) for d, s in p.items()}

    def file_scores(batch: Queries, cand: np.ndarray) -> np.ndarray:
        rows = [row_of[str(q)] for q in batch.ids]
        return np.array([[scores[(r, int(d))] for d in c] for r, c in zip(rows, cand)], dtype=np.float64)

    ranks, top_idx, _ = rank_lists(None, file_scores, test, pool, lists, depth, batch_size, chunk_size)
    n_ranked = _n_ranked(test, pool)
    # positives missing from the file: the last positions, in the engine's tie order
    rows = test.positives.row_ids()
    for i in np.unique(rows[ranks == 0]):
        flat = np.flatnonzero((rows == i) & (ranks == 0))
        order = np.lexsort((-test.positives.values[flat], test.grades.values[flat]))
        ranks[flat[order]] = n_ranked[i] - len(flat) + 1 + np.arange(len(flat))
    info = {"first_stage": {"run_file": str(path), "sha256": file_sha256(path)}, "cached": False,
            "run_file_queries": int(sum(1 for p in per if p))}
    return Stage1(_lists_from_topk(top_idx), ranks, n_ranked, info)


# --------------------------------------------------------------------------------------------
# ranking per-query lists through the engine
# --------------------------------------------------------------------------------------------


def rank_lists(ranker: Any, scorer: Any, test: Queries, pool: Pool, lists: Ragged, topk: int, batch_size: int,
               chunk_size: int, progress: Any = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rank each query's own list (``lists``, ragged) through the engine's per-query candidate
    path: the rank of every positive inside its list (0 for a positive outside it; aligned with
    ``test.positives.values``) and each query's top-``topk`` of its list (indices, scores; -1/-inf
    padded). Queries are grouped by list length (no padding); a query whose list holds none of its
    positives is ranked without any (``unlabelled_rows``): its list is scored like every other,
    and the ranker sees no labels either way."""
    n = len(test)
    ranks = np.zeros(len(test.positives.values), dtype=np.int64)
    top_idx = np.full((n, topk), -1, dtype=np.int64)
    top_val = np.full((n, topk), -np.inf, dtype=np.float64)
    lengths = lists.lengths()
    for length in np.unique(lengths[lengths > 0]):
        rows = np.flatnonzero(lengths == length)
        cand = lists.values[lists.offsets[rows][:, None] + np.arange(length)]
        pos_rows, grade_rows, where = [], [], []
        for j, i in enumerate(rows):
            pos, grades = test.positives[int(i)], test.grades[int(i)]
            inside = np.isin(pos, cand[j])
            pos_rows.append(pos[inside])
            grade_rows.append(grades[inside])
            where.append(test.positives.offsets[i] + np.flatnonzero(inside))
        sub = dataclasses.replace(test.take(rows), positives=Ragged.from_rows(pos_rows),
                                  grades=Ragged.from_rows(grade_rows, dtype=np.float64), candidates=cand, exclude=None)
        res = scan(ranker, sub, pool, batch_size=batch_size, chunk_size=chunk_size, topk=topk,
                   scorer=scorer, progress=progress, unlabelled_rows=True)
        flat = np.concatenate(where).astype(np.int64)
        ranks[flat] = res.ranks.values
        w = res.topk_index.shape[1]
        top_idx[rows, :w], top_val[rows, :w] = res.topk_index, res.topk_score
    return ranks, top_idx, top_val


# --------------------------------------------------------------------------------------------
# the protocol
# --------------------------------------------------------------------------------------------


def combine(test: Queries, st: Stage1, stage2_ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Final ranks (exact, full pool) and which positives were inside the top-N."""
    rows = test.positives.row_ids()
    inside = np.zeros(len(rows), dtype=bool)
    for i in range(len(test)):
        a, b = test.positives.offsets[i], test.positives.offsets[i + 1]
        inside[a:b] = np.isin(test.positives.values[a:b], st.lists[i])
    final = st.ranks.astype(np.int64).copy()
    final[inside] = stage2_ranks[inside]
    # a positive outside the top-N keeps its stage-1 rank, plus the top-N positives stage 1 had
    # tied with it and placed after it (they now sit in the top-N, before it)
    for i in np.unique(rows[~inside]):
        sel = rows == i
        if not (inside & sel).any():
            continue
        r1_in = st.ranks[sel & inside]
        for p in np.flatnonzero(sel & ~inside):
            final[p] = st.ranks[p] + int((r1_in > st.ranks[p]).sum())
    return final, inside


# --------------------------------------------------------------------------------------------
# the strategy
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TwoStage:
    """``--rerank-from``: stage 1 (``first``, another strategy, fitted and scored here; or the
    run file of ``rerank``), then the fitted ranker R over each query's top-N, combined into exact
    full-pool ranks (see the module docstring). ``first`` is None for a run file or 'all'."""

    rerank: RerankPlan
    first: Strategy | None
    scan: Scan
    variant: str = "original"  # the variant's label (the stage-1 cache key)
    seed: int = DEFAULTS.seed

    def score(self, ranker: Any, data: TaskData, job: Job) -> Scored:
        """The final result (its top-k is R's order of the top-N, with R's scores), the record's
        ``rerank`` entry and the tail-dropped per-query values (``<metric>-dropped``)."""
        rp = self.rerank
        if rp.depth is None:
            return self._exhaustive(ranker, data, job)
        test = data.test
        t0 = time.perf_counter()
        st = self.first_stage(data, job)
        first_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        scorer, _ = make_scorer(ranker, data.pool)
        index_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        tick = job.progress(f"{job.name} reranking {rp.tag}", None)
        r2, top_idx, top_val = rank_lists(ranker, scorer, test, data.pool, st.lists, rp.depth, self.scan.batch_size,
                                          self.scan.chunk_size, progress=tick)
        score_s = time.perf_counter() - t0
        final, inside = combine(test, st, r2)
        top_idx, top_val = _widen(top_idx, top_val, job.topk, rp.depth)
        result = EvalResult(ranks=Ragged(test.positives.offsets.copy(), final), topk_index=top_idx,
                            topk_score=top_val, n_ranked=st.n_ranked.copy(),
                            timings={"index_s": index_s, "score_s": score_s,
                                     "per_query_ms": 1000.0 * score_s / max(len(test), 1)})
        info = {**_info(rp, test, st, inside, first_s), **self._against_first(test, st, final, job.measures)}
        return Scored(result, rerank=info, dropped=_dropped(test, final, inside))

    def _exhaustive(self, ranker: Any, data: TaskData, job: Job) -> Scored:
        rp = self.rerank
        result, pairs = exhaustive(ranker, data, job, self.scan, rp.pair_budget, rp.force)
        first = ({"run_file": str(rp.run_file)} if rp.run_file is not None else
                 {"name": rp.ranker, "version": str(getattr(rp.ranker_cls, "version", "")),
                  "config": rp.ranker_config})
        return Scored(result, rerank={"first_stage": first, "depth": "all", "pairs_scored": int(pairs),
                                      "first_stage_recall@depth": 1.0, "label": rp.tag})

    def first_stage(self, data: TaskData, job: Job) -> Stage1:
        """Stage 1: from the cache, by running (fitting, then scoring) its ranker, or from its
        run file."""
        rp = self.rerank
        if rp.run_file is not None:
            return read_run_file(rp.run_file, data, rp.depth or 0, self.scan.batch_size, self.scan.chunk_size)
        ranker = rp.ranker_cls(config=rp.ranker_config, context=job.context)  # type: ignore[misc]
        version = str(getattr(ranker, "version", ""))
        key = cache_key(str(rp.ranker), version, ranker.config, data, self.variant, int(rp.depth or 0), self.seed)
        # the harness's folder, not the rankers' (the file holds every positive's stage-1 rank: those
        # outside the top-N cannot be recomputed from it without scanning the pool again)
        _forget_old_cache()
        path = paths.harness_dir("rerank") / f"{rp.ranker}-{key}.npz"
        first = {"name": rp.ranker, "version": version, "config": ranker.config}
        st = _load(path, len(data.test.positives.values)) if path.is_file() else None
        if st is not None:
            st.info = {**st.info, "first_stage": first, "cached": True}
            return st
        st = self._run_first(ranker, data, job)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            _save(path, st)
        except OSError as exc:
            warnings.warn(f"stage 1 not cached ({exc})", stacklevel=2)
        st.info = {**st.info, "first_stage": first, "cached": False}
        return st

    def _run_first(self, ranker: Any, data: TaskData, job: Job) -> Stage1:
        """Fit the stage-1 ranker (on the data without the test labels) and score it with its
        own strategy, keeping each query's top-N."""
        rp = self.rerank
        assert self.first is not None and rp.depth is not None
        view = data.for_fit()  # without the test labels, made before the timer
        t0 = time.perf_counter()
        step = job.progress(f"fitting {rp.ranker} (stage 1)", 1)
        ranker.fit(view)
        step(1)
        fit_s = time.perf_counter() - t0
        stage = Job(name=str(rp.ranker), topk=rp.depth, context=job.context, progress=job.progress)
        result = self.first.score(ranker, data, stage).result
        return Stage1(_lists_from_topk(result.topk_index), result.ranks.values.astype(np.int64),
                      result.n_ranked.copy(),
                      {"fit_s": round(fit_s, 4), "score_s": round(result.timings.get("score_s", 0.0), 4),
                       "index_s": round(result.timings.get("index_s", 0.0), 4)})

    def _against_first(self, test: Queries, st: Stage1, final: np.ndarray,
                       measures: tuple[str, ...]) -> dict[str, Any]:
        """Stage 1's own metrics on the same queries (its exact full-pool ranks) and, per measure,
        the rerank's mean change with a paired randomization test's p (the run's seed): a reader
        sees whether the rerank changed anything without running stage 1 alone."""
        names = measures or MEASURES
        offsets = test.positives.offsets
        first = per_query(Ragged(offsets.copy(), st.ranks.astype(np.int64)), test.grades, names)
        after = per_query(Ragged(offsets.copy(), final), test.grades, names)
        paired = {m: {"delta": float(np.mean(after[m] - first[m])) if len(test) else 0.0,
                      "p": float(p_value(after[m], first[m], "randomization", seed=self.seed))} for m in names}
        return {"first_stage_metrics": aggregate(first), "vs_first_stage": paired}


def _widen(top_idx: np.ndarray, top_val: np.ndarray, k: int, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """R's top-N as the run's top-``k``: cut, or padded with -1 / -inf past the depth."""
    if k <= depth:
        return top_idx[:, :k], top_val[:, :k]
    pad = k - depth
    return (np.concatenate([top_idx, np.full((len(top_idx), pad), -1, np.int64)], axis=1),
            np.concatenate([top_val, np.full((len(top_val), pad), -np.inf)], axis=1))


def _dropped(test: Queries, final: np.ndarray, inside: np.ndarray) -> dict[str, np.ndarray]:
    """The values BEIR, MTEB and rank_llm report: a positive below the depth is not retrieved."""
    dropped_ranks = np.where(inside, final, np.inf)
    dropped = per_query(Ragged(test.positives.offsets.copy(), dropped_ranks), test.grades, MEASURES)
    return {f"{m}{DROPPED}": v for m, v in dropped.items()}


def _info(rp: RerankPlan, test: Queries, st: Stage1, inside: np.ndarray, first_s: float) -> dict[str, Any]:
    """The record's ``rerank`` entry of a depth-N run (the stage-1 comparison is added beside it)."""
    lengths = test.positives.lengths()
    hits = np.add.reduceat(inside.astype(np.float64), test.positives.offsets[:-1]) if len(inside) else np.zeros(0)
    recall = float(np.mean(hits / np.maximum(lengths, 1))) if len(test) else 0.0
    return {"first_stage": st.info["first_stage"], "depth": rp.depth,
            "pairs_scored": int(st.lists.lengths().sum()), "first_stage_recall@depth": recall,
            "label": rp.tag, "cached": bool(st.info.get("cached")), "first_stage_s": round(first_s, 4),
            "positives_outside": int((~inside).sum()),
            "dropped_metrics": f"<metric>{DROPPED}: positives below depth {rp.depth} count as not retrieved "
                               "(as BEIR/MTEB/rank_llm report); the plain metrics keep their exact stage-1 ranks",
            "first_stage_timings": {k2: v for k2, v in st.info.items() if k2 in ("fit_s", "score_s", "index_s")},
            **({"run_file_queries": st.info["run_file_queries"]} if "run_file_queries" in st.info else {})}
