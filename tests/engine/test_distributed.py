"""Ray path: sharded scoring and sharded embedding give exactly the single-process results
(a local 2-CPU cluster started by the test). Runs in both install paths: the main environment
(Ray 2.6.3 pinned by RecBole: the Ray core actor-pool backend) and the ``distributed`` one
(current Ray: the Ray Data backend) — see docs/guides/scale.md, "Two environments"."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from rbench.engine.distributed import (
    ShardEncoder,
    _FixedEmbeddings,
    embed_pool_distributed,
    ray_data_usable,
    scan_sharded,
    score_shard,
    shard_bounds,
)
from rbench.engine.metrics import aggregate, per_query
from rbench.engine.scan import merge, scan
from rbench.engine.sharded import ShardedArray, finish, open_matrix, write_shard
from tests.helpers import make_pool, make_queries

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    yield
    ray.shutdown()


def _data(tmp_path, n_pool=3000, n_q=60, d=16, duplicates=True):
    rng = np.random.default_rng(0)
    emb = np.round(rng.standard_normal((n_pool, d)), 1).astype(np.float32)  # coarse values
    qv = rng.standard_normal((n_q, d)).astype(np.float32)
    positives = [rng.choice(n_pool, size=int(rng.integers(1, 3)), replace=False).tolist() for _ in range(n_q)]
    if duplicates:  # exact copies of positives elsewhere in the pool: real ties
        for i, p in enumerate(positives[:20]):
            emb[(p[0] + 1000 + i) % n_pool] = emb[p[0]]
    path = tmp_path / "emb.npy"
    np.save(path, emb)
    return emb, qv, path, make_queries(positives)


def _whole(emb, qv, q, chunk_size):
    ranker = _FixedEmbeddings(emb, qv, {str(i): k for k, i in enumerate(q.ids)})
    return scan(ranker, q, make_pool(len(emb)), chunk_size=chunk_size, batch_size=32)


def _assert_identical(a, b):
    np.testing.assert_array_equal(a.ranks.values, b.ranks.values)
    np.testing.assert_array_equal(a.topk_score, b.topk_score)
    np.testing.assert_array_equal(a.topk_index, b.topk_index)
    np.testing.assert_array_equal(a.n_ranked, b.n_ranked)


def test_shard_bounds_cover_and_align():
    assert shard_bounds(3000, 4, align=512) == [(0, 1024), (1024, 1536), (1536, 2048), (2048, 3000)]
    for n, k, al in [(1, 3, 1), (10, 3, 1), (1000, 7, 64), (65536 * 3 + 5, 2, 65536)]:
        b = shard_bounds(n, k, al)
        assert b[0][0] == 0 and b[-1][1] == n and all(x[1] == y[0] for x, y in zip(b, b[1:]))
        assert all(a % al == 0 for a, _ in b)


def test_shard_function_matches_single_process(tmp_path):
    emb, qv, path, q = _data(tmp_path)
    whole = _whole(emb, qv, q, chunk_size=256)
    parts = [score_shard(str(path), qv, q, b, batch_size=32, chunk_size=256)
             for b in shard_bounds(len(emb), 3, align=256)]
    _assert_identical(merge(parts), whole)


def test_ray_sharded_metrics_identical(tmp_path, cluster):
    emb, qv, path, q = _data(tmp_path)
    whole = _whole(emb, qv, q, chunk_size=512)
    sharded = scan_sharded(path, qv, q, n_shards=4, batch_size=32, chunk_size=512)
    _assert_identical(sharded, whole)
    assert aggregate(per_query(sharded.ranks, q.grades)) == aggregate(per_query(whole.ranks, q.grades))


def test_sharded_array_reads_like_the_array(tmp_path):
    rng = np.random.default_rng(3)
    full = rng.standard_normal((1000, 5)).astype(np.float32)
    for a in (0, 300, 301, 700):  # uneven shards
        write_shard(tmp_path, a, full[a : {0: 300, 300: 301, 301: 700, 700: 1000}[a]])
    arr = finish(tmp_path, 1000)
    assert arr.shape == (1000, 5) and arr.dtype == np.float32 and len(arr) == 1000
    np.testing.assert_array_equal(arr[250:720], full[250:720])
    np.testing.assert_array_equal(arr[300:301], full[300:301])
    idx = rng.integers(0, 1000, (7, 3))
    np.testing.assert_array_equal(arr[idx], full[idx])
    np.testing.assert_array_equal(arr[999], full[999])
    np.testing.assert_array_equal(arr[10:20, :2], full[10:20, :2])
    np.testing.assert_array_equal(np.asarray(arr), full)
    again = pickle.loads(pickle.dumps(arr))  # workers get the path, not the data
    assert len(pickle.dumps(arr)) < 500
    np.testing.assert_array_equal(again[0:1000], full)
    assert isinstance(open_matrix(tmp_path), ShardedArray)


def test_sharded_array_refuses_gaps_and_wrong_totals(tmp_path):
    write_shard(tmp_path, 0, np.zeros((10, 2), np.float32))
    write_shard(tmp_path, 20, np.zeros((10, 2), np.float32))
    with pytest.raises(ValueError, match="rows 10..19 have no shard"):
        finish(tmp_path, 30)
    write_shard(tmp_path, 10, np.zeros((10, 2), np.float32))
    with pytest.raises(ValueError, match="hold 30 rows, expected 31"):
        finish(tmp_path, 31)
    with pytest.raises(FileNotFoundError, match="not a finished sharded array"):
        ShardedArray.open(tmp_path)  # no manifest was written by the failed finishes


def test_engine_scores_a_sharded_matrix_like_the_npy(tmp_path):
    emb, qv, path, q = _data(tmp_path)
    for a in range(0, len(emb), 512):
        write_shard(tmp_path / "sh", a, emb[a : a + 512])
    arr = finish(tmp_path / "sh", len(emb))
    _assert_identical(_whole(arr, qv, q, chunk_size=512), _whole(emb, qv, q, chunk_size=512))


def _encoder_factory():
    """A model factory local to a function, so Ray pickles it by value (workers cannot import
    the test module)."""
    def make_encoder():
        def encode(batch):
            return np.array([[len(t), sum(map(ord, t)) % 101, 1.0] for t in batch], dtype=np.float32)
        return encode
    return make_encoder


_make_encoder = _encoder_factory()


def test_shard_encoder_writes_only_missing_shards(tmp_path):
    texts = [f"t{i}" for i in range(10)]
    enc = ShardEncoder(_make_encoder, texts, str(tmp_path), batch_size=3)
    write_shard(tmp_path, 0, np.full((5, 3), -1, np.float32))  # an earlier run's shard
    enc({"start": np.array([0, 5]), "stop": np.array([5, 10])})
    arr = finish(tmp_path, 10)
    np.testing.assert_array_equal(arr[0:5], -1)  # kept, not recomputed
    np.testing.assert_array_equal(arr[5:10], _make_encoder()(texts[5:10]))


@pytest.mark.parametrize("backend", ["actors", "ray-data"])
def test_ray_embedding_in_order_and_resumable(tmp_path, cluster, backend):
    if backend == "ray-data" and not ray_data_usable():
        pytest.skip(f"Ray Data cannot run with ray {ray.__version__} (the recsys environment); "
                    "tested in the distributed environment")
    texts = [f"candidate number {i} " + "x" * (i % 7) for i in range(500)]
    out = embed_pool_distributed(texts, _make_encoder, tmp_path / "pool", workers=2, shard_rows=64,
                                 batch_size=16, backend=backend, progress=False)
    np.testing.assert_array_equal(np.asarray(out), _make_encoder()(texts))
    assert len(out.files) == 8
    # resume: a lost shard is recomputed, the others are left as they are
    (tmp_path / "pool" / out.files[3]).unlink()
    (tmp_path / "pool" / "manifest.json").unlink()
    before = (tmp_path / "pool" / out.files[0]).stat().st_mtime_ns
    again = embed_pool_distributed(texts, _make_encoder, tmp_path / "pool", workers=2, shard_rows=64,
                                   batch_size=16, backend=backend, progress=False)
    np.testing.assert_array_equal(np.asarray(again), _make_encoder()(texts))
    assert (tmp_path / "pool" / out.files[0]).stat().st_mtime_ns == before


def test_arrow_texts_pickle_as_their_file(tmp_path):
    import pyarrow as pa

    from rbench.tasks.text_columns import ArrowTextColumn

    path = tmp_path / "pool.arrow"
    table = pa.table({"texts": [f"text {i}" for i in range(2000)]})
    with pa.ipc.new_file(str(path), table.schema) as w:
        w.write_table(table)
    texts = ArrowTextColumn.from_file(str(path), "texts")
    blob = pickle.dumps(texts)
    assert len(blob) < 500 and pickle.loads(blob)[1500:1502] == ["text 1500", "text 1501"]


def test_run_with_ray_shards_gives_the_single_process_record(monkeypatch, tmp_path, cluster):
    import importlib.util

    if importlib.util.find_spec("recbole") is None:  # the distributed environment has no ml-100k
        pytest.skip("ml-100k ships inside recbole (the recsys environment)")
    from rbench import rankers as plugins
    from rbench.core.errors import RBenchError
    from rbench.run.runner import RunOptions, run
    from tests.engine.test_ann import _HashEmbed

    class EP:
        def load(self):
            return _HashEmbed

    real = plugins._entry_points
    monkeypatch.setattr(plugins, "_entry_points", lambda: {**real(), "hashemb": EP()})
    opts = dict(ranker="hashemb", task="ml-100k", results_dir=tmp_path, max_queries=300, chunk_size=256,
                write=False)
    single = run(RunOptions(**opts))
    sharded = run(RunOptions(**opts, ray_shards=3))
    assert sharded.record.metrics == single.record.metrics
    for name in single.per_query:
        np.testing.assert_array_equal(sharded.per_query[name], single.per_query[name])
    assert sharded.record.run_options["ray_shards"] == 3
    with pytest.raises(RBenchError, match="needs an embedding ranker"):
        run(RunOptions(**{**opts, "ranker": "pop"}, ray_shards=2))
