"""`bench sweep` against a simulator with 4 batch slots: TTFT grows with load, so the search must
bracket the SLO crossing, interpolate it with a CI, and draw the sweep in the report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sim.servers import sim_server  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]
ROOT = Path(__file__).resolve().parents[3]


def test_sweep_finds_the_max_rate_meeting_the_slo(tmp_path):
    scn = tmp_path / "sweep.yaml"
    scn.write_text("kind: chat\nname: sweep\nprompt_tokens: {mean: 64}\noutput_tokens: {mean: 64}\nprompt_pool: 8\n"
                   "load: {rate_rps: 1, duration_s: 3, warmup_s: 0.5}\n")
    with sim_server("--profile", "mineru25-h200", "--model-name", "tiny", "--max-num-seqs", "4") as srv:
        r = subprocess.run(
            [sys.executable, "-m", "splitstack.cli.bench", "sweep", str(scn), "--url", srv.url, "--model", "tiny",
             "--api-key-env", "SIM_KEY", "--max", "200", "--metric", "ttft_ms", "--percentile", "95",
             "--start", "2", "--factor", "2", "--repeats", "2", "--bisect-steps", "2", "--max-rps", "64",
             "--out", str(tmp_path / "out")],
            cwd=ROOT, env={**os.environ, "SIM_KEY": "sekret"}, capture_output=True, text=True, timeout=380)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    sweep = json.loads((tmp_path / "out" / "summary.json").read_text())["sweep"]
    assert "bracket_rps" in sweep, f"{sweep['conclusion']}; points: {json.dumps(sweep['points'])}"
    lo, hi = sweep["bracket_rps"]
    assert 2 <= lo < hi <= 16  # 4 slots x ~0.5 s per answer: saturation near 8 req/s
    assert lo <= sweep["max_rate_rps"] <= hi
    assert sweep["ci_rps"] is not None and sweep["ci_rps"][0] <= sweep["max_rate_rps"] <= sweep["ci_rps"][1]
    assert any(not p["meets"] for p in sweep["points"]) and any(p["meets"] for p in sweep["points"])
    assert "max rate meeting p95 ttft_ms <= 200" in r.stdout
    assert "Sweep:" in (tmp_path / "out" / "report.html").read_text()
