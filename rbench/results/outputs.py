"""The one rule for a command's ``-o/--output`` file (``rbench table``, ``rbench plot``, ``rbench
data qrels``), so that the path a command prints is always the path it wrote:

- none given: the command's default file (``leaderboards/<name>`` under the current folder);
- a folder (one that exists, or a path ending in ``/``): the default file name inside it;
- a name without a suffix: the format's suffix is added (``-o board -f csv`` writes
  ``board.csv``; matplotlib would add ``.png`` on its own anyway);
- a name with a suffix: as given, except where the format is fixed by the suffix (``suffix_required``:
  a figure is a ``.png``) and it is another one: refused, one line.

Then ``rbench.results.record.require_target`` refuses, before any work, a path that cannot be written (a
file where one of its folders should be). ``rbench reproduce -o`` names a folder, always (it
writes several files into it); it is checked with ``require_target(..., folder=True)``.
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_DIR = Path("leaderboards")


def output_file(given: str | Path | None, default_name: str, suffix: str, option: str = "--output", *,
                suffix_required: bool = False, default_dir: Path = DEFAULT_DIR) -> Path:
    """The file a command writes for ``-o given`` (module doc); ``default_name`` ends in ``suffix``."""
    from rbench.results.record import require_target

    if given is None:
        path = default_dir / default_name
    else:
        text = os.fspath(given)
        path = Path(text).expanduser()
        seps = (os.sep, os.altsep) if os.altsep else (os.sep,)
        if text.endswith(seps) or path.is_dir():
            path = path / default_name
        elif not path.suffix:
            path = path.with_name(path.name + suffix)
    require_target(path, option, suffix=suffix if suffix_required else None)
    return path
