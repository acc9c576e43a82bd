"""Scoring: the exact scan (``scan.scan``) and its fused/GEMM kernels, measures, run files,
embeddings and their cache, ANN indexes, two-stage reranking, sharded and distributed scoring,
and ranker discovery (``plugins``)."""
