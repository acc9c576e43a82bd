"""The HTML report of a reproduced experiment: self-contained (figures inline), and it opens in
headless Chromium without a console error or a missing image (the Debian package; CI installs
it, elsewhere the browser test skips)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from rbench.results import report

TABLE = [{"ranker": r, "task": t, "variant": "original", "measure": m, "rbench": v, "paper": p,
          "delta": None if p is None else v - p, "status": "kept"}
         for r, v in (("pop", 4.3), ("bm25", 1.5)) for t, p in (("rec-movie", 0.5), ("ml-100k", None))
         for m in ("nDCG@10", "MRR")]


def _page(tmp_path, broken: bool = False):
    pytest.importorskip("matplotlib")
    from rbench.results.plots import plot_recipe

    png = plot_recipe("test figure", TABLE, tmp_path / "fig.png")
    if broken:
        png.write_bytes(b"not a png")
    page = tmp_path / ("broken.html" if broken else "page.html")
    page.write_text(report.render("A title", "sub", "a note", TABLE, [png], None))
    return page


def test_page_is_self_contained(tmp_path):
    html = _page(tmp_path).read_text()
    assert "data:image/png;base64," in html and "http://" not in html and "https://" not in html
    assert html.count("<tr>") == 1 + len(TABLE) and "+3.80" in html  # 4.30 - 0.50


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    pytest.skip("headless Chromium not installed (CI installs the Debian package)")


def _open(browser: str, page) -> tuple[str, str]:
    done = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
                           "--v=0", "--virtual-time-budget=3000", "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    return done.stdout, done.stderr


def test_page_opens_in_chromium_with_every_image(tmp_path):
    browser = _chromium()
    dom, log = _open(browser, _page(tmp_path))
    assert 'data-images="ok"' in dom, dom[:500]
    console = [line for line in log.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert not console, console
    dom, _ = _open(browser, _page(tmp_path, broken=True))  # the check can fail: a broken image is seen
    assert 'data-images="missing:1"' in dom
