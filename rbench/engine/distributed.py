"""Beyond one machine, on Ray: sharded candidate embedding and sharded exact scoring.

Why Ray: it schedules stateful actors (one model replica per worker/GPU) and plain tasks over a
cluster with one call, Ray Data streams row batches through an actor pool with back-pressure,
and it is already in the ``recsys`` environment (RecBole pulls it).

Two environments (docs/guides/scale.md): RecBole 1.2.1 pins ``ray<=2.6.3``, whose Ray Data imports
``pkg_resources._vendor`` (gone from the setuptools torch 2.13 needs), so Ray Data cannot run
beside the ``recsys`` extra. ``pip install 'rbench[distributed]'`` without ``recsys`` gets a
current Ray whose Ray Data is used (``map_batches`` with an actor pool); in the ``recsys``
environment the same worker class runs on Ray core's ``ActorPool``. Both write the same output
and both are tested.

Output: a ``rbench.engine.sharded`` directory — each worker writes the shards it encodes straight to
(shared) storage; only row ranges travel through Ray, never texts or vectors. Texts are read by
the workers themselves from the pool's lazy text column (``ArrowTexts`` pickles as its file
path), so the driver never holds them.

Exact sharded scoring: each task scans a disjoint row range of the candidate matrix but scores
every query's positives itself, and returns per positive how many of *its* candidates score
higher / tie plus its top-k; ``rbench.engine.scan.merge`` sums and merges them. Task ranges sit on the
engine's chunk grid, so every GEMM a task runs is the one the single process runs for the same
candidates: the scores, hence ranks, ties, top-k and metrics, are bit-identical (tested on a
2-CPU local cluster).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rbench.api import Pool, Queries
from rbench.core.settings import DEFAULTS
from rbench.engine.embeddings import _bar
from rbench.engine.scan import EvalResult, merge, scan
from rbench.engine.scorers import vector_scorer
from rbench.engine.sharded import ShardedArray, finish, open_matrix, shard_path, write_shard

EncoderFactory = Callable[[], Callable[[list[str]], np.ndarray]]


class _FixedEmbeddings:
    """An EmbeddingRanker over precomputed arrays (what a shard worker scores with)."""

    name, version, config = "fixed", "0", {}

    def __init__(self, emb: Any, query_vectors: np.ndarray, row_of: dict[str, int]) -> None:
        self.emb, self.q, self.row_of = emb, query_vectors, row_of

    def fit(self, task: Any) -> None:
        return None

    def encode_pool(self, pool: Pool) -> Any:
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


# --------------------------------------------------------------------------------------------
# scoring
# --------------------------------------------------------------------------------------------


def score_shard(matrix: str | Path | Any, query_vectors: np.ndarray, queries: Queries,
                pool_range: tuple[int, int], topk: int = DEFAULTS.topk,
                batch_size: int = DEFAULTS.batch_size, chunk_size: int = DEFAULTS.chunk_size) -> EvalResult:
    """Evaluate one row range of the candidate matrix (a ``.npy`` path, a sharded directory or an
    array); runs inside a Ray task, also callable directly."""
    emb = open_matrix(matrix)
    n = emb.shape[0]
    pool = Pool(ids=np.arange(n).astype(str).astype(object), texts=_Sized(n), name="shard")
    # no whole-matrix finiteness scan per shard: the engine checks this shard's scores instead
    scorer = vector_scorer(emb, query_vectors, queries, "shard")
    return scan(None, queries, pool, topk=topk, batch_size=batch_size, chunk_size=chunk_size,
                pool_range=pool_range, scorer=scorer)


def shard_bounds(n: int, n_shards: int, align: int = 1) -> list[tuple[int, int]]:
    """``n_shards`` contiguous row ranges of about equal size, edges on multiples of ``align``."""
    units = -(-n // align) if n else 0
    edges = np.minimum(np.linspace(0, units, n_shards + 1).round().astype(np.int64) * align, n)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:]) if b > a]


def scan_sharded(matrix: str | Path, query_vectors: np.ndarray, queries: Queries, n_shards: int,
                 topk: int = DEFAULTS.topk, batch_size: int = DEFAULTS.batch_size,
                 chunk_size: int = DEFAULTS.chunk_size,
                 **ray_init: Any) -> EvalResult:
    """Score ``queries`` against the candidate matrix in ``n_shards`` Ray tasks; the result equals
    ``scan`` over the whole matrix with the same ``batch_size`` and ``chunk_size``."""
    import ray

    _init(ray, ray_init)
    n = open_matrix(matrix).shape[0]
    remote = ray.remote(score_shard)
    q_ref, v_ref = ray.put(queries), ray.put(np.ascontiguousarray(query_vectors, dtype=np.float32))
    futures = [remote.remote(str(matrix), v_ref, q_ref, b, topk, batch_size, chunk_size)
               for b in shard_bounds(n, n_shards, align=chunk_size)]
    return merge(ray.get(futures))


# --------------------------------------------------------------------------------------------
# embedding
# --------------------------------------------------------------------------------------------


class ShardEncoder:
    """Runs in each worker: one model replica (``make_encoder()`` is called once, in the worker);
    takes row ranges, reads their texts itself, writes one shard per range."""

    def __init__(self, make_encoder: EncoderFactory, texts: Any, out_dir: str, batch_size: int = 256,
                 dtype: str = "float32") -> None:
        self.encode = make_encoder()
        self.texts, self.out_dir, self.batch_size, self.dtype = texts, out_dir, batch_size, dtype

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        for a, b in zip(batch["start"].tolist(), batch["stop"].tolist()):
            if shard_path(self.out_dir, a).exists():  # resumed run: this shard is complete
                continue
            parts = []
            for i in range(a, b, self.batch_size):
                chunk = [str(t) for t in self.texts[i : min(i + self.batch_size, b)]]
                vecs = np.asarray(self.encode(chunk), dtype=np.float32)
                if vecs.ndim != 2 or len(vecs) != len(chunk):
                    raise ValueError(f"encoder returned shape {vecs.shape} for {len(chunk)} texts")
                parts.append(vecs)
            write_shard(self.out_dir, a, np.concatenate(parts).astype(self.dtype, copy=False))
        return {"start": batch["start"], "stop": batch["stop"]}


def ray_data_usable() -> bool:
    """Whether this environment's Ray Data can run (not the Ray 2.6.3 RecBole pins)."""
    try:
        import ray

        if tuple(int(x) for x in ray.__version__.split(".")[:2]) < (2, 10):  # concurrency=, override_num_blocks=
            return False
        import ray.data.extensions  # noqa: F401  (the import that fails under ray 2.6.3)
    except Exception:
        return False
    return True


