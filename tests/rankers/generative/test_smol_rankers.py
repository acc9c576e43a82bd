"""The generative rankers on the real offline model (SmolLM2-135M-Instruct, skipped when absent):
PRP's likelihood verdicts agree with the model's own written answers, and on a synthetic
20-candidate needle task (the query and exactly one candidate share a rare made-up word) each
ranker's output is not the input order, or its record says it is (issue 41)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rbench.api import Pool, Queries, Ragged, RunContext
from rbench.results.ranking_checks import flag
from rbench_rankers.generative.iranker import IRankerRanker
from rbench_rankers.generative.parse import parse_pair
from rbench_rankers.generative.pointwise import PointwiseLLMRanker
from rbench_rankers.generative.prompts import prp_chat
from rbench_rankers.generative.prp import PRIMED_LABELS, PRPRanker
from rbench_rankers.generative.rankgpt import RankGPTRanker

SMOL = Path.home() / ".cache" / "rbench-models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
pytestmark = pytest.mark.skipif(not SMOL.exists(), reason="needs the offline SmolLM2 GGUF (scripts/offline-models.sh)")

FILLER = ["the weather was mild and the market opened late", "a short note about trains and timetables",
          "recipes for bread with flour water and salt", "the committee met on tuesday to discuss budgets",
          "a review of garden tools and watering cans", "notes on the history of the local library"]
RARE = ["zorblatt", "quendrix", "marlovian", "vexintor", "plumbrane", "taskovel", "brindlequay", "snorvath"]


def needle_task(n_queries: int, m: int = 20, seed: int = 0):
    """Query i asks for the candidate that mentions RARE[i]; exactly one of its m candidates does,
    at a random position (never the first), the rest are filler."""
    rng = np.random.default_rng(seed)
    texts, rows, needles = [], [], []
    for i in range(n_queries):
        at = int(rng.integers(1, m))
        row = []
        for j in range(m):
            base = FILLER[int(rng.integers(len(FILLER)))] + f" (note {i}.{j})"
            row.append(len(texts))
            texts.append(f"{RARE[i]} is described here: {base}" if j == at else base)
        rows.append(row)
        needles.append(at)
    pool = Pool(ids=np.array([f"d{k}" for k in range(len(texts))], dtype=object), texts=texts, name="needle")
    queries = Queries(ids=np.array([f"q{i}" for i in range(n_queries)], dtype=object),
                      texts=[f"Which passage mentions {RARE[i]}?" for i in range(n_queries)],
                      positives=Ragged.from_rows([[] for _ in range(n_queries)]),
                      grades=Ragged.from_rows([[] for _ in range(n_queries)], dtype=np.float64)).unlabelled()
    cand = np.asarray(rows)
    return pool, Queries(**{**queries.__dict__, "candidates": cand}), cand, needles


@pytest.fixture(scope="module")
def smol():
    pytest.importorskip("gguf", reason="transformers needs the gguf package to read GGUF files")
    from rbench_rankers.generative.backends.transformers import TransformersBackend

    backend = TransformersBackend("smollm2-135m", device="cpu", batch_size=8, max_length=4096)
    yield backend
    backend.close()


def test_prp_likelihood_verdicts_agree_with_the_models_written_answers(smol, one_torch_thread):
    """The primed label token (" A" / " B" after "Passage") is the model's written choice: on 16
    prompts (8 pairs, both orders) the likelihood verdict equals the greedy answer's label far
    more often than chance (0.5). Version 1's unprimed first-token verdict agreed in 2 of 12."""
    from rbench_rankers.generative.backends import Decoding

    pool, queries, cand, needles = needle_task(4, m=6, seed=3)
    chats_plain, chats_primed = [], []
    for i in range(4):
        q, texts = queries.texts[i], [pool.texts[c] for c in cand[i]]
        for other in (0, 2):
            a, b = texts[needles[i]], texts[other if other != needles[i] else 1]
            for x, y in ((a, b), (b, a)):
                chats_plain.append(prp_chat(q, x, y, "passage"))
                chats_primed.append(prp_chat(q, x, y, "passage", prime=True))
    written = [parse_pair(c.text) for c in smol.chat(chats_plain, Decoding(max_new_tokens=8))]
    scores = smol.next_token_logprobs(chats_primed, PRIMED_LABELS)
    verdict = ["A" if s.logprobs[" A"] > s.logprobs[" B"] else "B" for s in scores]
    readable = [(w, v) for w, v in zip(written, verdict) if w is not None]
    assert len(readable) >= 12 and {w for w, _ in readable} == {"A", "B"}, written  # both answers occur
    # greedy writes "Passage" then its label: the primed label token is that label, every time
    # (16 of 16 here, chance 0.5; the unprimed first-token verdict of version 1 agrees in 14 of 16
    # only because this model mostly writes A, and misses every B)
    assert [v for _, v in readable] == [w for w, _ in readable], (written, verdict)


RANKERS = [
    (RankGPTRanker, {}),
    (PRPRanker, {"variant": "sliding", "passes": 2}),
    (IRankerRanker, {}),
    (PointwiseLLMRanker, {}),
    (PointwiseLLMRanker, {"mode": "query-likelihood"}),
]


@pytest.mark.parametrize("cls,options", RANKERS, ids=[c.name + "".join(f"-{v}" for v in o.values()) for c, o in RANKERS])
def test_each_ranker_ranks_the_needle_task_or_the_record_says_so(cls, options, smol, tmp_path, one_torch_thread):
    pool, queries, cand, needles = needle_task(1)
    ranker = cls(cls.Config(cache=False, **options), RunContext(cache_dir=tmp_path, seed=0), backend=smol)
    ranker.domain = "passage"
    ranker.index(pool)
    scores = ranker.score(queries, cand)
    orders = [list(np.argsort(-row, kind="stable")) for row in scores]
    gen = ranker.info["generation"]
    is_input_order = all(o == list(range(cand.shape[1])) for o in orders)
    assert not is_input_order or flag({"generation": gen}), gen
    if flag({"generation": gen}):  # the record tells: print what the model did, for the report
        print(cls.name, "flagged:", flag({"generation": gen}))
    ranks = [o.index(n) + 1 for o, n in zip(orders, needles)]
    print(cls.name, "needle ranks", ranks, "input positions", [n + 1 for n in needles], "tau", gen["input_order_tau"],
          "repaired", gen["repaired_share"], "ties", gen["tie_share"])
