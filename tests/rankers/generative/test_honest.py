"""What scripted oracles cannot see (issue 41): a RECORDING backend that logs every request (the
chat, the decoding settings, the seed, the token budget, the labels) and a TIE backend (equal
logprobs, answers that choose nothing), used to pin PRP's tie rule, the seed and
``max_new_tokens`` reaching decoding, the budgets of RankGPT and IRanker, the pointwise
fallbacks, the readability statistics of the record, the honest cost under the cache and the
cache key (weights by content, prompt template version, validated entries)."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

from rbench.api import RunContext
from rbench.results.ranking_checks import REPAIRED_MAX, TAU_MAX, flag
from rbench_rankers.generative import prompts
from rbench_rankers.generative.backends import Completion, NextTokenScores
from rbench_rankers.generative.base import input_order_correlation
from rbench_rankers.generative.cache import CachedBackend, ResponseCache
from rbench_rankers.generative.iranker import IRankerRanker
from rbench_rankers.generative.parse import parse_choice, parse_pair, parse_permutation, strip_think
from rbench_rankers.generative.pointwise import LOGPROB_FLOOR, PointwiseLLMRanker
from rbench_rankers.generative.prp import PRPRanker, bubble_positions, heap_sort, sliding_sort
from rbench_rankers.generative.rankgpt import RankGPTRanker
from tests.rankers.generative.test_rankers import Oracle, build, order_of, world


class Recording:
    """Wraps a backend and logs every request: (kind, chat, decoding or labels)."""

    def __init__(self, inner, prefill: bool = True):
        self.inner = inner
        self.kind = "recording"
        self.supports_logprobs = inner.supports_logprobs
        self.supports_prefill = prefill
        self.log: list[tuple[str, list, object]] = []

    def identity(self):
        return {"backend": "recording", **self.inner.identity()}

    def chat(self, chats, decoding):
        self.log += [("chat", c, decoding) for c in chats]
        return self.inner.chat(chats, decoding)

    def next_token_logprobs(self, chats, labels):
        self.log += [("logprobs", c, tuple(labels)) for c in chats]
        return self.inner.next_token_logprobs(chats, labels)

    def close(self):
        pass


class PrimedOracle(Oracle):
    """The oracle, answering PRP's primed likelihood requests (" A" / " B" after "Passage")."""

    def next_token_logprobs(self, chats, labels):
        if labels == (" A", " B"):
            out = []
            for chat in chats:
                assert chat[-1]["role"] == "assistant"
                said = self.answer(chat[-2]["content"])[-1]
                out.append(NextTokenScores({" A": -0.1 if said == "A" else -3.0, " B": -0.1 if said == "B" else -3.0},
                                           1, 0.0))
            return out
        return super().next_token_logprobs(chats, labels)


class Tie:
    """Every label equally likely; every generated answer chooses nothing (the instruction echoed)."""

    kind = "tie"

    def __init__(self, logprobs: bool = True, answer: str = "Passage A or Passage B"):
        self.supports_logprobs = logprobs
        self.supports_prefill = True
        self.text = answer

    def identity(self):
        return {"backend": "tie", "logprobs": self.supports_logprobs, "answer": self.text}

    def chat(self, chats, decoding):
        return [Completion(self.text, 10, 3, 0.01) for _ in chats]

    def next_token_logprobs(self, chats, labels):
        return [NextTokenScores({lab: -0.7 for lab in labels}, 10, 0.01) for _ in chats]

    def close(self):
        pass


class PositionBiased(Tie):
    """Always prefers whatever is shown first (label A), whatever the candidates: a pure position effect."""

    def next_token_logprobs(self, chats, labels):
        return [NextTokenScores({lab: (-0.1 if i == 0 else -2.0) for i, lab in enumerate(labels)}, 10, 0.01)
                for _ in chats]


# ----------------------------------------------------------------------------------- PRP


def test_prp_likelihood_primes_the_noun_and_scores_the_label_token(tmp_path):
    pool, queries, cand, relevance, truth = world(n_queries=2, m=6)
    rec = Recording(PrimedOracle(relevance))
    ranker = build(PRPRanker, rec, tmp_path, variant="allpair")
    ranker.index(pool)
    assert order_of(ranker.score(queries, cand)) == [list(t) for t in truth]
    assert rec.log and all(kind == "logprobs" for kind, _, _ in rec.log)
    for _, chat, labels in rec.log:
        assert labels == (" A", " B")
        assert chat[-1] == {"role": "assistant", "content": "Passage"}
    assert ranker.info["scoring"] == "likelihood"


