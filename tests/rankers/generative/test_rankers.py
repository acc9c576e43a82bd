"""The generative rankers with an ORACLE backend (a ``Backend`` that reads the prompt it is given
and answers what a perfect model would, from a hidden relevance per (query, candidate) text), a
GARBAGE backend (answers nothing a parser can use as given), and end to end through
``rbench.evaluate``: with the oracle (labels never reach the ranker, set-dependent scores are
accepted, the metrics are perfect) and with the real offline SmolLM2 (counts and the cache)."""

from __future__ import annotations

import json
import random
import re
import zlib
from pathlib import Path

import numpy as np
import pytest

from rbench.api import Pool, Queries, Ragged, RunContext
from rbench.plugin import RBenchError
from rbench_rankers.generative.backends import Completion, NextTokenScores
from rbench_rankers.generative.iranker import IRankerRanker
from rbench_rankers.generative.pointwise import PointwiseLLMRanker
from rbench_rankers.generative.prp import PRPRanker
from rbench_rankers.generative.rankgpt import RankGPTRanker, sliding_windows

# --------------------------------------------------------------------------------- the oracle

_CAND = re.compile(r"^\[(\d+)\] (.*)$", re.M)


class Oracle:
    """A perfect model: it parses the prompt (query, candidates, what is asked) and answers from
    ``relevance[(query, text)]`` (0 when absent). ``garbage=True``: seeded nonsense instead."""

    kind = "oracle"

    def __init__(self, relevance: dict[tuple[str, str], float], logprobs: bool = True, garbage: bool = False):
        self.relevance = relevance
        self.supports_logprobs = logprobs
        self.garbage = garbage
        self.prompts: list[str] = []

    def identity(self):
        return {"backend": "oracle", "logprobs": self.supports_logprobs, "garbage": self.garbage}

    def rel(self, query: str, text: str) -> float:
        return self.relevance.get((query, text), 0.0)

    def answer(self, prompt: str) -> str:
        self.prompts.append(prompt)
        if self.garbage:
            rng = random.Random(zlib.crc32(prompt.encode()))
            return rng.choice(["[99] > [99] > [0]", "Passage C", "I think so.", "[1] > [1] > [1]", "",
                               "maybe", "[0]", "Both are relevant", "12345678901234567890"])
        if m := re.search(r'^Given a query "(.*?)", which', prompt, re.S):  # PRP
            a = re.search(r' A: "(.*?)"\n\n', prompt, re.S).group(1)
            b = re.search(r' B: "(.*?)"\n\nOutput', prompt, re.S).group(1)
            noun = re.search(r"Output (\w+) A", prompt).group(1)
            return f"{noun} {'A' if self.rel(m.group(1), a) >= self.rel(m.group(1), b) else 'B'}"
        if m := re.search(r"\nQuery: (.*?)\nDoes the", prompt):  # pointwise
            text = prompt.split("\n", 1)[0].split(": ", 1)[1]
            return "Yes" if self.rel(m.group(1), text) > 0 else "No"
        if "Search Query:" in prompt:  # RankGPT
            query = re.search(r"Search Query: (.*?)\. \n", prompt).group(1)
        elif prompt.startswith("Here is a query: "):  # IRanker step (passages)
            query = re.search(r"^Here is a query: (.*?)\.\nAnd here", prompt).group(1)
        else:  # IRanker direct
            query = re.search(r"\nQuery: (.*?)\n\nCandidate", prompt).group(1)
        cands = [(int(i), t) for i, t in _CAND.findall(prompt)]
        if "You MUST choose exactly one" in prompt:
            worst = min(cands, key=lambda c: (self.rel(query, c[1]), -c[0]))
            return f"[{worst[0]}]"
        best = sorted(cands, key=lambda c: (-self.rel(query, c[1]), c[0]))
        return " > ".join(f"[{i}]" for i, _ in best)

    def chat(self, chats, decoding):
        out = []
        for chat in chats:
            text = self.answer(chat[-1]["content"])
            out.append(Completion(text, sum(len(m["content"].split()) for m in chat), len(text.split()), 0.0))
        return out

    def next_token_logprobs(self, chats, labels):
        out = []
        for chat in chats:
            prompt = chat[-1]["content"]
            if self.garbage:
                rng = random.Random(zlib.crc32(prompt.encode()))
                lp = {lab: (None if rng.random() < 0.3 else -rng.random() * 5) for lab in labels}
            elif labels == ("Yes", "No"):
                query = re.search(r"\nQuery: (.*?)\nDoes the", prompt).group(1)
                text = prompt.split("\n", 1)[0].split(": ", 1)[1]
                lp = {"Yes": -1.0 / (1.0 + self.rel(query, text)), "No": -1.0}
            else:
                said = self.answer(prompt)[-1]
                lp = {"A": -0.1 if said == "A" else -3.0, "B": -0.1 if said == "B" else -3.0}
            out.append(NextTokenScores(lp, len(prompt.split()), 0.0))
        return out

    def close(self):
        pass


