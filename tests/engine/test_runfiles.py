"""Run files: every run writes its top-k as a gzipped TREC run beside the RunRecord (named by its
sha256, which the record holds), and ``rbench data qrels`` writes the task's qrels, so that
ir_measures and ranx reproduce the record's nDCG@10, R@10, R@100 and RR@100 from the two files,
ties included: the file lists rbench's pessimistic order with strictly decreasing scores
(``rbench.engine.runfile``)."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from rbench import rankers as plugins
from rbench.results.record import RUN_SUFFIX, read_record
from rbench.run.runner import RunOptions, run
from tests.helpers import cli
from tests.run.test_end_to_end import all_tasks  # noqa: F401  (fixture: every task's raw files)

ir_measures = pytest.importorskip("ir_measures")


class _EP:
    def __init__(self, obj):
        self.obj = obj

    def load(self):
        return self.obj


class TieFree:
    """Scores from a 64-bit mix of (query id, pool index): no two candidates of a query tie."""

    name, version, config = "tie-free", "1", {}

    def __init__(self, config=None, context=None):
        pass

    def fit(self, task):
        return None

    def index(self, pool):
        return None

    def score(self, queries, candidates):
        q = np.array([int(hashlib.sha256(str(i).encode()).hexdigest()[:12], 16) for i in queries.ids], np.uint64)
        cand = candidates if candidates.ndim == 2 else np.broadcast_to(candidates, (len(queries), len(candidates)))
        with np.errstate(over="ignore"):
            z = cand.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + q[:, None]
            z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            z = z ^ (z >> np.uint64(31))
        return (z >> np.uint64(11)).astype(np.float64) / float(1 << 53)


@pytest.fixture
def tie_free(monkeypatch):
    real = plugins._entry_points
    monkeypatch.setattr(plugins, "_entry_points", lambda: {**real(), "tie-free": _EP(TieFree)})


def _read_run(path: Path) -> list[list[str]]:
    return [line.split() for line in gzip.decompress(path.read_bytes()).decode().splitlines()]


def _check_with_ir_measures(capsys, tmp_path: Path, rec_path: Path, task: str, variant: str = "original",
                            max_queries: int | None = None) -> None:
    rec = read_record(rec_path)
    assert rec.run_file.endswith(RUN_SUFFIX) and rec.run_file.startswith(rec_path.stem + ".")
    run_path = rec_path.with_name(rec.run_file)
    assert hashlib.sha256(run_path.read_bytes()).hexdigest() == rec.run_sha256
    qrels = tmp_path / "qrels.txt"
    code, _, err = cli(capsys, "data", "qrels", task, "--variant", variant, "--output", str(qrels))
    assert code == 0, err
    run_rows = _read_run(run_path)
    assert all(len(r) == 6 and r[1] == "Q0" for r in run_rows)
    run_qids = {r[0] for r in run_rows}
    judged = [line for line in qrels.read_text().splitlines() if line.split()[0] in run_qids]
    assert len(run_qids) == rec.n_queries
    if max_queries:  # a sample: judge only the sampled queries
        qrels.write_text("\n".join(judged) + "\n")
    measures = [ir_measures.parse_measure("nDCG@10"), ir_measures.parse_measure("RR")]
    got = ir_measures.calc_aggregate(measures, ir_measures.read_trec_qrels(str(qrels)),
                                     ir_measures.read_trec_run(str(run_path)))
    assert got[measures[0]] == pytest.approx(rec.metrics["nDCG@10"], abs=1e-9)
    assert got[measures[1]] == pytest.approx(rec.metrics["RR"], abs=1e-9)
    try:  # ranx too, where installed (it is optional)
        import ranx
    except ImportError:
        return
    r = ranx.evaluate(ranx.Qrels.from_file(str(qrels), kind="trec"), ranx.Run.from_file(str(run_path)),
                      ["ndcg@10", "mrr"])
    assert r["ndcg@10"] == pytest.approx(rec.metrics["nDCG@10"], abs=1e-6)


def test_large_task_with_exclusions_round_trips_through_ir_measures(tie_free, capsys, tmp_path):
    # ml-100k: a shared pool with each user's seen items excluded; top-k >= the pool: every positive is inside
    res = tmp_path / "res"
    code, out, err = cli(capsys, "run", "-r", "tie-free", "-t", "ml-100k", "--max-queries", "40", "--topk", "5000",
                         "--results-dir", str(res), "--json", "--quiet")
    assert code == 0, err
    rec_path = next(res.rglob("tie-free*.json"))
    rec = read_record(rec_path)
    run_rows = _read_run(rec_path.with_name(rec.run_file))
    # excluded candidates never appear: each query lists exactly its ranked candidates
    per_q: dict[str, int] = {}
    for r in run_rows:
        per_q[r[0]] = per_q.get(r[0], 0) + 1
    assert rec.task_info["mean_ranked"] == pytest.approx(np.mean(list(per_q.values())))
    assert rec.task_info["mean_ranked"] < rec.task_info["pool_size"]  # something was excluded
    scores = [float(r[4]) for r in run_rows if r[0] == run_rows[0][0]]
    assert scores == sorted(scores, reverse=True) and [int(r[3]) for r in run_rows[: len(scores)]] == \
        list(range(1, len(scores) + 1))
    _check_with_ir_measures(capsys, tmp_path, rec_path, "ml-100k", max_queries=40)


def test_small_scenario_lists_each_querys_own_candidates(all_tasks, tie_free, capsys, tmp_path):  # noqa: F811
    out = run(RunOptions(ranker="tie-free", task="routing-balance", results_dir=tmp_path / "res", topk=1000))
    rows = _read_run(out.path.with_name(out.record.run_file))
    from rbench.tasks.registry import load, resolve

    task = resolve("routing-balance")
    data = load(task, task.options({}), seed=0)
    ids = np.asarray(data.pool.ids).astype(str)
    for i in (0, len(data.test) // 2):
        qid = str(data.test.ids[i])
        listed = [r[2] for r in rows if r[0] == qid]
        assert sorted(listed) == sorted(ids[data.test.candidates[i]].tolist())
    _check_with_ir_measures(capsys, tmp_path, out.path, "routing-balance")


def test_variant_uses_the_variant_pool_ids(all_tasks, tie_free, capsys, tmp_path):  # noqa: F811
    out = run(RunOptions(ranker="tie-free", task="rec-movie", variant="scaled:60", results_dir=tmp_path / "res",
                         topk=100_000))
    assert out.record.task_info["pool_size"] <= 100_000
    _check_with_ir_measures(capsys, tmp_path, out.path, "rec-movie", variant="scaled:60")


def test_default_top100_topk0_and_replacement(tie_free, tmp_path):
    opts = dict(ranker="tie-free", task="ml-100k", max_queries=20, results_dir=tmp_path, overwrite="always")
    first = run(RunOptions(**opts))
    rows = _read_run(first.path.with_name(first.record.run_file))
    assert len(rows) == 20 * 100 and {r[5] for r in rows} == {"tie-free"}
    again = run(RunOptions(**opts))  # deterministic bytes: the same file, nothing left over
    assert again.record.run_file == first.record.run_file
    assert sorted(p.name for p in first.path.parent.glob(f"*{RUN_SUFFIX}")) == [first.record.run_file]
    ten = run(RunOptions(**opts, topk=10))
    assert [p.name for p in ten.path.parent.glob(f"*{RUN_SUFFIX}")] == [ten.record.run_file]
    assert len(_read_run(ten.path.with_name(ten.record.run_file))) == 200
    none = run(RunOptions(**opts, topk=0))
    assert none.record.run_file == "" and not list(none.path.parent.glob(f"*{RUN_SUFFIX}"))
    assert json.loads(none.path.read_text())["run_file"] == ""
    assert none.record.metrics == first.record.metrics == ten.record.metrics  # --topk never changes them
    assert "RR@100" in first.record.metrics


def test_qrels_command(capsys, tmp_path):
    code, out, err = cli(capsys, "data", "qrels", "ml-100k")
    assert code == 0, err
    lines = out.splitlines()
    assert lines and all(len(line.split()) == 4 and line.split()[1] == "0" for line in lines)
    code, _, err = cli(capsys, "data", "qrels", "ml-100k", "--split", "bogus")
    assert code == 2 and "--split" in err
    gz = tmp_path / "q.txt.gz"
    assert cli(capsys, "data", "qrels", "ml-100k", "--split", "valid", "-o", str(gz))[0] == 0
    assert gzip.decompress(gz.read_bytes()).decode().count("\n") > 0


# --------------------------------------------------------------------------------------------
# ties: the run file lists rbench's pessimistic order, and every tool reads the record's values
# --------------------------------------------------------------------------------------------


class TiedPop:
    """Heavy ties, like BM25's zeros: training popularity in a few classes (most candidates 0),
    plus a query-dependent bump on about one candidate in eight, so queries' orders differ."""

    name, version, config = "tied-pop", "1", {}

    def __init__(self, config=None, context=None):
        self._counts: dict[str, float] = {}

    def fit(self, task):
        counts = np.bincount(task.train.positives.values, minlength=len(task.fit_pool))
        self._counts = dict(zip(map(str, task.fit_pool.ids), counts.tolist()))

    def index(self, pool):
        counts = np.array([self._counts.get(str(i), 0) for i in pool.ids], dtype=np.float64)
        self._cls = np.maximum(0.0, np.floor(np.log2(1.0 + counts)) - 4.0)

    def score(self, queries, candidates):
        bump = (TieFree().score(queries, candidates) < 0.125).astype(np.float64)
        return self._cls[candidates] + bump


