"""The ``rbench`` command line: ``app`` (run, table, tasks, rankers, report, reproduce, ...) and
``data`` (download, prepare, import). The console script is ``rbench.cli.app:main``."""
