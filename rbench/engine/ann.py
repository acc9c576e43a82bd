"""Optional faiss indexes, measured against the exact scan — never used for headline metrics.

Headline metrics always come from the engine's exact full-rank scan. An approximate index
(IVF, HNSW, PQ) is what a deployment would use, so ``rbench run --ann hnsw`` additionally builds
it over the same candidate vectors, searches the same query vectors, and records in the RunRecord
how much of the exact top-k it recovers (recall@k), how often it still finds each positive in its
top-k, and its build/search times.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from rbench.core.errors import RBenchError
from rbench.core.settings import DEFAULT_SEED

BACKENDS = ("flat", "ivf", "hnsw", "pq")


def build_index(emb: np.ndarray, backend: str, seed: int = DEFAULT_SEED) -> Any:
    try:
        import faiss
    except ImportError as exc:
        raise RBenchError("--ann needs faiss: pip install 'rbench[ann]'") from exc
    n, d = emb.shape
    x = np.ascontiguousarray(emb, dtype=np.float32)
    if backend == "flat":
        index = faiss.IndexFlatIP(d)
    elif backend == "hnsw":
        index = faiss.IndexHNSWFlat(d, 32, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efSearch = 128
    elif backend == "ivf":
        nlist = max(1, min(4096, int(4 * np.sqrt(n))))
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(d), d, nlist, faiss.METRIC_INNER_PRODUCT)
        index.cp.seed = seed
        index.train(x[np.random.default_rng(seed).choice(n, size=min(n, 50 * nlist), replace=False)])
        index.nprobe = max(1, nlist // 16)
    elif backend == "pq":
        m = next(m for m in (16, 8, 4, 2, 1) if d % m == 0)
        index = faiss.IndexPQ(d, m, 8, faiss.METRIC_INNER_PRODUCT)
        index.train(x[np.random.default_rng(seed).choice(n, size=min(n, 20000), replace=False)])
    else:
        raise RBenchError(f"unknown --ann backend {backend!r}; known: {', '.join(BACKENDS)}")
    index.add(x)
    return index


def exact_topk(emb: np.ndarray, query_vectors: np.ndarray, k: int, chunk: int = 65536) -> np.ndarray:
    """Brute-force top-k by inner product (the reference the index is measured against)."""
    from rbench.engine.scan import _topk_rows

    q = np.ascontiguousarray(query_vectors, dtype=np.float32)
    best_i = np.full((len(q), 0), -1, dtype=np.int64)
    best_v = np.full((len(q), 0), -np.inf, dtype=np.float32)
    for a in range(0, emb.shape[0], chunk):
        s = q @ np.asarray(emb[a : a + chunk], dtype=np.float32).T
        ci, cv = _topk_rows(s, k)
        mi = np.concatenate([best_i, ci + a], axis=1)
        mv = np.concatenate([best_v, cv.astype(np.float32)], axis=1)
        oi, ov = _topk_rows(mv, k)
        best_i, best_v = np.take_along_axis(mi, oi, axis=1), ov
    return best_i


def measure(emb: np.ndarray, query_vectors: np.ndarray, positives: list[np.ndarray], backend: str,
            k: int = 100, seed: int = DEFAULT_SEED) -> dict[str, Any]:
    """Recall of the approximate top-k against the exact top-k of the same vectors (no
    exclusions on either side), plus how often each query's positives are in the ANN top-k."""
    k = min(k, emb.shape[0])
    t = time.perf_counter()
    index = build_index(emb, backend, seed)
    build_s = time.perf_counter() - t
    t = time.perf_counter()
    _, approx = index.search(np.ascontiguousarray(query_vectors, dtype=np.float32), k)
    search_s = time.perf_counter() - t
    exact = exact_topk(emb, query_vectors, k)
    overlap = [len(np.intersect1d(a[a >= 0], e)) / k for a, e in zip(approx, exact)]
    found = [float(np.isin(p, a).mean()) for p, a in zip(positives, approx)]
    found_exact = [float(np.isin(p, e).mean()) for p, e in zip(positives, exact)]
    return {"backend": backend, "k": int(k), "n_queries": len(query_vectors),
            f"recall@{k}_vs_exact": float(np.mean(overlap)),
            f"positives_in_top{k}_ann": float(np.mean(found)),
            f"positives_in_top{k}_exact": float(np.mean(found_exact)),
            "build_s": round(build_s, 4),
            "search_ms_per_query": round(1000 * search_s / max(1, len(query_vectors)), 4),
            "note": "approximate index measured against a brute-force scan of the same vectors; "
                    "headline metrics are always the exact scan's"}