@pytest.fixture
def tied_pop(monkeypatch):
    real = plugins._entry_points
    monkeypatch.setattr(plugins, "_entry_points", lambda: {**real(), "tied-pop": _EP(TiedPop)})


_RANX = {"nDCG@10": "ndcg@10", "R@10": "recall@10", "R@100": "recall@100", "RR@100": "mrr@100", "RR": "mrr"}


def _cutoffs(topk: int) -> list[str]:
    """The record's measures a run file of depth ``topk`` reproduces (RR without a cutoff only
    when the file holds every candidate: not asked here)."""
    return [m for m, k in (("nDCG@10", 10), ("R@10", 10), ("R@100", 100), ("RR@100", 100)) if topk >= k]


def _reproduced(capsys, tmp_path: Path, rec_path: Path, task: str, topk: int,
                sampled: bool = False) -> dict[str, float]:
    """ir_measures and ranx on the exported run and ``rbench data qrels`` (``sampled``: its lines
    of the run's queries): the record's values."""
    import ranx

    rec = read_record(rec_path)
    run_path = rec_path.with_name(rec.run_file)
    qrels = tmp_path / "qrels.txt"
    code, _, err = cli(capsys, "data", "qrels", task, "--output", str(qrels))
    assert code == 0, err
    rows = _read_run(run_path)
    assert len({r[0] for r in rows}) == rec.n_queries
    if sampled:
        qids = {r[0] for r in rows}
        qrels.write_text("".join(line + "\n" for line in qrels.read_text().splitlines() if line.split()[0] in qids))
    by_q: dict[str, list[list[str]]] = {}
    for r in rows:
        by_q.setdefault(r[0], []).append(r)
    for q_rows in by_q.values():  # lines 1..n, scores strictly decreasing: no tie left to break
        assert [int(r[3]) for r in q_rows] == list(range(1, len(q_rows) + 1)) and len(q_rows) <= topk
        scores = [float(r[4]) for r in q_rows]
        assert all(a > b for a, b in zip(scores, scores[1:]))
    names = _cutoffs(topk)
    got = ir_measures.calc_aggregate([ir_measures.parse_measure(n) for n in names],
                                     ir_measures.read_trec_qrels(str(qrels)), ir_measures.read_trec_run(str(run_path)))
    for n in names:
        assert got[ir_measures.parse_measure(n)] == pytest.approx(rec.metrics[n], abs=1e-9), f"ir_measures {n}"
    r = ranx.evaluate(ranx.Qrels.from_file(str(qrels), kind="trec"), ranx.Run.from_file(str(run_path)),
                      [_RANX[n] for n in names], make_comparable=True)
    r = r if isinstance(r, dict) else {_RANX[names[0]]: r}
    for n in names:
        assert r[_RANX[n]] == pytest.approx(rec.metrics[n], abs=1e-9), f"ranx {n}"
    return {n: rec.metrics[n] for n in names}


