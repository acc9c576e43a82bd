"""Generative LLM rankers: RankGPT (listwise), PRP (pairwise), IRanker (iterative elimination) and
pointwise relevance generation, on one generation backend layer (in-process transformers, vLLM,
any OpenAI-compatible server) behind an on-disk response cache. docs/guides/generative.md."""
