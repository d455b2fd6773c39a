"""Open the HTML report in headless chromium: the chart script runs without errors.

The page's script marks ``<html data-parastream="ok">`` once every chart is drawn, or
``"error: ..."`` from ``window.onerror``; with ``#selftest`` in the URL it also zooms, pans,
hovers, switches colours and checks that bars were painted. ``--dump-dom`` shows the mark.
"""

from __future__ import annotations

import html
import os
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest

from parastream.report.html import write_html

try:  # tests/report as a package, or as a rootdir-inserted folder (pytest's default)
    from .test_html import EVIL, SUMMARY, big_analysis, big_timeline, small_capture
except ImportError:
    from test_html import EVIL, SUMMARY, big_analysis, big_timeline, small_capture

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else shutil.which("chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--mute-audio"]

if not CHROMIUM:
    pytest.skip("chromium is not installed", allow_module_level=True)


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / "profile"
    profile.mkdir(exist_ok=True)
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=180)


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    tl, a = small_capture(op_name=EVIL)
    big = big_timeline(60_000)
    out = tmp_path_factory.mktemp("report") / "report.html"
    write_html(out, [(tl, a), (big, big_analysis(big))], SUMMARY, "browser test")
    return out


def page_status(dom: str) -> str:
    m = re.search(r'<html[^>]*data-parastream="([^"]*)"', dom)
    assert m, dom[:500]
    return html.unescape(m.group(1))


@pytest.mark.parametrize("fragment", ["", "#selftest", "#point=2", "#view=10,20"])
def test_chart_script_runs_without_errors(report, tmp_path, fragment):
    proc = chromium(tmp_path, "--virtual-time-budget=5000", "--dump-dom",
                    report.as_uri() + fragment)
    dom = proc.stdout
    assert page_status(dom) == "ok", proc.stderr[-2000:]
    assert "Uncaught" not in proc.stderr
    assert 'id="ps-error" class="error" hidden' in dom
    assert "<img" not in dom.lower()  # the op named like an <img> tag stayed text


def png_size_and_pixels(path: Path) -> tuple[int, int, bytes]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    return width, height, zlib.decompress(idat)


def test_screenshot_is_not_blank(report, tmp_path):
    shot = tmp_path / "shot.png"
    proc = chromium(tmp_path, "--window-size=1400,1400", f"--screenshot={shot}", report.as_uri())
    assert shot.exists(), proc.stderr[-2000:]
    width, height, raw = png_size_and_pixels(shot)
    assert (width, height) == (1400, 1400)
    assert shot.stat().st_size > 30_000
    # a blank or single-colour page compresses to a few KB and its filtered scanlines use a
    # handful of byte values; the chart's colours, text and anti-aliasing use most of them
    counts = np.bincount(np.frombuffer(raw, np.uint8), minlength=256)
    assert (counts > 0).sum() > 200


def test_cli_report_of_the_real_trace_opens_offline(tmp_path):
    """The acceptance command, as a user types it, then the page in a headless browser."""
    import sys

    src = Path(__file__).parents[1] / "data" / "kineto" / "cuda_event_sync_multi_stream.json.gz"
    out = tmp_path / "r.html"
    subprocess.run([sys.executable, "-m", "parastream", "analyze", str(src), "--html", str(out)],
                   check=True, capture_output=True, timeout=120)
    text = out.read_text()
    assert "http://" not in text and "https://" not in text  # nothing to fetch
    proc = chromium(tmp_path, "--virtual-time-budget=5000", "--dump-dom", out.as_uri() + "#selftest")
    assert page_status(proc.stdout) == "ok", proc.stderr[-2000:]
    assert "Uncaught" not in proc.stderr


FIT_PROBE = """<script>
window.addEventListener("load", function () { setTimeout(function () {
  var W = window.innerWidth, bad = [];
  var tables = document.querySelectorAll("table");
  for (var i = 0; i < tables.length; i++) {
    var wrap = tables[i].closest(".table-wrap");
    if (!wrap) bad.push("table " + i + " is not in a scrolling wrapper");
    else if (wrap.getBoundingClientRect().right > W + 0.5) bad.push("table " + i + " is cut");
  }
  if (document.documentElement.scrollWidth > W) bad.push("the page scrolls sideways");
  document.documentElement.setAttribute("data-fit", bad.join("; ") || "ok");
}, 200); });
</script>"""


def test_wide_tables_fit_a_1400_pixel_window(tmp_path):
    """Tables wider than the window scroll inside their own wrapper: the page never scrolls
    sideways and no table is cut, whatever the summary holds (many columns, long values,
    a long key, a list of unbreakable names)."""
    tl, a = small_capture(op_name=EVIL)
    rows = [{f"column_{k}_with_a_long_header": f"value_{k}_" + "x" * 30 for k in range(14)}
            for _ in range(3)]
    summary = dict(SUMMARY, demo_rows=rows,
                   nested={"candidates": rows, "long_list": ["a_long_item_" * 8] * 5})
    summary["k_" + "long_key_" * 40] = {"inner_" + "y" * 300: rows}
    out = tmp_path / "wide.html"
    write_html(out, [(tl, a)], summary, "wide tables")
    out.write_text(out.read_text().replace("</body>", FIT_PROBE + "</body>"))
    proc = chromium(tmp_path, "--window-size=1400,1000", "--virtual-time-budget=5000",
                    "--dump-dom", out.as_uri())
    m = re.search(r'data-fit="([^"]*)"', proc.stdout)
    assert m, proc.stderr[-2000:]
    assert html.unescape(m.group(1)) == "ok"
