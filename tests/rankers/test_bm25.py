"""BM25 ranker: scores against rank-bm25 / bm25s references, the engine's call pattern, edge cases."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence

import numpy as np
import pytest

from rbench.api import Pool, Queries, Ragged
from rbench.core.errors import RBenchError
from rbench.rankers import load_ranker_class, make_ranker
from rbench_rankers.bm25 import BM25Options, BM25Ranker, idf_weights
from rbench_rankers.text import ENGLISH_STOPWORDS, Tokenizer

rank_bm25 = pytest.importorskip("rank_bm25")


# ------------------------------------------------------------------------------------ builders


def make_pool(texts, name: str = "synthetic") -> Pool:
    ids = np.array([f"d{i}" for i in range(len(texts))], dtype=object)
    return Pool(ids=ids, texts=texts, name=name)


def make_queries(texts: list[str]) -> Queries:
    n = len(texts)
    return Queries(ids=np.array([f"q{i}" for i in range(n)], dtype=object), texts=list(texts),
                   positives=Ragged.from_rows([[0]] * n),
                   grades=Ragged.from_rows([[1.0]] * n, dtype=np.float64))


def random_corpus(seed: int, n_docs: int = 240, n_words: int = 50, everywhere: bool = True):
    """Zipf-distributed words (the head words occur in more than half the documents, so their
    Okapi idf is negative), random lengths (repeats are frequent), optionally one word in every
    document (df == N), and queries with repeated, unknown and head words."""
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(n_words)]
    p = 1.0 / np.arange(1, n_words + 1) ** 1.1
    p /= p.sum()
    docs = [list(rng.choice(words, size=int(rng.integers(1, 30)), p=p)) for _ in range(n_docs)]
    if everywhere:
        docs = [d + ["every"] for d in docs]
    queries = [list(rng.choice(words, size=int(rng.integers(1, 7)), p=p)) for _ in range(25)]
    queries += [["w0", "w0", "w1"], ["every", "w3"], ["unknownword", "w7", "w7", "w7"], [words[-1]]]
    return docs, queries


def reference_scores(docs, queries, **kw) -> np.ndarray:
    ref = rank_bm25.BM25Okapi(docs, **kw)
    return np.array([ref.get_scores(q) for q in queries])


def assert_close(ours: np.ndarray, ref: np.ndarray, rtol: float = 1e-5) -> None:
    scale = np.abs(ref).max()
    assert scale > 0
    np.testing.assert_allclose(ours, ref, rtol=rtol, atol=rtol * scale)


def indexed(texts, **options) -> BM25Ranker:
    ranker = BM25Ranker(BM25Options(**options))
    ranker.index(make_pool(texts))
    return ranker


# ---------------------------------------------------------------------------- reference checks


@pytest.mark.parametrize("epsilon", [0.25, 0.0])
def test_scores_equal_rank_bm25_okapi(epsilon):
    docs, queries = random_corpus(seed=1)
    n = len(docs)
    df = {w: sum(w in d for d in docs) for d in docs for w in d}
    assert any(v > n / 2 for v in df.values()), "corpus must contain negative-idf terms"
    assert df["every"] == n
    assert any(len(set(d)) < len(d) for d in docs), "corpus must contain repeated terms"

    texts = [" ".join(d) for d in docs]
    ranker = indexed(texts, epsilon=epsilon)
    assert [Tokenizer()(t) for t in texts] == docs  # the test compares on the same tokens
    ours = ranker.score(make_queries([" ".join(q) for q in queries]), np.arange(n))
    ref = reference_scores(docs, queries, epsilon=epsilon)
    assert ours.dtype in (np.float32, np.float64) and np.isfinite(ours).all()
    assert_close(ours, ref)
    # the floor matters on this corpus: epsilon changes the scores of queries with head words
    if epsilon == 0.25:
        assert not np.allclose(ref, reference_scores(docs, queries, epsilon=0.0))


def test_non_default_k1_b_and_empty_document_match_rank_bm25():
    docs, queries = random_corpus(seed=2, everywhere=False)
    docs[3] = []  # rank-bm25 counts empty documents in N and in avgdl, as we do
    ours = indexed([" ".join(d) for d in docs], k1=0.9, b=0.4).score(
        make_queries([" ".join(q) for q in queries]), np.arange(len(docs)))
    assert_close(ours, reference_scores(docs, queries, k1=0.9, b=0.4))
    assert np.all(ours[:, 3] == 0)


@pytest.mark.parametrize("kind", ["atire", "lucene"])
def test_other_idfs_match_bm25s(kind):
    """'atire' is bm25s' ATIRE exactly; 'lucene' is bm25s' Lucene BM25 times the constant (k1+1)."""
    bm25s = pytest.importorskip("bm25s")
    docs, queries = random_corpus(seed=3)
    k1 = 1.2
    ours = indexed([" ".join(d) for d in docs], idf=kind, k1=k1).score(
        make_queries([" ".join(q) for q in queries]), np.arange(len(docs)))
    ref_model = bm25s.BM25(k1=k1, b=0.75, method=kind)
    ref_model.index(docs, show_progress=False)
    ref = np.array([ref_model.get_scores(q) if any(t in ref_model.vocab_dict for t in q)
                    else np.zeros(len(docs)) for q in queries], dtype=np.float64)
    assert_close(ours, ref * ((k1 + 1) if kind == "lucene" else 1.0))


def test_idf_weights_formulas():
    df = np.array([1, 5, 6, 10])
    n = 10
    okapi_raw = np.log((n - df + 0.5) / (df + 0.5))
    np.testing.assert_allclose(idf_weights(df, n, "okapi", 0.5),
                               np.where(okapi_raw < 0, 0.5 * okapi_raw.mean(), okapi_raw))
    assert idf_weights(df, n, "okapi", 0.0)[1] == 0.0  # df == N/2: idf exactly 0, not floored
    np.testing.assert_allclose(idf_weights(df, n, "atire"), np.log(n / df))
    assert (idf_weights(df, n, "lucene") > 0).all()


# ------------------------------------------------------------------------- the engine's calls


def test_shared_and_per_query_candidates_agree_bit_for_bit():
    docs, queries = random_corpus(seed=4, n_docs=400)
    texts = [" ".join(d) for d in docs]
    q = make_queries([" ".join(x) for x in queries])
    rng = np.random.default_rng(0)
    per_query = rng.integers(0, len(docs), size=(len(q), 20))

    fresh = indexed(texts)
    direct = fresh.score(q, per_query)  # small lists: looked up in the postings
    assert fresh._batch is not None and fresh._batch.full is None

    full = fresh.score(q, np.arange(len(docs)))  # shared 1-D: whole-pool scores
    assert direct.shape == per_query.shape and full.shape == (len(q), len(docs))
    assert np.array_equal(direct, np.take_along_axis(full, per_query, axis=1))
    assert np.array_equal(fresh.score(q, per_query), direct)  # now served from the batch's scores
    shuffled = rng.permutation(len(docs))
    assert np.array_equal(fresh.score(q, shuffled), full[:, shuffled])
    small_shared = shuffled[:10]  # a small 1-D set on a new ranker takes the direct path
    other = indexed(texts)
    assert np.array_equal(other.score(q, small_shared), full[:, small_shared])


def test_full_pool_scores_computed_once_per_query_batch(monkeypatch):
    docs, queries = random_corpus(seed=5, n_docs=300)
    ranker = indexed([" ".join(d) for d in docs])
    model = ranker._index.model
    calls = []
    original = model.get_scores_from_ids

    def spy(tokens, *args, **kwargs):
        calls.append(len(tokens))
        return original(tokens, *args, **kwargs)

    monkeypatch.setattr(model, "get_scores_from_ids", spy)
    q = make_queries([" ".join(x) for x in queries])
    chunks = [np.arange(a, min(a + 64, len(docs))) for a in range(0, len(docs), 64)]
    pieces = [ranker.score(q, c) for c in chunks]
    assert len(calls) == len(queries)  # one whole-pool pass per query, sliced for every chunk
    whole = np.concatenate(pieces, axis=1)
    assert np.array_equal(whole, ranker.score(q, np.arange(len(docs))))
    q2 = make_queries([" ".join(x) for x in queries[::-1]])  # another batch: recomputed
    other = ranker.score(q2, np.arange(len(docs)))
    assert len(calls) == 2 * len(queries)
    assert np.array_equal(other, whole[::-1])
    cached = ranker.score(q2, np.arange(len(docs)))
    with pytest.raises(ValueError, match="read-only"):
        cached[0, 0] = 1.0  # cached scores are handed out read-only


def test_engine_ranks_planted_documents_first_in_a_large_pool():
    """10^5 documents: index, then the engine's batched x chunked calls (chunks smaller than the
    pool) for a few queries; each query's words were planted in one document only."""
    from rbench.engine.scan import scan

    n = 100_000
    rng = np.random.default_rng(7)
    vocab = np.array([f"t{i}" for i in range(3000)], dtype=object)
    words = vocab[rng.integers(0, len(vocab), size=(n, 6))]
    texts = [" ".join(row) for row in words]
    planted = [11, 54_321, 99_999]
    for k, i in enumerate(planted):
        texts[i] += f" needle{k} haystack{k}"
    pool = make_pool(texts)
    q = make_queries([f"needle{k} haystack{k} t1 t2" for k in range(len(planted))] + ["", "the of"])
    q = Queries(ids=q.ids, texts=q.texts, positives=Ragged.from_rows([[i] for i in planted] + [[0], [1]]),
                grades=q.grades)
    ranker = BM25Ranker()
    computed = []
    full_scores = ranker._full_scores
    ranker._full_scores = lambda batch: (batch.full is None and computed.append(len(batch.tokens))) or full_scores(batch)
    result = scan(ranker, q, pool, batch_size=4, chunk_size=30_000, topk=5)
    assert ranker.info["n_docs"] == n
    assert computed == [4, 1]  # pool chunks were served from each batch's full scores, computed once a batch
    assert [int(t[0]) for t in result.topk_index[: len(planted)]] == planted
    ranks = result.ranks.values
    assert list(ranks[: len(planted)]) == [1] * len(planted)
    assert list(ranks[len(planted):]) == [n, n]  # empty / stopword-only query: all tied at 0
    direct = ranker.score(q, np.array(planted)[None, :].repeat(len(q), axis=0))
    assert np.isfinite(direct).all()
    assert np.all(np.diag(direct[: len(planted)]) > 0)
    assert np.all(direct[len(planted):] == 0)