def test_prp_without_prefill_generates_and_reads_the_answer(tmp_path):
    pool, queries, cand, relevance, truth = world(n_queries=1, m=5)
    rec = Recording(Oracle(relevance), prefill=False)
    ranker = build(PRPRanker, rec, tmp_path, variant="allpair")
    ranker.index(pool)
    assert order_of(ranker.score(queries, cand)) == [list(truth[0])]
    assert {kind for kind, _, _ in rec.log} == {"chat"} and ranker.info["scoring"] == "generation"


@pytest.mark.parametrize("variant", ["sliding", "sorting", "allpair"])
@pytest.mark.parametrize("backend", [Tie(), Tie(logprobs=False), PositionBiased()])
def test_prp_ties_keep_the_input_order_and_the_record_says_so(variant, backend, tmp_path):
    pool, queries, cand, relevance, _ = world(n_queries=2, m=7)
    ranker = build(PRPRanker, backend, tmp_path, variant=variant)
    ranker.index(pool)
    assert order_of(ranker.score(queries, cand)) == [list(range(7))] * 2  # a tie never moves a candidate
    gen = ranker.info["generation"]
    assert gen["tie_share"] == 1.0 and gen["comparisons"] > 0 and gen["ties"] == gen["comparisons"]
    assert gen["input_order_tau"] == 1.0 and gen["input_order_spearman"] == 1.0
    assert flag({"generation": gen})
    if not backend.supports_logprobs:  # the echoed instruction is a failure, never an A
        assert gen["parse_failures"] == gen["answers"] > 0 and gen["repairs"] == {"unreadable_pair": gen["answers"]}


def test_prp_sliding_stops_where_the_top_is_final():
    assert len(bubble_positions(20, 10)) * 2 == 290  # not 380
    assert bubble_positions(4, 10) == [2, 1, 0, 2, 1, 2]


def _run_sort(gen, rel):
    """Drive a sort generator with exact verdicts from ``rel``; returns (order, pairs asked)."""
    asked = 0
    try:
        pair = next(gen)
        while True:
            asked += 1
            x, y = pair
            pair = gen.send(2.0 if rel[x] > rel[y] else (0.0 if rel[x] < rel[y] else 1.0))
    except StopIteration as stop:
        return stop.value, asked


@pytest.mark.parametrize("seed", range(6))
def test_prp_sorting_finds_the_top_k_in_fewer_comparisons(seed):
    rng = np.random.default_rng(seed)
    m, k = 20, 10
    rel = rng.permutation(m).astype(float)
    order, asked = _run_sort(heap_sort(m, k), rel)
    assert sorted(order) == list(range(m))
    assert order[:k] == list(np.argsort(-rel)[:k])
    assert order[k:] == sorted(order[k:])  # the rest in input order
    sliding, asked_sliding = _run_sort(sliding_sort(m, k), rel)
    assert sliding[:k] == order[:k] and asked < asked_sliding == 145


def test_prp_sorting_end_to_end_with_the_oracle(tmp_path):
    pool, queries, cand, relevance, truth = world(n_queries=3, m=10)
    ranker = build(PRPRanker, PrimedOracle(relevance), tmp_path, variant="sorting", top_k=4)
    ranker.index(pool)
    got = order_of(ranker.score(queries, cand))
    assert [g[:4] for g in got] == [list(t[:4]) for t in truth]


# ----------------------------------------------------------------------------- decoding


@pytest.mark.parametrize("cls,options", [(RankGPTRanker, {"window": 4, "step": 2}), (IRankerRanker, {}),
                                         (PRPRanker, {"scoring": "generation"}), (PointwiseLLMRanker, {})])
