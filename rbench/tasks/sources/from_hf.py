"""``rbench data import --hf REPO[:CONFIG]``: an MTEB-style retrieval dataset of Hugging Face
``datasets`` written as a BEIR folder.

The package keeps its own downloads and cache; it is an optional extra, imported only inside
``hf_folder``."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rbench.core.errors import DataError, RBenchError
from rbench.tasks.sources.beir_writer import external_error, json_line, jsonl_writer, tsv_id

_HF_SPLITS = {"train": "train", "dev": "dev", "validation": "dev", "valid": "dev", "test": "test"}


def hf_spec(text: str) -> tuple[str, str | None]:
    """``REPO[:CONFIG]`` (a hub repository or a local dataset folder) -> (repo, config)."""
    repo, sep, config = text.rpartition(":")
    if sep and repo and config and not any(c in config for c in "/\\") and len(repo) > 1:
        return repo, config
    return text, None


def _hf_rows(dataset: Any, where: str, fields: dict[str, tuple[str, ...]]) -> Iterable[tuple[int, dict[str, Any]]]:
    """(row number, {name: value}) of a ``datasets.Dataset``, each wanted field taken from the
    first of its accepted column names; a missing column is one line naming the config."""
    columns = set(dataset.column_names)
    chosen = {}
    for name, accepted in fields.items():
        found = [c for c in accepted if c in columns]
        if not found and name != "title":
            raise DataError(f"no {' or '.join(repr(c) for c in accepted)} column (columns: "
                            f"{', '.join(sorted(columns))})", where)
        chosen[name] = found[0] if found else None
    row = 0
    for batch in dataset.iter(batch_size=10_000):
        for i in range(len(next(iter(batch.values())))):
            row += 1
            yield row, {name: (batch[col][i] if col else None) for name, col in chosen.items()}


def _hf_text(value: Any, where: str, row: int, field: str, required: bool = True) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise DataError(f"expected a string, got {type(value).__name__}", where, row, field)
    return value


def hf_folder(spec: str, folder: Path) -> str:
    """Write the MTEB-style retrieval dataset ``REPO[:CONFIG]`` (Hugging Face ``datasets``: a hub
    repository or a local folder) as a BEIR folder in ``folder``; returns the import option that
    fetches it again. Its ``corpus`` and ``queries`` configs hold ``_id``/``title``/``text`` and
    ``_id``/``text``; its qrels config (CONFIG, else ``qrels`` where there is one, else ``default``)
    has ``query-id``, ``corpus-id``, ``score`` in splits named train, dev (or validation) and test.
    With CONFIG, ``CONFIG-corpus`` and ``CONFIG-queries`` are used where they exist (multilingual
    layouts)."""
    flag = "--hf"
    repo, config = hf_spec(spec)
    try:
        import datasets
    except ImportError:
        raise RBenchError(f"{flag} needs the datasets package: pip install 'rbench[hf]'") from None
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    try:
        configs = list(datasets.get_dataset_config_names(repo))
        qrels_cfg = config or ("qrels" if "qrels" in configs else "default")
        corpus_cfg = f"{config}-corpus" if config and f"{config}-corpus" in configs else "corpus"
        queries_cfg = f"{config}-queries" if config and f"{config}-queries" in configs else "queries"
        missing = [c for c in (corpus_cfg, queries_cfg, qrels_cfg) if c not in configs]
        if missing:
            raise RBenchError(f"{flag} {spec}: no {', '.join(missing)} config (it has: {', '.join(configs) or 'none'}); "
                              "an MTEB-style retrieval dataset has corpus, queries and qrels (or default) configs")

        def one_split(cfg: str) -> tuple[Any, str]:
            parts = datasets.load_dataset(repo, cfg)
            names = list(parts)
            if len(names) != 1:
                raise RBenchError(f"{flag} {spec}: the {cfg} config has splits {', '.join(names)}; expected one")
            return parts[names[0]], f"{repo} ({cfg} config, {names[0]} split)"

        qrels = datasets.load_dataset(repo, qrels_cfg)
        unknown = [s for s in qrels if s not in _HF_SPLITS]
        if unknown:
            raise RBenchError(f"{flag} {spec}: the {qrels_cfg} config has split {unknown[0]!r}; expected train, "
                              "dev (or validation) and test")
        if "test" not in qrels:
            raise RBenchError(f"{flag} {spec}: the {qrels_cfg} config has no test split (it has: "
                              f"{', '.join(qrels)})")
        corpus, where = one_split(corpus_cfg)
        with jsonl_writer(folder / "corpus.jsonl") as fh:
            for row, r in _hf_rows(corpus, where, {"_id": ("_id", "id", "doc_id"), "title": ("title",),
                                                   "text": ("text",)}):
                fh.write(json_line({"_id": tsv_id(r["_id"], where, row, "_id"),
                                     "title": _hf_text(r["title"], where, row, "title", required=False),
                                     "text": _hf_text(r["text"], where, row, "text")}))
        queries, where = one_split(queries_cfg)
        with jsonl_writer(folder / "queries.jsonl") as fh:
            for row, r in _hf_rows(queries, where, {"_id": ("_id", "id", "query_id"), "text": ("text",)}):
                fh.write(json_line({"_id": tsv_id(r["_id"], where, row, "_id"),
                                     "text": _hf_text(r["text"], where, row, "text")}))
        for split in qrels:
            target = folder / "qrels" / f"{_HF_SPLITS[split]}.tsv"
            if target.exists():
                raise RBenchError(f"{flag} {spec}: the {qrels_cfg} config has both dev and validation splits")
            where = f"{repo} ({qrels_cfg} config, {split} split)"
            with jsonl_writer(target) as fh:
                fh.write("query-id\tcorpus-id\tscore\n")
                for row, r in _hf_rows(qrels[split], where, {"q": ("query-id", "query_id", "qid"),
                                                             "d": ("corpus-id", "corpus_id", "doc_id"),
                                                             "s": ("score", "relevance", "label")}):
                    score = r["s"]
                    if isinstance(score, bool) or not isinstance(score, (int, float)):
                        raise DataError(f"expected a number, got {score!r}", where, row, "score")
                    shown = int(score) if float(score).is_integer() else score
                    fh.write(f"{tsv_id(r['q'], where, row, 'query-id')}\t{tsv_id(r['d'], where, row, 'corpus-id')}"
                             f"\t{shown}\n")
    except RBenchError:
        raise
    except Exception as exc:  # the package's own failures (no network, an unknown repository)
        raise external_error(flag, spec, exc) from exc
    return f"{flag} {spec}"