def test_tie_heavy_shared_pool_with_exclusions_is_reproduced(tied_pop, capsys, tmp_path):
    # ml-100k: one shared pool, each user's seen items excluded; most candidates tie at 0
    res = tmp_path / "res"
    code, _, err = cli(capsys, "run", "-r", "tied-pop", "-t", "ml-100k", "--results-dir", str(res), "--quiet")
    assert code == 0, err
    rec_path = next(res.rglob("tied-pop*.json"))
    values = _reproduced(capsys, tmp_path, rec_path, "ml-100k", 100)
    assert values["nDCG@10"] > 0 and values["R@100"] > values["R@10"] > 0  # the file has positives to place
    per_q = read_record(rec_path).per_query
    assert per_q is None or "RR@100" in per_q.columns


def test_tie_heavy_per_query_lists_are_reproduced(all_tasks, tied_pop, capsys, tmp_path):  # noqa: F811
    # rec-music: each query its own list of 20; top-10 cuts inside the lists (and their ties)
    for topk in (10, 100):
        out = run(RunOptions(ranker="tied-pop", task="rec-music", results_dir=tmp_path / f"res{topk}", topk=topk))
        values = _reproduced(capsys, tmp_path, out.path, "rec-music", topk)
        assert values["R@10"] > 0


def test_two_stage_run_is_reproduced(tied_pop, capsys, tmp_path):
    # R (tied-pop) reranks BM25's top-100: the file is R's pessimistic order of each list
    out = run(RunOptions(ranker="tied-pop", task="ml-100k", rerank_from="bm25", rerank_depth=100,
                         results_dir=tmp_path / "res", max_queries=300))
    values = _reproduced(capsys, tmp_path, out.path, "ml-100k", 100, sampled=True)
    assert values["R@100"] > values["R@10"] > 0
    # a depth below --topk: the lists end at the depth (positives past it rank by stage 1, whose
    # candidates the run does not keep), so the file reproduces the cutoffs within the depth only
    with pytest.warns(UserWarning, match="a two-stage run's depth below the run file's"):
        out = run(RunOptions(ranker="tied-pop", task="ml-100k", rerank_from="bm25", rerank_depth=20,
                             results_dir=tmp_path / "res20", max_queries=300))
    assert len(_read_run(out.path.with_name(out.record.run_file))) == 300 * 20
    assert _reproduced(capsys, tmp_path, out.path, "ml-100k", 20, sampled=True)["R@10"] > 0


