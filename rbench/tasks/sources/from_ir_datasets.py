"""``rbench data import --ir-datasets ID``: an ``ir_datasets`` collection written as a BEIR folder.

The package keeps its own downloads and cache; it is an optional extra, imported only inside
``ir_datasets_folder``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rbench.core.errors import RBenchError
from rbench.tasks.sources.beir_writer import external_error, json_line, jsonl_writer, tsv_id


def ir_datasets_folder(ident: str, folder: Path) -> str:
    """Write the ``ir_datasets`` collection ``ident`` as a BEIR folder in ``folder``; returns the
    import option that fetches it again. An id with qrels is one split, the test split (a zero-shot
    collection: ``beir/scifact/test``, ``msmarco-passage/trec-dl-2019/judged``); an id without
    (``beir/scifact``) takes its ``/train``, ``/dev`` and ``/test`` subsets as the three splits."""
    flag = "--ir-datasets"
    try:
        import ir_datasets
    except ImportError:
        raise RBenchError(f"{flag} needs the ir_datasets package: pip install 'rbench[ir-datasets]'") from None
    try:
        ds = ir_datasets.load(ident)
    except KeyError:
        raise RBenchError(f"{flag} {ident}: not an ir_datasets id (see https://ir-datasets.com)") from None
    try:
        if not ds.has_docs():
            raise RBenchError(f"{flag} {ident}: the dataset has no documents")
        splits: dict[str, Any] = {}
        if ds.has_qrels():
            splits["test"] = ds
        else:
            for split in ("train", "dev", "test"):
                try:
                    sub = ir_datasets.load(f"{ident}/{split}")
                except KeyError:
                    continue
                if sub.has_qrels() and sub.has_queries():
                    splits[split] = sub
        if "test" not in splits:
            raise RBenchError(f"{flag} {ident}: no qrels here nor in a {ident}/test subset; name the judged "
                              "subset (e.g. beir/scifact/test, msmarco-passage/trec-dl-2019/judged)")
        if not all(s.has_queries() for s in splits.values()):
            raise RBenchError(f"{flag} {ident}: the dataset has qrels but no queries")
        with jsonl_writer(folder / "corpus.jsonl") as fh:
            for doc in ds.docs_iter():
                fields = getattr(doc, "_fields", ())
                text = doc.text if "text" in fields else doc.default_text()
                title = doc.title if "title" in fields else ""
                fh.write(json_line({"_id": doc.doc_id, "title": title or "", "text": text}))
        seen: dict[str, str] = {}
        with jsonl_writer(folder / "queries.jsonl") as fh:
            for sub in splits.values():
                for q in sub.queries_iter():
                    text = q.text if "text" in getattr(q, "_fields", ()) else q.default_text()
                    if q.query_id in seen:
                        if seen[q.query_id] != text:
                            raise RBenchError(f"{flag} {ident}: query {q.query_id!r} has two texts in two subsets")
                        continue
                    seen[q.query_id] = text
                    fh.write(json_line({"_id": q.query_id, "text": text}))
        for split, sub in splits.items():
            where = f"{ident} qrels" if sub is ds else f"{ident}/{split} qrels"
            with jsonl_writer(folder / "qrels" / f"{split}.tsv") as fh:
                fh.write("query-id\tcorpus-id\tscore\n")
                for row, qrel in enumerate(sub.qrels_iter(), 1):
                    qid = tsv_id(qrel.query_id, where, row, "query_id")
                    did = tsv_id(qrel.doc_id, where, row, "doc_id")
                    fh.write(f"{qid}\t{did}\t{qrel.relevance}\n")
    except RBenchError:
        raise
    except Exception as exc:  # the package's own failures (a download without network, a bad file)
        raise external_error(flag, ident, exc) from exc
    return f"{flag} {ident}"
