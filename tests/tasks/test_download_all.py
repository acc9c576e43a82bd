"""Every paper task is one download away: MS MARCO v1.1 (Hugging Face parquet) and GraphRouter's
routing data join the Amazon/MovieLens/ESCI sources, and ``rbench data download --all`` shows the
total before it starts. All against a loopback server serving files in the real formats."""

from __future__ import annotations

import dataclasses
import io
import json
import re

import pandas as pd
import pytest

from rbench.api import RemoteFile, Source
from rbench.core import paths
from rbench.core.errors import RBenchError
from rbench.tasks import registry
from rbench.tasks.sources import downloads, install
from tests.helpers import Server
from tests.tasks.test_sources import esci_examples_parquet, ml1m_zip, reviews_json_gz, sha
from tests.tasks.test_tasks_passages import qna_records
from tests.tasks.test_tasks_routing import LLMS, make_rows


def serve_spec_files(monkeypatch, server: Server, name: str, bodies: dict[str, bytes]) -> None:
    """Keep task ``name``'s real RemoteFiles (file names, pins, extract flags) and point their URLs
    at the loopback server, which serves ``bodies[filename]``."""
    task = registry.BUILTIN[name]
    files = []
    for rf in task.spec.downloads:
        path = f"/{name}/{rf.filename}"
        server.files[path] = bodies[rf.filename]
        files.append(dataclasses.replace(rf, urls=(server.url(path),), sha256=None, size=None))
    src = task.spec.sources[0]
    spec = dataclasses.replace(task.spec, sources=(dataclasses.replace(src, files=tuple(files)),))
    monkeypatch.setitem(registry.BUILTIN, name, dataclasses.replace(task, spec=spec))


def parquet_bytes(records: list[dict]) -> bytes:
    buf = io.BytesIO()
    pd.DataFrame(records).to_parquet(buf, index=False)
    return buf.getvalue()


def router_csv(rows: list[dict]) -> bytes:
    return pd.DataFrame(rows).to_csv(index=False).encode()


def descriptions() -> bytes:
    """GraphRouter's ``LLM_Descriptions.json`` shape: name -> {"feature": ...}."""
    return json.dumps({llm: {"feature": f"{llm} is a model", "input_price": 0.1} for llm in LLMS}).encode()


# --------------------------------------------------------------------------------------------
# the two new sources
# --------------------------------------------------------------------------------------------


def test_msmarco_and_routing_name_their_public_sources():
    ms = registry.get_task("msmarco").downloads
    assert [rf.filename for rf in ms] == ["ms_marco_v1.1_train.parquet", "ms_marco_v1.1_validation.parquet"]
    assert all(re.fullmatch(r"https://huggingface\.co/datasets/microsoft/ms_marco/resolve/[^/]+/v1\.1/"
                            r"(train|validation)-00000-of-00001\.parquet", rf.urls[0]) for rf in ms)
    rt = {rf.filename: rf for rf in registry.get_task("routing-balance").downloads}
    assert set(rt) == {"router_data.csv", "LLM_Descriptions.json"}
    desc_url = rt["LLM_Descriptions.json"].urls[0]
    assert re.search(r"/ulab-uiuc/GraphRouter/[0-9a-f]{40}/configs/LLM_Descriptions\.json$", desc_url)  # a commit
    assert all("1YYn-BV-5s2amh6mKLqKMR0H__JB-CKU4" in u for u in rt["router_data.csv"].urls)
    assert all(rf.sha256 is None for rf in (*ms, *rt.values()))  # none published: first seen is recorded


