"""``rbench data import --beir / --ir-datasets / --hf`` and zero-shot (test-only) collections:
splits from the qrels files, BM25 through the CLI against a direct computation, rankers that
train refused in one line on a test-only task, ``task.split=test`` for imported tasks, and every
error path one line with exit 2 and nothing written. Offline: ir_datasets reads local files
registered under a test id, Hugging Face ``datasets`` a local folder laid out as an MTEB repo."""

from __future__ import annotations

import builtins
import json
import random
import textwrap

import numpy as np
import pytest

from rbench.api import Pool, Queries, Ragged
from rbench.run.runner import RunOptions, make_plan
from rbench.tasks.families.imported import imported_root
from rbench.tasks.registry import load_task, resolve
from tests.helpers import cli, one_line

VOCAB = [f"w{i}" for i in range(50)]
SPLITS = {"train": range(0, 14), "dev": range(14, 19), "test": range(19, 30)}


def write_jsonl(path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def beir_folder(root, splits=SPLITS, n_docs: int = 90, n_queries: int = 30):
    """A BEIR folder: docs of distinct lengths over a small vocabulary, graded qrels (2 and 1, and
    a 0 judgement), each positive holding its query's first word (no positive scores 0 in BM25).
    Returns (folder, {split: {qid: {docid: grade}}})."""
    rng = random.Random(7)
    qwords = [[rng.choice(VOCAB) for _ in range(3)] for _ in range(n_queries)]
    positives = {i: {(i * 7) % n_docs: 2.0, (i * 7 + 3) % n_docs: 1.0} for i in range(n_queries)}
    extra: dict[int, list[str]] = {}
    for i, docs in positives.items():
        for d in docs:
            extra.setdefault(d, []).append(qwords[i][0])
    docs = [{"_id": f"d{d}", "title": f"title{d}" if d % 2 else "",
             "text": " ".join([rng.choice(VOCAB) for _ in range(4 + d)] + extra.get(d, []))} for d in range(n_docs)]
    write_jsonl(root / "corpus.jsonl", docs)
    write_jsonl(root / "queries.jsonl", [{"_id": f"q{i}", "text": " ".join(w)} for i, w in enumerate(qwords)])
    truth: dict[str, dict[str, dict[str, float]]] = {}
    for name, rows in splits.items():
        lines = ["query-id\tcorpus-id\tscore"]
        for i in rows:
            lines += [f"q{i}\td{d}\t{int(g)}" for d, g in positives[i].items()]
            lines.append(f"q{i}\td{(i * 7 + 5) % n_docs}\t0")
            truth.setdefault(name, {})[f"q{i}"] = {f"d{d}": g for d, g in positives[i].items()}
        (root / "qrels").mkdir(parents=True, exist_ok=True)
        (root / "qrels" / f"{name}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root, truth


def direct_bm25_metrics(folder, test: dict[str, dict[str, float]]) -> dict[str, float]:
    """BM25 scores over the corpus as the files give it (title + text), then nDCG@10 and RR
    computed here from the test qrels file (linear gain, log2 discount; rank 1 + #higher + the
    tied candidates placed before it: every non-positive, and positives of a lower grade)."""
    from rbench_rankers.bm25 import BM25Ranker

    docs = [json.loads(line) for line in (folder / "corpus.jsonl").read_text().splitlines()]
    ids = np.asarray([d["_id"] for d in docs], dtype=object)
    texts = np.asarray([f"{d['title']} {d['text']}" if d["title"] else d["text"] for d in docs], dtype=object)
    qtext = {q["_id"]: q["text"] for q in map(json.loads, (folder / "queries.jsonl").read_text().splitlines())}
    qids = sorted(test)
    ranker = BM25Ranker()
    ranker.index(Pool(ids=ids, texts=texts, name="direct"))
    queries = Queries(ids=np.asarray(qids, dtype=object), texts=[qtext[q] for q in qids],
                      positives=Ragged.from_rows([[0]] * len(qids)),
                      grades=Ragged.from_rows([[1.0]] * len(qids), dtype=np.float64))
    scores = ranker.score(queries, np.arange(len(ids)))
    ndcg, rr = [], []
    where = {d: i for i, d in enumerate(ids)}
    for row, q in enumerate(qids):
        s = scores[row]
        pos = {where[d]: g for d, g in test[q].items()}
        ranks = {}
        for d, g in test[q].items():  # the pessimistic tie rule: tied others first, tied positives by grade
            v = s[where[d]]
            tied = [i for i in np.flatnonzero(s == v) if i != where[d]]
            before = [i for i in tied if i not in pos or (pos[i], i) < (g, where[d])]
            ranks[d] = 1 + int((s > v).sum()) + len(before)
        dcg = sum(g / np.log2(ranks[d] + 1) for d, g in test[q].items() if ranks[d] <= 10)
        ideal = sorted(test[q].values(), reverse=True)
        ndcg.append(dcg / sum(g / np.log2(k + 2) for k, g in enumerate(ideal[:10])))
        rr.append(1.0 / min(ranks.values()))
    return {"nDCG@10": float(np.mean(ndcg)), "RR": float(np.mean(rr))}


def record(results, task: str, ranker: str) -> dict:
    return json.loads((results / "large" / task / f"{ranker}.json").read_text())


def nothing_written() -> bool:
    root = imported_root()
    return not root.exists() or not any(root.iterdir())


# --------------------------------------------------------------------------------------------
# BEIR folders
# --------------------------------------------------------------------------------------------


def test_beir_folder_splits_from_qrels_files_and_bm25_through_the_cli_matches_direct(tmp_path, capsys):
    folder, truth = beir_folder(tmp_path / "beir")
    code, out, err = cli(capsys, "data", "import", "byo", "--beir", str(folder))
    assert code == 0, err
    assert "splits: train 14, valid 5, test 11" in out
    task = load_task("byo", seed=3)
    for split, name in ((task.train, "train"), (task.valid, "dev"), (task.test, "test")):
        got = {q: {task.pool.ids[p]: g for p, g in zip(split.positives[i], split.grades[i])}
               for i, q in enumerate(split.ids)}
        assert got == truth[name]
    assert task.info["split"] == "qrels files"
    assert load_task("byo", seed=4).test.ids.tolist() == task.test.ids.tolist()  # no seeded re-split

    results = tmp_path / "results"
    # the direct computation ranks the whole corpus; this small corpus is mostly judged documents
    # (pool_from_positives), whose default leaves the train/valid positives out of the test
    # rankings (rbench.tasks.fit_positives, tested in test_fit_positives.py): compare the other reading
    code, _, err = cli(capsys, "run", "--ranker", "bm25", "--task", "byo", "--results-dir", str(results),
                       "--set", "task.exclude_fit_positives=false")
    assert code == 0, err
    (path,) = (results / "large" / "byo").glob("bm25*.json")  # named for its non-default task option
    rec = json.loads(path.read_text())
    assert rec["task_info"]["pool_from_positives"] is True
    assert rec["n_queries"] == 11 and rec["task_info"]["n_train"] == 14 and rec["task_info"]["n_valid"] == 5
    want = direct_bm25_metrics(folder, truth["test"])
    assert rec["metrics"]["nDCG@10"] == pytest.approx(want["nDCG@10"], abs=1e-9)
    assert rec["metrics"]["RR"] == pytest.approx(want["RR"], abs=1e-9)
    assert 0 < want["nDCG@10"] < 1  # the data leaves BM25 something to get wrong


class Trainer:
    """A ranker that learns (it overrides fit): fit and index fail loudly, so a refusal that came
    after loading or fitting shows."""

    name = "trainer"
    version = "1"
    transfers = True
    config: dict = {}
    info: dict = {}

    def fit(self, task) -> None:
        if len(task.train) == 0:
            raise AssertionError("fitted on an empty train split")
        self.info = {"fitted_on": len(task.train)}

    def index(self, pool) -> None:
        pass

    def score(self, queries, candidates):
        return np.zeros((len(queries), len(candidates)))


def test_test_only_folder_runs_bm25_and_pop_zero_shot_and_refuses_a_ranker_that_trains(tmp_path, capsys, monkeypatch):
    folder, truth = beir_folder(tmp_path / "zs", splits={"test": SPLITS["test"]})
    code, out, err = cli(capsys, "data", "import", "zs", "--beir", str(folder))
    assert code == 0 and "splits: test 11 only: evaluated zero-shot" in out, err
    results = tmp_path / "results"
    for ranker in ("bm25", "pop", "random"):
        code, _, err = cli(capsys, "run", "--ranker", ranker, "--task", "zs", "--results-dir", str(results))
        assert code == 0, err
        rec = record(results, "zs", ranker)
        assert rec["n_queries"] == 11 and rec["task_info"]["n_train"] == 0
    want = direct_bm25_metrics(folder, truth["test"])
    assert record(results, "zs", "bm25")["metrics"]["nDCG@10"] == pytest.approx(want["nDCG@10"], abs=1e-9)

    # a ranker that trains: refused in one line before anything is loaded, naming the transfer
    import rbench.run.runner as runner

    def no_load(*a, **k):
        raise AssertionError("loaded before refusing")

    module = tmp_path / "trainer_mod.py"
    module.write_text("from tests.tasks.test_beir_import import Trainer\n")
    with monkeypatch.context() as m:
        m.setattr(runner, "load", no_load)
        for args in (("-r", f"{module}:Trainer"), ("-r", "cross-encoder", "--set", "fit=true"), ("-r", "lranker")):
            code, _, err = cli(capsys, "run", *args, "--task", "zs", "--results-dir", str(results))
            line = one_line(err)
            assert code == 2 and "learns from a train split" in line and "'zs'" in line, line
            assert "--variant from-TASK" in line and "bm25" in line

    # with a same-domain task that has a train split, the refusal names it, and the transfer runs
    other, _ = beir_folder(tmp_path / "tr")
    assert cli(capsys, "data", "import", "with-train", "--beir", str(other))[0] == 0
    code, _, err = cli(capsys, "run", "-r", f"{module}:Trainer", "--task", "zs", "--results-dir", str(results))
    assert code == 2 and "--variant from-with-train" in one_line(err)
    code, _, err = cli(capsys, "run", "-r", f"{module}:Trainer", "--task", "zs", "--variant", "from-with-train",
                       "--results-dir", str(results))
    assert code == 0, err
    assert record(results, "zs~from-with-train", "trainer")["ranker_info"]["fitted_on"] == 14


def test_task_split_test_on_imported_tasks_and_msmarco_refuses_training_at_plan_time(tmp_path, capsys):
    d = tmp_path / "three"
    folder, truth = beir_folder(d)
    qrels = "query-id\tcorpus-id\tscore\n" + "".join(
        (folder / "qrels" / f"{s}.tsv").read_text().split("\n", 1)[1] for s in SPLITS)
    (d / "qrels.tsv").write_text(qrels)
    code, out, err = cli(capsys, "data", "import", "files3", "--corpus", str(d / "corpus.jsonl"), "--queries",
                         str(d / "queries.jsonl"), "--qrels", str(d / "qrels.tsv"))
    assert code == 0 and "8:1:1 seeded by query" in out and "task.split=test" in out, err
    assert len(load_task("files3").test) == 3  # the seeded split: 30 queries -> 3 test
    everything = load_task("files3", {"split": "test"})
    assert len(everything.test) == 30 and len(everything.train) == len(everything.valid) == 0
    assert everything.info["split"] == "test (task.split=test)"
    results = tmp_path / "results"
    code, _, err = cli(capsys, "run", "-r", "bm25", "-t", "files3", "--set", "task.split=test",
                       "--results-dir", str(results))
    assert code == 0, err
    recs = [json.loads(p.read_text()) for p in (results / "large" / "files3").glob("bm25*.json")]
    assert [r["n_queries"] for r in recs] == [30] and recs[0]["task_options"] == {"split": "test", "exclude_fit_positives": True}
    with pytest.raises(Exception, match="learns from a train split.*run without --set task.split=test"):
        make_plan(RunOptions(ranker="lranker", task="files3", sets={"task.split": "test"}))
    make_plan(RunOptions(ranker="lranker", task="files3"))  # its own split has train queries
    # msmarco: refused from the options alone (no data here)
    with pytest.raises(Exception, match="learns from a train split and task 'msmarco' has none"):
        make_plan(RunOptions(ranker="lranker", task="msmarco", sets={"task.split": "test"}))
    make_plan(RunOptions(ranker="bm25", task="msmarco", sets={"task.split": "test"}))
    code, _, err = cli(capsys, "run", "-r", "bm25", "-t", "files3", "--set", "task.split=all")
    assert code == 2 and "split" in one_line(err)


def test_explicit_split_field_all_test_is_a_zero_shot_collection(tmp_path, capsys):
    d = tmp_path / "x"
    beir_folder(d, splits={"test": range(30)})
    rows = [json.loads(line) for line in (d / "queries.jsonl").read_text().splitlines()]
    write_jsonl(d / "queries.jsonl", [{**r, "split": "test"} for r in rows])
    code, out, err = cli(capsys, "data", "import", "dl", "--corpus", str(d / "corpus.jsonl"), "--queries",
                         str(d / "queries.jsonl"), "--qrels", str(d / "qrels" / "test.tsv"))
    assert code == 0 and "evaluated zero-shot" in out, err
    task = load_task("dl")
    assert len(task.test) == 30 and len(task.train) == 0
    assert resolve("dl").family.test_only(resolve("dl").spec, None)


# --------------------------------------------------------------------------------------------
# error paths: one line, exit 2, nothing written
# --------------------------------------------------------------------------------------------


def _drop(path):
    path.unlink()


def _write(rel, text):
    def mutate(folder):
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    return mutate


BAD_FOLDERS = [
    (lambda f: _drop(f / "corpus.jsonl"), "corpus.jsonl", "missing"),
    (lambda f: _drop(f / "qrels" / "test.tsv"), "test.tsv", "needs qrels/test.tsv"),
    (_write("qrels/validation.tsv", "query-id\tcorpus-id\tscore\n"), "validation.tsv", "not a BEIR qrels split"),
    (_write("qrels/dev.tsv", "qid\tdocid\tscore\nq14\td8\t1\n"), "dev.tsv, line 1", "expected the header"),
    (_write("qrels/test.tsv", "query-id\tcorpus-id\tscore\nq20\td1\t1\nq21\tnope\t1\n"),
     "test.tsv, line 3, field 'corpus-id'", "unknown"),
    (_write("qrels/test.tsv", "query-id\tcorpus-id\tscore\nq2\td1\t1\n"), "test.tsv", "both"),
    (_write("corpus.jsonl", '{"_id": "d0", "text": "a"}\n{"_id": "d1"}\n'), "corpus.jsonl, line 2, field 'text'",
     "missing"),
    (_write("queries.jsonl", '{"_id": "q0", "text": "a"}\nnot json\n'), "queries.jsonl, line 2", ""),
    (_write("qrels/test.tsv", "query-id\tcorpus-id\tscore\nq20\td1\t0\n"), "test.tsv", "no query to evaluate"),
]


@pytest.mark.parametrize("mutate, where, what", BAD_FOLDERS)
def test_bad_beir_folders_are_one_line_naming_file_line_field(tmp_path, capsys, mutate, where, what):
    folder, _ = beir_folder(tmp_path / "beir")
    mutate(folder)
    code, _, err = cli(capsys, "data", "import", "bad", "--beir", str(folder))
    line = one_line(err)
    assert code == 2 and where in line and what in line, line
    assert nothing_written()


def test_a_query_in_two_qrels_files_names_both(tmp_path, capsys):
    folder, _ = beir_folder(tmp_path / "beir")
    with (folder / "qrels" / "test.tsv").open("a") as fh:
        fh.write("q3\td21\t1\n")  # q3 is a train query
    code, _, err = cli(capsys, "data", "import", "bad", "--beir", str(folder))
    line = one_line(err)
    assert code == 2 and "'q3'" in line and "train.tsv" in line and "test.tsv" in line, line
    assert nothing_written()


def test_import_source_options_are_checked(tmp_path, capsys):
    folder, _ = beir_folder(tmp_path / "beir")
    for args in ((), ("--beir", str(folder), "--hf", "x/y"), ("--corpus", str(folder / "corpus.jsonl")),
                 ("--beir", str(tmp_path / "nowhere")), ("--beir", str(folder), "--scenario", "small")):
        code, _, err = cli(capsys, "data", "import", "bad", *args)
        assert code == 2 and one_line(err)
    assert nothing_written()
    assert cli(capsys, "data", "import", "ok", "--beir", str(folder))[0] == 0
    code, _, err = cli(capsys, "data", "import", "ok", "--beir", str(folder))
    assert code == 2 and "already imported" in one_line(err)


@pytest.mark.parametrize("flag, value, module, extra", [("--ir-datasets", "beir/scifact/test", "ir_datasets", "ir-datasets"),
                                                        ("--hf", "mteb/scifact", "datasets", "hf")])
def test_missing_package_names_the_extra(tmp_path, capsys, monkeypatch, flag, value, module, extra):
    real = builtins.__import__

    def blocked(name, *args, **kwargs):
        if name == module or name.startswith(module + "."):
            raise ImportError(f"No module named {module!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", blocked)
    code, _, err = cli(capsys, "data", "import", "ext", flag, value)
    line = one_line(err)
    assert code == 2 and f"rbench[{extra}]" in line, line
    assert not (imported_root() / "ext").exists()


# --------------------------------------------------------------------------------------------
# ir_datasets (local files registered under a test id) and Hugging Face datasets (local folder)
# --------------------------------------------------------------------------------------------


def _register_ir(tmp_path, monkeypatch, base: str, folder) -> None:
    """``base`` (docs), ``base/train`` and ``base/test`` (queries + TREC qrels), from local files
    in ir_datasets' own formats."""
    ir_datasets = pytest.importorskip("ir_datasets")
    from ir_datasets.formats import TrecQrels, TsvDocs, TsvQueries
    from ir_datasets.util import LocalDownload

    monkeypatch.setenv("IR_DATASETS_HOME", str(tmp_path / "ir-home"))
    docs = [json.loads(line) for line in (folder / "corpus.jsonl").read_text().splitlines()]
    (tmp_path / "docs.tsv").write_text("".join(f"{d['_id']}\t{d['text']}\n" for d in docs))
    queries = [json.loads(line) for line in (folder / "queries.jsonl").read_text().splitlines()]
    (tmp_path / "queries.tsv").write_text("".join(f"{q['_id']}\t{q['text']}\n" for q in queries))
    docs_obj = TsvDocs(LocalDownload(tmp_path / "docs.tsv"))
    queries_obj = TsvQueries(LocalDownload(tmp_path / "queries.tsv"))
    ir_datasets.registry.register(base, ir_datasets.Dataset(docs_obj))
    for split in ("train", "test"):
        rows = (folder / "qrels" / f"{split}.tsv").read_text().splitlines()[1:]
        (tmp_path / f"{split}.qrels").write_text("".join(f"{q} 0 {d} {g}\n" for q, d, g in (r.split("\t") for r in rows)))
        qrels = TrecQrels(LocalDownload(tmp_path / f"{split}.qrels"), {0: "not", 1: "rel", 2: "high"})
        ir_datasets.registry.register(f"{base}/{split}", ir_datasets.Dataset(docs_obj, queries_obj, qrels))


def test_ir_datasets_test_subset_is_zero_shot_and_parent_takes_its_split_subsets(tmp_path, capsys, monkeypatch):
    folder, truth = beir_folder(tmp_path / "src", splits={"train": SPLITS["train"], "test": SPLITS["test"]})
    base = f"rbench-test-{tmp_path.name}"
    _register_ir(tmp_path, monkeypatch, base, folder)
    code, out, err = cli(capsys, "data", "import", "ird", "--ir-datasets", f"{base}/test")
    assert code == 0 and "splits: test 11 only" in out, err
    task = load_task("ird")
    got = {q: {task.pool.ids[p]: g for p, g in zip(task.test.positives[i], task.test.grades[i])}
           for i, q in enumerate(task.test.ids)}
    assert got == truth["test"] and len(task.train) == 0 and len(task.pool) == 90
    spec = resolve("ird").spec
    assert spec.how_to_get == f"rbench data import ird --ir-datasets {base}/test"
    assert cli(capsys, "run", "-r", "bm25", "-t", "ird", "--results-dir", str(tmp_path / "r"))[0] == 0

    code, out, err = cli(capsys, "data", "import", "ird-all", "--ir-datasets", base)
    assert code == 0 and "splits: train 14, valid 0, test 11" in out, err
    assert sorted(load_task("ird-all").train.ids) == sorted(truth["train"])

    code, _, err = cli(capsys, "data", "import", "nope", "--ir-datasets", f"{base}-missing")
    assert code == 2 and "not an ir_datasets id" in one_line(err)
    assert not (imported_root() / "nope").exists()


def _hf_repo(root, folder, qrels_config: str = "default") -> None:
    """A local folder laid out as an MTEB retrieval repository (README configs over jsonl)."""
    for name in ("corpus", "queries"):
        (root / f"{name}.jsonl").parent.mkdir(parents=True, exist_ok=True)
        (root / f"{name}.jsonl").write_text((folder / f"{name}.jsonl").read_text())
    splits = []
    for split in ("train", "dev", "test"):
        rows = (folder / "qrels" / f"{split}.tsv").read_text().splitlines()[1:]
        hf_split = "validation" if split == "dev" else split
        write_jsonl(root / "qrels" / f"{hf_split}.jsonl",
                    [{"query-id": q, "corpus-id": d, "score": int(g)} for q, d, g in (r.split("\t") for r in rows)])
        splits.append(f"  - split: {hf_split}\n    path: qrels/{hf_split}.jsonl")
    (root / "README.md").write_text(textwrap.dedent("""\
        ---
        configs:
        - config_name: corpus
          data_files:
          - split: corpus
            path: corpus.jsonl
        - config_name: queries
          data_files:
          - split: queries
            path: queries.jsonl
        - config_name: {qrels}
          data_files:
        {splits}
        ---
        """).format(qrels=qrels_config, splits="\n".join(splits)))


@pytest.fixture
def offline_hf(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True, raising=False)
    return datasets


def test_hf_mteb_layout_imports_with_the_qrels_config_splits(tmp_path, capsys, offline_hf):
    folder, truth = beir_folder(tmp_path / "src")
    repo = tmp_path / "mteb-like"
    _hf_repo(repo, folder)
    code, out, err = cli(capsys, "data", "import", "hfd", "--hf", str(repo))
    assert code == 0 and "splits: train 14, valid 5, test 11" in out, err
    task = load_task("hfd")
    for split, name in ((task.train, "train"), (task.valid, "dev"), (task.test, "test")):
        got = {q: {task.pool.ids[p]: g for p, g in zip(split.positives[i], split.grades[i])}
               for i, q in enumerate(split.ids)}
        assert got == truth[name]
    text_of = dict(zip(task.pool.ids, task.pool.texts))
    assert text_of["d1"].startswith("title1 ") and not text_of["d0"].startswith("title")

    named = tmp_path / "named"
    _hf_repo(named, folder, qrels_config="qrels")
    code, out, err = cli(capsys, "data", "import", "hfq", "--hf", f"{named}:qrels")
    assert code == 0, err
    assert len(load_task("hfq").test) == 11
    code, _, err = cli(capsys, "data", "import", "hfx", "--hf", f"{named}:nope")
    line = one_line(err)
    assert code == 2 and "no nope config" in line and "corpus, queries, qrels" in line, line
    assert not (imported_root() / "hfx").exists()
    bad = tmp_path / "bad"
    _hf_repo(bad, folder)
    rows = (bad / "corpus.jsonl").read_text().splitlines()
    (bad / "corpus.jsonl").write_text("\n".join(rows[:2] + [json.dumps({**json.loads(rows[2]), "_id": ""})] + rows[3:]))
    code, _, err = cli(capsys, "data", "import", "hfbad", "--hf", str(bad))
    line = one_line(err)
    assert code == 2 and "corpus config" in line and "line 3, field '_id'" in line, line
    assert not (imported_root() / "hfbad").exists()