# ------------------------------------------------------------------------------- small inputs


def world(n_queries: int = 3, m: int = 10, seed: int = 0):
    """A pool of n_queries * m texts, each query's own list (shuffled), and a hidden distinct
    relevance per (query, candidate): what the oracle knows and the ranker does not."""
    rng = np.random.default_rng(seed)
    texts = [f"document {k} about topic {k % 7}" for k in range(n_queries * m)]
    pool = Pool(ids=np.array([f"d{k}" for k in range(len(texts))], dtype=object), texts=texts, name="w")
    cand = np.stack([rng.permutation(np.arange(q * m, (q + 1) * m)) for q in range(n_queries)])
    queries = Queries(ids=np.array([f"q{i}" for i in range(n_queries)], dtype=object),
                      texts=[f"question number {i}" for i in range(n_queries)],
                      positives=Ragged.from_rows([[] for _ in range(n_queries)]),
                      grades=Ragged.from_rows([[] for _ in range(n_queries)], dtype=np.float64)).unlabelled()
    queries = Queries(**{**queries.__dict__, "candidates": cand})
    relevance, truth = {}, []
    for i in range(n_queries):
        grades = rng.permutation(m) + 1.0
        for j, c in enumerate(cand[i]):
            relevance[(queries.texts[i], texts[c])] = float(grades[j])
        truth.append(np.argsort(-grades, kind="stable"))
    return pool, queries, cand, relevance, truth


def build(cls, backend, tmp_path, **options):
    cfg = cls.Config(**{"cache": False, **options})
    ranker = cls(cfg, RunContext(cache_dir=tmp_path, seed=0), backend=backend)
    ranker.domain = "passage"
    return ranker


def order_of(scores: np.ndarray) -> list[list[int]]:
    return [list(np.argsort(-row, kind="stable")) for row in scores]


ORACLE_CASES = [
    (RankGPTRanker, {"window": 4, "step": 2, "passes": 5}, True),
    (RankGPTRanker, {"window": 20, "step": 10}, True),
    (PRPRanker, {"variant": "allpair"}, True),
    (PRPRanker, {"variant": "allpair"}, False),
    (PRPRanker, {"variant": "sliding", "passes": 10}, True),
    (PRPRanker, {"variant": "sliding", "passes": 10}, False),
    (IRankerRanker, {"variant": "iterative"}, True),
    (IRankerRanker, {"variant": "direct"}, True),
    (PointwiseLLMRanker, {}, True),
]