def _ranx_name(measure: str) -> str:
    base, k = measure.split("@")
    return {"nDCG": "ndcg", "R": "recall", "RR": "mrr"}[base] + f"@{k}"


def _tools_per_query(qrels: Path, run_path: Path, names: list[str]) -> tuple[dict, dict]:
    """Per-query values of ``names`` by ir_measures and by ranx, from the two files."""
    import ranx

    irm: dict[str, dict[str, float]] = {n: {} for n in names}
    for m in ir_measures.iter_calc([ir_measures.parse_measure(n) for n in names],
                                   ir_measures.read_trec_qrels(str(qrels)), ir_measures.read_trec_run(str(run_path))):
        irm[str(m.measure)][m.query_id] = m.value
    r = ranx.Run.from_file(str(run_path))
    ranx.evaluate(ranx.Qrels.from_file(str(qrels), kind="trec"), r, [_ranx_name(n) for n in names],
                  make_comparable=True)
    return irm, {n: dict(r.scores[_ranx_name(n)]) for n in names}


@pytest.mark.parametrize("seed", range(4))
def test_tie_heavy_tables_round_trip_at_every_depth(seed, tmp_path):
    """Graded multi-positive queries, most scores 0 and the rest in four values; a shared pool with
    exclusions (even seeds) or per-query lists (odd): at every depth, each positive ranked within it
    is on the line of its rank, and ir_measures and ranx read rbench's per-query values."""
    from rbench.cli.data import qrels_text
    from rbench.engine.metrics import per_query
    from rbench.engine.runfile import run_file_bytes, run_width
    from rbench.engine.scan import scan
    from tests.helpers import TableRanker, make_pool, make_queries

    rng = np.random.default_rng(seed)
    n_q, n_pool, lists = 40, int(rng.integers(60, 160)), seed % 2 == 1
    table = rng.choice([0.0] * 6 + [0.5, 1.0, 1.0, 2.0, 3.0], size=(n_q, n_pool))
    positives, grades, exclude, cands = [], [], [], []
    for _ in range(n_q):
        pos = rng.choice(n_pool, size=int(rng.integers(1, 6)), replace=False)
        positives.append(pos.tolist())
        grades.append(rng.integers(1, 4, size=len(pos)).astype(float).tolist())
        rest = np.setdiff1d(np.arange(n_pool), pos)
        if lists:
            cands.append(rng.permutation(np.concatenate([pos, rng.choice(rest, size=50 - len(pos), replace=False)])))
        else:
            exclude.append(rng.choice(rest, size=int(rng.integers(0, 15)), replace=False).tolist())
    queries = make_queries(positives, grades, exclude=None if lists else exclude,
                           candidates=np.array(cands) if lists else None)
    pool = make_pool(n_pool)
    qrels = tmp_path / "qrels.txt"
    qrels.write_text(qrels_text(queries, pool.ids))
    for topk in (1, 3, 10, 25, 1000):
        res = scan(TableRanker(table), queries, pool, batch_size=7, chunk_size=37,
                   topk=run_width(topk, queries))
        run_path = tmp_path / f"run{topk}.run.gz"
        run_path.write_bytes(run_file_bytes(queries, pool.ids, res, topk, "tag"))
        line_of: dict[tuple[str, str], int] = {}
        for r in _read_run(run_path):
            line_of[(r[0], r[2])] = int(r[3])
        for i, (pos, ranks) in enumerate(zip(queries.positives, res.ranks)):
            for p, rank in zip(pos.tolist(), ranks.tolist()):
                assert line_of.get((f"q{i}", f"d{p}")) == (rank if rank <= topk else None), (topk, i, p)
        names = [f"RR@{topk}", f"R@{topk}", f"nDCG@{topk}"] + (["nDCG@10", "R@10"] if topk > 10 else [])
        ours = per_query(res.ranks, queries.grades, tuple(names))
        irm, rx = _tools_per_query(qrels, run_path, names)
        for n in names:
            for i in range(n_q):
                assert irm[n].get(f"q{i}", 0.0) == pytest.approx(ours[n][i], abs=1e-9), ("ir_measures", topk, n, i)
                assert rx[n].get(f"q{i}", 0.0) == pytest.approx(ours[n][i], abs=1e-9), ("ranx", topk, n, i)


