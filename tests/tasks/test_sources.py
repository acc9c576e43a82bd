"""Downloads against a loopback HTTP server (never the real network): checksums, interrupted
and resumed transfers, mirrors, Git LFS pointers; archive extraction that refuses escapes."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import socket
import tarfile
import zipfile
from pathlib import Path

import pandas as pd
import pytest

from rbench.api import RemoteFile
from rbench.core import paths
from rbench.core.errors import RBenchError
from rbench.tasks.sources import downloads, install
from rbench.tasks.sources.archives import archive_kind, safe_extract
from rbench.tasks.sources.downloads import DownloadError, fetch


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------------------------
# small files in the real formats
# --------------------------------------------------------------------------------------------


def ml1m_zip() -> bytes:
    """MovieLens 1M layout: ml-1m/{ratings,movies,users}.dat, '::'-separated, latin-1."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("ml-1m/", "")
        zf.writestr("ml-1m/ratings.dat", "1::1193::5::978300760\n1::661::3::978302109\n2::1193::4::978298413\n")
        zf.writestr("ml-1m/movies.dat", "1193::One Flew Over the Cuckoo's Nest (1975)::Drama\n"
                                        "661::James and the Giant Peach (1996)::Animation|Children's|Musical\n"
                                        .encode("latin-1"))
        zf.writestr("ml-1m/users.dat", "1::F::1::10::48067\n2::M::56::16::70072\n")
    return buf.getvalue()


def esci_examples_parquet() -> bytes:
    df = pd.DataFrame({"example_id": [0, 1, 2], "query": ["revent 80 cfm"] * 3, "query_id": [0, 0, 0],
                       "product_id": ["B000MOO21W", "B07X3Y6B1V", "B07WDM7MQQ"], "product_locale": ["us"] * 3,
                       "esci_label": ["I", "E", "E"], "small_version": [0, 1, 1], "large_version": [1, 1, 1],
                       "split": ["train"] * 3})
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    return buf.getvalue()


def reviews_json_gz(n: int = 400) -> bytes:
    """Amazon 2014 5-core review lines; large enough to be cut mid-body."""
    lines = [json.dumps({"reviewerID": f"A{i % 37}", "asin": f"B{i % 53:09d}", "overall": 5.0,
                         "reviewText": "fun toy " + hashlib.sha1(str(i).encode()).hexdigest(), "unixReviewTime": 1300000000 + i}) for i in range(n)]
    return gzip.compress(("\n".join(lines) + "\n").encode(), mtime=0)


