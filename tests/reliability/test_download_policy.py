"""Dataset downloads under the one HTTP policy (issue 42 item 1): the loopback servers of
``test_http_policy`` (reused, not copied) redirect across hosts with credentials, trickle, stall
and flood a download; each is one line, the other host is never asked, and nothing half-written
is left where a file is expected. Limits are ~1 s so that each test takes a second or two."""

from __future__ import annotations

import ast
import base64
import time
from pathlib import Path
from typing import Any

import pytest

from rbench.api import RemoteFile
from rbench.core import paths
from rbench.core.errors import RBenchError
from rbench.tasks.sources.downloads import DownloadError, fetch
from rbench.tasks.sources.transfer import DownloadLimits
from tests.helpers import with_downloads
from tests.reliability.test_http_policy import redirect, serve  # noqa: F401  (serve: the fixture)

BODY = bytes(range(256)) * 40  # 10,240 bytes
FAST = DownloadLimits(deadline_s=1.0, stall_s=0.5, max_bytes=1 << 20)


def send_file(h: Any, body: bytes = BODY) -> None:
    h.send_response(200)
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)


def trickle(h: Any) -> None:
    """Headers promising the file, then one byte every 0.2 s (never a 0.5 s stall)."""
    h.send_response(200)
    h.send_header("Content-Length", str(len(BODY)))
    h.end_headers()
    for b in BODY:
        h.wfile.write(bytes([b]))
        h.wfile.flush()
        time.sleep(0.2)


def stall_after_headers(h: Any) -> None:
    h.send_response(200)
    h.send_header("Content-Length", str(len(BODY)))
    h.end_headers()
    h.wfile.write(BODY[:100])
    h.wfile.flush()
    time.sleep(5)


def stall_before_headers(h: Any) -> None:
    time.sleep(5)


def flood(h: Any) -> None:
    """No length: bytes until the client hangs up."""
    h.send_response(200)
    h.end_headers()
    chunk = b"x" * (1 << 16)
    while True:
        h.wfile.write(chunk)


def announce_10_gib(h: Any) -> None:
    h.send_response(200)
    h.send_header("Content-Length", str(10 << 30))
    h.end_headers()
    h.wfile.write(b"x" * 1000)


def folder(task: str = "rec-toy") -> list[str]:
    d = paths.home() / "downloads" / task
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


# ------------------------------------------------------------------------------ credentials


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_download_with_credentials_is_never_redirected_to_another_host(serve, status):  # noqa: F811
    elsewhere = serve(send_file, host="localhost")  # another host: localhost != 127.0.0.1
    first = serve(redirect(f"http://localhost:{elsewhere.port}", status))
    rf = RemoteFile("data.bin", (f"http://alice:s3cret@127.0.0.1:{first.port}/data.bin",))
    with pytest.raises(DownloadError, match="another host or scheme: refused") as err:
        fetch("rec-toy", rf, limits=FAST)
    assert "\n" not in str(err.value) and "s3cret" not in str(err.value)
    assert elsewhere.seen == []  # not even asked without the credential
    sent = first.seen[0][2].get("Authorization", "")
    assert sent == "Basic " + base64.b64encode(b"alice:s3cret").decode()  # the URL's credential is one
    assert folder() == []  # no file, no part


def test_a_download_without_credentials_follows_a_redirect_to_a_mirror_and_sends_none(serve):  # noqa: F811
    mirror = serve(send_file, host="localhost")
    first = serve(redirect(f"http://localhost:{mirror.port}", 302))
    rf = RemoteFile("data.bin", (f"http://127.0.0.1:{first.port}/data.bin",), size=len(BODY))
    got = fetch("rec-toy", rf, limits=FAST)
    assert got.read_bytes() == BODY and folder() == ["data.bin", "manifest.json"]
    assert [s[1] for s in mirror.seen] == ["/data.bin"]
    assert all("Authorization" not in s[2] for s in first.seen + mirror.seen)


# ------------------------------------------------------------------------------ deadlines and caps


def test_a_trickling_download_ends_at_its_deadline_and_keeps_its_part(serve):  # noqa: F811
    s = serve(trickle)
    rf = RemoteFile("data.bin", (s.url + "/data.bin",), size=len(BODY))
    t0 = time.monotonic()
    with pytest.raises(DownloadError, match=r"interrupted after .* within 1 s \(the deadline\)") as err:
        fetch("rec-toy", rf, limits=FAST)
    assert time.monotonic() - t0 < 10  # the whole trickle takes 34 minutes
    assert "\n" not in str(err.value) and "resumes" in str(err.value) and "deadline 1 s" in str(err.value)
    assert folder() == ["data.bin.part", "data.bin.part.json"]  # resumable; never the file itself


