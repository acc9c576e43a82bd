"""LLM routing (Routing-Balance, RBench-Small) from GraphRouter's ``router_data.csv``.

Each query was answered by every candidate LLM; a row holds (task_id, query, llm, effect, cost)
(extra columns are ignored). Ranking the LLMs for a query is scored against the one that
maximises GraphRouter's scenario objective ``w_perf * effect - w_cost * cost``.

Choices written down:

1. Scenarios (``--set task.scenario=``): ``balance`` 0.5/0.5 (the paper's task), ``performance``
   1.0/0.0, ``cost`` 0.2/0.8, exactly GraphRouter's "Balance", "Performance First" and "Cost First".
   The issue's "performance (w=1.0)" and "cost (w=0.2)" name the performance weight; the cost
   weight is 1 - w.
2. Cost is min-max normalised within each task_id over all of its rows, as GraphRouter's data
   construction does ("Normalize cost according to task"); a task whose costs are all equal gets
   0. ``cost_norm=query`` (within each query's rows), ``global`` (all rows) and ``none`` (raw; use
   it when the file's cost is already normalised and must be kept as is) are options. Already
   normalised files (GraphRouter's released CSV) are unchanged by ``task`` normalisation when
   each task spans [0, 1].
3. Ties in the objective (equal within 1e-12): ``ties=first`` (default) keeps the first tied LLM
   in candidate order, which is what GraphRouter's ``np.argmax`` label does; ``ties=all`` makes
   every tied LLM a positive (grade 1). The number of tied queries is reported in ``info``;
   under ``performance`` with 0/1 effects ties are common and ``ties=all`` is the fairer choice.
4. Candidates = the distinct LLMs. Their order (and candidate ids) follows the description file
   when one is given (GraphRouter orders LLMs by its description JSON), else first appearance in
   the CSV. Candidate text = ``"<name>: <feature>"`` from the description file
   (``candidate_models.json`` or GraphRouter's ``LLM_Descriptions.json``: name -> {"feature": ...}),
   else the name. Every LLM of the CSV must have a description when the file is present. This
   order is kept (``assemble``'s ``pool_order="given"``, not the hashed order of the other
   families): it is one list of LLMs, the same for every query (each query is answered by every
   LLM), so a candidate's position says which LLM it is, as its id does, and nothing about which
   query it answers or which LLM is best for that query.
5. A query is a (task_id, query) pair. Each query's candidate list (``Queries.candidates``) is the
   LLMs with a row for it, in candidate order (so every list is the same and a column names an
   LLM, never the query's positive); all queries must have the same number (else a
   DataError naming the first query that differs), and an LLM twice for one query is an error.
   Query ids: the ``query_idx`` (or ``query_id``) column when it is one-to-one with queries, else
   ``q`` + 12 hex of sha1(task_id, query).
6. Query text = the query; the prompt wraps it in the paper's routing template. Split 8:1:1 by
   query within each task_id (GraphRouter also splits per task), seeded.
7. Training signal for trainable routers (``RoutingOutcomes``): the train and valid splits carry,
   in ``Queries.meta["routing_outcomes"]``, every query's task_id and, for each LLM of its
   candidate list (same column order), the raw effect and the cost normalised as in 2., plus the
   scenario weights; ``routing_outcomes(queries)`` reads it back typed and aligned by query id
   (so a ``take`` of the split still lines up). The test split never carries them (nor its task
   ids): a router learns from train, selects on valid, and sees only test texts. The task
   fingerprint does not include them (they are derived from the same rows), so records made
   before this field existed keep their fingerprint.
"""

from __future__ import annotations

import csv
import hashlib
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from rbench.api import Pool, Queries, RemoteFile, Source, TaskData, TaskSpec
from rbench.core import paths
from rbench.core.errors import DataError, RBenchError, did_you_mean
from rbench.core.inputs import read_json, text_reader
from rbench.core.settings import DEFAULT_SEED
from rbench.tasks.building import QueryTable, assemble, locate, not_present, split_labels
from rbench.tasks.family import TaskFamily