def test_seed_and_max_new_tokens_reach_decoding(cls, options, tmp_path):
    pool, queries, cand, relevance, _ = world(n_queries=2, m=5)
    rec = Recording(Oracle(relevance, logprobs=False))
    ranker = build(cls, rec, tmp_path, seed=1234, max_new_tokens=77, temperature=0.5, **options)
    ranker.index(pool)
    ranker.score(queries, cand)
    decodings = [d for kind, _, d in rec.log if kind == "chat"]
    assert decodings and all(d.seed == 1234 and d.max_new_tokens == 77 and d.temperature == 0.5 for d in decodings)
    # no seed given: the run's
    rec = Recording(Oracle(relevance, logprobs=False))
    ranker = cls(cls.Config(cache=False, **options), RunContext(cache_dir=tmp_path, seed=99), backend=rec)
    ranker.domain = "passage"
    ranker.index(pool)
    ranker.score(queries, cand)
    assert all(d.seed == 99 for kind, _, d in rec.log if kind == "chat")


def test_rankgpt_budget_is_six_tokens_per_candidate_of_the_window(tmp_path):
    pool, queries, cand, relevance, _ = world(n_queries=1, m=11)
    rec = Recording(Oracle(relevance))
    ranker = build(RankGPTRanker, rec, tmp_path, window=4, step=2)
    ranker.index(pool)
    ranker.score(queries, cand)
    for _, chat, d in rec.log:
        n = len(re.findall(r"^\[\d+\] ", chat[-1]["content"], re.M))
        assert d.max_new_tokens == 6 * n
    assert sorted({len(re.findall(r"^\[\d+\] ", c[-1]["content"], re.M)) for _, c, _ in rec.log}) == [3, 4]


def test_rankgpt_cuts_candidates_by_words_and_shrinks_to_fit(tmp_path):
    from rbench.api import Pool

    pool, queries, cand, relevance, _ = world(n_queries=1, m=3)
    long_pool = Pool(ids=pool.ids, texts=[t + " word" * 400 for t in pool.texts])

    class Counting(Recording):
        context_length = 900

        def count_tokens(self, chats):
            return [sum(len(m["content"].split()) for m in c) for c in chats]

    rec = Counting(Oracle(relevance))
    ranker = build(RankGPTRanker, rec, tmp_path, max_candidate_words=300)
    ranker.index(long_pool)
    ranker.score(queries, cand)
    body = rec.log[-1][1][-1]["content"]
    lines = re.findall(r"^\[\d+\] (.*)$", body, re.M)
    assert lines and all(len(x.split()) < 300 for x in lines)  # shrunk below the 300-word cut
    assert rec.count_tokens([rec.log[-1][1]])[0] <= 900 - 6 * 3
    assert ranker.info["shrunk_to_words"] < 300
    rec2 = Recording(Oracle(relevance))  # cannot count tokens: the 300-word cut alone
    ranker = build(RankGPTRanker, rec2, tmp_path, max_candidate_words=300)
    ranker.index(long_pool)
    ranker.score(queries, cand)
    assert all(len(x.split()) == 300 for x in re.findall(r"^\[\d+\] (.*)$", rec2.log[-1][1][-1]["content"], re.M))


def test_iranker_budget_fits_a_name_and_thinking_is_primed(tmp_path):
    pool, queries, cand, relevance, _ = world(n_queries=1, m=4)
    rec = Recording(Oracle(relevance))
    ranker = build(IRankerRanker, rec, tmp_path)
    ranker.index(pool)
    ranker.score(queries, cand)
    assert {d.max_new_tokens for _, _, d in rec.log} == {48}
    rec = Recording(Tie(answer="<think>the third one is off topic</think><answer>[3]</answer>"))
    ranker = build(IRankerRanker, rec, tmp_path, think=True)
    ranker.index(pool)
    got = order_of(ranker.score(queries, cand))
    assert {d.max_new_tokens for _, _, d in rec.log} == {1024}
    assert all(c[-1] == {"role": "assistant", "content": prompts.THINK_PRIME} for _, c, _ in rec.log)
    assert got[0][-1] == 2 and ranker.info["generation"]["tokens_out"] == 3 * 3  # thinking tokens counted