def test_msmarco_downloads_and_prepares_from_the_hf_parquet_layout(server, monkeypatch):
    records = qna_records(n=60)
    serve_spec_files(monkeypatch, server, "msmarco", {
        "ms_marco_v1.1_train.parquet": parquet_bytes(records[:50]),
        "ms_marco_v1.1_validation.parquet": parquet_bytes(records[50:])})
    raw = install.download_task(registry.get_task("msmarco"))
    assert sorted(p.name for p in raw.iterdir()) == [".source.json", "ms_marco_v1.1_train.parquet",
                                                     "ms_marco_v1.1_validation.parquet"]
    present, detail = registry.data_status("msmarco")
    assert present and "v1.1 QnA" in detail
    data = registry.load_task("msmarco", {"n_queries": 0})
    eligible = [r for r in records if any(r["passages"]["is_selected"])]
    assert len(data.train) + len(data.valid) + len(data.test) == len(eligible)  # both splits read
    manifest = json.loads((downloads.downloads_dir("msmarco") / "manifest.json").read_text())
    assert manifest["ms_marco_v1.1_train.parquet"]["sha256"] == sha(parquet_bytes(records[:50]))


def test_routing_downloads_and_loads_graphrouter_files(server, monkeypatch):
    rows = make_rows()
    serve_spec_files(monkeypatch, server, "routing-balance", {
        "router_data.csv": router_csv(rows), "LLM_Descriptions.json": descriptions()})
    install.download_task(registry.get_task("routing-balance"))
    data = registry.load_task("routing-balance")
    assert list(data.pool.ids) == LLMS  # candidate order from the description file
    assert data.pool.texts[0] == "llm-a: llm-a is a model"
    assert len(data.train) + len(data.valid) + len(data.test) == len({r["query_idx"] for r in rows})


def test_an_html_page_instead_of_the_file_is_refused_and_the_mirror_used(server):
    page = b"<!DOCTYPE html><html><head><title>Google Drive - Virus scan warning</title></head></html>"
    body = router_csv(make_rows())
    server.files["/drive"] = page
    server.files["/mirror.csv"] = body
    rf = RemoteFile("router_data.csv", (server.url("/drive"),))
    with pytest.raises(downloads.DownloadError, match="returned an HTML page, not router_data.csv.*"
                                                    "rbench data prepare routing-balance --from DIR"):
        downloads.fetch("routing-balance", rf)
    folder = downloads.downloads_dir("routing-balance")
    assert not (folder / "router_data.csv").exists()  # nothing recorded as the file
    manifest = folder / "manifest.json"
    assert not manifest.exists() or "router_data.csv" not in json.loads(manifest.read_text())
    rf2 = dataclasses.replace(rf, urls=(server.url("/drive"), server.url("/mirror.csv")))
    assert downloads.fetch("routing-balance", rf2).read_bytes() == body
    # an .html file that is meant to be one is not refused
    server.files["/page.html"] = page
    assert downloads.fetch("routing-balance", RemoteFile("page.html", (server.url("/page.html"),))).read_bytes() == page


# --------------------------------------------------------------------------------------------
# --all
# --------------------------------------------------------------------------------------------


def real_format_bodies() -> dict[str, dict[str, bytes]]:
    """For every built-in task with downloads, small bodies in each file's real format."""
    records = qna_records(n=30)
    out: dict[str, dict[str, bytes]] = {}
    for name, task in registry.BUILTIN.items():
        bodies = {}
        for rf in task.spec.downloads:
            f = rf.filename
            if f.endswith(".zip"):
                bodies[f] = ml1m_zip()
            elif f.startswith("ms_marco"):
                bodies[f] = parquet_bytes(records)
            elif f == "router_data.csv":
                bodies[f] = router_csv(make_rows())
            elif f == "LLM_Descriptions.json":
                bodies[f] = descriptions()
            elif f.endswith(".parquet"):
                bodies[f] = esci_examples_parquet()
            else:
                bodies[f] = reviews_json_gz(50 + len(f))  # gz review/meta lines
        if bodies:
            out[name] = bodies
    return out


def human(n: int) -> str:
    from rbench.cli.common import bytes_text

    return bytes_text(n)


