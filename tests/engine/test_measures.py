"""Measures by name (``rbench.core.measures``) against the real ir_measures (trec_eval semantics).

Random tables with many ties and graded labels are ranked by rbench's engine; an independent full
ordering that follows the documented tie rule (higher score first; a positive after the
non-positives it ties with; tied positives by ascending grade) is written as a run with distinct
scores and evaluated by ir_measures. Every measure must agree per query to 1e-9. Each cutoff used
is checked to have a relevant document exactly at it, and each threshold to split some query's
positives, so an off-by-one cutoff or a wrong threshold cannot pass unnoticed.
"""

from __future__ import annotations

import ir_measures
import numpy as np
import pytest

from rbench.core.errors import RBenchError
from rbench.core.measures import FAMILIES, Measure, parse_measure, parse_measures
from rbench.engine.metrics import per_query
from rbench.engine.scan import scan
from tests.helpers import TableRanker, make_pool, make_queries

CHECKED = ("nDCG@10", "nDCG", "nDCG@3", "RR", "RR@10", "RR(rel=2)@10", "RR(rel=3)", "R@10", "R@1000",
           "R(rel=2)@100", "R(rel=3)@5", "P@5", "P@1", "P(rel=2)@10", "P(rel=3)@3", "AP", "AP@100", "AP@10",
           "AP(rel=2)", "AP(rel=3)@20", "AP@3", "AP(rel=2)@2", "Success@1", "Success@10", "Success(rel=2)@5", "Success@3", "P@7", "R(rel=2)@7", "AP@7")


def _random_task(seed: int, n_q: int = 200) -> tuple[np.ndarray, list[list[int]], list[list[float]], list[list[int]]]:
    """A tie-heavy score table, 1-6 positives a query graded 1-3 (some queries all grade 1; some
    positives tied with each other at the top) and a few excluded candidates."""
    rng = np.random.default_rng(seed)
    n_pool = int(rng.integers(40, 120))
    table = rng.choice([0.0] * 5 + [0.5, 1.0, 1.0, 2.0, 3.0, 4.0], size=(n_q, n_pool))
    table += (rng.random((n_q, n_pool)) < 0.3) * rng.integers(0, 40, size=(n_q, n_pool)) / 8.0
    positives, grades, exclude = [], [], []
    for qi in range(n_q):
        pos = rng.choice(n_pool, size=int(rng.integers(1, 7)), replace=False)
        table[qi, pos] = rng.choice([0.0, 1.0, 4.0, 6.0, 8.0, 9.0, 9.0], size=len(pos))  # 9: tied at the top
        positives.append(pos.tolist())
        top = 1 if qi % 7 == 0 else 3  # some queries have nothing relevant at rel=2
        grades.append(rng.integers(1, top + 1, size=len(pos)).astype(float).tolist())
        rest = np.setdiff1d(np.arange(n_pool), pos)
        exclude.append(rng.choice(rest, size=int(rng.integers(0, 8)), replace=False).tolist())
    return table, positives, grades, exclude


def _tie_rule_order(scores: np.ndarray, grade_of: dict[int, float], skip: set[int]) -> list[int]:
    """The pool indices of one query in rbench's documented order, written independently of the
    engine: score descending; among equal scores non-positives first, then positives by
    ascending grade."""
    docs = [d for d in range(len(scores)) if d not in skip]
    return sorted(docs, key=lambda d: (-scores[d], d in grade_of, grade_of.get(d, 0.0), d))


def _ir_measures(table, positives, grades, exclude, names) -> dict[str, np.ndarray]:
    qrels, run = [], []
    for qi in range(table.shape[0]):
        grade_of = {p: g for p, g in zip(positives[qi], grades[qi])}
        qrels += [ir_measures.Qrel(f"q{qi}", f"d{p}", int(g)) for p, g in grade_of.items()]
        order = _tie_rule_order(table[qi], grade_of, set(exclude[qi]))
        run += [ir_measures.ScoredDoc(f"q{qi}", f"d{d}", float(len(order) - i)) for i, d in enumerate(order)]
    out = {}
    for name in names:
        vals = {r.query_id: r.value for r in ir_measures.iter_calc([ir_measures.parse_measure(name)], qrels, run)}
        out[name] = np.array([vals.get(f"q{i}", 0.0) for i in range(table.shape[0])])
    return out


def _rbench(table, positives, grades, exclude, names):
    queries = make_queries(positives, grades, exclude=exclude)
    res = scan(TableRanker(table), queries, make_pool(table.shape[1]), batch_size=9, chunk_size=23, topk=5)
    return res.ranks, queries.grades, per_query(res.ranks, queries.grades, names)