@pytest.mark.parametrize("cls,options,logprobs", ORACLE_CASES)
def test_oracle_recovers_the_hidden_order(cls, options, logprobs, tmp_path):
    pool, queries, cand, relevance, truth = world()
    oracle = Oracle(relevance, logprobs=logprobs)
    ranker = build(cls, oracle, tmp_path, **options)
    ranker.index(pool)
    scores = ranker.score(queries, cand)
    assert scores.shape == cand.shape and np.isfinite(scores).all()
    assert order_of(scores) == [list(t) for t in truth]
    gen = ranker.info["generation"]
    assert gen["parse_failures"] == 0 and gen["repairs"] == {} and gen["calls"] > 0
    assert ranker.info["backend"] == oracle.identity()
    if cls.set_dependent:
        assert len(set(scores[0].tolist())) == cand.shape[1]  # no ties


def test_rankgpt_one_pass_fixes_the_top_window_minus_step(tmp_path):
    """One back-to-front pass of windows w/s carries the true top (w - s) to the front, and the
    result equals a reference that sorts each window of ``sliding_windows`` by the truth."""
    pool, queries, cand, relevance, truth = world(m=11, seed=3)
    ranker = build(RankGPTRanker, Oracle(relevance), tmp_path, window=4, step=2)
    ranker.index(pool)
    got = order_of(ranker.score(queries, cand))
    for i in range(len(queries)):
        rel = [relevance[(queries.texts[i], pool.texts[c])] for c in cand[i]]
        order = list(range(11))
        for a, b in sliding_windows(11, 4, 2):
            order[a:b] = sorted(order[a:b], key=lambda j: -rel[j])
        assert got[i] == order
        assert got[i][:2] == list(truth[i][:2])
    assert ranker.info["windows"]["per_list"] == len(sliding_windows(11, 4, 2))


def test_prp_sliding_equals_a_reference_bubble_sort(tmp_path):
    pool, queries, cand, relevance, truth = world(m=9, seed=4)
    for k in (1, 2, 3):
        ranker = build(PRPRanker, Oracle(relevance), tmp_path, variant="sliding", passes=k)
        ranker.index(pool)
        got = order_of(ranker.score(queries, cand))
        for i in range(len(queries)):
            rel = [relevance[(queries.texts[i], pool.texts[c])] for c in cand[i]]
            order = list(range(9))
            for _ in range(k):  # bubble the best to the front, from the back
                for j in range(len(order) - 1, 0, -1):
                    if rel[order[j]] > rel[order[j - 1]]:
                        order[j], order[j - 1] = order[j - 1], order[j]
            assert got[i] == order
            assert got[i][:k] == list(truth[i][:k])
        assert ranker.info["comparisons_per_list"] == 2 * sum(8 - p for p in range(k))  # pass p stops at p


@pytest.mark.parametrize("cls,options,logprobs", ORACLE_CASES)
def test_garbage_answers_still_give_permutations_and_are_counted(cls, options, logprobs, tmp_path):
    pool, queries, cand, relevance, _ = world()
    ranker = build(cls, Oracle(relevance, logprobs=logprobs, garbage=True), tmp_path, **options)
    ranker.index(pool)
    scores = ranker.score(queries, cand)
    assert scores.shape == cand.shape and np.isfinite(scores).all()
    gen = ranker.info["generation"]
    if cls is PointwiseLLMRanker:
        assert sum(gen["repairs"].values()) > 0
        return
    if cls.set_dependent and not (cls is PRPRanker and options["variant"] == "allpair"):
        for row in scores:
            assert sorted(row.tolist()) == list(range(1, cand.shape[1] + 1))  # an order: m - position
    assert gen["parse_failures"] > 0 and sum(gen["repairs"].values()) >= gen["parse_failures"]


def test_garbage_counts_for_rankgpt_are_exact(tmp_path):
    pool, queries, cand, relevance, _ = world(n_queries=1, m=4)
    oracle = Oracle(relevance)
    oracle.answer = lambda prompt: "[3] > [1] > [3] > [9]"  # rank_llm's case on a 4-candidate window
    ranker = build(RankGPTRanker, oracle, tmp_path, window=4, step=2)
    ranker.index(pool)
    scores = ranker.score(queries, cand)
    assert order_of(scores) == [[2, 0, 1, 3]]
    gen = ranker.info["generation"]
    assert gen["parse_failures"] == 1
    assert gen["repairs"] == {"answers_repaired": 1, "duplicates": 1, "out_of_range": 1, "missing": 2}


