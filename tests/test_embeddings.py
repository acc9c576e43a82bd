"""The candidate-embedding cache: computed once, memory-mapped, resumable after interruption."""

from __future__ import annotations

import numpy as np
import pytest

from rbench.embeddings import pool_embeddings
from tests.helpers import make_pool


def _encoder(calls):
    def encode(texts):
        calls.append(len(texts))
        return np.array([[len(t), sum(map(ord, t)) % 97, 1.0] for t in texts], dtype=np.float32)
    return encode


def test_cached_and_memory_mapped(tmp_path):
    pool = make_pool(1000)
    calls: list[int] = []
    a = pool_embeddings(pool, {"model": "toy"}, _encoder(calls), batch_size=64, root=tmp_path, progress=False)
    assert a.shape == (1000, 3) and sum(calls) == 1000
    b = pool_embeddings(pool, {"model": "toy"}, _encoder(calls), batch_size=64, root=tmp_path, progress=False)
    assert sum(calls) == 1000  # no encoding the second time
    assert isinstance(b, np.memmap)
    np.testing.assert_array_equal(a, b)
    pool_embeddings(pool, {"model": "other"}, _encoder(calls), batch_size=64, root=tmp_path, progress=False)
    assert sum(calls) == 2000  # another key encodes again


def test_resumes_after_interruption(tmp_path):
    pool = make_pool(2000)
    calls: list[int] = []
    enc = _encoder(calls)

    def flaky(texts):
        if sum(calls) >= 1100:
            raise KeyboardInterrupt
        return enc(texts)

    with pytest.raises(KeyboardInterrupt):
        pool_embeddings(pool, {"m": 1}, flaky, batch_size=50, root=tmp_path, progress=False)
    assert not list(tmp_path.rglob("emb.npy"))  # no complete-looking file
    done_before = sum(calls)
    out = pool_embeddings(pool, {"m": 1}, enc, batch_size=50, root=tmp_path, progress=False)
    resumed = sum(calls) - done_before
    assert resumed < 2000  # did not start over (progress is flushed every 16 batches)
    ref = _encoder([])(pool.text_batch(np.arange(2000)))
    np.testing.assert_array_equal(out, ref)


def test_fp16_storage_and_truncation(tmp_path):
    pool = make_pool(300)
    calls: list[int] = []
    full = pool_embeddings(pool, {"m": 1}, _encoder(calls), root=tmp_path, progress=False)
    half = pool_embeddings(pool, {"m": 1}, _encoder(calls), root=tmp_path, progress=False, dtype="float16")
    cut = pool_embeddings(pool, {"m": 1}, _encoder(calls), root=tmp_path, progress=False, truncate=2)
    assert half.dtype == np.float16 and cut.shape == (300, 2)
    np.testing.assert_allclose(half.astype(np.float32), full, rtol=1e-3)
    np.testing.assert_array_equal(cut, full[:, :2])
    assert sum(calls) == 900  # three distinct cache entries
