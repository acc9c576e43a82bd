"""Small things a shell user meets first: ``--version``, a reader that closes the pipe early, wide
tables in a pipe."""

from __future__ import annotations

import subprocess
import sys

import pytest

import rbench
from rbench.core.protocol import PROTOCOL_VERSION
from tests.cli.test_cli_data import run

RBENCH = [sys.executable, "-c", "from rbench.cli.app import entry; entry()"]


def test_version_names_the_release_and_the_evaluation_protocol(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.strip() == f"rbench {rbench.__version__} (evaluation protocol {PROTOCOL_VERSION})"


@pytest.mark.parametrize("argv", [["rankers"], ["tasks", "--json"], ["--help"]])  # rich, print, click
def test_a_reader_that_closes_the_pipe_early_is_not_an_error(argv):
    """``rbench rankers | head -1``: the reader goes away before rbench writes (its end of the
    pipe is closed at once, so the write always meets a closed pipe)."""
    proc = subprocess.Popen([*RBENCH, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    assert b"BrokenPipe" not in err and b"Traceback" not in err


def test_a_piped_table_keeps_its_columns():
    """Piped (not a terminal), rich would draw at 80 columns and cut wide tables to "…"."""
    proc = subprocess.run([*RBENCH, "rankers"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0
    assert max(len(line) for line in proc.stdout.splitlines()) > 80 and "…" not in proc.stdout