WEIGHTS: dict[str, tuple[float, float]] = {"balance": (0.5, 0.5), "performance": (1.0, 0.0), "cost": (0.2, 0.8)}
REQUIRED = ("task_id", "query", "llm", "effect", "cost")
DESCRIPTION_FILES = ("candidate_models.json", "LLM_Descriptions.json", "llm_descriptions.json")
TIE_ATOL = 1e-12


@dataclass
class RoutingOptions:
    """Routing task options (``--set task.key=value``)."""

    scenario: Literal["balance", "performance", "cost"] = "balance"
    cost_norm: Literal["task", "query", "global", "none"] = "task"
    ties: Literal["first", "all"] = "first"
    descriptions: bool = True  # use the LLM description file when present
    split: Literal["8:1:1", "test"] = "8:1:1"  # "test": every query is a test query (zero-shot eval)


def _fingerprint_text(opts: RoutingOptions) -> str:
    """The options' part of the task fingerprint. ``split`` joined the options after records
    existed: at its default it is left out, so those records keep their fingerprint."""
    text = (f"RoutingOptions(scenario={opts.scenario!r}, cost_norm={opts.cost_norm!r}, ties={opts.ties!r}, "
            f"descriptions={opts.descriptions!r})")
    return text if opts.split == "8:1:1" else f"{text[:-1]}, split={opts.split!r})"


# ------------------------------------------------------------------------------------------
# files
# ------------------------------------------------------------------------------------------


def _csv_file(d: Path) -> Path | None:
    if (d / "router_data.csv").is_file():
        return d / "router_data.csv"
    found = sorted(p for p in d.glob("*.csv") if p.is_file())
    return found[0] if len(found) == 1 else None


def _descriptions_file(d: Path) -> Path | None:
    return next((d / n for n in DESCRIPTION_FILES if (d / n).is_file()), None)


def _data_dir(spec: TaskSpec) -> Path | None:
    return locate(paths.raw_dir(spec.name), lambda p: _csv_file(p) is not None)


def data_status(spec: TaskSpec) -> tuple[bool, str]:
    d = _data_dir(spec)
    if d is None:
        return not_present(spec, paths.raw_dir(spec.name))
    desc = _descriptions_file(d)
    csv_path = _csv_file(d)
    assert csv_path is not None
    return True, f"{csv_path.name}{' + ' + desc.name if desc else ' (no LLM descriptions)'} in {d}"


# ------------------------------------------------------------------------------------------
# reading
# ------------------------------------------------------------------------------------------


@dataclass
class RouterRows:
    task_ids: list[str]
    queries: list[str]
    llms: list[str]
    effect: np.ndarray
    cost: np.ndarray
    lines: np.ndarray  # first file line of each record
    query_idx: list[str] | None


def _number(raw: str, path: Path, line: int, field: str) -> float:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise DataError(f"expected a number, got {raw!r}", path, line, field) from None
    if not math.isfinite(value):
        raise DataError(f"expected a finite number, got {raw!r}", path, line, field)
    return value


