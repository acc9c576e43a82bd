"""``rbench compare``: paired tests checked against scipy, Holm/Bonferroni against a hand-written
reference and the textbook example, the ranx-style superscripts, the CLI and the Python API."""

from __future__ import annotations

import csv
import io
import itertools
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from rbench.cli.app import main
from rbench.core.errors import RBenchError
from rbench.results.compare import compare_frames, letter
from rbench.results.paired import adjust, bonferroni, effect, holm, p_value, paired_t
from rbench.results.significance import paired_randomization

# ------------------------------------------------------------------------------------------
# corrections
# ------------------------------------------------------------------------------------------


def holm_reference(p):
    """Holm (1979) as written: walk the p-values from the smallest, multiply the i-th (from 0) by
    m - i, never let an adjusted p fall below the one before it, cap at 1."""
    m = len(p)
    order = sorted(range(m), key=lambda i: (p[i], i))
    out = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


def test_holm_textbook_example():
    # Wikipedia's Holm-Bonferroni example: m = 4, alpha = 0.05 rejects H1 and H4 only
    p = [0.01, 0.04, 0.03, 0.005]
    assert holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert list(holm(p) < 0.05) == [True, False, False, True]
    # R: p.adjust(c(0.01, 0.02, 0.03, 0.04, 0.05), "holm") -> 0.05 0.08 0.09 0.09 0.09
    assert holm([0.01, 0.02, 0.03, 0.04, 0.05]) == pytest.approx([0.05, 0.08, 0.09, 0.09, 0.09])
    assert bonferroni(p) == pytest.approx([0.04, 0.16, 0.12, 0.02])


