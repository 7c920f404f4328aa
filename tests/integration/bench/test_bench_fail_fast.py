"""A run that cannot succeed stops early, through the real `bench run` against the simulator
answering every request with 500: invalid, exit 2, the first failures' reasons printed and in the
report, instead of running its whole 120 s."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/integration/sim/servers.py

from sim.servers import API_KEY, sim_server  # noqa: E402

from testsupport.stack import ROOT  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def bench(url: str, out: Path, *flags: str) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "SIM_KEY": API_KEY, "BENCH_PROGRESS_EVERY": "0"}
    t = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "splitstack.cli.bench", "run", "chat-smoke", "--url", url, "--model",
                        "tiny", "--api-key-env", "SIM_KEY", "--out", str(out), *flags], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=150)
    return r, time.monotonic() - t


def test_every_request_failing_stops_the_run_with_its_reasons(tmp_path):
    with sim_server("--model-name", "tiny", "--fault", "error_rate=1.0", "--fault", "error_status=500") as srv:
        r, took = bench(srv.url, tmp_path / "run", "--rate", "20", "--duration-s", "120", "--fail-fast-s", "3")
    text = " ".join((r.stdout + r.stderr).split())
    print(f"stopped after {took:.1f} s of a 120 s run: {text[-900:]}")
    assert r.returncode == 2, text
    assert "Traceback" not in text
    assert "ran to its end (fail fast)" in text and "stopped early: every request that finished in" in text
    assert "first http_500 at" in text
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert not summary["validity"]["valid"]
    stop = next(c for c in summary["validity"]["checks"] if c["check"] == "ran to its end (fail fast)")
    assert not stop["passed"] and stop["measured"] >= 3.0
    assert summary["first_failures"][0]["error"] == "http_500"
    assert took < 60, f"a fail-fast stop after 3 s took {took:.0f} s in all"
    assert "First failures" in (tmp_path / "run" / "report.html").read_text()


def test_fail_fast_off_rides_through_to_the_end(tmp_path):
    with sim_server("--model-name", "tiny", "--fault", "error_rate=1.0", "--fault", "error_status=500") as srv:
        r, took = bench(srv.url, tmp_path / "run", "--rate", "20", "--duration-s", "4", "--fail-fast-s", "0")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    checks = {c["check"] for c in summary["validity"]["checks"]}
    assert "ran to its end (fail fast)" not in checks  # off: not judged
    assert all(p["fail_fast_after_s"] is None for p in summary["run"]["client"]["processes"])
    assert summary["requests"]["sent"] >= 40  # the 4 s window at 20 req/s (Poisson: ~80), not a 20-failure stop
    assert r.returncode == 2  # still invalid: nothing succeeded