def read_router_csv(path: Path) -> RouterRows:
    """csv-module read (records may span lines: responses hold newlines) with exact line numbers."""
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    out = RouterRows([], [], [], np.zeros(0), np.zeros(0), np.zeros(0, dtype=np.int64), None)
    effect: list[float] = []
    cost: list[float] = []
    lines: list[int] = []
    qidx: list[str] = []
    with text_reader(path) as fh:  # a regular file only (a FIFO named *.csv would block)
        reader = csv.reader(fh)
        try:
            header = next(reader)
        except StopIteration:
            raise DataError("empty file (expected a header with task_id, query, llm, effect, cost)", path, 1) from None
        header = [h.strip().lstrip("\ufeff") for h in header]
        col = {h: i for i, h in enumerate(header)}
        for name in REQUIRED:
            if name not in col:
                raise DataError(f"missing column{did_you_mean(name, header)}; header has {', '.join(header)}",
                                path, 1, name)
        idx_col = next((c for c in ("query_idx", "query_id") if c in col), None)
        width = len(header)
        prev = reader.line_num
        try:
            for record in reader:
                start, prev = prev + 1, reader.line_num
                if not record or (len(record) == 1 and not record[0].strip()):
                    continue
                if len(record) != width:
                    raise DataError(f"expected {width} comma-separated fields, got {len(record)}", path, start,
                                    header[min(len(record), width - 1)])
                values = {name: record[col[name]] for name in REQUIRED}
                for name in ("task_id", "query", "llm"):
                    if not values[name].strip():
                        raise DataError("empty value", path, start, name)
                out.task_ids.append(values["task_id"])
                out.queries.append(values["query"])
                out.llms.append(values["llm"].strip())
                effect.append(_number(values["effect"], path, start, "effect"))
                cost.append(_number(values["cost"], path, start, "cost"))
                lines.append(start)
                if idx_col:
                    qidx.append(record[col[idx_col]].strip())
        except csv.Error as exc:
            raise DataError(f"malformed CSV: {exc}", path, reader.line_num) from None
    if not lines:
        raise DataError("no rows", path)
    out.effect, out.cost = np.asarray(effect), np.asarray(cost)
    out.lines = np.asarray(lines, dtype=np.int64)
    out.query_idx = qidx if idx_col else None
    return out


def read_descriptions(path: Path) -> dict[str, str]:
    """``candidate_models.json``: LLM name -> its one-line description (``rbench.core.inputs``: a
    regular file within the size, depth and digit limits)."""
    raw = read_json(path, "an LLM description file")
    if not isinstance(raw, dict):
        raise DataError("expected an object {llm name: {\"feature\": description, ...}}", path)
    out = {}
    for name, entry in raw.items():
        feature = entry.get("feature") if isinstance(entry, dict) else None
        if not isinstance(feature, str) or not feature.strip():
            raise DataError(f"LLM {name!r} has no 'feature' description string", path, None, f"{name}.feature")
        out[str(name)] = " ".join(feature.split())
    return out


# ------------------------------------------------------------------------------------------
# the protocol
# ------------------------------------------------------------------------------------------


def normalise_cost(cost: np.ndarray, groups: np.ndarray | None) -> np.ndarray:
    """Min-max within each group (one group when None); a constant group maps to 0."""
    if groups is None:
        groups = np.zeros(len(cost), dtype=np.int64)
    n = int(groups.max()) + 1
    lo = np.full(n, np.inf)
    hi = np.full(n, -np.inf)
    np.minimum.at(lo, groups, cost)
    np.maximum.at(hi, groups, cost)
    span = (hi - lo)[groups]
    return np.where(span > 0, (cost - lo[groups]) / np.where(span > 0, span, 1.0), 0.0)


def _codes(values: list[Any]) -> tuple[np.ndarray, list[Any]]:
    """Codes in order of first appearance."""
    index: dict[Any, int] = {}
    codes = np.fromiter((index.setdefault(v, len(index)) for v in values), dtype=np.int64, count=len(values))
    return codes, list(index)


