"""`bench locust run` against the simulator: Locust headless, custom TTFT events, ingestion."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
ROOT = Path(__file__).resolve().parents[3]


def test_locust_headless_run_is_ingested(instant_target, tmp_path):
    # find_spec, not importorskip: importing locust monkey-patches this process with gevent
    if importlib.util.find_spec("locust") is None:
        pytest.skip("the bench extra (locust) is not installed")
    out = tmp_path / "loc"
    r = subprocess.run([sys.executable, "-m", "bench", "locust", "run", "chat-smoke", "--url", instant_target.base_url,
                        "--model", "tiny", "--api-key-env", "SIM_KEY", "--users", "2", "--run-time", "6",
                        "--warmup-s", "1", "--cooldown-s", "1", "--out", str(out)],
                       cwd=ROOT, env={**os.environ, "SIM_KEY": instant_target.api_key}, capture_output=True,
                       text=True, timeout=150)
    assert r.returncode in (0, 2), r.stdout + r.stderr  # 2 only if Locust itself was CPU-bound
    s = json.loads((out / "summary.json").read_text())
    assert s["run"]["client"]["tool"] == "locust"
    assert s["requests"]["sent"] > 10 and s["requests"]["errors"] == 0
    assert s["tokens"]["output"]["mean"] == 64 and s["tokens"]["prompt_mismatch_vs_server"] == 0
    assert {c["check"] for c in s["validity"]["checks"]} >= {"locust CPU warnings"}
    rows = {row["Name"]: row for row in csv.DictReader((out / "locust_stats.csv").open())}
    assert int(rows["TTFT"]["Request Count"]) > 10 and int(rows["chat"]["Failure Count"]) == 0
    assert (out / "report.html").is_file()
    # the ingested run feeds the same gates
    gate = tmp_path / "g.yaml"
    gate.write_text("name: g\nscenario: chat-smoke\ngates:\n  - {kind: error_rate, max_fraction: 0.5}\n")
    r = subprocess.run([sys.executable, "-m", "bench", "check", str(out), "--gate", str(gate)], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == (0 if s["validity"]["valid"] else 2), r.stdout + r.stderr