def test_top_k_boundary(tmp_path):
    """A tie group straddling line k = 3. q0: the engine's top 3 (ties by lower pool index) holds
    tied positives ranked 4 and 5 and lacks the tied non-positives d3, d4 that rank 2 and 3. q1: a
    positive ranked 3 needs d3, which the top 3 lacks. q2: a positive ranked 3 (d3) is not in the
    top 3 at all; it ties with its lowest score."""
    from rbench.engine.runfile import pessimistic_lists, run_file_bytes, run_width
    from rbench.engine.scan import scan
    from tests.helpers import TableRanker, make_pool, make_queries

    table = np.array([[5, 3, 3, 3, 3, 1, 0, 0], [5, 3, 3, 3, 0, 0, 0, 0], [5, 3, 3, 3, 0, 0, 0, 0]], dtype=float)
    queries = make_queries([[1, 2, 5], [1, 2], [2, 3]])
    pool = make_pool(8)
    narrow = scan(TableRanker(table), queries, pool, topk=3)
    assert narrow.topk_index.tolist() == [[0, 1, 2]] * 3
    assert narrow.ranks.values.tolist() == [5, 4, 6, 4, 3, 4, 3]

    def listed(res) -> list[list[str]]:
        raw = run_file_bytes(queries, pool.ids, res, 3, "t")
        rows = [line.split() for line in gzip.decompress(raw).decode().splitlines()]
        for q in ("q0", "q1", "q2"):
            mine = [r for r in rows if r[0] == q]
            assert [int(r[3]) for r in mine] == list(range(1, len(mine) + 1))
            assert all(float(a[4]) > float(b[4]) for a, b in zip(mine, mine[1:]))
        return [[r[2] for r in rows if r[0] == q] for q in ("q0", "q1", "q2")]

    # the engine's own top 3: what can be written exactly; q1 stops before its positive (warned)
    with pytest.warns(UserWarning, match="lists 1 queries only down to the line before a positive"):
        assert listed(narrow) == [["d0"], ["d0"], ["d0", "d1", "d3"]]
    lists = pessimistic_lists(queries.positives, narrow.ranks, narrow.topk_index, narrow.topk_score, 3)
    assert lists.short.tolist() == [False, True, False] and lists.length.tolist() == [1, 1, 3]
    # run_width (3 + 3) holds what every line needs: the head of the pessimistic order
    wide = scan(TableRanker(table), queries, pool, topk=run_width(3, queries))
    assert listed(wide) == [["d0", "d3", "d4"], ["d0", "d3", "d2"], ["d0", "d1", "d3"]]