# ----------------------------------------------------------------------------------- edge cases


def test_empty_query_and_empty_documents_score_zero():
    ranker = indexed(["", "apple banana", "banana cherry", None, "the of and"])
    q = make_queries(["", "   ", "the and", "unknown words", "banana"])
    s = ranker.score(q, np.arange(5))
    assert np.isfinite(s).all()
    assert np.all(s[:4] == 0)
    assert s[4, 1] > 0 and s[4, 2] > 0 and s[4, 0] == s[4, 3] == s[4, 4] == 0
    assert ranker.score(q, np.zeros((5, 0), dtype=np.int64)).shape == (5, 0)


def test_pool_of_only_empty_documents():
    ranker = indexed(["", "the", None])
    s = ranker.score(make_queries(["anything", ""]), np.arange(3))
    assert s.shape == (2, 3) and np.all(s == 0)


class LazyTexts(Sequence):
    """A text column that is not a list and only answers integer indexing."""

    def __init__(self, texts: list[str]) -> None:
        self._texts = texts
        self.reads = 0

    def __len__(self) -> int:
        return len(self._texts)

    def __getitem__(self, i):
        if not isinstance(i, (int, np.integer)):
            raise TypeError("integer indexing only")
        self.reads += 1
        return self._texts[i]


def test_lazy_text_column():
    docs, queries = random_corpus(seed=6)
    texts = [" ".join(d) for d in docs]
    lazy = LazyTexts(texts)
    q = make_queries([" ".join(x) for x in queries])
    from_lazy = BM25Ranker(BM25Options(index_chunk=7))
    from_lazy.index(make_pool(lazy))
    assert lazy.reads == len(texts)
    expected = indexed(texts).score(q, np.arange(len(texts)))
    assert np.array_equal(from_lazy.score(q, np.arange(len(texts))), expected)