@pytest.mark.parametrize("seed", range(4))
def test_every_measure_matches_ir_measures_with_ties_grades_and_thresholds(seed):
    table, positives, grades, exclude = _random_task(seed)
    ranks, gr, ours = _rbench(table, positives, grades, exclude, CHECKED)
    ref = _ir_measures(table, positives, grades, exclude, CHECKED)
    assert list(ours) == [str(parse_measure(n)) for n in CHECKED]
    for name in CHECKED:
        np.testing.assert_allclose(ours[name], ref[name], atol=1e-9, rtol=0, err_msg=name)
    # the data exercises what the measures hinge on: a relevant document exactly at each small
    # cutoff (an off-by-one cutoff moves a value), thresholds that split a query's positives,
    # and queries left with nothing relevant at rel=2 (they score 0)
    r, g = ranks.values, gr.values
    assert any(len(gr[i]) > 3 for i in range(len(ranks)))  # AP@3 divides by more than 3 relevant documents
    for k in (1, 3, 5, 10):
        assert ((r == k) & (g >= 2)).any() and (((r == k) & (g < 2)).any() or k == 10), k
    mixed = [i for i in range(len(ranks)) if len(set(gr[i].tolist())) > 1]
    assert mixed
    nothing = [i for i in range(len(ranks)) if gr[i].max() < 2]
    assert nothing and all(ours["AP(rel=2)"][i] == 0.0 for i in nothing)


def test_measures_on_a_hand_made_query():
    """One query, positives at ranks 2 (grade 1), 3 (grade 3) and 7 (grade 2): the values worked
    out by hand, so the definitions on the docs page are the ones computed."""
    from rbench.api import Ragged

    ranks, grades = Ragged.from_rows([[2, 3, 7]]), Ragged.from_rows([[1.0, 3.0, 2.0]], dtype=np.float64)
    got = {k: float(v[0]) for k, v in per_query(ranks, grades, ["RR", "RR(rel=2)", "RR(rel=3)@2", "P@5",
                                                                "P(rel=2)@5", "R@5", "R(rel=2)@5", "AP",
                                                                "AP(rel=2)", "AP@5", "AP@2", "Success@1",
                                                                "Success(rel=3)@3", "nDCG@3"]).items()}
    ideal = 3 + 2 / np.log2(3) + 1 / np.log2(4)
    assert got == pytest.approx({
        "RR": 1 / 2, "RR(rel=2)": 1 / 3, "RR(rel=3)@2": 0.0, "P@5": 2 / 5, "P(rel=2)@5": 1 / 5,
        "R@5": 2 / 3, "R(rel=2)@5": 1 / 2, "AP": (1 / 2 + 2 / 3 + 3 / 7) / 3, "AP(rel=2)": (1 / 3 + 2 / 7) / 2,
        "AP@5": (1 / 2 + 2 / 3) / 3, "AP@2": (1 / 2) / 3, "Success@1": 0.0, "Success(rel=3)@3": 1.0,
        "nDCG@3": (1 / np.log2(3) + 3 / np.log2(4)) / ideal}, abs=1e-12)


def test_a_query_without_positives_scores_zero():
    from rbench.api import Ragged

    ranks, grades = Ragged.from_rows([[], [1]]), Ragged.from_rows([[], [1.0]], dtype=np.float64)
    got = per_query(ranks, grades, ["AP", "P@1", "R@1", "Success@1", "RR", "nDCG"])
    assert {k: v.tolist() for k, v in got.items()} == {k: [0.0, 1.0] for k in got}


@pytest.mark.parametrize(("text", "canonical"), [
    ("nDCG@10", "nDCG@10"), ("nDCG", "nDCG"), ("RR", "RR"), ("RR@10", "RR@10"), ("RR(rel=2)@10", "RR(rel=2)@10"),
    ("R@1000", "R@1000"), ("R(rel=2)@100", "R(rel=2)@100"), ("P@5", "P@5"), ("P(rel=2)@10", "P(rel=2)@10"),
    ("AP", "AP"), ("AP@100", "AP@100"), ("AP(rel=2)", "AP(rel=2)"), ("Success@3", "Success@3"),
    ("RR(rel=1)@10", "RR@10"), ("MRR@10", "RR@10"), ("MAP", "AP"), ("NDCG@5", "nDCG@5"), (" P@5 ", "P@5"),
    ("RR( rel = 2 )", "RR(rel=2)"),
])
def test_parse_gives_ir_measures_canonical_spelling(text, canonical):
    m = parse_measure(text)
    assert str(m) == canonical == str(ir_measures.parse_measure(text.strip()))
    assert parse_measure(m) == m and parse_measure(canonical) == m