def embed_pool_distributed(texts: Any, make_encoder: EncoderFactory, out_dir: str | Path, *,
                           workers: int = 2, shard_rows: int = 65536, batch_size: int = 256,
                           num_gpus_per_worker: float = 0.0, dtype: str = "float32",
                           backend: str = "auto", progress: bool = True, **ray_init: Any) -> ShardedArray:
    """Encode every text of ``texts`` (a pool's lazy text column: only workers read it) on a Ray
    actor pool into the sharded array ``out_dir`` (shards of ``shard_rows`` rows, resumable).

    ``backend``: ``"ray-data"`` (``map_batches`` over row ranges with an actor pool),
    ``"actors"`` (Ray core ``ActorPool``, for the Ray that RecBole pins) or ``"auto"``.
    ``shard_rows`` a multiple of the engine's ``chunk_size`` keeps chunks inside one shard."""
    import ray

    if backend == "auto":
        backend = "ray-data" if ray_data_usable() else "actors"
    if backend not in ("ray-data", "actors"):
        raise ValueError(f"unknown backend {backend!r}: expected auto, ray-data or actors")
    n = len(texts)
    if n == 0:
        raise ValueError("no texts to encode")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    todo = [(a, min(a + shard_rows, n)) for a in range(0, n, shard_rows)
            if not shard_path(out_dir, a).exists()]
    _init(ray, ray_init)
    args = {"make_encoder": make_encoder, "texts": texts, "out_dir": str(out_dir), "batch_size": batch_size,
            "dtype": dtype}
    bar = _bar(progress, n, f"embedding {n:,} candidates ({backend}, {workers} workers)")
    advance = (lambda k: bar[0].advance(bar[1], k)) if bar is not None else (lambda k: None)
    try:
        advance(n - sum(b - a for a, b in todo))
        if todo and backend == "ray-data":
            import ray.data

            # one block per shard, so every actor of the pool gets work
            ds = ray.data.from_items([{"start": a, "stop": b} for a, b in todo], override_num_blocks=len(todo))
            out = ds.map_batches(ShardEncoder, fn_constructor_kwargs=args, batch_size=1, batch_format="numpy",
                                 concurrency=max(1, min(workers, len(todo))), num_gpus=num_gpus_per_worker or None)
            for row in out.iter_rows():
                advance(int(row["stop"]) - int(row["start"]))
        elif todo:
            from ray.util import ActorPool

            actor = ray.remote(num_gpus=num_gpus_per_worker)(ShardEncoder)
            pool = ActorPool([actor.remote(**args) for _ in range(max(1, min(workers, len(todo))))])
            jobs = [{"start": np.array([a]), "stop": np.array([b])} for a, b in todo]
            for done in pool.map_unordered(lambda act, job: act.__call__.remote(job), jobs):
                advance(int(done["stop"][0] - done["start"][0]))
    finally:
        if bar is not None:
            bar[0].stop()
    return finish(out_dir, n)


def _init(ray: Any, ray_init: dict[str, Any]) -> None:
    if not ray.is_initialized():
        ray.init(**{"include_dashboard": False, "log_to_driver": False, **ray_init})
