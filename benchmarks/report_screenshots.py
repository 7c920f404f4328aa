"""Screenshots of the bench's HTML report in a real browser (headless Chromium), for docs/images/.

Starts the simulator with a GPU latency profile on a free port, runs `bench run chat-mixed`
and a short `bench sweep chat-mixed` against it, then opens both report.html files in headless
Chromium (Debian's `chromium`; nothing is fetched from the network: plotly.js is inlined) and
writes full-page PNGs. Prints each report's size. Look at the PNGs before committing them.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/report_screenshots.py --out docs/images
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from sim.servers import API_KEY, sim_server  # noqa: E402

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--no-first-run", "--hide-scrollbars",
                  "--virtual-time-budget=5000"]  # lets plotly draw before the capture


def bench(*args: str, env: dict[str, str]) -> None:
    r = subprocess.run([sys.executable, "-m", "splitstack.cli.bench", *args], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=600)
    if r.returncode not in (0, 2):
        raise SystemExit(f"bench {' '.join(args)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")


def screenshot(html: Path, png: Path, width: int, height: int) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        raise SystemExit("chromium is not installed: apt-get install -y chromium")
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--screenshot={png.resolve()}",
                        f"--window-size={width},{height}", html.resolve().as_uri()],
                       check=True, capture_output=True, timeout=120)
    _trim(png)
    print(f"{png}: {png.stat().st_size / 1e3:.0f} kB")


def _trim(png: Path) -> None:
    """Cut the blank bottom of a capture taller than the page (Pillow, from the sim extra)."""
    from PIL import Image, ImageChops

    with Image.open(png) as im:
        rgb = im.convert("RGB")
    box = ImageChops.difference(rgb, Image.new("RGB", rgb.size, (255, 255, 255))).getbbox()
    if box:
        rgb.crop((0, 0, rgb.size[0], min(rgb.size[1], box[3] + 24))).save(png, optimize=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "images")
    ap.add_argument("--runs", type=Path, default=None, help="keep the run folders here (default: a temp folder)")
    ap.add_argument("--width", type=int, default=1200)
    a = ap.parse_args()
    runs = a.runs or Path(tempfile.mkdtemp(prefix="report-shots-"))
    env = {**os.environ, "SIM_KEY": API_KEY}
    with sim_server("--profile", "mineru25-h200", "--model-name", "tiny", "--max-model-len", "4096") as srv:
        target = ["--url", srv.url, "--model", "tiny", "--api-key-env", "SIM_KEY"]
        bench("run", "chat-mixed", *target, "--rate", "8", "--duration-s", "30", "--out", str(runs / "run"), env=env)
        bench("sweep", "chat-mixed", *target, "--max", "25", "--start", "2", "--factor", "2", "--max-rps", "16",
              "--repeats", "2", "--bisect-steps", "1", "--duration-s", "10", "--out", str(runs / "sweep"), env=env)
    a.out.mkdir(parents=True, exist_ok=True)
    for name in ("run", "sweep"):
        html = runs / name / "report.html"
        print(f"{html}: {html.stat().st_size / 1e6:.2f} MB")
        screenshot(html, a.out / f"bench-report-{name}.png", a.width, 6400 if name == "run" else 7200)


if __name__ == "__main__":
    main()
