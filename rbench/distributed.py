"""Beyond one machine, on Ray: sharded exact scoring and sharded candidate embedding.

Why Ray: it is already in the ``recsys`` environment (RecBole pulls it), it schedules plain Python
functions and stateful actors over a cluster with one call, and an actor pool keeps one model
replica per worker/GPU — exactly the shape of "encode 48M candidate texts". Nothing here is needed on one machine; the single-process engine stays the default.

Exactness: each shard scans a disjoint range of the pool but scores every query's positives
itself, so it returns, per positive, how many of *its* candidates score higher / tie; summing
those counts over shards and merging the per-shard top-k (``rbench.engine.merge``) gives exactly
the single-process ranks and metrics (tested on a 2-CPU local cluster).

Storage: the candidate matrix is a ``.npy`` file every worker can open (local disk on one box,
shared storage on a cluster); workers memory-map it and touch only their range plus the
positives' rows.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rbench.api import Pool, Queries
from rbench.engine import EvalResult, evaluate, merge


class _FixedEmbeddings:
    """An EmbeddingRanker over precomputed arrays (what a shard worker scores with)."""

    name, version, config = "fixed", "0", {}

    def __init__(self, emb: np.ndarray, query_vectors: np.ndarray, row_of: dict[str, int]) -> None:
        self.emb, self.q, self.row_of = emb, query_vectors, row_of

    def fit(self, task: Any) -> None:
        return None

    def encode_pool(self, pool: Pool) -> np.ndarray:
        return self.emb

    def encode_queries(self, queries: Queries) -> np.ndarray:
        return self.q[[self.row_of[str(i)] for i in queries.ids]]


class _Sized:
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: Any) -> str:
        return ""


def score_shard(emb_path: str, query_vectors: np.ndarray, queries: Queries, pool_range: tuple[int, int],
                topk: int = 100, batch_size: int = 256, chunk_size: int = 65536) -> EvalResult:
    """Evaluate one pool shard (runs inside a Ray task; also callable directly)."""
    emb = np.load(emb_path, mmap_mode="r")
    n = emb.shape[0]
    pool = Pool(ids=np.arange(n).astype(str).astype(object), texts=_Sized(n), name="shard")
    ranker = _FixedEmbeddings(emb, query_vectors, {str(q): i for i, q in enumerate(queries.ids)})
    return evaluate(ranker, queries, pool, topk=topk, batch_size=batch_size, chunk_size=chunk_size,
                    pool_range=pool_range)


def shard_bounds(n: int, n_shards: int) -> list[tuple[int, int]]:
    edges = np.linspace(0, n, n_shards + 1).astype(np.int64)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:]) if b > a]


def evaluate_sharded(emb_path: str | Path, query_vectors: np.ndarray, queries: Queries, n_shards: int,
                     topk: int = 100, **ray_init: Any) -> EvalResult:
    """Score ``queries`` against the memory-mapped candidate matrix in ``n_shards`` Ray tasks."""
    import ray

    if not ray.is_initialized():
        ray.init(**{"include_dashboard": False, "log_to_driver": False, **ray_init})
    n = np.load(str(emb_path), mmap_mode="r").shape[0]
    remote = ray.remote(score_shard)
    q_ref, v_ref = ray.put(queries), ray.put(np.ascontiguousarray(query_vectors, dtype=np.float32))
    futures = [remote.remote(str(emb_path), v_ref, q_ref, b, topk) for b in shard_bounds(n, n_shards)]
    return merge(ray.get(futures))


def embed_pool_ray(texts: list[str], make_encoder: Callable[[], Callable[[list[str]], np.ndarray]],
                   out_path: str | Path, *, workers: int = 2, batch_size: int = 256,
                   num_gpus_per_worker: float = 0.0) -> np.ndarray:
    """Encode candidate texts on a Ray actor pool (one model replica per worker / GPU) and write
    the (N, d) float32 matrix to ``out_path`` (.npy), rows in input order, batch by batch.

    Why an actor pool and not Ray Data's ``map_batches``: the Ray that RecBole pins (2.6.3) has a
    Ray Data that imports ``pkg_resources._vendor``, which setuptools >= 77 (required by torch
    2.13) no longer ships, so Ray Data cannot share the ``recsys`` environment. Ray core actors can,
    and give the same shape: a stateful replica per worker fed batches in parallel.
    ``make_encoder`` is called once inside each actor (each worker loads its own model).
    """
    import ray
    from ray.util import ActorPool

    if not ray.is_initialized():
        ray.init(include_dashboard=False, log_to_driver=False)

    @ray.remote(num_gpus=num_gpus_per_worker)
    class _Encoder:
        def __init__(self, factory: Callable[[], Callable[[list[str]], np.ndarray]]) -> None:
            self.encode = factory()

        def run(self, start: int, batch: list[str]) -> tuple[int, np.ndarray]:
            return start, np.asarray(self.encode(batch), dtype=np.float32)

    actors = ActorPool([_Encoder.remote(make_encoder) for _ in range(max(1, workers))])
    jobs = [(a, texts[a : a + batch_size]) for a in range(0, len(texts), batch_size)]
    if not jobs:
        raise ValueError("no texts to encode")
    out_path = Path(out_path)
    tmp = out_path.with_name(out_path.name + ".partial.npy")
    result = None
    for start, vecs in actors.map_unordered(lambda actor, job: actor.run.remote(*job), jobs):
        if result is None:
            result = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(len(texts), vecs.shape[1]))
        result[start : start + len(vecs)] = vecs
    result.flush()
    del result
    tmp.replace(out_path)
    return np.load(out_path, mmap_mode="r")
