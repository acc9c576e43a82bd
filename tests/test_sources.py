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
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pandas as pd
import pytest

from rbench import paths, sources
from rbench.api import RemoteFile
from rbench.errors import RBenchError
from rbench.sources import DownloadError, fetch, safe_extract

# --------------------------------------------------------------------------------------------
# a loopback server with Range support and scripted failures
# --------------------------------------------------------------------------------------------


class Server:
    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.cut: dict[str, list[int]] = {}  # path -> byte counts after which to drop the connection
        self.ignore_range: set[str] = set()
        self.no_validator: set[str] = set()
        self.log: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                path = self.path
                server.log.append({"path": path, "range": self.headers.get("Range"),
                                   "if_range": self.headers.get("If-Range")})
                if path not in server.files:
                    self.send_error(404)
                    return
                body = server.files[path]
                etag = '"' + hashlib.sha1(body).hexdigest() + '"'
                start, status = 0, 200
                rng = self.headers.get("Range")
                if rng and path not in server.ignore_range:
                    if_range = self.headers.get("If-Range")
                    if if_range is None or if_range == etag:
                        start = int(rng.split("=")[1].split("-")[0])
                        if start >= len(body):
                            self.send_response(416)
                            self.send_header("Content-Range", f"bytes */{len(body)}")
                            self.end_headers()
                            return
                        status = 206
                self.send_response(status)
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
                self.send_header("Content-Length", str(len(body) - start))
                if path not in server.no_validator:
                    self.send_header("ETag", etag)
                    self.send_header("Accept-Ranges", "bytes")
                self.end_headers()
                payload = body[start:]
                cuts = server.cut.get(path)
                if cuts:
                    n = cuts.pop(0)
                    self.wfile.write(payload[:n])
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02},
                                       daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"

    def requests_for(self, path: str) -> list[dict]:
        return [r for r in self.log if r["path"] == path]


@pytest.fixture
def server():
    s = Server()
    s.thread.start()
    yield s
    s.httpd.shutdown()
    s.httpd.server_close()


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
    raw = sources.download_task(get_task("rec-movie"))
    assert raw == paths.raw_dir("rec-movie")
    assert folder_files(raw) == ["ml-1m"]
    assert folder_files(raw / "ml-1m") == ["movies.dat", "ratings.dat", "users.dat"]
    assert (raw / "ml-1m" / "movies.dat").read_bytes().decode("latin-1").startswith("1193::One Flew")
    assert [p.name for p in raw.parent.iterdir() if p.name.startswith(".")] == []  # no temp folders
    raw_e = sources.download_task(get_task("esci"))
    linked = raw_e / "shopping_queries_dataset_examples.parquet"
    cached = paths.home() / "downloads" / "esci" / "shopping_queries_dataset_examples.parquet"
    assert linked.read_bytes() == pbody
    assert os.stat(linked).st_ino == os.stat(cached).st_ino  # a hard link, not a second copy


def test_tasks_without_a_public_url_say_how_to_get_the_data():
    from rbench.tasks.registry import get_task

    with pytest.raises(RBenchError, match="no direct public download.*routing-balance --from"):
        sources.remote_files(get_task("routing-balance"))
    with pytest.raises(RBenchError, match="did you mean"):
        get_task("rec-moive")


def test_source_table_is_well_formed():
    from rbench.tasks.registry import TASKS

    table = {name: spec.downloads for name, spec in TASKS.items() if spec.downloads}
    assert {"rec-movie", "esci", "rec-toy", "rec-clothing", "rec-music"} <= set(table)
    for files in table.values():
        assert len({f.filename for f in files}) == len(files)
        for rf in files:
            assert rf.urls and all(u.startswith("https://") for u in rf.urls), rf
            assert rf.sha256 is None or (len(rf.sha256) == 64 and int(rf.sha256, 16) >= 0)
            assert rf.extract == (sources.archive_kind(sources.Path(rf.filename)) is not None)
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
    t = make_tar(tmp_path / "a.tar.gz", {"data/collection.tsv": b"0\tpassage zero\n"},
                 links=[("data/latest.tsv", "collection.tsv", tarfile.SYMTYPE),
                        ("data/copy.tsv", "data/collection.tsv", tarfile.LNKTYPE)])
    safe_extract(t, tmp_path / "t")
    assert (tmp_path / "t" / "data" / "latest.tsv").read_text() == "0\tpassage zero\n"
    assert (tmp_path / "t" / "data" / "latest.tsv").is_symlink()
    assert (tmp_path / "t" / "data" / "copy.tsv").read_text() == "0\tpassage zero\n"


@pytest.mark.parametrize("build,needle", [
    (lambda p: make_zip(p / "a.zip", {"ok.txt": b"x", "../evil.txt": b"x"}), "'..'"),
    (lambda p: make_zip(p / "a.zip", {"ok.txt": b"x", "/tmp/evil.txt": b"x"}), "absolute"),
    (lambda p: make_zip(p / "a.zip", {"ok.txt": b"x", "C:\\evil.txt": b"x"}), "absolute"),
    (lambda p: make_zip(p / "a.zip", {"ok.txt": b"x"}, symlinks={"link": "../../etc"}), "outside"),
    (lambda p: make_zip(p / "a.zip", {"ok.txt": b"x"}, symlinks={"link": "/etc/passwd"}), "absolute"),
    (lambda p: make_tar(p / "a.tar.gz", {"ok.txt": b"x", "sub/../../evil.txt": b"x"}), "'..'"),
    (lambda p: make_tar(p / "a.tar.gz", {"ok.txt": b"x"}, links=[("l", "/etc/passwd", tarfile.SYMTYPE)]), "absolute"),
    (lambda p: make_tar(p / "a.tar.gz", {"ok.txt": b"x"}, links=[("d/l", "../../x", tarfile.SYMTYPE)]), "outside"),
    (lambda p: make_tar(p / "a.tar.gz", {"ok.txt": b"x"}, links=[("h", "../secret", tarfile.LNKTYPE)]), "outside"),
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