def test_holm_and_bonferroni_match_the_reference_on_random_vectors():
    rng = np.random.default_rng(3)
    for trial in range(300):
        m = int(rng.integers(1, 12))
        p = rng.random(m) ** 3
        if trial % 3 == 0:  # ties and ones
            p[: m // 2] = p[0]
            p[-1] = 1.0
        got = holm(p)
        assert got == pytest.approx(holm_reference(list(p)), abs=1e-15)
        assert np.all(got >= p) and np.all(got <= 1.0)
        # monotone: a smaller p never gets a larger adjusted p
        order = np.argsort(p, kind="stable")
        assert np.all(np.diff(got[order]) >= 0)
        assert np.all(got <= bonferroni(p) + 1e-15)  # Holm is never weaker than Bonferroni
        assert bonferroni(p) == pytest.approx(np.minimum(1.0, m * p))
    assert list(adjust([0.2, 0.01], "none")) == [0.2, 0.01]
    assert holm([]).size == 0
    with pytest.raises(RBenchError, match="unknown correction 'hochberg'"):
        adjust([0.1], "hochberg")


# ------------------------------------------------------------------------------------------
# tests and effect sizes against scipy
# ------------------------------------------------------------------------------------------


def _pairs(seed, n=60, shift=0.03):
    rng = np.random.default_rng(seed)
    a = rng.random(n)
    return a, np.clip(a - shift + rng.normal(0, 0.1, n), 0, 1)


@pytest.mark.parametrize("seed", range(5))
def test_paired_t_is_scipys_two_sided_ttest_rel(seed):
    a, b = _pairs(seed)
    ref = stats.ttest_rel(a, b)
    t, p = paired_t(a, b)
    assert t == pytest.approx(ref.statistic, rel=1e-12) and p == pytest.approx(ref.pvalue, rel=1e-10)
    assert p_value(a, b, "t") == pytest.approx(ref.pvalue, rel=1e-10)
    assert paired_t(b, a)[1] == pytest.approx(p, rel=1e-12)  # two-sided: the order does not matter


def test_paired_t_without_spread():
    a = np.arange(10) * 0.125  # exact in binary: the differences are exactly equal
    assert paired_t(a, a) == (0.0, 1.0)
    assert paired_t(a + 0.5, a) == (math.inf, 0.0)
    assert effect(a + 0.5, a).d_z == math.inf


@pytest.mark.parametrize("seed", range(5))
def test_effect_matches_scipys_interval_and_d_z(seed):
    a, b = _pairs(seed)
    ref = stats.ttest_rel(a, b)
    ci = ref.confidence_interval(0.95)
    e = effect(a, b)
    assert e.mean_diff == pytest.approx(float(np.mean(a - b)), rel=1e-12)
    assert (e.ci_low, e.ci_high) == pytest.approx((ci.low, ci.high), rel=1e-10)
    # d_z = mean(d) / sd(d) = t / sqrt(n)
    assert e.d_z == pytest.approx(ref.statistic / math.sqrt(len(a)), rel=1e-12)
    ci90 = ref.confidence_interval(0.90)
    e90 = effect(a, b, 0.90)
    assert (e90.ci_low, e90.ci_high) == pytest.approx((ci90.low, ci90.high), rel=1e-10)


def _scipy_randomization(a, b, n_resamples):
    return stats.permutation_test((a, b), lambda x, y, axis: np.mean(x - y, axis=axis), vectorized=True,
                                  permutation_type="samples", alternative="two-sided", n_resamples=n_resamples,
                                  random_state=0).pvalue


@pytest.mark.parametrize("seed,shift", [(0, 0.05), (1, 0.1), (2, 0.0), (4, 0.08)])
def test_randomization_matches_scipys_exact_permutation_test(seed, shift):
    # 12 queries: scipy enumerates all 2^12 sign patterns, an exact reference for the Monte Carlo
    a, b = _pairs(seed, n=12, shift=shift)
    exact = _scipy_randomization(a, b, 10**6)
    n = 20000
    ours = p_value(a, b, "randomization", n_resamples=n, seed=seed)
    assert ours == paired_randomization(a, b, n_resamples=n, seed=seed)
    se = math.sqrt(exact * (1 - exact) / n)
    assert abs(ours - exact) <= 4 * se + 2 / (n + 1), (ours, exact)


def test_randomization_matches_scipy_monte_carlo_on_more_queries():
    a, b = _pairs(7, n=200, shift=0.015)
    ref = _scipy_randomization(a, b, 20000)
    ours = p_value(a, b, "randomization", n_resamples=20000)
    assert 0.001 < ref < 0.9 and abs(ours - ref) <= 4 * math.sqrt(2 * ref * (1 - ref) / 20000) + 1e-3


# ------------------------------------------------------------------------------------------
# the comparison
# ------------------------------------------------------------------------------------------


def _frame(values, ids=None, measure="RR"):
    ids = ids if ids is not None else [f"q{i}" for i in range(len(values))]
    return pd.DataFrame({"query_id": ids, measure: values, "nDCG@10": np.asarray(values) * 0.9, "rank": 1})


def _three(n=300):
    rng = np.random.default_rng(0)
    base = rng.random(n) * 0.5
    return {"weak": _frame(base), "mid": _frame(np.clip(base + 0.1 + rng.normal(0, 0.05, n), 0, 1)),
            "strong": _frame(np.clip(base + 0.3 + rng.normal(0, 0.05, n), 0, 1))}


def test_letters():
    assert [letter(i) for i in (0, 1, 25, 26, 27, 52)] == ["a", "b", "z", "aa", "ab", "ba"]


@pytest.mark.parametrize("test", ["randomization", "t"])
@pytest.mark.parametrize("correction", ["holm", "bonferroni", "none"])
def test_every_pair_is_tested_and_corrected_once_per_measure(test, correction):
    runs = _three()
    c = compare_frames(runs, ["RR", "nDCG@10"], task="t", test=test, correction=correction, n_resamples=2000)
    assert c.systems == ["weak", "mid", "strong"] and c.n_queries == 300
    assert [(p.measure, p.a, p.b) for p in c.pairs] == [(m, i, j) for m in ("RR", "nDCG@10")
                                                          for i, j in ((0, 1), (0, 2), (1, 2))]
    for m in ("RR", "nDCG@10"):
        mine = [p for p in c.pairs if p.measure == m]
        raw = [p_value(runs[c.systems[p.a]][m].to_numpy(), runs[c.systems[p.b]][m].to_numpy(), test, 2000)
               for p in mine]
        assert [p.p_value for p in mine] == pytest.approx(raw, rel=1e-12)
        # the family is the 3 pairs of one measure, corrected once
        assert [p.p_adjusted for p in mine] == pytest.approx(list(adjust(raw, correction)), rel=1e-12)
        for p in mine:
            assert p.mean_a == pytest.approx(runs[c.systems[p.a]][m].mean())
            assert p.effect.mean_diff == pytest.approx(p.mean_a - p.mean_b)
    assert c.beats(2, "RR") == "ab" and c.beats(1, "RR") == "a" and c.beats(0, "RR") == ""


def test_holm_removes_a_superscript_that_no_correction_gives():
    # y and w (equal) sit above x at a raw t-test p of 0.035; z is far above all three. Holm
    # multiplies the two 0.035s by 3 and 2 (the three tiny p-values of z come first): no mark left
    rng = np.random.default_rng(11)
    n = 80
    base = rng.random(n) * 0.5
    noise = rng.normal(0, 0.1, n)
    noise -= noise.mean()
    shift = stats.t.isf(0.035 / 2, n - 1) * noise.std(ddof=1) / math.sqrt(n)
    runs = {"x": _frame(base), "y": _frame(base + shift + noise), "w": _frame(base + shift + noise),
            "z": _frame(base + 0.5)}
    raw = stats.ttest_rel(runs["y"]["RR"], runs["x"]["RR"]).pvalue
    assert raw == pytest.approx(0.035, rel=1e-6)
    plain = compare_frames(runs, ["RR"], test="t", correction="none")
    held = compare_frames(runs, ["RR"], test="t", correction="holm")
    assert plain.beats(1, "RR") == plain.beats(2, "RR") == "a"
    assert held.beats(1, "RR") == held.beats(2, "RR") == "" and held.beats(3, "RR") == "abc"
    xy, xw = (next(p for p in held.pairs if (p.a, p.b) == pair) for pair in ((0, 1), (0, 2)))
    assert xy.p_value == pytest.approx(raw, rel=1e-10)
    assert sorted([xy.p_adjusted, xw.p_adjusted]) == pytest.approx([3 * raw, 3 * raw])  # monotone: 2p -> 3p
    assert not xy.significant and not xw.significant
    bonf = compare_frames(runs, ["RR"], test="t", correction="bonferroni")
    assert bonf.pairs[0].p_adjusted == pytest.approx(6 * raw) and bonf.beats(1, "RR") == ""


def test_queries_must_match_and_the_refusal_names_both_runs():
    runs = {"one": _frame([0.1, 0.2, 0.3]), "two": _frame([0.1, 0.2, 0.3], ids=["q0", "q1", "q9"])}
    with pytest.raises(RBenchError, match=r"one and two on ml-100k hold different queries \(3 and 3, 2 shared\)"):
        compare_frames(runs, ["RR"], task="ml-100k")
    shuffled = {"one": _frame([0.1, 0.2, 0.3]), "two": _frame([0.3, 0.1, 0.2], ids=["q2", "q0", "q1"])}
    c = compare_frames(shuffled, ["RR"], test="t")  # aligned by query id, not by row
    assert c.pairs[0].effect.mean_diff == 0.0 and c.pairs[0].p_value == 1.0
    with pytest.raises(RBenchError, match="unknown test 'wilcoxon'"):
        compare_frames(runs, ["RR"], test="wilcoxon")
    with pytest.raises(RBenchError, match="at least two runs"):
        compare_frames({"one": runs["one"]}, ["RR"])


def test_renderings_carry_the_superscripts_and_the_caption():
    c = compare_frames(_three(), ["RR"], task="ml-100k", n_resamples=2000)
    md = c.to_markdown()
    strong = next(line for line in md.splitlines() if line.startswith("| c | strong |"))
    assert f"**{100 * c.means[(2, 'RR')]:.2f}**<sup>ab</sup>" in strong
    assert "randomization test (2,000 sign flips, seed 0)" in md and "Holm over the 3 pairs" in md
    assert "alpha = 0.05" in md
    tex = c.to_latex()
    assert r"\textbf{" in tex and "$^{ab}$" in tex and r"\caption{ml-100k: values in \%" in tex
    rows = list(csv.DictReader(io.StringIO(c.to_csv())))
    assert len(rows) == 3 and rows[1]["a_letter"] == "a" and rows[1]["winner"] == "c"
    assert float(rows[1]["p_adjusted"]) == c.pairs[1].p_adjusted
    text = c.to_text()
    assert "strong" in text and "ab" in text and "Holm" in text
    t_caption = compare_frames(_three(), ["RR"], test="t", correction="none", alpha=0.01).caption()
    assert "paired t-test, p-values not corrected" in t_caption and "alpha = 0.01" in t_caption


# ------------------------------------------------------------------------------------------
# from RunRecords: the CLI and the Python API
# ------------------------------------------------------------------------------------------


def _write(res, ranker, rr, ids=None, options=None):
    from rbench.core.config import config_hash
    from rbench.results.record import RunRecord, per_query_bytes, record_path, write_run

    rr = np.asarray(rr, dtype=float)
    values = {"nDCG@10": rr * 0.9, "RR": rr, "R@10": (rr > 0.1).astype(float)}
    diff = {"ranker": options} if options else {}
    rec = RunRecord(task="ml-100k", variant="original", scenario="large", task_fingerprint="f",
                    ranker={"name": ranker, "version": "1", "config": dict(options or {})}, seed=0, n_queries=len(rr),
                    metrics={k: float(v.mean()) for k, v in values.items()}, timings={}, peak_rss_bytes=0,
                    created="2026-11-22T00:00:00+00:00", run_options={"non_default": diff},
                    config_hash=config_hash(diff) if diff else "")
    ids = ids if ids is not None else [f"q{i}" for i in range(len(rr))]
    return write_run(rec, record_path(res, "large", "ml-100k", ranker, rec.config_hash),
                     per_query_bytes(np.array(ids), values, np.ones(len(rr), dtype=int)))


@pytest.fixture
def res(tmp_path):
    rng = np.random.default_rng(0)
    base = rng.random(200) * 0.5
    out = tmp_path / "results"
    _write(out, "pop", base)
    _write(out, "bm25", np.clip(base + 0.2 + rng.normal(0, 0.05, 200), 0, 1))
    _write(out, "random", base * 0.2)
    return out


def test_python_compare_reads_the_tables_rows(res):
    import rbench

    c = rbench.compare("ml-100k", results_dir=res, measures=["MRR"], n_resamples=2000)
    assert c.systems == ["random", "pop", "bm25"] and c.measures == ["RR"] and c.task == "ml-100k"
    assert c.beats(2, "RR") == "ab" and c.beats(1, "RR") == "a"
    two = rbench.compare("ml-100k", ["bm25", "pop"], results_dir=res, test="t")
    assert two.systems == ["bm25", "pop"] and len(two.pairs) == 2


def test_cli_compare_writes_each_format(res, tmp_path, capsys):
    for fmt, suffix in (("md", ".md"), ("csv", ".csv"), ("latex", ".tex"), ("rich", ".txt")):
        target = tmp_path / f"out-{fmt}"
        code = main(["compare", "--task", "ml-100k", "--results-dir", str(res), "-r", "pop", "-r", "bm25",
                     "--format", fmt, "--out", str(target), "--resamples", "500"])
        assert code == 0
        text = (tmp_path / f"out-{fmt}{suffix}").read_text()
        assert "bm25" in text
    assert "<sup>a</sup>" in (tmp_path / "out-md.md").read_text()
    capsys.readouterr()
    assert main(["compare", "-t", "ml-100k", "--results-dir", str(res), "-f", "csv", "--test", "t",
                 "--correction", "bonferroni"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == 6 and {r["correction"] for r in rows} == {"bonferroni"}


def _one_error(capsys, argv):
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error:"), err
    return " ".join(err.split())


def test_cli_compare_bad_input_is_one_line_exit_2(res, capsys):
    base = ["compare", "--results-dir", str(res)]
    assert "unknown task 'ml-10k' (did you mean 'ml-100k'?)" in _one_error(capsys, [*base, "-t", "ml-10k"])
    assert "unknown ranker on ml-100k 'bm52'" in _one_error(capsys, [*base, "-t", "ml-100k", "-r", "bm52",
                                                                     "-r", "pop"])
    assert "unknown measure 'Q@5'" in _one_error(capsys, [*base, "-t", "ml-100k", "-m", "Q@5"])
    # a measure the runs did not record is computed from their run files: these records have none
    assert "holds no P@5 and no run file" in _one_error(capsys, [*base, "-t", "ml-100k", "-m", "P@5"])
    assert "unknown correction 'fdr'" in _one_error(capsys, [*base, "-t", "ml-100k", "--correction", "fdr"])
    assert "expected at least two" in _one_error(capsys, [*base, "-t", "ml-100k", "-r", "pop"])
    pq = next(res.rglob("bm25.*.perquery.csv.gz"))
    pq.write_bytes(pq.read_bytes()[:-5])
    line = _one_error(capsys, [*base, "-t", "ml-100k"])
    assert line.startswith("error: bm25 on ml-100k: per-query file") and "sha256 differs" in line
    pq.unlink()
    assert "cannot be read" in _one_error(capsys, [*base, "-t", "ml-100k"])


def test_cli_compare_refuses_runs_on_other_queries(tmp_path, capsys):
    res = tmp_path / "results"
    _write(res, "pop", np.full(10, 0.2))
    _write(res, "bm25", np.full(10, 0.3), ids=[f"q{i}" for i in range(5, 15)])
    line = _one_error(capsys, ["compare", "-t", "ml-100k", "--results-dir", str(res)])
    assert "pop and bm25 on ml-100k hold different queries (10 and 10, 5 shared)" in line


def test_load_results_per_query(res):
    import rbench

    wide = rbench.load_results(res, per_query=True)
    assert len(wide) == 600 and list(wide.columns[:9]) == ["scenario", "task", "variant", "column", "ranker",
                                                            "label", "config_hash", "path", "query_id"]
    assert {"RR", "nDCG@10", "R@10", "rank"} <= set(wide.columns)
    pop = wide[wide.ranker == "pop"]
    long = rbench.load_results(res, ranker="pop")
    assert pop["RR"].mean() == pytest.approx(float(long[long.measure == "RR"].value.iloc[0]), abs=1e-9)
    assert pop.query_id.tolist()[:2] == ["q0", "q1"]
    only = rbench.load_results(res, ranker="bm25", per_query=True)
    assert set(only.ranker) == {"bm25"} and len(only) == 200
    pq = next(res.rglob("bm25.*.perquery.csv.gz"))
    pq.write_bytes(pq.read_bytes() + b"x")
    with pytest.warns(UserWarning, match="sha256 differs"):
        tampered = rbench.load_results(res, per_query=True)
    assert set(tampered.ranker) == {"pop", "random"}


# ------------------------------------------------------------------------------------------
# the leaderboard's `*`: Holm over the rows tested against the column's best
# ------------------------------------------------------------------------------------------


def test_leaderboard_marks_use_holm_over_the_rows_tested_against_the_best(res):
    from rbench.results.leaderboard import FOOTER, build
    from rbench.results.record import ColumnKey, RowKey, read_per_query

    lb = build(res, "large")
    col = ColumnKey("ml-100k")
    sig = lb.significance()
    best = RowKey("bm25")
    ref = read_per_query(lb.record_files[(best, col)], lb.records[(best, col)])
    for metric in ("RR", "nDCG@10"):
        rows = [r for r in lb.rows if r != best]
        raw = []
        for r in rows:
            other = read_per_query(lb.record_files[(r, col)], lb.records[(r, col)])
            both = ref.merge(other, on="query_id", suffixes=("_a", "_b"))
            raw.append(paired_randomization(both[f"{metric}_a"].to_numpy(), both[f"{metric}_b"].to_numpy(),
                                            n_resamples=2000))
        assert [sig[(r, col, metric)] for r in rows] == pytest.approx(holm_reference(raw), rel=1e-12)
    assert "Holm" in FOOTER


def test_holm_in_the_leaderboard_can_remove_a_mark(tmp_path):
    """Two rows, each at raw p just under alpha against the best: Holm keeps at most the smaller."""
    from rbench.results.leaderboard import build
    from rbench.results.record import ColumnKey, RowKey

    rng = np.random.default_rng(5)
    n = 60
    base = rng.random(n) * 0.5
    res = tmp_path / "results"
    _write(res, "best", base + 0.3)
    found = None
    for shift, trial in itertools.product(np.linspace(0.01, 0.05, 9), range(20)):
        noise = np.random.default_rng(trial).normal(0, 0.1, n)
        other = np.clip(base + 0.3 - shift + noise - noise.mean(), 0, 1)
        p = paired_randomization(base + 0.3, other, n_resamples=2000)
        if 0.026 < p < 0.05:
            found = other
            break
    assert found is not None
    _write(res, "near1", found)
    _write(res, "near2", found.copy())  # the same values: the same raw p
    sig = build(res, "large").significance()
    col = ColumnKey("ml-100k")
    assert sig[(RowKey("near1"), col, "RR")] >= 0.05 and sig[(RowKey("near2"), col, "RR")] >= 0.05