@pytest.mark.parametrize("behave,needle", [(stall_after_headers, "interrupted after 100 bytes"),
                                           (stall_before_headers, "cannot download")])
def test_a_stalled_download_is_cut_after_stall_s(serve, behave, needle):  # noqa: F811
    s = serve(behave)
    rf = RemoteFile("data.bin", (s.url + "/data.bin",), size=len(BODY))
    t0 = time.monotonic()
    with pytest.raises(DownloadError, match=r"no byte for 0\.5 s") as err:
        fetch("rec-toy", rf, limits=DownloadLimits(deadline_s=30, stall_s=0.5))
    assert time.monotonic() - t0 < 3.5  # the server hangs up after 5 s
    assert needle in str(err.value) and "\n" not in str(err.value)
    assert "data.bin" not in folder()


@pytest.mark.parametrize("size,needle", [(None, "more than the 1 MiB cap"),
                                         (5000, "more than the 5,000 bytes the task declares")])
def test_a_flood_is_cut_at_the_cap_and_nothing_is_kept(serve, size, needle):  # noqa: F811
    s = serve(flood)
    rf = RemoteFile("data.bin", (s.url + "/data.bin",), sha256="0" * 64, size=size)
    with pytest.raises(DownloadError, match=needle) as err:
        fetch("rec-toy", rf, limits=FAST)
    assert "\n" not in str(err.value)
    assert folder() == []  # a flood is not resumed: the part is gone


def test_an_announced_size_over_the_cap_is_refused_before_the_body(serve):  # noqa: F811
    s = serve(announce_10_gib)
    rf = RemoteFile("data.bin", (s.url + "/data.bin",), sha256="0" * 64)
    with pytest.raises(DownloadError, match=r"announces 10,737,418,240 bytes, more than the 1 MiB cap"):
        fetch("rec-toy", rf, limits=FAST)
    assert folder() == []


# ------------------------------------------------------------------------------ the command


def test_the_download_command_sets_the_limits_and_says_one_line(serve, monkeypatch, capsys):  # noqa: F811
    from rbench.cli.app import main

    s = serve(trickle)
    with_downloads(monkeypatch, "rec-toy", (RemoteFile("data.bin", (s.url + "/data.bin",), size=len(BODY)),))
    t0 = time.monotonic()
    code = main(["data", "download", "rec-toy", "--quiet", "--deadline-s", "1", "--stall-s", "0.5"])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and time.monotonic() - t0 < 10
    assert len(lines) == 1 and "within 1 s (the deadline)" in lines[0] and "Traceback" not in lines[0]
    assert not (paths.raw_dir("rec-toy") / "data.bin").exists()


@pytest.mark.parametrize("args,needle", [(["--deadline-s", "nan"], "deadline_s=nan"),
                                         (["--stall-s", "0"], "stall_s=0"),
                                         (["--max-gb", "inf"], "--max-gb inf"),
                                         (["--max-gb", "0"], "--max-gb 0")])
def test_bad_limits_are_refused_before_any_request(serve, monkeypatch, capsys, args, needle):  # noqa: F811
    from rbench.cli.app import main

    s = serve(send_file)
    with_downloads(monkeypatch, "rec-toy", (RemoteFile("data.bin", (s.url + "/data.bin",)),))
    code = main(["data", "download", "rec-toy", "--quiet", *args])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and "Traceback" not in err and s.seen == []


def test_limits_are_checked_where_they_are_built():
    for bad in ({"deadline_s": float("inf")}, {"stall_s": -1.0}, {"max_bytes": 0}, {"max_bytes": True}):
        with pytest.raises(RBenchError, match="download limit"):
            DownloadLimits(**bad)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ one policy

NETWORK_MODULES = ("requests", "urllib.request", "urllib3", "http.client", "httpx", "aiohttp", "socket", "pooch")


def network_imports(root: Path) -> list[str]:
    """``file:line module`` for every import of a network client under ``root`` (any depth,
    inside functions too), but ``rbench/core/http.py``: the one place that opens connections."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.as_posix().endswith("rbench/core/http.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            for name in names:
                if any(name == m or name.startswith(m + ".") for m in NETWORK_MODULES):
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno} {name}")
    return found


def test_every_network_call_goes_through_the_one_policy(tmp_path):
    """No module of rbench or of the built-in rankers opens a connection of its own (the imports
    of ir_datasets, datasets and model hubs do theirs inside those packages)."""
    repo = Path(__file__).resolve().parents[2]
    assert network_imports(repo / "rbench") == [] and network_imports(repo / "rankers") == []
    planted = tmp_path / "pkg"
    planted.mkdir()
    (planted / "m.py").write_text("def get():\n    import requests\n    from urllib.request import urlopen\n")
    assert network_imports(planted) == ["pkg/m.py:2 requests", "pkg/m.py:3 urllib.request"]