def test_download_all_shows_the_total_first_then_fetches_every_task(server, monkeypatch, capsys):
    from rbench.cli.app import main

    bodies = real_format_bodies()
    assert {"msmarco", "routing-balance", "esci", "rec-movie", "rec-toy", "rec-music", "rec-clothing"} <= set(bodies)
    for name, b in bodies.items():
        serve_spec_files(monkeypatch, server, name, b)
    total = sum(len(v) for b in bodies.values() for v in b.values())
    n_files = sum(len(b) for b in bodies.values())
    assert main(["data", "download", "--all", "--quiet"]) == 0
    out = capsys.readouterr().out
    plan, _, after = out.partition(f"to fetch: {n_files} of {n_files} files, {human(total)}")
    assert after, out  # the total line is printed ...
    assert "installed into" not in plan  # ... before anything is installed
    for name, b in bodies.items():
        for f in b:
            assert f in plan
        assert f"next: rbench data prepare {name}" in after
        assert sorted(p.name for p in (paths.home() / "downloads" / name).iterdir() if p.name != "manifest.json"
                      and not p.name.startswith(".")) == sorted(b)
    heads = [r for r in server.log if r.get("method") == "HEAD"]
    assert len(heads) == n_files  # sizes asked once each, before the transfers
    # a second run: everything cached, nothing to fetch, no body transferred again
    gets = sum(1 for r in server.log if r.get("method") is None)
    assert main(["data", "download", "--all", "--quiet"]) == 0
    assert f"to fetch: 0 of {n_files} files, 0 B" in capsys.readouterr().out
    assert sum(1 for r in server.log if r.get("method") is None) == gets


def test_download_all_goes_on_past_a_failed_task_and_exits_2(server, monkeypatch, capsys):
    from rbench.cli.app import main

    bodies = real_format_bodies()
    for name, b in bodies.items():
        serve_spec_files(monkeypatch, server, name, b)
    del server.files["/routing-balance/router_data.csv"]  # 404 for one file of one task
    code = main(["data", "download", "--all", "--quiet"])
    captured = capsys.readouterr()
    assert code == 2
    assert re.search(r"failed routing-balance: .*router_data\.csv.*404", captured.err.replace("\n", " "))
    assert "Traceback" not in captured.err
    assert "unknown" in captured.out  # the missing file's size could not be known in advance
    assert "next: rbench data prepare msmarco" in captured.out  # the others were installed
    assert not paths.raw_dir("routing-balance").exists() or not any(paths.raw_dir("routing-balance").iterdir())


def test_download_needs_one_task_or_all(capsys):
    from rbench.cli.app import main

    assert main(["data", "download", "--quiet"]) == 2
    assert "name one TASK or pass --all" in capsys.readouterr().err
    assert main(["data", "download", "msmarco", "--all", "--quiet"]) == 2


def test_plan_uses_pinned_recorded_or_probed_sizes_and_never_probes_a_cached_file(monkeypatch):
    probed: list[str] = []

    def probe(rf: RemoteFile) -> int | None:
        probed.append(rf.filename)
        return 7 if rf.filename == "b" else None

    files = (RemoteFile("a", ("https://x/a",), size=11), RemoteFile("b", ("https://x/b",)),
             RemoteFile("c", ("https://x/c",)), RemoteFile("d", ("https://x/d",)))
    spec = dataclasses.replace(registry.get_task("rec-toy"), sources=(Source("t", "https://x", "t", files=files),))
    folder = downloads.downloads_dir(spec.name)
    folder.mkdir(parents=True)
    (folder / "d").write_bytes(b"12345")
    planned = {p.file.filename: p for p in downloads.plan_downloads([spec], probe=probe)}
    assert {k: (p.size, p.cached) for k, p in planned.items()} == {
        "a": (11, False), "b": (7, False), "c": (None, False), "d": (5, True)}
    assert probed == ["b", "c"]


def test_remote_size_reads_head_and_ignores_html(server):
    server.files["/f.bin"] = b"x" * 1234
    assert downloads.remote_size(RemoteFile("f.bin", (server.url("/nope"), server.url("/f.bin")))) == 1234
    assert downloads.remote_size(RemoteFile("g.bin", (server.url("/nope"),))) is None


def test_a_task_without_a_download_still_says_how_to_get_it(capsys):
    from rbench.cli.app import main

    with pytest.raises(RBenchError, match="no direct public download"):
        downloads.remote_files(registry.get_task("ml-100k"))
    assert main(["data", "download", "ml-100k", "--quiet"]) == 2
