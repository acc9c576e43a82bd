"""The candidate-embedding cache: computed once, memory-mapped, resumable after interruption."""

from __future__ import annotations

import numpy as np
import pytest

from rbench.engine.embeddings import pool_embeddings
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


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_resumes_after_interruption(tmp_path, dtype):
    from rbench.engine.embeddings import from_bf16_bits, to_bf16_bits

    pool = make_pool(2000)
    calls: list[int] = []
    enc = _encoder(calls)

    def flaky(texts):
        if sum(calls) >= 1100:
            raise KeyboardInterrupt
        return enc(texts)

    with pytest.raises(KeyboardInterrupt):
        pool_embeddings(pool, {"m": 1}, flaky, batch_size=50, root=tmp_path, progress=False, dtype=dtype)
    assert not list(tmp_path.rglob("emb.npy"))  # no complete-looking file
    done_before = sum(calls)
    out = pool_embeddings(pool, {"m": 1}, enc, batch_size=50, root=tmp_path, progress=False, dtype=dtype)
    resumed = sum(calls) - done_before
    assert resumed < 2000  # did not start over (progress is flushed every 16 batches)
    ref = _encoder([])(pool.text_batch(np.arange(2000)))
    np.testing.assert_array_equal(np.asarray(out), from_bf16_bits(to_bf16_bits(ref)) if dtype == "bfloat16" else ref)


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


def test_bf16_bits_match_torch_rounding():
    torch = pytest.importorskip("torch")
    from rbench.engine.embeddings import from_bf16_bits, to_bf16_bits

    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(10000).astype(np.float32) * 1e3,
                        # halfway cases (round to even), extremes, signed zero, infinities
                        np.array([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 3.3895314e38, -3.4e38, 0.0, -0.0,
                                  np.inf, -np.inf, 1e-40], dtype=np.float32)])
    ref = torch.from_numpy(x).to(torch.bfloat16).to(torch.float32).numpy()
    np.testing.assert_array_equal(from_bf16_bits(to_bf16_bits(x)), ref)
    assert np.isnan(from_bf16_bits(to_bf16_bits(np.array([np.nan], np.float32)))).all()


def test_bf16_storage_reads_as_fp32_chunkwise(tmp_path):
    from rbench.engine.distributed import _FixedEmbeddings
    from rbench.engine.embeddings import BF16Matrix, from_bf16_bits, to_bf16_bits
    from rbench.engine.scan import scan
    from tests.helpers import make_queries

    pool = make_pool(500)
    calls: list[int] = []
    full = pool_embeddings(pool, {"m": 1}, _encoder(calls), root=tmp_path, progress=False)
    bf = pool_embeddings(pool, {"m": 1}, _encoder(calls), root=tmp_path, progress=False, dtype="bfloat16")
    assert isinstance(bf, BF16Matrix) and bf.shape == (500, 3) and bf.dtype == np.float32
    expect = from_bf16_bits(to_bf16_bits(np.asarray(full)))
    files = {p.stat().st_size for p in tmp_path.rglob("emb.npy")}
    assert min(files) < 0.6 * max(files)  # half the bytes (+ the .npy header)
    np.testing.assert_array_equal(np.asarray(bf), expect)
    np.testing.assert_array_equal(bf[100:200], expect[100:200])
    idx = np.array([[3, 499], [7, 7]])
    np.testing.assert_array_equal(bf[idx], expect[idx])
    again = pool_embeddings(pool, {"m": 1}, _encoder(calls), root=tmp_path, progress=False, dtype="bfloat16")
    assert sum(calls) == 1000 and isinstance(again.bits, np.memmap)  # cached: no third encoding
    q = make_queries([[i] for i in range(0, 500, 25)])
    qv = np.random.default_rng(1).standard_normal((len(q), 3)).astype(np.float32)
    row_of = {str(i): k for k, i in enumerate(q.ids)}
    a = scan(_FixedEmbeddings(bf, qv, row_of), q, pool, chunk_size=128)
    b = scan(_FixedEmbeddings(expect, qv, row_of), q, pool, chunk_size=128)
    np.testing.assert_array_equal(a.ranks.values, b.ranks.values)
    with pytest.raises(ValueError, match="float32, float16, bfloat16"):
        pool_embeddings(pool, {"m": 1}, _encoder(calls), root=tmp_path, progress=False, dtype="int8")



def _damage_cases():
    def truncate(f):
        f.write_bytes(f.read_bytes()[:-20])

    def alter(f):
        data = bytearray(f.read_bytes())
        data[-5] ^= 0xFF
        f.write_bytes(bytes(data))

    def other_dim(f):
        np.save(f, np.zeros((300, 4), dtype=np.float32))

    def nan(f):
        arr = np.load(f)
        arr[7, 1] = np.nan
        np.save(f, arr)

    def no_record(f):
        (f.parent / "emb.json").unlink()

    return {"truncated": truncate, "altered": alter, "other-dim": other_dim, "nan": nan, "no-record": no_record}


@pytest.mark.parametrize("case", sorted(_damage_cases()))
def test_a_damaged_cache_is_rebuilt_with_a_note(tmp_path, case):
    pool = make_pool(300)
    calls: list[int] = []
    good = np.array(pool_embeddings(pool, {"m": 1}, _encoder(calls), root=tmp_path, progress=False))
    (emb,) = tmp_path.rglob("emb.npy")
    _damage_cases()[case](emb)
    with pytest.warns(UserWarning, match="damaged"):
        again = pool_embeddings(pool, {"m": 1}, _encoder(calls), dim=3, root=tmp_path, progress=False)
    assert sum(calls) == 600  # encoded again
    np.testing.assert_array_equal(np.asarray(again), good)


def test_a_non_finite_vector_blames_the_encoder_and_caches_nothing(tmp_path):
    from rbench.core.errors import RankerOutputError

    def encode(texts):
        out = np.ones((len(texts), 2), dtype=np.float32)
        out[0, 0] = np.inf
        return out

    with pytest.raises(RankerOutputError, match="encoder returned a non-finite value for candidate 0"):
        pool_embeddings(make_pool(50), {"m": 2}, encode, root=tmp_path, progress=False)
    assert not list(tmp_path.rglob("emb.npy"))


def test_two_concurrent_encodings_of_a_new_pool_both_succeed(tmp_path):
    import threading
    import time

    pool = make_pool(400)
    calls: list[int] = []
    slow = _encoder(calls)

    def encode(texts):
        time.sleep(0.01)
        return slow(texts)

    out, errors = [], []

    def worker():
        try:
            out.append(np.asarray(pool_embeddings(pool, {"m": 3}, encode, batch_size=50, root=tmp_path,
                                                  progress=False)))
        except Exception as exc:  # noqa: BLE001 - the test reports it
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(out) == 2
    np.testing.assert_array_equal(out[0], out[1])
    assert sum(calls) == 400  # the second waited and read the first one's file
