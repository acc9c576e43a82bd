"""Task data from outside: downloads, archives, provenance and the collection importers.

One module per concern (import the module you need; this package face holds no code):

- ``downloads``: checksummed, resumable transfers into the download cache (``fetch``), the
  sha256 manifest, and the sizes shown before ``rbench data download --all``;
- ``archives``: extraction that cannot escape its folder (``safe_extract``);
- ``install``: the raw folder filled from the download cache (``download_task``);
- ``provenance``: what data a task's raw folder holds (``DataSource``: the task's own or not);
- ``beir_writer``, ``from_ir_datasets``, ``from_hf``: ``rbench data import --ir-datasets`` /
  ``--hf`` write a BEIR folder from those packages.

Where files go
--------------
``RBENCH_HOME/downloads/<task>/<file>`` is the download cache (kept, so ``rbench data download
--force`` and re-extraction never need the network twice). ``install`` then fills
``rbench.core.paths.raw_dir(task)``, which the task loaders read: archives (zip, tar, tar.gz) are
extracted there with their own folder layout (MovieLens 1M lands in ``raw/rec-movie/ml-1m/``;
the loaders accept one subfolder), every other file is hard-linked there (no second copy on
disk, and deleting the download cache does not break the raw folder); when a hard link is not
possible (another file system) the file is copied.
"""