def test_long_lists_and_shared_pools_are_refused_in_one_line(tmp_path):
    pool, queries, cand, relevance, _ = world(m=10)
    for cls in (PRPRanker, IRankerRanker, PointwiseLLMRanker):
        ranker = build(cls, Oracle(relevance), tmp_path, max_list=5)
        ranker.index(pool)
        with pytest.raises(RBenchError, match="--rerank-from bm25 --rerank-depth 20"):
            ranker.score(queries, cand)
    ranker = build(RankGPTRanker, Oracle(relevance), tmp_path, max_list=5, window=4, step=2)
    ranker.index(pool)
    assert ranker.score(queries, cand).shape == cand.shape  # windowed: per-query lists of any length
    with pytest.raises(RBenchError, match="shared pool of 30 candidates") as err:
        ranker.score(queries, np.arange(30))
    assert "\n" not in str(err.value)


def test_domain_wording_reaches_the_prompt(tmp_path):
    pool, queries, cand, relevance, _ = world(n_queries=1, m=3)
    for domain, noun in (("recommendation", "items"), ("routing", "models"), ("product", "products")):
        oracle = Oracle(relevance)
        ranker = build(RankGPTRanker, oracle, tmp_path)
        ranker.fit(type("T", (), {"spec": type("S", (), {"domain": domain})()})())
        ranker.index(pool)
        ranker.score(queries, cand)
        assert f"Rank the 3 {noun} above" in oracle.prompts[0] and "passage" not in oracle.prompts[0]


def test_candidate_text_is_truncated(tmp_path):
    pool, queries, cand, relevance, _ = world(n_queries=1, m=2)
    long_pool = Pool(ids=pool.ids, texts=[t + " x" * 500 for t in pool.texts])
    oracle = Oracle(relevance)
    ranker = build(PointwiseLLMRanker, oracle, tmp_path, max_candidate_chars=40)
    ranker.index(long_pool)
    ranker.score(queries, cand)
    first = oracle.prompts[0] if oracle.prompts else None
    assert first is None or len(first.split("\n")[0]) <= len("Passage: ") + 40


# ------------------------------------------------------------------------------- end to end


def import_tiny_task(root: Path, name: str, n_test: int = 3, m: int = 5):
    """A small-scenario BEIR task: n_test test queries (plus one train, one dev), m candidates
    each, distinct graded qrels for every candidate; returns the hidden relevance by text."""
    from rbench.tasks.registry import import_task

    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(11)
    docs, queries, qrels, cands, relevance = [], [], ["query-id\tcorpus-id\tscore"], [], {}
    splits = ["train", "dev"] + ["test"] * n_test
    for qi, split in enumerate(splits):
        qtext = f"what is fact number {qi}"
        queries.append({"_id": f"q{qi}", "text": qtext, "split": split})
        grades = rng.permutation(m) + 1
        ids = []
        for j in range(m):
            did, text = f"d{qi}-{j}", f"fact {qi}.{j}: a short note on subject {(qi * m + j) % 4}"
            docs.append({"_id": did, "text": text})
            qrels.append(f"q{qi}\t{did}\t{int(grades[j])}")
            relevance[(qtext, text)] = float(grades[j])
            ids.append(did)
        cands.append({"query_id": f"q{qi}", "candidates": ids})
    for fname, rows in (("corpus.jsonl", docs), ("queries.jsonl", queries), ("candidates.jsonl", cands)):
        (root / fname).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (root / "qrels.tsv").write_text("\n".join(qrels) + "\n")
    import_task(name, root / "corpus.jsonl", root / "queries.jsonl", root / "qrels.tsv", scenario="small",
                candidates=root / "candidates.jsonl")
    return relevance