def test_iranker_reads_names_and_falls_back_on_similarity(tmp_path):
    pool, queries, cand, relevance, _ = world(n_queries=1, m=4)
    texts = [pool.texts[c] for c in cand[0]]
    script = iter([f"I would drop {texts[2]}.", texts[0].upper().replace("ABOUT", "abuot"), "no idea"])
    oracle = Oracle(relevance)
    oracle.answer = lambda prompt: next(script)
    ranker = build(IRankerRanker, oracle, tmp_path)
    ranker.index(pool)
    got = order_of(ranker.score(queries, cand))
    gen = ranker.info["generation"]
    # step 1 by name (2), step 2 by similarity (0), step 3 unreadable: the last remaining (3)
    assert got == [[1, 3, 0, 2]]
    assert gen["fallbacks"] == 1 and gen["parse_failures"] == 1 and gen["answers"] == 3
    assert gen["repairs"] == {"choice_similar": 1, "choice_unreadable": 1}
    assert gen["repaired_share"] == pytest.approx(2 / 3, abs=1e-4)


def test_iranker_routing_scenarios_get_the_reference_question():
    for scenario, words in (("balance", "least BALANCED"), ("cost", "least COST-EFFICIENT"),
                            ("performance", "least PERFORMANCE-EFFICIENT")):
        chat = prompts.iranker_step_chat("q", ["LLaMA-3 (8b): cheap", "Mixtral-8x7B: good"], [0, 1], "routing", scenario)
        assert words in chat[-1]["content"]
        assert all(w not in chat[-1]["content"] for s, w in (("b", "least BALANCED"), ("c", "least COST-EFFICIENT"),
                                                             ("p", "least PERFORMANCE-EFFICIENT")) if w != words)
    rec = prompts.iranker_step_chat("q", ["a", "b"], [0, 1], "recommendation")
    assert "least likely to be my next choice" in rec[-1]["content"]


# ----------------------------------------------------------------------------- pointwise


def test_pointwise_fallbacks_are_pinned(tmp_path):
    pool, queries, cand, relevance, _ = world(n_queries=1, m=3)

    class HalfMissing(Tie):
        def next_token_logprobs(self, chats, labels):
            return [NextTokenScores({"Yes": None, "No": -1.5}, 10, 0.0) for _ in chats]

    ranker = build(PointwiseLLMRanker, HalfMissing(), tmp_path)
    ranker.index(pool)
    scores = ranker.score(queries, cand)
    assert np.all(scores == LOGPROB_FLOOR + 1.5)
    assert ranker.info["generation"]["repairs"] == {"label_missing": 3}
    ranker = build(PointwiseLLMRanker, Tie(logprobs=False, answer="maybe"), tmp_path)
    ranker.index(pool)
    assert np.all(ranker.score(queries, cand) == 0.5)
    gen = ranker.info["generation"]
    assert gen["parse_failures"] == 3 and gen["repairs"] == {"unreadable_yes_no": 3} and gen["repaired_share"] == 1.0
    assert flag({"generation": gen})


# ----------------------------------------------------------------------------- the checks


def test_flag_thresholds():
    assert flag({"generation": {"input_order_tau": TAU_MAX, "repaired_share": 0.0}})
    assert not flag({"generation": {"input_order_tau": TAU_MAX - 0.01, "repaired_share": REPAIRED_MAX}})
    assert flag({"generation": {"input_order_tau": 0.0, "repaired_share": REPAIRED_MAX + 0.01}})
    assert not flag({"generation": {"input_order_tau": None, "repaired_share": None}}) and not flag({})


def test_input_order_correlation():
    assert input_order_correlation(np.array([5.0, 4, 3, 2, 1])) == (1.0, 1.0)
    tau, rho = input_order_correlation(np.array([1.0, 2, 3, 4, 5]))
    assert tau == pytest.approx(-1.0) and rho == pytest.approx(-1.0)
    tau, _ = input_order_correlation(np.array([4.0, 5, 3, 2, 1]))  # one adjacent swap of 10 pairs
    assert tau == pytest.approx(0.8)


def test_a_ranker_that_ranks_is_not_flagged(tmp_path):
    pool, queries, cand, relevance, _ = world(n_queries=3, m=10)
    ranker = build(PRPRanker, PrimedOracle(relevance), tmp_path, variant="allpair")
    ranker.index(pool)
    ranker.score(queries, cand)
    gen = ranker.info["generation"]
    assert gen["tie_share"] == 0.0 and gen["input_order_tau"] < TAU_MAX and not flag({"generation": gen})


