"""Runs read back: a record's test set re-drawn as the runner drew it, the ranks its run file gives, and the runs ``compare`` reads.

They re-draw the test set with the runner's own sampling (``rbench.run``), so they sit above it and below ``rbench.public``.
"""