def test_bad_candidates_and_unindexed_use_are_errors():
    ranker = BM25Ranker()
    with pytest.raises(RBenchError, match="before index"):
        ranker.score(make_queries(["a"]), np.arange(1))
    ranker.index(make_pool(["a b", "b c"]))
    q = make_queries(["b"])
    for bad in (np.array([0, 2]), np.array([-1]), np.array([0.0, 1.0]), np.zeros((2, 1), np.int64)):
        with pytest.raises(ValueError):
            ranker.score(q, bad)


# ------------------------------------------------------------------------- options, tokenizer


def test_options_are_checked_and_the_entry_point_loads():
    assert load_ranker_class("bm25") is BM25Ranker
    r = make_ranker("bm25", {"k1": "1.2", "idf": "lucene", "stopwords": "false"})
    assert r.config["k1"] == 1.2 and r.config["idf"] == "lucene" and r.tokenizer.stopwords is False
    with pytest.raises(RBenchError, match="expected one of okapi, lucene, atire"):
        make_ranker("bm25", {"idf": "lucen"})
    with pytest.raises(RBenchError, match="did you mean 'epsilon'"):
        make_ranker("bm25", {"epsilom": "0"})
    with pytest.raises(RBenchError):
        make_ranker("bm25", {"b": "1.5"})
    with pytest.raises(RBenchError):
        make_ranker("bm25", {"k1": "-1"})


def test_tokenizer():
    tok = Tokenizer()
    assert tok("The Café-au-lait, GPT-4 & the X_1!") == ["café", "au", "lait", "gpt", "4", "x_1"]
    assert Tokenizer(stopwords=False)("The cat") == ["the", "cat"]
    assert Tokenizer(lowercase=False)("The Cat") == ["Cat"]
    assert tok(None) == [] and tok("") == []
    assert len(ENGLISH_STOPWORDS) == 33


def test_stopwords_change_scores():
    texts = ["the cat", "the the the dog", "a bird", "fish", "a cow"]
    q = make_queries(["the cat"])
    with_stop = indexed(texts).score(q, np.arange(5))
    without = indexed(texts, stopwords=False).score(q, np.arange(5))
    assert with_stop[0, 1] == 0 and without[0, 1] > 0


def test_module_does_not_import_torch():
    code = "import sys, rbench_rankers.bm25, rbench_rankers.text; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