# -------------------------------------------------------------------------------- parsers


def test_parsers_cap_digit_runs():
    huge = "9" * 5000
    order, rep = parse_permutation(f"[{huge}] > [2] > {huge}", 3)
    assert order == [1, 0, 2] and rep.out_of_range == 1
    assert parse_permutation(f"{huge} 1", 2)[0] == [0, 1]
    assert parse_choice(f"[{huge}]", 3, [0, 1, 2]) == (None, "out_of_range")
    assert parse_choice(huge, 3, [0, 1, 2], ["a", "b", "c"]) == (None, "out_of_range")


def test_think_blocks_are_stripped_everywhere():
    assert strip_think("<think>[1] > [2] maybe</think>[2] > [1]") == "[2] > [1]"
    assert parse_permutation("<think>[1] > [3]</think>\n[3] > [2] > [1]", 3)[0] == [2, 1, 0]
    assert parse_pair("<think>Passage A looks good</think>Passage B") == "B"
    assert parse_pair("<think>Passage A is clearly better and") is None  # cut off while thinking
    assert parse_choice("<think>not [1]</think><answer>[2]</answer>", 3, [0, 1, 2]) == (1, "")


@pytest.mark.parametrize("text,want", [("Passage A or Passage B", None), ("Output Passage B or Passage A:", None),
                                       ("A or B", None), ("Passage B", "B"), ("Passage A.", "A"),
                                       ("Passage B is more relevant than Passage A", "B")])
def test_an_echoed_instruction_is_no_choice(text, want):
    assert parse_pair(text) == want


# ------------------------------------------------------------------------- cost and cache


def _counting_backend(relevance):
    oracle = Oracle(relevance)
    oracle.chat = lambda chats, decoding: [Completion("[2] > [1]", 100, 7, 0.25) for _ in chats]
    return oracle


def test_cached_runs_keep_the_cost_of_the_run_that_produced_the_answers(tmp_path):
    pool, queries, cand, relevance, _ = world(n_queries=3, m=4)
    runs = []
    for _ in range(2):
        ranker = RankGPTRanker(RankGPTRanker.Config(window=4, step=2), RunContext(cache_dir=tmp_path, seed=0),
                               backend=_counting_backend(relevance))
        ranker.domain = "passage"
        ranker.index(pool)
        ranker.score(queries, cand)
        runs.append(ranker.info["generation"])
        ranker.close()
    first, again = runs
    assert first["calls"] == 3 and first["cache_hits"] == 0 and first["fresh"]["calls"] == 3
    assert (again["calls"], again["tokens_in"], again["tokens_out"], again["seconds"]) == (3, 300, 21, 0.75)
    assert again["cache_hits"] == 3 and again["fresh"] == {"calls": 0, "tokens_in": 0, "tokens_out": 0, "seconds": 0.0}


def test_the_cache_key_includes_the_template_version(tmp_path, monkeypatch):
    pool, queries, cand, relevance, _ = world(n_queries=1, m=4)

    def run():
        ranker = RankGPTRanker(RankGPTRanker.Config(window=4, step=2), RunContext(cache_dir=tmp_path, seed=0),
                               backend=_counting_backend(relevance))
        ranker.domain = "passage"
        ranker.index(pool)
        ranker.score(queries, cand)
        ranker.close()
        return ranker.info["generation"]["cache_hits"]

    assert run() == 0 and run() == 1
    import rbench_rankers.generative.base as base

    monkeypatch.setattr(base, "TEMPLATE_VERSION", "test-next")
    assert run() == 0


