"""Task families from another package (entry-point group ``rbench.tasks``) reach the CLI; a broken
one is skipped with one warning naming it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

PLUGIN = textwrap.dedent('''
    import numpy as np
    from rbench.api import Pool, TaskSpec
    from rbench.tasks.family import TaskFamily
    from rbench.tasks.building import QueryTable, assemble, split_labels

    COLOURS = TaskSpec(name="colours", title="Colours", scenario="large", domain="generic",
                       description="Find the colour a sentence is about.", paper_candidates=None,
                       paper_queries=None, sources=(), license="CC0", how_to_get="built in code")


    class ColourFamily(TaskFamily):
        name = "colours"
        cached = False

        def specs(self):
            return (COLOURS,)

        def check(self, spec):
            return True, "built in code"

        def load(self, spec, options, seed):
            names = ["red", "green", "blue", "yellow", "black", "white", "purple", "orange"]
            pool = Pool(ids=np.array(names, dtype=object), name=spec.name,
                        texts=np.array([f"the colour {c}" for c in names], dtype=object))
            things = ["a tomato", "grass", "the sky", "a banana", "coal", "snow", "a plum", "a carrot"]
            table = QueryTable(ids=np.array([f"q{i}" for i in range(40)], dtype=object),
                               texts=[f"what colour is {things[i % 8]}?" for i in range(40)],
                               positives=[np.array([i % 8]) for i in range(40)],
                               grades=[np.ones(1) for _ in range(40)])
            return assemble(spec, pool, table, split_labels(len(table), seed), info={"source": "code"})


    class Broken:
        pass
''')


def _site(tmp_path: Path, entry_points: str) -> Path:
    site = tmp_path / "site"
    (site / "colours_plugin-1.0.dist-info").mkdir(parents=True)
    (site / "colours_plugin.py").write_text(PLUGIN)
    (site / "colours_plugin-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: colours-plugin\nVersion: 1.0\n")
    (site / "colours_plugin-1.0.dist-info" / "entry_points.txt").write_text(entry_points)
    return site


def _rbench(site: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(site), "RBENCH_HOME": str(cwd / "home")}
    return subprocess.run([sys.executable, "-c", "from rbench.cli.app import entry; entry()", *args],
                          capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


def test_a_task_family_from_another_package_reaches_the_cli(tmp_path):
    site = _site(tmp_path, "[rbench.tasks]\ncolours = colours_plugin:ColourFamily\n")
    listed = _rbench(site, "tasks", "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    names = [t["name"] for t in json.loads(listed.stdout)]
    assert "colours" in names and "ml-100k" in names
    run = _rbench(site, "run", "-r", "bm25", "-t", "colours", "--no-write", "--json", "-q", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    record = json.loads(run.stdout)
    rec = record[0] if isinstance(record, list) else record
    assert rec["task"] == "colours" and rec["n_queries"] == 4


def test_a_broken_task_family_is_skipped_with_one_warning(tmp_path):
    site = _site(tmp_path, "[rbench.tasks]\nbroken = colours_plugin:Broken\nmissing = no_such_module:X\n")
    listed = _rbench(site, "tasks", "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "ml-100k" in [t["name"] for t in json.loads(listed.stdout)]
    assert "task family plugin 'broken'" in listed.stderr and "is not a rbench.tasks.family.TaskFamily" in listed.stderr
    assert "task family plugin 'missing'" in listed.stderr and "ModuleNotFoundError" in listed.stderr