def load_routing(spec: TaskSpec, options: RoutingOptions | None, seed: int = DEFAULT_SEED) -> TaskData:
    opts = options or RoutingOptions()
    d = _data_dir(spec)
    if d is None:
        raise DataError(f"{spec.name}: no router_data.csv in {paths.raw_dir(spec.name)}; {spec.how_to_get}")
    csv_path = _csv_file(d)
    assert csv_path is not None
    rows = read_router_csv(csv_path)

    # candidates: description-file order when given, else first appearance
    llm_codes, llms_seen = _codes(rows.llms)
    desc_path = _descriptions_file(d) if opts.descriptions else None
    descriptions = read_descriptions(desc_path) if desc_path else {}
    if desc_path:
        for name in llms_seen:
            if name not in descriptions:
                raise DataError(f"no description for LLM {name!r} of {csv_path.name}"
                                f"{did_you_mean(name, descriptions)}", desc_path, None, name)
        names = [n for n in descriptions if n in set(llms_seen)]
    else:
        names = llms_seen
    position = {n: i for i, n in enumerate(names)}
    llm_pool = np.asarray([position[n] for n in llms_seen], dtype=np.int64)[llm_codes]
    texts = [f"{n}: {descriptions[n]}" if n in descriptions else n for n in names]
    pool = Pool(ids=np.asarray(names, dtype=object), texts=np.asarray(texts, dtype=object), name=spec.name)

    # queries = (task_id, query) pairs
    qcodes, qkeys = _codes(list(zip(rows.task_ids, rows.queries)))
    nq = len(qkeys)
    task_codes, _ = _codes(rows.task_ids)
    cost = {"task": lambda: normalise_cost(rows.cost, task_codes),
            "query": lambda: normalise_cost(rows.cost, qcodes),
            "global": lambda: normalise_cost(rows.cost, None),
            "none": lambda: rows.cost}[opts.cost_norm]()
    w_perf, w_cost = WEIGHTS[opts.scenario]
    objective = w_perf * rows.effect - w_cost * cost

    order = np.lexsort((llm_pool, qcodes))  # rows grouped by query, candidates in pool order
    counts = np.bincount(qcodes, minlength=nq)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    m = int(counts[0])
    if (counts != m).any():
        q = int(np.flatnonzero(counts != m)[0])
        line = int(rows.lines[order[offsets[q]]])
        raise DataError(f"query {qkeys[q][1][:60]!r} (task {qkeys[q][0]!r}) has {counts[q]} LLM rows but the "
                        f"first query has {m}: every query needs the same candidate LLMs", csv_path, line, "llm")
    cand = llm_pool[order].reshape(nq, m)
    dup = np.flatnonzero((np.diff(np.sort(cand, axis=1), axis=1) == 0).any(axis=1))
    if len(dup):
        q = int(dup[0])
        lines_q = rows.lines[order[offsets[q] : offsets[q + 1]]]
        raise DataError(f"an LLM has two rows for query {qkeys[q][1][:60]!r} (task {qkeys[q][0]!r})",
                        csv_path, int(lines_q.max()), "llm")
    obj = objective[order].reshape(nq, m)
    best = obj.max(axis=1, keepdims=True)
    tied = np.isclose(obj, best, rtol=0.0, atol=TIE_ATOL)
    n_tied = int((tied.sum(axis=1) > 1).sum())
    if opts.ties == "first":
        tied = tied & (np.cumsum(tied, axis=1) == 1)
    positives = [cand[q][tied[q]] for q in range(nq)]

    # query ids
    if rows.query_idx is not None:
        ids_by_q: list[str] = [""] * nq
        one_to_one = True
        for code, qi in zip(qcodes, rows.query_idx):
            if ids_by_q[code] and ids_by_q[code] != qi:
                one_to_one = False
                break
            ids_by_q[code] = qi
        one_to_one = one_to_one and len(set(ids_by_q)) == nq and all(ids_by_q)
    else:
        one_to_one = False
    if not one_to_one:
        ids_by_q = ["q" + hashlib.sha1(f"{t}\x1f{q}".encode()).hexdigest()[:12] for t, q in qkeys]

    canon = np.argsort(np.asarray(ids_by_q, dtype=object).astype(str), kind="stable")
    table = QueryTable(
        ids=np.asarray(ids_by_q, dtype=object)[canon],
        texts=[qkeys[q][1] for q in canon],
        positives=[positives[q].astype(np.int64) for q in canon],
        grades=[np.ones(len(positives[q]), dtype=np.float64) for q in canon],
        candidates=cand[canon],
    )
    strata = np.asarray([qkeys[q][0] for q in canon], dtype=object)
    labels = split_labels(nq, seed, strata=strata, mode=opts.split)
    share = np.bincount(np.concatenate(table.positives), minlength=len(pool))
    info = {"source": str(d), "file": csv_path.name, "descriptions": desc_path.name if desc_path else None,
            "scenario": opts.scenario, "weights": {"performance": w_perf, "cost": w_cost},
            "cost_norm": opts.cost_norm, "ties": opts.ties, "n_queries_with_tied_best": n_tied,
            "n_rows": len(rows.llms), "n_llms": len(pool), "n_tasks": len(set(rows.task_ids)),
            "positives_per_llm": {names[i]: int(c) for i, c in enumerate(share)}, "seed": seed}
    if len(set(table.ids.tolist())) != nq:
        raise RBenchError("internal: query ids are not unique")
    data = assemble(spec, pool, table, labels, info, fingerprint_parts=(_fingerprint_text(opts),), pool_order="given")
    effect_q, cost_q = rows.effect[order].reshape(nq, m)[canon], cost[order].reshape(nq, m)[canon]
    task_q = np.asarray([qkeys[q][0] for q in canon], dtype=object)
    for split, queries in ((0, data.train), (1, data.valid)):  # never the test split (choice 7)
        rows_s = np.flatnonzero(labels == split)
        queries.meta = {**queries.meta, OUTCOMES_KEY: {
            "query_ids": [str(x) for x in table.ids[rows_s]], "task_ids": [str(x) for x in task_q[rows_s]],
            "effect": effect_q[rows_s].tolist(), "cost": cost_q[rows_s].tolist(),
            "scenario": opts.scenario, "weights": [w_perf, w_cost], "cost_norm": opts.cost_norm}}
    return data