def folder_files(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


# --------------------------------------------------------------------------------------------
# downloads
# --------------------------------------------------------------------------------------------


def test_good_download_is_cached_and_not_fetched_again(server):
    body = esci_examples_parquet()
    server.files["/esci/examples.parquet"] = body
    rf = RemoteFile("shopping_queries_dataset_examples.parquet", (server.url("/esci/examples.parquet"),),
                    sha256=sha(body), size=len(body))
    seen = []
    got = fetch("esci", rf, progress=lambda done, total: seen.append((done, total)))
    assert got == paths.home() / "downloads" / "esci" / rf.filename
    assert got.read_bytes() == body
    assert seen[-1] == (len(body), len(body))
    assert pd.read_parquet(got)["esci_label"].tolist() == ["I", "E", "E"]
    manifest = json.loads((got.parent / "manifest.json").read_text())
    assert manifest[rf.filename]["sha256"] == sha(body) and manifest[rf.filename]["sha256_pinned"]
    n = len(server.log)
    assert fetch("esci", rf) == got
    assert len(server.log) == n  # served from the cache
    assert folder_files(got.parent) == ["manifest.json", rf.filename]


def test_wrong_checksum_is_a_clear_error_and_leaves_nothing(server):
    body = ml1m_zip()
    server.files["/ml-1m.zip"] = body
    rf = RemoteFile("ml-1m.zip", (server.url("/ml-1m.zip"),), sha256="0" * 64)
    with pytest.raises(DownloadError, match="checksum mismatch") as err:
        fetch("rec-movie", rf)
    assert server.url("/ml-1m.zip") in str(err.value) and "deleted" in str(err.value)
    assert folder_files(paths.home() / "downloads" / "rec-movie") == []


def test_interrupted_transfer_errors_then_resumes_with_a_range_request(server):
    body = reviews_json_gz()
    assert len(body) > 4000
    server.files["/reviews_Toys_and_Games_5.json.gz"] = body
    server.cut["/reviews_Toys_and_Games_5.json.gz"] = [1500]
    rf = RemoteFile("reviews_Toys_and_Games_5.json.gz", (server.url("/reviews_Toys_and_Games_5.json.gz"),),
                    sha256=sha(body))
    folder = paths.home() / "downloads" / "rec-toy"
    with pytest.raises(DownloadError, match="interrupted after") as err:
        fetch("rec-toy", rf)
    assert "resumes" in str(err.value)
    part = folder / (rf.filename + ".part")
    assert part.read_bytes() == body[:1500]
    assert not (folder / rf.filename).exists()

    got = fetch("rec-toy", rf)
    assert got.read_bytes() == body
    assert gzip.decompress(got.read_bytes()).count(b"\n") == 400
    second = server.requests_for("/reviews_Toys_and_Games_5.json.gz")[-1]
    assert second["range"] == "bytes=1500-"
    assert second["if_range"] == '"' + hashlib.sha1(body).hexdigest() + '"'
    assert folder_files(folder) == ["manifest.json", rf.filename]  # part and its json are gone


def test_resume_restarts_when_the_server_ignores_range_or_the_file_changed(server):
    old, new = reviews_json_gz(300), reviews_json_gz(350)
    server.files["/a.json.gz"] = old
    server.cut["/a.json.gz"] = [1000]
    rf = RemoteFile("a.json.gz", (server.url("/a.json.gz"),))  # no published checksum
    with pytest.raises(DownloadError):
        fetch("rec-toy", rf)
    server.files["/a.json.gz"] = new  # the file changed upstream: If-Range no longer matches
    got = fetch("rec-toy", rf)
    assert got.read_bytes() == new
    assert server.requests_for("/a.json.gz")[-1]["range"] == "bytes=1000-"  # asked, got the whole file

    server.files["/b.json.gz"] = old
    server.cut["/b.json.gz"] = [800]
    server.ignore_range.add("/b.json.gz")
    rf_b = RemoteFile("b.json.gz", (server.url("/b.json.gz"),), sha256=sha(old))
    with pytest.raises(DownloadError):
        fetch("rec-toy", rf_b)
    assert fetch("rec-toy", rf_b).read_bytes() == old


def test_no_resume_without_a_validator_or_checksum(server):
    body = reviews_json_gz(300)
    server.files["/c.json.gz"] = body
    server.no_validator.add("/c.json.gz")
    server.cut["/c.json.gz"] = [700]
    rf = RemoteFile("c.json.gz", (server.url("/c.json.gz"),))
    with pytest.raises(DownloadError):
        fetch("rec-toy", rf)
    assert fetch("rec-toy", rf).read_bytes() == body
    assert server.requests_for("/c.json.gz")[-1]["range"] is None  # could not prove the bytes belong together


def test_part_that_already_holds_every_byte_completes_on_416(server):
    body = reviews_json_gz(100)
    server.files["/d.json.gz"] = body
    rf = RemoteFile("d.json.gz", (server.url("/d.json.gz"),), sha256=sha(body))
    folder = paths.home() / "downloads" / "rec-toy"
    folder.mkdir(parents=True)
    (folder / "d.json.gz.part").write_bytes(body)
    (folder / "d.json.gz.part.json").write_text(json.dumps({"url": rf.urls[0], "validator": None}))
    assert fetch("rec-toy", rf).read_bytes() == body
    assert server.requests_for("/d.json.gz")[-1]["range"] == f"bytes={len(body)}-"


def test_mirror_is_used_when_the_first_url_fails_and_errors_name_every_url(server):
    body = esci_examples_parquet()
    server.files["/mirror/x.parquet"] = body
    rf = RemoteFile("x.parquet", (server.url("/gone/x.parquet"), server.url("/mirror/x.parquet")), sha256=sha(body))
    assert fetch("esci", rf).read_bytes() == body
    bad = RemoteFile("y.parquet", (server.url("/gone/y.parquet"), server.url("/gone2/y.parquet")))
    with pytest.raises(DownloadError) as err:
        fetch("esci", bad)
    assert "HTTP 404" in str(err.value) and "/gone/y.parquet" in str(err.value) and "/gone2/y.parquet" in str(err.value)
    assert "\n" not in str(err.value)  # one line, every source named


def test_unreachable_host_is_a_download_error():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rf = RemoteFile("z.bin", (f"http://127.0.0.1:{port}/z.bin",))
    with pytest.raises(DownloadError, match="cannot download"):
        fetch("esci", rf)


def test_git_lfs_pointer_is_refused(server):
    server.files["/lfs.parquet"] = (b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"a" * 64
                                    + b"\nsize 51286808\n")
    rf = RemoteFile("lfs.parquet", (server.url("/lfs.parquet"),))
    with pytest.raises(DownloadError, match="Git LFS pointer"):
        fetch("esci", rf)
    assert not (paths.home() / "downloads" / "esci" / "lfs.parquet").exists()


def test_force_fetches_again(server):
    body = esci_examples_parquet()
    server.files["/e.parquet"] = body
    rf = RemoteFile("e.parquet", (server.url("/e.parquet"),))
    fetch("esci", rf)
    n = len(server.requests_for("/e.parquet"))
    fetch("esci", rf, force=True)
    assert len(server.requests_for("/e.parquet")) == n + 1


def manifest_of(task: str) -> dict:
    return json.loads((paths.home() / "downloads" / task / "manifest.json").read_text())


def test_a_transfer_with_no_length_is_installed_only_when_something_can_vouch_for_it(server):
    """No Content-Length and no chunked framing: the end of the body is the connection closing, so
    a cut transfer looks whole. Without a pinned sha256, size or recorded hash it is refused."""
    body = reviews_json_gz(1200)
    server.files["/nolen.json.gz"] = body
    server.no_length.add("/nolen.json.gz")
    server.cut["/nolen.json.gz"] = [len(body) // 3]
    rf = RemoteFile("nolen.json.gz", (server.url("/nolen.json.gz"),))
    folder = paths.home() / "downloads" / "rec-toy"
    with pytest.raises(DownloadError, match="sent no length") as err:
        fetch("rec-toy", rf)
    assert "sha256" in str(err.value) and "size" in str(err.value)
    assert folder_files(folder) == []  # neither the short file nor a part that cannot be resumed
    with pytest.raises(DownloadError, match="sent no length"):  # whole, but nothing can tell
        fetch("rec-toy", rf)
    server.cut["/nolen.json.gz"] = [len(body) // 3]
    sized = RemoteFile(rf.filename, rf.urls, size=len(body))
    with pytest.raises(DownloadError, match=f"expected {len(body):,}"):
        fetch("rec-toy", sized)
    assert fetch("rec-toy", sized).read_bytes() == body
    assert manifest_of("rec-toy")[rf.filename]["sha256"] == sha(body)
    # the hash recorded now vouches for a later transfer without a length; a cut one is refused
    (folder / rf.filename).unlink()
    assert fetch("rec-toy", rf).read_bytes() == body
    (folder / rf.filename).unlink()
    server.cut["/nolen.json.gz"] = [1000]
    with pytest.raises(DownloadError, match=sha(body)):
        fetch("rec-toy", rf)


def test_chunked_transfers_are_framed_and_a_cut_one_is_an_error(server):
    body = reviews_json_gz(600)
    server.files["/ch.json.gz"] = body
    server.chunked.add("/ch.json.gz")
    server.no_validator.add("/ch.json.gz")
    server.cut["/ch.json.gz"] = [2500]
    rf = RemoteFile("ch.json.gz", (server.url("/ch.json.gz"),))
    with pytest.raises(DownloadError, match="interrupted after"):
        fetch("rec-toy", rf)
    assert fetch("rec-toy", rf).read_bytes() == body


def test_a_corrupted_cache_of_an_unpinned_file_is_fetched_again_and_the_first_hash_kept(server):
    body = reviews_json_gz(300)
    server.files["/u.json.gz"] = body
    rf = RemoteFile("u.json.gz", (server.url("/u.json.gz"),))
    got = fetch("rec-toy", rf)
    first = manifest_of("rec-toy")[rf.filename]
    assert first["sha256"] == sha(body) and not first["sha256_pinned"]
    n = len(server.requests_for("/u.json.gz"))
    assert fetch("rec-toy", rf) == got and len(server.requests_for("/u.json.gz")) == n  # intact: reused
    bad = bytearray(body)
    bad[100] ^= 0xFF
    got.write_bytes(bytes(bad))
    with pytest.warns(UserWarning) as notes:
        assert fetch("rec-toy", rf).read_bytes() == body
    assert len(server.requests_for("/u.json.gz")) == n + 1
    assert manifest_of("rec-toy")[rf.filename]["sha256"] == sha(body)
    assert len(notes) == 1 and "fetched again" in str(notes[0].message) and rf.filename in str(notes[0].message)


def test_a_shipped_unpinned_file_that_changes_upstream_is_refused_unless_forced(server):
    """The Amazon files publish no checksum: the first sha256 seen is recorded and holds."""
    from rbench.tasks.registry import TASKS

    shipped = TASKS["rec-toy"].downloads[0]
    assert shipped.sha256 is None  # Amazon 2014 reviews: nothing published to pin
    old, new = reviews_json_gz(300), reviews_json_gz(310)
    server.files["/r.json.gz"] = old
    rf = RemoteFile(shipped.filename, (server.url("/r.json.gz"),), sha256=shipped.sha256, size=shipped.size)
    got = fetch("rec-toy", rf)
    got.unlink()  # the cache is gone, and upstream now serves something else
    server.files["/r.json.gz"] = new
    with pytest.raises(DownloadError) as err:
        fetch("rec-toy", rf)
    msg = str(err.value)
    assert sha(old) in msg and sha(new) in msg and "--force" in msg and "\n" not in msg
    assert not got.exists() and manifest_of("rec-toy")[rf.filename]["sha256"] == sha(old)
    with pytest.warns(UserWarning) as notes:
        assert fetch("rec-toy", rf, force=True).read_bytes() == new
    entry = manifest_of("rec-toy")[rf.filename]
    assert entry["sha256"] == sha(new) and entry["previous_sha256"] == sha(old)
    assert len(notes) == 1 and sha(old) in str(notes[0].message) and sha(new) in str(notes[0].message)


def test_a_cached_file_of_the_wrong_size_is_fetched_again(server):
    body = reviews_json_gz(200)
    server.files["/s.json.gz"] = body
    rf = RemoteFile("s.json.gz", (server.url("/s.json.gz"),), size=len(body))  # no sha256, no manifest yet
    folder = paths.home() / "downloads" / "rec-toy"
    folder.mkdir(parents=True)
    (folder / rf.filename).write_bytes(body[: len(body) // 2])  # e.g. left by an older, unchecked copy
    with pytest.warns(UserWarning, match=f"not {len(body):,}; fetched again"):
        assert fetch("rec-toy", rf).read_bytes() == body
    assert manifest_of("rec-toy")[rf.filename]["sha256"] == sha(body)


def test_an_unreadable_manifest_is_said_and_the_hash_recorded_again(server):
    body = reviews_json_gz(100)
    server.files["/m.json.gz"] = body
    rf = RemoteFile("m.json.gz", (server.url("/m.json.gz"),))
    folder = paths.home() / "downloads" / "rec-toy"
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_bytes(b'{"m.json.gz": {"sha2')
    with pytest.warns(UserWarning, match="manifest.json is unreadable"):
        fetch("rec-toy", rf)
    assert manifest_of("rec-toy")[rf.filename]["sha256"] == sha(body)


def test_download_task_installs_archives_extracted_and_files_linked(server, monkeypatch):
    zbody, pbody = ml1m_zip(), esci_examples_parquet()
    server.files["/ml-1m.zip"] = zbody
    server.files["/ex.parquet"] = pbody
    from rbench.tasks.registry import get_task
    from tests.helpers import with_downloads

    with_downloads(monkeypatch, "rec-movie",
                   (RemoteFile("ml-1m.zip", (server.url("/ml-1m.zip"),), sha256=sha(zbody), extract=True),))
    with_downloads(monkeypatch, "esci",
                   (RemoteFile("shopping_queries_dataset_examples.parquet", (server.url("/ex.parquet"),),
                               sha256=sha(pbody)),))
    raw = install.download_task(get_task("rec-movie"))
    assert raw == paths.raw_dir("rec-movie")
    assert folder_files(raw) == [".source.json", "ml-1m"]
    assert folder_files(raw / "ml-1m") == ["movies.dat", "ratings.dat", "users.dat"]
    assert (raw / "ml-1m" / "movies.dat").read_bytes().decode("latin-1").startswith("1193::One Flew")
    assert [p.name for p in raw.parent.iterdir() if p.name.startswith(".")] == []  # no temp folders
    raw_e = install.download_task(get_task("esci"))
    linked = raw_e / "shopping_queries_dataset_examples.parquet"
    cached = paths.home() / "downloads" / "esci" / "shopping_queries_dataset_examples.parquet"
    assert linked.read_bytes() == pbody
    assert os.stat(linked).st_ino == os.stat(cached).st_ino  # a hard link, not a second copy


def test_tasks_without_a_public_url_say_how_to_get_the_data():
    from rbench.tasks.registry import get_task

    with pytest.raises(RBenchError, match="no direct public download.*pip install"):
        downloads.remote_files(get_task("ml-100k"))
    with pytest.raises(RBenchError, match="did you mean"):
        get_task("rec-moive")


def test_source_table_is_well_formed():
    from rbench.tasks.registry import TASKS

    table = {name: spec.downloads for name, spec in TASKS.items() if spec.downloads}
    assert {"rec-movie", "esci", "rec-toy", "rec-clothing", "rec-music", "msmarco", "routing-balance"} <= set(table)
    for files in table.values():
        assert len({f.filename for f in files}) == len(files)
        for rf in files:
            assert rf.urls and all(u.startswith("https://") for u in rf.urls), rf
            assert rf.sha256 is None or (len(rf.sha256) == 64 and int(rf.sha256, 16) >= 0)
            assert rf.extract == (archive_kind(Path(rf.filename)) is not None)
    esci = TASKS["esci"].downloads
    assert all(f.sha256 and f.size for f in esci)  # from the Git LFS pointers
    assert all("/raw/" in f.urls[0] and "raw.githubusercontent" not in f.urls[0] for f in esci)


# --------------------------------------------------------------------------------------------
# archives
# --------------------------------------------------------------------------------------------


def make_zip(path, members: dict[str, bytes], symlinks: dict[str, str] | None = None):
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        for name, target in (symlinks or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (0o120777 << 16)
            zf.writestr(info, target)
    return path


def make_tar(path, members: dict[str, bytes], links: list[tuple[str, str, bytes]] = (), fifo: str | None = None):
    with tarfile.open(path, "w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        for name, target, kind in links:
            info = tarfile.TarInfo(name)
            info.type = kind
            info.linkname = target
            tf.addfile(info)
        if fifo:
            info = tarfile.TarInfo(fifo)
            info.type = tarfile.FIFOTYPE
            tf.addfile(info)
    return path


def test_good_archives_extract_with_their_layout(tmp_path):
    z = tmp_path / "ml-1m.zip"
    z.write_bytes(ml1m_zip())
    written = safe_extract(z, tmp_path / "out")
    assert sorted(written) == ["ml-1m/movies.dat", "ml-1m/ratings.dat", "ml-1m/users.dat"]
    assert (tmp_path / "out" / "ml-1m" / "ratings.dat").read_text().splitlines()[0] == "1::1193::5::978300760"
    t = make_tar(tmp_path / "a.tar.gz", {"data/collection.tsv": b"0\tpassage zero\n", "data/sub/q.tsv": b"q\n"})
    assert sorted(safe_extract(t, tmp_path / "t")) == ["data/collection.tsv", "data/sub/q.tsv"]
    assert (tmp_path / "t" / "data" / "collection.tsv").read_text() == "0\tpassage zero\n"


def make_tar_seq(path, entries: list[tuple[str, str, bytes | str]]):
    """A tar with members in exactly this order: (name, 'file' | 'dir' | 'sym' | 'hard', data or target)."""
    kinds = {"dir": tarfile.DIRTYPE, "sym": tarfile.SYMTYPE, "hard": tarfile.LNKTYPE}
    with tarfile.open(path, "w") as tf:
        for name, kind, payload in entries:
            info = tarfile.TarInfo(name)
            if kind == "file":
                info.size = len(payload)
                tf.addfile(info, io.BytesIO(payload))
            else:
                info.type = kinds[kind]
                info.linkname = payload if kind in ("sym", "hard") else ""
                tf.addfile(info)
    return path


def _chain(depth: int) -> str:
    """``a -> .`` makes ``a/a/…/a`` the destination itself, so as many ``..`` climb above it while
    the text ``a/…/a/../…/..`` looks like it stays inside."""
    return "/".join(["a"] * depth + [".."] * depth + ["etc", "passwd"])


@pytest.mark.parametrize("kind", ["tar", "zip"])
def test_a_symlink_chain_cannot_reach_outside_the_destination(tmp_path, kind):
    dest = tmp_path / "raw" / "rec-movie"
    depth = len(dest.resolve().parts) + 2
    if kind == "tar":
        archive = make_tar_seq(tmp_path / "evil.tar", [("a", "sym", "."), ("leak", "sym", _chain(depth))])
    else:
        archive = make_zip(tmp_path / "evil.zip", {}, symlinks={"a": ".", "leak": _chain(depth)})
    with pytest.raises(RBenchError, match="refusing link 'a'") as err:
        safe_extract(archive, dest)
    assert str(archive) in str(err.value) and "\n" not in str(err.value)
    assert not os.path.lexists(dest / "leak") and folder_files(dest) == []


@pytest.mark.parametrize("entries,member", [
    ([("data/x.tsv", "file", b"0\tx\n"), ("data/y.tsv", "sym", "x.tsv")], "data/y.tsv"),  # harmless-looking
    ([("data/x.tsv", "file", b"0\tx\n"), ("data/y.tsv", "hard", "data/x.tsv")], "data/y.tsv"),
    ([("h", "hard", "a/a/../../etc/passwd")], "h"),
])
def test_links_in_archives_are_refused_whatever_their_target(tmp_path, entries, member):
    archive = make_tar_seq(tmp_path / "l.tar", entries)
    with pytest.raises(RBenchError, match=f"refusing link {member!r}"):
        safe_extract(archive, tmp_path / "out")
    assert folder_files(tmp_path / "out") == []


@pytest.mark.parametrize("entries,member,needle", [
    ([("d/x", "file", b"1"), ("d/x", "file", b"2")], "d/x", "duplicate member"),
    ([("d", "file", b"1"), ("d", "dir", b"")], "d", "a file and a folder"),  # was FileExistsError
    ([("d", "dir", b""), ("d", "file", b"1")], "d", "a file and a folder"),  # was IsADirectoryError
    ([("d", "file", b"1"), ("d/x", "file", b"2")], "d/x", "under the file 'd'"),
    ([("d/x", "file", b"2"), ("d", "file", b"1")], "d", "a file and a folder"),
])
def test_clashing_member_names_are_refused_with_one_line(tmp_path, entries, member, needle):
    archive = make_tar_seq(tmp_path / "c.tar", entries)
    with pytest.raises(RBenchError, match=needle) as err:
        safe_extract(archive, tmp_path / "out")
    assert str(err.value).startswith(f"{archive}: refusing member {member!r}")
    assert folder_files(tmp_path / "out") == []


def test_a_member_that_clashes_with_what_the_destination_holds_is_one_line(tmp_path):
    archive = make_tar_seq(tmp_path / "c.tar", [("d/x", "file", b"1")])
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "d").write_text("a file already here")
    with pytest.raises(RBenchError, match="cannot write member 'd/x'") as err:
        safe_extract(archive, tmp_path / "out")
    assert str(archive) in str(err.value)


def test_duplicate_zip_members_are_refused(tmp_path):
    z = tmp_path / "dup.zip"
    with zipfile.ZipFile(z, "w") as zf, pytest.warns(UserWarning, match="Duplicate name"):
        zf.writestr("ml-1m/ratings.dat", "1::1::5::1\n")
        zf.writestr("ml-1m/ratings.dat", "1::2::5::1\n")
    with pytest.raises(RBenchError, match="refusing member 'ml-1m/ratings.dat': duplicate member"):
        safe_extract(z, tmp_path / "out")


def test_the_download_command_refuses_a_symlink_chain_and_installs_nothing(server, monkeypatch, capsys):
    from rbench.cli.app import main
    from tests.helpers import with_downloads

    raw = paths.raw_dir("rec-movie")
    z = make_zip(paths.home() / "evil.zip", {"ml-1m/ratings.dat": b"1::1::5::1\n"},
                 symlinks={"ml-1m/a": ".", "ml-1m/leak": _chain(len(raw.parts) + 3)})
    server.files["/ml-1m.zip"] = z.read_bytes()
    with_downloads(monkeypatch, "rec-movie", (RemoteFile("ml-1m.zip", (server.url("/ml-1m.zip"),),
                                                         sha256=sha(z.read_bytes()), extract=True),))
    code = main(["data", "download", "rec-movie", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "refusing link 'ml-1m/a'" in err and "Traceback" not in err
    assert not os.path.lexists(raw / "ml-1m" / "leak") and folder_files(raw) == []
    assert [p.name for p in raw.parent.iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize("build,needle", [
    (lambda p: make_zip(p / "a.zip", {"ok.txt": b"x", "../evil.txt": b"x"}), "'..'"),
    (lambda p: make_zip(p / "a.zip", {"ok.txt": b"x", "/tmp/evil.txt": b"x"}), "absolute"),
    (lambda p: make_zip(p / "a.zip", {"ok.txt": b"x", "C:\\evil.txt": b"x"}), "absolute"),
    (lambda p: make_zip(p / "a.zip", {"ok.txt": b"x"}, symlinks={"link": "../../etc"}), "refusing link"),
    (lambda p: make_zip(p / "a.zip", {"ok.txt": b"x"}, symlinks={"link": "/etc/passwd"}), "refusing link"),
    (lambda p: make_tar(p / "a.tar.gz", {"ok.txt": b"x", "sub/../../evil.txt": b"x"}), "'..'"),
    (lambda p: make_tar(p / "a.tar.gz", {"ok.txt": b"x"}, links=[("l", "/etc/passwd", tarfile.SYMTYPE)]),
     "refusing link"),
    (lambda p: make_tar(p / "a.tar.gz", {"ok.txt": b"x"}, links=[("d/l", "../../x", tarfile.SYMTYPE)]),
     "refusing link"),
    (lambda p: make_tar(p / "a.tar.gz", {"ok.txt": b"x"}, links=[("h", "../secret", tarfile.LNKTYPE)]),
     "refusing link"),
    (lambda p: make_tar(p / "a.tar.gz", {"ok.txt": b"x"}, fifo="pipe"), "special file"),
])
def test_escaping_members_are_refused_before_anything_is_written(tmp_path, build, needle):
    archive = build(tmp_path)
    dest = tmp_path / "deep" / "dest"
    with pytest.raises(RBenchError, match=needle) as err:
        safe_extract(archive, dest)
    assert str(archive) in str(err.value)
    assert folder_files(dest) == []  # not even the harmless member
    assert not (tmp_path / "evil.txt").exists() and not (tmp_path / "deep" / "evil.txt").exists()


def test_damaged_archive_is_a_clear_error(tmp_path):
    z = tmp_path / "ml-1m.zip"
    z.write_bytes(ml1m_zip()[:100])
    with pytest.raises(RBenchError, match="damaged archive"):
        safe_extract(z, tmp_path / "out")
