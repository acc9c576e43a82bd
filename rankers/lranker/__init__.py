"""LRanker, the paper's model, as an rbench ranker plugin (entry point ``lranker``).

Only ``config`` and ``ranker`` are imported when the plugin is listed; the model code (torch,
transformers, peft, scikit-learn) is imported when the ranker is fitted.
"""
