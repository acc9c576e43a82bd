"""The package's release version, declared once.

Why here and not in ``rbench/__init__.py``: the task store and the RunRecord write it, and they
sit below the package face (which re-exports the public API); reading it from ``rbench`` would be
an import that runs back up the layers. ``rbench.__version__`` re-exports this constant. What a
record's numbers depend on is ``rbench.core.protocol``, not this.
"""

__version__ = "0.2.0"  # follows releases