# ------------------------------------------------------------------------------------------
# the training signal for routers (choice 7)
# ------------------------------------------------------------------------------------------

OUTCOMES_KEY = "routing_outcomes"


@dataclass(frozen=True)
class RoutingOutcomes:
    """Outcomes of one split: row i is ``queries`` row i, column j is LLM ``candidates[i, j]``."""

    task_ids: np.ndarray  # str (object), (n,)
    effect: np.ndarray  # (n, m) raw effect
    cost: np.ndarray  # (n, m) normalised cost (the task's ``cost_norm``)
    candidates: np.ndarray  # (n, m) pool indices
    w_perf: float
    w_cost: float
    scenario: str

    def objective(self) -> np.ndarray:
        """GraphRouter's scenario objective ``w_perf * effect - w_cost * cost``, (n, m)."""
        return self.w_perf * self.effect - self.w_cost * self.cost

    def best(self) -> np.ndarray:
        """Pool index of each row's best LLM; ties go to the first candidate (the task's
        ``ties=first`` rule and GraphRouter's ``np.argmax`` label)."""
        obj = self.objective()
        tied = np.isclose(obj, obj.max(axis=1, keepdims=True), rtol=0.0, atol=TIE_ATOL)
        return self.candidates[np.arange(len(obj)), tied.argmax(axis=1)]

    def by_pool(self, values: np.ndarray, n_pool: int, fill: float = np.nan) -> np.ndarray:
        """(n, m) values in candidate order -> (n, n_pool) in pool order (``fill`` elsewhere)."""
        out = np.full((len(values), n_pool), fill, dtype=np.float64)
        out[np.arange(len(values))[:, None], self.candidates] = values
        return out


def has_outcomes(queries: Queries) -> bool:
    return OUTCOMES_KEY in (queries.meta or {})