def test_unreadable_cache_entries_are_reported_and_asked_again(tmp_path):
    from rbench_rankers.generative.backends import Decoding, GenerationStats

    cache = ResponseCache(tmp_path / "r.sqlite")
    inner = _counting_backend({})
    chats = [[{"role": "user", "content": f"q{i}"}] for i in range(3)]
    CachedBackend(inner, cache).chat(chats, Decoding())
    conn = cache._conn()
    keys = [k for (k,) in conn.execute("SELECT key FROM responses ORDER BY key")]
    conn.execute("UPDATE responses SET value = ? WHERE key = ?", ("{not json", keys[0]))
    conn.execute("UPDATE responses SET value = ? WHERE key = ?", ('{"text": 5, "tokens_in": 1}', keys[1]))
    conn.commit()
    stats = GenerationStats()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = CachedBackend(inner, cache, stats).chat(chats, Decoding())
    lines = [str(w.message) for w in caught]
    assert len(lines) == 2 and all(str(cache.path) in x and "asking the model again" in x and "\n" not in x
                                   for x in lines)
    assert [g.text for g in got] == ["[2] > [1]"] * 3 and stats.fresh_calls == 2 and stats.cache_hits == 1
    assert len(CachedBackend(inner, cache, GenerationStats()).cache.get_many(keys)) == 3  # re-stored, readable


def test_answers_of_the_wrong_form_are_never_cached(tmp_path):
    from rbench_rankers.generative.backends import Decoding

    cache = ResponseCache(tmp_path / "r.sqlite")
    inner = _counting_backend({})
    inner.chat = lambda chats, decoding: [Completion("ok", 1, 1, float("nan")) for _ in chats]
    CachedBackend(inner, cache).chat([[{"role": "user", "content": "x"}]], Decoding())
    assert len(cache) == 0


def test_weights_digest_reads_contents(tmp_path, monkeypatch):
    import rbench_rankers.models as hf

    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"a" * 64)
    (folder / "config.json").write_text("{}")
    monkeypatch.setattr(hf, "resolve_model", lambda model, gguf=None: (str(folder), None))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    first = hf.weights_digest("m")
    import os

    st = (folder / "model.safetensors").stat()
    (folder / "model.safetensors").write_bytes(b"b" * 64)  # same name, same size
    os.utime(folder / "model.safetensors", ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert hf.weights_digest("m") != first
    assert (tmp_path / "xdg" / "rbench" / "weights-digests.json").exists()


# ------------------------------------------------------------------ rbench run and rbench table


FLAGGED = {"generation": {"input_order_tau": 0.99, "repaired_share": 0.0}}
FINE = {"generation": {"input_order_tau": 0.2, "repaired_share": 0.1}}


def test_the_table_marks_a_ranker_that_did_not_rank(tmp_path):
    from rbench.results.leaderboard import build as build_table
    from rbench.results.leaderboard import to_markdown
    from rbench.results.ranking_checks import LEGEND, MARK
    from tests.results.test_leaderboard import _write

    _write(tmp_path, "pop", "ml-100k", [0.5, 0.2, 0.1])
    _write(tmp_path, "prp", "ml-100k", [0.5, 0.3, 0.1], ranker_info=FINE)
    assert MARK not in to_markdown(build_table(tmp_path, "large"))
    _write(tmp_path, "rankgpt", "ml-100k", [0.4, 0.2, 0.1], ranker_info=FLAGGED)
    md = to_markdown(build_table(tmp_path, "large"))
    rows = {line.split("|")[1].strip(): line for line in md.splitlines() if line.startswith("| ")}
    assert MARK in rows["rankgpt"] and MARK not in rows["prp"] and MARK not in rows["pop"]
    assert md.count(LEGEND) == 1


def test_rbench_run_warns_about_a_ranker_that_did_not_rank(monkeypatch):
    from types import SimpleNamespace

    from rbench.cli import run as run_cli
    from rbench.results.record import RunRecord

    monkeypatch.setattr(run_cli.out, "print", lambda *a, **k: None)

    def outcome(info):
        rec = RunRecord(task="ml-100k", variant="original", scenario="large", task_fingerprint="f",
                        ranker={"name": "prp", "version": "2", "config": {}}, seed=0, n_queries=3,
                        metrics={"nDCG@10": 0.5, "RR": 0.5}, timings={"fit_s": 0, "index_s": 0, "score_s": 0,
                                                                       "per_query_ms": 0}, peak_rss_bytes=0,
                        created="2026-11-27T00:00:00+00:00", ranker_info=info)
        return SimpleNamespace(record=rec, skipped=None, path=None)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_cli._report(outcome(FINE))
        assert not caught
        run_cli._report(outcome(FLAGGED))
    assert len(caught) == 1 and "input order" in str(caught[0].message) and "rbench table" in str(caught[0].message)
