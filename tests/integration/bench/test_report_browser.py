"""The report and the comparison in a real browser (headless Debian `chromium`, installed by
`make setup`): at 700 and 1,920 px wide nothing overflows horizontally: the page is no wider than
the window and no table or plot is wider than its box. Two short `chat-smoke` runs against the simulator
give every section a real run has (server metrics, count agreement, SLO lines).

Screenshots go to the test's temporary folder, or to $REPORT_SHOTS_DIR when set.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
WIDTHS = (700, 1920)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--hide-scrollbars", "--virtual-time-budget=8000"]

# Run in the page after plotly has drawn: what sticks out to the right of the window or its box.
CHECK = """<script>window.addEventListener('load', () => setTimeout(() => {
  const doc = document.documentElement, w = doc.clientWidth;
  const tables = [...document.querySelectorAll('table')]
    .filter(t => t.getBoundingClientRect().width > t.parentElement.clientWidth + 1)
    .map(t => t.rows[0].innerText.slice(0, 80));
  const plots = [...document.querySelectorAll('.plot')]
    .filter(p => [...p.querySelectorAll('.main-svg')].some(s => s.getBoundingClientRect().right > w + 1
      || s.getBoundingClientRect().width > p.clientWidth + 1)).length;
  const out = document.createElement('pre'); out.id = 'layout-check';
  out.textContent = JSON.stringify({inner: window.innerWidth, client: w, scroll: doc.scrollWidth,
    tables: tables, plots: plots, n_tables: document.querySelectorAll('table').length,
    n_plots: document.querySelectorAll('.plot .main-svg').length});
  document.body.appendChild(out);
}, 1500));</script></body>"""


def _browser() -> str:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.fail("chromium is not installed: `make setup` installs it (apt-get install -y chromium)")
    return browser


def _layout(html: Path, width: int) -> dict:
    probe = html.with_name(f"{html.stem}-probe-{width}.html")
    probe.write_text(html.read_text().replace("</body>", CHECK, 1))
    with tempfile.TemporaryDirectory() as profile:
        r = subprocess.run([_browser(), *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},1200",
                            "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=120)
    m = re.search(r'<pre id="layout-check">(.*?)</pre>', r.stdout)
    assert m, f"{html.name} at {width} px: the layout check did not run\n{r.stderr[-2000:]}"
    return json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))


def _screenshot(html: Path, png: Path, width: int) -> None:
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([_browser(), *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},4000",
                        f"--screenshot={png}", html.as_uri()], check=True, capture_output=True, timeout=120)
    assert png.stat().st_size > 10_000


def _bench(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "splitstack.cli.bench", *args], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, **env}, timeout=240)


@pytest.fixture
def runs(sim_target, tmp_path):
    env = {"SIM_KEY": sim_target.api_key}
    target = ["--url", sim_target.base_url, "--model", "tiny", "--api-key-env", "SIM_KEY"]
    for name, seed in (("base", "1"), ("cand", "2")):
        r = _bench("run", "chat-smoke", *target, "--rate", "20", "--count", "100", "--seed", seed,
                   "--out", str(tmp_path / name), env=env)
        assert r.returncode in (0, 2), r.stdout + r.stderr  # 2: the shared machine preempted the client
    r = _bench("compare", str(tmp_path / "base"), str(tmp_path / "cand"), "--allow-invalid", "--resamples", "200",
               "--out", str(tmp_path / "comparison.json"), env={"COLUMNS": "200"})
    assert r.returncode in (0, 1), r.stdout + r.stderr
    assert "nan" not in r.stdout.lower() and "Warning" not in r.stderr
    rows = {(x["metric"], x["stat"]): x for x in json.loads((tmp_path / "comparison.json").read_text())["rows"]}
    assert "ci_low" in rows[("e2e_ms", "p95")], rows[("e2e_ms", "p95")]  # 100 requests a run: p95 has an interval
    return {"report": tmp_path / "base" / "report.html", "comparison": tmp_path / "comparison.html"}


def test_report_and_comparison_fit_700_and_1920_px(runs, tmp_path):
    shots = Path(os.environ.get("REPORT_SHOTS_DIR") or tmp_path / "shots")
    shots.mkdir(parents=True, exist_ok=True)
    for name, html in runs.items():
        for width in WIDTHS:
            got = _layout(html, width)
            where = f"{name} at {width} px"
            assert got["inner"] == width, f"{where}: the window is {got['inner']} px wide"
            assert got["scroll"] <= got["client"], f"{where}: the page scrolls sideways ({got})"
            assert got["tables"] == [], f"{where}: tables wider than their box: {got['tables']}"
            assert got["n_plots"] >= 2 and got["plots"] == 0, f"{where}: plots wider than their box ({got})"
            _screenshot(html, shots / f"{name}-{width}.png", width)