def routing_outcomes(queries: Queries) -> RoutingOutcomes:
    """The outcomes of ``queries`` (a train or valid split of a routing task), aligned by id."""
    raw = (queries.meta or {}).get(OUTCOMES_KEY)
    if raw is None or queries.candidates is None:
        raise RBenchError("this ranker learns from routing outcomes: it needs the train and valid splits of a "
                          "routing task (rbench.tasks.families.routing), which carry them in Queries.meta")
    where = {q: i for i, q in enumerate(raw["query_ids"])}
    try:
        rows = np.fromiter((where[str(q)] for q in queries.ids), dtype=np.int64, count=len(queries))
    except KeyError as exc:
        raise RBenchError(f"query {exc.args[0]!r} has no routing outcomes") from None
    effect = np.asarray(raw["effect"], dtype=np.float64).reshape(len(where), -1)[rows]
    cost = np.asarray(raw["cost"], dtype=np.float64).reshape(len(where), -1)[rows]
    if effect.shape != queries.candidates.shape:
        raise RBenchError(f"routing outcomes have shape {effect.shape}, candidates {queries.candidates.shape}")
    w_perf, w_cost = (float(w) for w in raw["weights"])
    return RoutingOutcomes(task_ids=np.asarray(raw["task_ids"], dtype=object)[rows], effect=effect, cost=cost,
                           candidates=np.asarray(queries.candidates, dtype=np.int64), w_perf=w_perf, w_cost=w_cost,
                           scenario=str(raw["scenario"]))


# GraphRouter's released data: ``router_data.csv`` is on Google Drive (the link in its README; the
# ``drive.usercontent`` form with ``confirm=t`` skips the virus-scan page large files get), the
# LLM descriptions are ``configs/LLM_Descriptions.json`` in its repository, pinned to a commit.
# Neither publishes a checksum: the first sha256 seen is recorded and must hold.
GRAPHROUTER_COMMIT = "0edfb8758d45acd93c8029354867ffb49bb8a97f"
_GRAPHROUTER_DRIVE_ID = "1YYn-BV-5s2amh6mKLqKMR0H__JB-CKU4"
ROUTING_FILES = (
    RemoteFile("router_data.csv",
               (f"https://drive.usercontent.google.com/download?id={_GRAPHROUTER_DRIVE_ID}&export=download&confirm=t",
                f"https://drive.google.com/uc?export=download&confirm=t&id={_GRAPHROUTER_DRIVE_ID}"),
               note="GraphRouter router_data.csv (Google Drive link of its README); no published checksum"),
    RemoteFile("LLM_Descriptions.json",
               (f"https://raw.githubusercontent.com/ulab-uiuc/GraphRouter/{GRAPHROUTER_COMMIT}/configs/"
                "LLM_Descriptions.json",),
               note=f"GraphRouter's LLM descriptions at commit {GRAPHROUTER_COMMIT[:7]}; no published checksum"),
)

SPEC = TaskSpec(
    name="routing-balance",
    title="Routing-Balance",
    scenario="small",
    domain="routing",
    description="LLM routing: rank the candidate LLMs for a query; the positive maximises "
    "0.5*effect - 0.5*normalised cost (GraphRouter's balance scenario).",
    paper_candidates=20,
    paper_queries=1620,
    sources=(Source("GraphRouter router_data.csv", "https://github.com/ulab-uiuc/GraphRouter", "MIT",
                    files=ROUTING_FILES),),
    license="MIT (GraphRouter)",
    how_to_get="rbench data download routing-balance, or rbench data prepare routing-balance --from DIR "
    "(router_data.csv [+ model descriptions])",
    paper_row=2,
)


class RoutingFamily(TaskFamily):
    """LLM routing from GraphRouter's router_data.csv (see the module doc for the protocol)."""

    name = "routing"
    doc = __doc__ or ""

    def specs(self) -> tuple[TaskSpec, ...]:
        return (SPEC,)

    def options_type(self, spec: TaskSpec) -> type:
        return RoutingOptions

    def check(self, spec: TaskSpec) -> tuple[bool, str]:
        return data_status(spec)

    def test_only(self, spec: TaskSpec, options: Any) -> bool:
        return isinstance(options, RoutingOptions) and options.split == "test"

    def load(self, spec: TaskSpec, options: Any, seed: int) -> TaskData:
        return load_routing(spec, options, seed)


FAMILY = RoutingFamily()