def test_measure_objects():
    assert parse_measure("P(rel=2)@10") == Measure("P", cutoff=10, rel=2)
    assert parse_measure(Measure("RR", rel=1)) == Measure("RR")  # rel=1 is the default, as in ir_measures
    assert parse_measures(["RR@10", "MRR@10", "RR(rel=1)@10", "AP"]) == (Measure("RR", 10), Measure("AP"))
    assert parse_measures("nDCG@10") == (Measure("nDCG", 10),)
    assert set(FAMILIES) == {"nDCG", "RR", "R", "P", "AP", "Success"}


@pytest.mark.parametrize(("text", "says"), [
    ("Judged@10", "Judged counts the judged documents"),
    ("ERR@10", "unknown measure 'ERR'"),
    ("ndcg@10", "did you mean 'nDCG'"),
    ("P", "P needs a cutoff (P@K)"),
    ("R", "R needs a cutoff"),
    ("Success", "Success needs a cutoff"),
    ("nDCG(rel=2)@10", "nDCG takes no parameters"),
    ("RR(rel=0)", "rel must be an integer of at least 1, got '0'"),
    ("RR(rel=x)", "rel must be an integer"),
    ("P(judged_only=True)@5", "unknown parameter 'judged_only=True'"),
    ("P@0", "the cutoff must be an integer of at least 1, got '0'"),
    ("P@five", "the cutoff must be an integer"),
    ("nDCG@10@20", "not in ir_measures' syntax"),
    ("", "not in ir_measures' syntax"),
])
def test_refusals_are_one_line_naming_what_is_expected(text, says):
    with pytest.raises(RBenchError) as err:
        parse_measure(text)
    message = str(err.value)
    assert says in message and "\n" not in message
    assert message.startswith(f"measure {text!r}: ")
    assert "expected NAME, NAME@K, NAME(rel=N) or NAME(rel=N)@K with NAME one of nDCG, RR, R, P, AP, Success" in message


def test_per_query_refuses_an_unknown_measure():
    from rbench.api import Ragged

    with pytest.raises(RBenchError, match="measure 'Judged@5'"):
        per_query(Ragged.from_rows([[1]]), Ragged.from_rows([[1.0]], dtype=np.float64), ["Judged@5"])


def _per_query_before_measures_by_name(ranks, grades, measures):
    """rbench.engine.metrics.per_query as committed before measures by name (issue 33), kept to
    pin the default measures bit for bit: the committed records' numbers must not move."""
    n, rows = len(ranks), ranks.row_ids()
    r, g, npos = ranks.values.astype(np.float64), grades.values.astype(np.float64), ranks.lengths()
    out = {}
    for name in measures:
        base, k = name.split("@")[0], (int(name.split("@", 1)[1]) if "@" in name else None)
        if base == "RR":
            best = np.full(n, np.inf)
            np.minimum.at(best, rows, r)
            out[name] = np.where(best <= (np.inf if k is None else float(k)), 1.0 / best, 0.0)
        elif base == "R":
            hit = np.zeros(n)
            np.add.at(hit, rows, (r <= k).astype(np.float64))
            out[name] = np.divide(hit, npos, out=np.zeros(n), where=npos > 0)
        else:
            dcg = np.zeros(n)
            inside = r <= k
            np.add.at(dcg, rows[inside], g[inside] / np.log2(r[inside] + 1.0))
            idcg = np.zeros(n)
            single = npos == 1
            idcg[single] = g[ranks.offsets[:-1][single]]
            for i in np.flatnonzero(~single):
                top = np.sort(grades[i])[::-1][:k].astype(np.float64)
                idcg[i] = float((top / np.log2(np.arange(2, len(top) + 2))).sum())
            out[name] = np.divide(dcg, idcg, out=np.zeros(n), where=idcg > 0)
    return out


@pytest.mark.parametrize("seed", range(3))
def test_the_record_measures_are_bit_for_bit_what_they_were(seed):
    from rbench.engine.metrics import RECORD_MEASURES

    table, positives, grades, exclude = _random_task(seed)
    grades = [[g / 2 for g in row] for row in grades] if seed == 2 else grades  # fractional grades (imports)
    ranks, gr, ours = _rbench(table, positives, grades, exclude, RECORD_MEASURES)
    before = _per_query_before_measures_by_name(ranks, gr, RECORD_MEASURES)
    assert list(ours) == list(RECORD_MEASURES)
    for name in RECORD_MEASURES:
        assert ours[name].tobytes() == before[name].tobytes(), name
