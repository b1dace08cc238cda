"""report.html as a reader sees it: rendered by headless Chromium, every plot must load as an
image and every table must have rows, and the screenshot must not be blank."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from .conftest import lab

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (make setup installs it)")

# Run in the page once it has loaded: how many images failed to decode, written where --dump-dom
# shows it.
PROBE = """<script>window.addEventListener('load', () => {
  const broken = [...document.images].filter(i => !i.complete || i.naturalWidth === 0).length;
  document.body.setAttribute('data-images', document.images.length);
  document.body.setAttribute('data-broken', broken);
});</script>"""


def chromium(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--virtual-time-budget=5000", *args], capture_output=True, text=True, timeout=120)


class Tables(HTMLParser):
    """Rows (with at least one data cell) per table."""

    def __init__(self):
        super().__init__()
        self.rows: list[int] = []
        self._cells = 0

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.rows.append(0)
        elif tag == "tr":
            self._cells = 0
        elif tag == "td":
            self._cells += 1

    def handle_endtag(self, tag):
        if tag == "tr" and self._cells and self.rows:
            self.rows[-1] += 1


def check_report(html_path: Path, tmp: Path) -> list[str]:
    """What is wrong with the report as rendered; empty when it looks right."""
    problems = []
    text = html_path.read_text()
    t = Tables()
    t.feed(text)
    if not t.rows:
        problems.append("no table")
    problems += [f"table {i} has no rows" for i, n in enumerate(t.rows) if n == 0]
    probed = tmp / "probed.html"
    probed.write_text(text.replace("</body>", PROBE + "</body>"))
    dom = chromium("--dump-dom", probed.as_uri())
    m = re.search(r'data-images="(\d+)" data-broken="(\d+)"', dom.stdout)
    if not m:
        problems.append(f"chromium did not render the page: {dom.stderr[-500:]}")
    else:
        images, broken = int(m.group(1)), int(m.group(2))
        if images == 0:
            problems.append("no plot in the report")
        if broken:
            problems.append(f"{broken} of {images} plots do not load")
    shot = tmp / "shot.png"
    r = chromium(f"--screenshot={shot}", "--window-size=1400,2000", html_path.as_uri())
    if not shot.exists():
        problems.append(f"no screenshot: {r.stderr[-500:]}")
    else:
        import matplotlib.image as mpimg

        px = mpimg.imread(str(shot))[:, :, :3]
        ink = np.mean(np.any(px < 0.9, axis=2))  # share of pixels that are not (near) white
        if ink < 0.01:
            problems.append(f"the screenshot is blank ({ink * 100:.2f} % ink)")
    return problems


@pytest.fixture(scope="module")
def report(built, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs")
    r = lab("run", "--suite", "patterns", "--smoke", "--alloc", "glibc,strata", "--rounds", "2",
            "--warmup", "0", "--cells", "larson/*", "--out", str(out), "--report", "--no-progress")
    assert r.returncode == 0, r.stderr
    [d] = list(out.iterdir())
    return d / "report.html"


def test_report_renders_with_plots_and_tables(report, tmp_path):
    assert check_report(report, tmp_path) == []


def test_a_broken_plot_or_an_empty_table_is_caught(report, tmp_path):
    # The checker itself must fail on what it is there to catch.
    text = report.read_text()
    first = re.search(r"data:image/png;base64,([A-Za-z0-9+/=]+)", text)
    broken = text.replace(first.group(1), base64.b64encode(b"not a png").decode(), 1)
    (tmp_path / "broken.html").write_text(broken)
    assert any("plots do not load" in p for p in check_report(tmp_path / "broken.html", tmp_path))
    empty = re.sub(r"(<table>)(.*?)(</table>)", lambda m: m.group(1) + "<tr><th>cell</th></tr>" + m.group(3),
                   text, count=1, flags=re.S)
    (tmp_path / "empty.html").write_text(empty)
    assert "table 0 has no rows" in check_report(tmp_path / "empty.html", tmp_path)
    blank = "<!doctype html><html><body><table><tr><td>x</td></tr></table></body></html>"
    (tmp_path / "blank.html").write_text(blank)
    problems = check_report(tmp_path / "blank.html", tmp_path)
    assert "no plot in the report" in problems and any("blank" in p for p in problems)
