"""Audits of committed records: re-run a record's ranker (``verify --rerun``, ``reproduce``) and hold its numbers against the record.

They run rankers through the public API (``rbench.public``), so they sit above it and below the CLI.
"""