def test_scores_walk_down_in_float32_ulps():
    from rbench.engine.runfile import strictly_decreasing

    below_one = float(np.nextafter(np.float32(1), np.float32(0)))
    F32_MAX = float(np.finfo(np.float32).max)  # noqa: N806
    raw = np.array([[1.0, 0.0, 0.0, 0.0, -1.0],  # a tie group of zeros
                    [1.0, 1.0, 1.0, below_one, 0.0],  # no room before the next distinct score: pushed
                    [0.1, 0.1, 0.1 - 1e-12, 0.05, np.nan],  # distinct in float64, one float32: a tie there
                    [-F32_MAX] * 3 + [np.nan, np.nan]])  # would pass float32's -inf: k, k-1, ...
    out = strictly_decreasing(raw, np.array([5, 5, 4, 3]))
    tiny = float(np.float32(1.4e-45))
    assert out[0].tolist() == [1.0, 0.0, -tiny, -2 * tiny, -1.0]
    assert out[1].tolist()[:4] == [1.0] + [float(np.float32(1) - np.float32(k) * np.float32(2 ** -24))
                                           for k in (1, 2, 3)] and out[1, 4] == 0.0
    assert out[2, 0] == 0.1 and out[2, 3] == 0.05  # raw values kept where float32 tells them apart
    assert out[3, :3].tolist() == [3.0, 2.0, 1.0]
    for row, n in zip(out, (5, 5, 4, 3)):  # strictly decreasing as float64 and as float32 (trec_eval's)
        assert (np.diff(row[:n]) < 0).all() and (np.diff(row[:n].astype(np.float32)) < 0).all()
        assert (np.array([float(repr(v)) for v in row[:n].tolist()]) == row[:n]).all()


def test_ids_a_trec_file_cannot_hold_are_refused_at_import(capsys, tmp_path):
    from tests.helpers import one_line
    from tests.tasks.test_tasks_imported import beir, write_jsonl

    d, _ = beir(tmp_path)
    corpus = [json.loads(line) for line in (d / "corpus.jsonl").read_text().splitlines()]
    for bad in ("d 7", "d\t7", "d7\n"):
        corpus[7]["_id"] = bad
        write_jsonl(d / "corpus.jsonl", corpus)
        code, _, err = cli(capsys, "data", "import", "spaced", "--corpus", str(d / "corpus.jsonl"),
                           "--queries", str(d / "queries.jsonl"), "--qrels", str(d / "qrels.tsv"))
        line = one_line(err)
        assert code == 2 and "corpus.jsonl" in line and "line 8" in line and repr(bad) in line, line
    corpus[7]["_id"] = "d7"
    write_jsonl(d / "corpus.jsonl", corpus)
    queries = [json.loads(line) for line in (d / "queries.jsonl").read_text().splitlines()]
    queries[2]["_id"] = "q 2"
    write_jsonl(d / "queries.jsonl", queries)
    code, _, err = cli(capsys, "data", "import", "spaced", "--corpus", str(d / "corpus.jsonl"),
                       "--queries", str(d / "queries.jsonl"), "--qrels", str(d / "qrels.tsv"))
    assert code == 2 and "queries.jsonl" in one_line(err) and "line 3" in err and "'q 2'" in err


def test_qrels_and_run_file_refuse_ids_with_whitespace():
    from rbench.cli.data import qrels_text
    from rbench.core.errors import DataError
    from rbench.engine.runfile import run_file_bytes
    from rbench.engine.scan import scan
    from tests.helpers import TableRanker, make_pool, make_queries

    queries, pool = make_queries([[1]]), make_pool(3)
    pool.ids[1] = "d 1"  # a task imported before ids were checked
    with pytest.raises(DataError, match="'d 1'"):
        qrels_text(queries, pool.ids)
    res = scan(TableRanker(np.array([[0.0, 1.0, 0.5]])), queries, pool, topk=3)
    with pytest.raises(DataError, match="'d 1'"):
        run_file_bytes(queries, pool.ids, res, 3, "t")
