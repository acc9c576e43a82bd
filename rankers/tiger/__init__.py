"""TIGER: semantic IDs (quantiser.py), a T5 over them (model.py, train.py), the ranker (ranker.py)."""

from rbench_rankers.tiger.ranker import CPU_PRESET, TigerOptions, TigerRanker

__all__ = ["CPU_PRESET", "TigerOptions", "TigerRanker"]
