"""Built-in ranker plugins for rbench (registered under the rbench.rankers entry points)."""
