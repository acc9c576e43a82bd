"""Model resolution and weight identities (``rbench_rankers.models``) give the values they gave
before the loading code had one home: these strings are in cache keys (LRanker's checkpoints and
candidate vectors, the generative response cache, dense candidate vectors), so a change to any of
them silently orphans every cache built before it. The expected values were computed with the
code as it stood in ``rankers/lranker/model.py``, ``rankers/generative/backends/transformers.py``
and ``rankers/dense.py`` before the move, on the folder ``_folder`` builds (fixed bytes, fixed
mtimes). None of this needs torch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rbench.core.errors import RBenchError
from rbench_rankers import models
from rbench_rankers.models import (
    local_files_hash,
    model_fingerprint,
    resolve_folder,
    resolve_model,
    weights_digest,
)

MTIME_NS = 1_700_000_000_500_000_000  # a half second: int(st_mtime) and st_mtime_ns both count
FILES = {"config.json": b'{"a": 1}', "model.safetensors": b"w" * 100, "tokenizer.json": b"{}",
         "chat_template.jinja": b"x", "README.md": b"r", "a.gguf": b"GGUF1", "b.gguf": b"GGUF22",
         "1_Pooling/config.json": b'{"p": 2}'}


def _folder(root: Path) -> Path:
    """A model folder: two GGUFs, a sentence-transformers subfolder, files each identity skips."""
    folder = root / "m"
    (folder / "1_Pooling").mkdir(parents=True)
    for name, data in FILES.items():
        (folder / name).write_bytes(data)
        os.utime(folder / name, ns=(MTIME_NS, MTIME_NS))
    return folder


@pytest.fixture
def folder(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))  # weights_digest's sha256 memo
    return _folder(tmp_path)


def test_lranker_model_fingerprint_is_unchanged(folder):
    """Names, sizes and whole-second mtimes of the top-level weight files (only the named GGUF)."""
    assert model_fingerprint(str(folder), None) == {"model": str(folder.resolve()), "gguf_file": None,
                                                    "files": "e14e0ecfc8acd3f9"}
    assert model_fingerprint(str(folder), "a.gguf")["files"] == "a0cbab2d949afccc"
    assert model_fingerprint(str(folder / "b.gguf"), None) == {"model": str(folder.resolve()), "gguf_file": "b.gguf",
                                                               "files": "d81d29a74ee38400"}
    assert model_fingerprint("Org/not-here", None) == {"model": "Org/not-here", "gguf_file": None}


def test_generative_weights_digest_is_unchanged(folder):
    """sha256 of the files' contents (``.jinja`` included), only the named GGUF; "" for a hub id."""
    assert weights_digest(str(folder)) == "adab7b5061b3e221"
    assert weights_digest(str(folder), "a.gguf") == "565d18493e24d4ed"
    assert weights_digest(str(folder / "b.gguf")) == "0094149bda4d7137"
    assert weights_digest("Org/not-here") == ""


def test_dense_local_folder_identity_is_unchanged(folder):
    """Every file below the folder (README excluded) by relative name, size and mtime in ns."""
    assert local_files_hash(folder) == "1146cd54ad6b4baf"
    assert resolve_folder(str(folder)).key() == {"model": str(folder.resolve()), "revision": "1146cd54ad6b4baf"}


def test_resolve_model_paths(tmp_path):
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF")
    assert resolve_model(str(f)) == (str(tmp_path.resolve()), "m.gguf")
    assert resolve_model(str(tmp_path), "x.gguf") == (str(tmp_path.resolve()), "x.gguf")
    assert resolve_model("Qwen/Qwen3-0.6B") == ("Qwen/Qwen3-0.6B", None)


def test_offline_aliases_resolve_as_before(tmp_path, monkeypatch):
    monkeypatch.setattr(models, "OFFLINE_MODELS", tmp_path)
    for alias in ("smollm2-135m", "SmolLM2-135M-Instruct", "smollm2-135m-gguf"):
        with pytest.raises(RBenchError, match="SmolLM2-135M-Instruct.Q4_1.gguf"):
            resolve_model(alias)
    (tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf").write_bytes(b"GGUF")
    assert resolve_model("smollm2-135m") == (str(tmp_path), "SmolLM2-135M-Instruct.Q4_1.gguf")
    assert resolve_model("Qwen/Qwen3-0.6B", "q.gguf") == ("Qwen/Qwen3-0.6B", "q.gguf")


def test_resolving_and_naming_a_model_imports_no_framework(tmp_path):
    """A ranker names its weights (cache keys, ``rbench rankers``) before it loads anything."""
    code = ("import sys; from rbench_rankers import models; models.model_fingerprint(sys.argv[1], None); "
            "models.weights_digest(sys.argv[1]); models.resolve_folder(sys.argv[1]); "
            "print(sorted(m for m in ('torch', 'transformers', 'sentence_transformers') if m in sys.modules))")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    out = subprocess.run([sys.executable, "-c", code, str(_folder(tmp_path))], capture_output=True, text=True,
                         check=True, env=env).stdout
    assert out.strip() == "[]"


def test_from_pretrained_reads_local_files_first(tmp_path, monkeypatch):
    """A folder and the local cache are read with ``local_files_only``; the hub is asked only for a
    hub id missing from the cache, and never with ``hub=False`` or ``HF_HUB_OFFLINE=1``."""
    asked: list[tuple[str, bool]] = []

    class Loader:
        @staticmethod
        def from_pretrained(where: str, local_files_only: bool = False, **kwargs):
            asked.append((where, local_files_only))
            if local_files_only and where == "Org/not-cached":
                raise OSError("not in the local cache")
            return where, kwargs

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert models.from_pretrained(Loader, tmp_path, dtype="x") == (str(tmp_path), {"dtype": "x"})
    assert models.from_pretrained(Loader, "Org/cached") == ("Org/cached", {})
    assert asked == [(str(tmp_path), True), ("Org/cached", True)]
    assert models.from_pretrained(Loader, "Org/not-cached") == ("Org/not-cached", {})
    assert asked[-2:] == [("Org/not-cached", True), ("Org/not-cached", False)]
    with pytest.raises(OSError):
        models.from_pretrained(Loader, "Org/not-cached", hub=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(OSError):
        models.from_pretrained(Loader, "Org/not-cached")
    assert [a for a in asked if not a[1]] == [("Org/not-cached", False)]  # the hub: once
