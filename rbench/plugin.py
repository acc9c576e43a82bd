"""The toolkit for ranker plugins: what a ranker may use from rbench beyond the contract.

A ranker (built in under ``rankers/``, or a third party's, registered in the ``rbench.rankers``
entry-point group) imports the contract from ``rbench.api`` (``Pool``, ``Queries``, ``TaskData``,
...) and everything else from here, so that rbench's internal layout can change without breaking
a plugin. ``tests/test_imports.py`` holds the built-in rankers to that rule.

- base class and its defaults: ``BaseRanker``, ``NoOptions``, ``FLOAT32_KERNELS``;
- typed options with named presets: ``PresetOptions``; a numeric option's range, declared in its
  annotation: ``Range`` and the common ones (``AtLeast0``, ``AtLeast1``, ``Positive``, ``NonNegative``,
  ``Fraction``, ``DropoutRate``, ``Seed``; ``rbench.core.ranges``); a short hash of a config: ``config_hash``;
  the canonical text and hash of any JSON-like value (cache keys): ``canonical_json``, ``short_hash``;
- errors a user should read as one line: ``RBenchError``;
- the one HTTP policy for JSON requests (deadlines, byte cap, no credentials to another host):
  ``request_json``, ``HttpPolicy``, ``RequestFailed``, ``DeadlineExceeded``;
- the embedding cache: ``pool_embeddings`` (candidate vectors, encoded once per pool and model);
- writes that never leave half a file: ``atomic_write_text``, ``atomic_path``, ``atomic_dir``;
- scoring and measures for rankers that tune or check themselves on a validation split:
  ``scan`` (the engine's exact scan: top-k plus every positive's rank; ``evaluate``, its old name
  that collided with the user's ``rbench.evaluate``, still resolves with a DeprecationWarning),
  ``ranker_scorer``, ``vector_scorer``, ``MEASURES``, ``per_query``, ``aggregate``, ``paired_randomization``;
- task helpers: ``routing_outcomes`` (the per-model outcomes of a routing task's queries).
"""

from __future__ import annotations

from typing import Any

from rbench.api import FLOAT32_KERNELS, BaseRanker, NoOptions
from rbench.core.atomic import atomic_dir, atomic_path, atomic_write_text
from rbench.core.config import PresetOptions, config_hash
from rbench.core.errors import RBenchError
from rbench.core.hashing import ast_digest, canonical_json, short_hash
from rbench.core.http import DeadlineExceeded, HttpPolicy, RequestFailed, request_json
from rbench.core.ranges import AtLeast0, AtLeast1, DropoutRate, Fraction, NonNegative, Positive, Range, Seed
from rbench.engine.embeddings import pool_embeddings
from rbench.engine.metrics import MEASURES, aggregate, per_query
from rbench.engine.scan import scan
from rbench.engine.scorers import Scorer, ranker_scorer, vector_scorer
from rbench.results.significance import paired_randomization
from rbench.tasks.families.routing import routing_outcomes

__all__ = [
    "AtLeast0", "AtLeast1", "DropoutRate", "Fraction", "NonNegative", "Positive", "Range", "Seed",
    "FLOAT32_KERNELS", "MEASURES", "BaseRanker", "DeadlineExceeded", "HttpPolicy", "NoOptions", "PresetOptions",
    "RBenchError", "RequestFailed", "Scorer", "aggregate", "request_json",
    "ast_digest", "atomic_dir", "atomic_path", "atomic_write_text", "canonical_json", "config_hash", "paired_randomization",
    "per_query", "pool_embeddings", "ranker_scorer", "routing_outcomes", "scan", "short_hash", "vector_scorer",
]


def __getattr__(name: str) -> Any:
    """``evaluate``, the old name of ``scan``, still resolves (with a DeprecationWarning) so that a
    third-party plugin written against it keeps running; it collided with ``rbench.evaluate``."""
    if name == "evaluate":
        import warnings

        warnings.warn("rbench.plugin.evaluate is deprecated: use rbench.plugin.scan (same function)",
                      DeprecationWarning, stacklevel=2)
        return scan
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
