"""rbench: a benchmark harness for LLM rankers over large candidate pools."""

__version__ = "0.1.0"