class Spy:
    """Mixed into a ranker: records what ``score`` receives."""

    def score(self, queries, candidates):
        self.seen.append((queries.labelled, len(queries.positives.values), queries.exclude, candidates.shape))
        return super().score(queries, candidates)


@pytest.mark.parametrize("cls,options,logprobs", [c for c in ORACLE_CASES if c[1] != {"window": 20, "step": 10}])
def test_end_to_end_with_the_oracle(cls, options, logprobs, tmp_path):
    import rbench

    relevance = import_tiny_task(tmp_path / "beir", "gen-tiny", m=6)
    spied = type(cls.__name__, (Spy, cls), {})
    ranker = spied(cls.Config(**options), RunContext(cache_dir=tmp_path / "cache", seed=0),
                   backend=Oracle(relevance, logprobs=logprobs))
    ranker.seen = []
    rec = rbench.evaluate(ranker, "gen-tiny")
    assert ranker.seen and all(s[:3] == (False, 0, None) for s in ranker.seen)  # never a label
    widths = sorted({s[3][-1] for s in ranker.seen})
    assert all(len(s[3]) == 2 for s in ranker.seen)  # one row per query
    # set-dependent: only whole lists; pointwise: also the engine's consistency re-score (half a list)
    assert widths == ([6] if cls.set_dependent else [3, 6])
    assert rec.n_queries == 3
    perfect = {k: v for k, v in rec.metrics.items() if "ndcg" in k.lower() or k.lower().startswith(("rr", "mrr"))}
    assert perfect and all(v == pytest.approx(1.0) for v in perfect.values()), rec.metrics
    gen = rec.ranker_info["generation"]
    assert gen["calls"] > 0 and gen["parse_failures"] == 0
    assert rec.ranker_info["backend"]["backend"] == "oracle"


SMOL = Path.home() / ".cache" / "rbench-models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
HF = Path(__file__).resolve().parents[3] / "rankers" / "generative" / "backends" / "transformers.py"


@pytest.mark.skipif(not SMOL.exists() or not HF.exists(), reason="needs the offline SmolLM2 GGUF and the transformers backend")
def test_end_to_end_with_smollm2_and_the_cache(tmp_path, one_torch_thread):
    import rbench

    import_tiny_task(tmp_path / "beir", "gen-smol", n_test=3, m=5)
    first = rbench.evaluate(RankGPTRanker, "gen-smol", options={"model": "smollm2-135m", "batch_size": 3})
    gen = first.ranker_info["generation"]
    assert gen["calls"] == 3 and gen["tokens_in"] > 0 and gen["tokens_out"] > 0 and gen["cache_hits"] == 0
    assert first.ranker_info["backend"]["backend"] == "transformers"
    again = rbench.evaluate(RankGPTRanker, "gen-smol", options={"model": "smollm2-135m", "batch_size": 3})
    gen2 = again.ranker_info["generation"]
    assert gen2["fresh"]["calls"] == 0 and gen2["cache_hits"] == 3
    assert (gen2["calls"], gen2["tokens_in"], gen2["tokens_out"]) == (3, gen["tokens_in"], gen["tokens_out"])
    assert again.metrics == first.metrics


def test_iranker_unreadable_step_eliminates_the_last_remaining(tmp_path):
    pool, queries, cand, relevance, _ = world(n_queries=2, m=5)
    oracle = Oracle(relevance)
    answers = iter(["[99]", "[99]", "nothing", "nothing", "[5]", "[5]", "[5]", "[5]"])
    oracle.answer = lambda prompt: next(answers)
    ranker = build(IRankerRanker, oracle, tmp_path)
    ranker.index(pool)
    got = order_of(ranker.score(queries, cand))
    assert got == [[0, 1, 2, 3, 4]] * 2  # each step dropped the back of the list: input order
    gen = ranker.info["generation"]
    assert gen["parse_failures"] == 8
    assert gen["repairs"] == {"choice_out_of_range": 2, "choice_unreadable": 2, "choice_eliminated": 4}
