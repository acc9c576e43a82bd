"""Model resolution and weight identities give the values they gave
before the loading code had one home: these strings are in cache keys (LRanker's checkpoints and
candidate vectors, the generative response cache, dense candidate vectors), so a change to any of
them silently orphans every cache built before it. The expected values were computed with the
code as it stood in ``rankers/lranker/model.py``, ``rankers/generative/backends/transformers.py``
and ``rankers/dense.py`` before the move, on the folder ``_folder`` builds (fixed bytes, fixed
mtimes)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rbench.core.errors import RBenchError
from rbench_rankers.dense import local_files_hash
from rbench_rankers.dense import resolve_model as resolve_folder
from rbench_rankers.generative.backends.transformers import weights_digest
from rbench_rankers.lranker import model as lranker_model
from rbench_rankers.lranker.model import model_fingerprint, resolve_model

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


def test_offline_aliases_resolve_as_before(tmp_path, monkeypatch):
    monkeypatch.setattr(lranker_model, "OFFLINE_MODELS", tmp_path)
    for alias in ("smollm2-135m", "SmolLM2-135M-Instruct", "smollm2-135m-gguf"):
        with pytest.raises(RBenchError, match="SmolLM2-135M-Instruct.Q4_1.gguf"):
            resolve_model(alias)
    (tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf").write_bytes(b"GGUF")
    assert resolve_model("smollm2-135m") == (str(tmp_path), "SmolLM2-135M-Instruct.Q4_1.gguf")
    assert resolve_model("Qwen/Qwen3-0.6B", "q.gguf") == ("Qwen/Qwen3-0.6B", "q.gguf")
