"""Issue 6 items 4 and 5 on the full local stack (`splitstack up`: Redis, Prometheus with the
rules of alerts/, the simulator engine and a real worker): after real PDF jobs, every dashboard
panel returns data; killing the inference server fires InferenceServerDown within its `for`
plus a scrape and an evaluation interval; it resolves after a restart; `slo report` reads the
stack's Prometheus.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from dashboards.generate import DASHBOARD_DIR, panel_exprs
from splitstack.cli.slo import app
from stack.secrets import queue_url
from testsupport.stack import ROOT, local_stack

pytestmark = pytest.mark.integration

SERVER = "server-vlm"
FOR_S, SCRAPE_S, EVAL_S = 60, 1, 1  # testsupport.stack.local_stack scrapes and evaluates every second


def _query(prom: str, expr: str) -> list[dict]:
    body = httpx.get(f"{prom}/api/v1/query", params={"query": expr}, timeout=10).json()
    assert body["status"] == "success", (expr, body)
    return body["data"]["result"]


def _alert(prom: str, name: str) -> dict | None:
    alerts = httpx.get(f"{prom}/api/v1/alerts", timeout=5).json()["data"]["alerts"]
    return next((a for a in alerts if a["labels"]["alertname"] == name), None)


def _alert_state(prom: str, name: str) -> str | None:
    alert = _alert(prom, name)
    return alert["state"] if alert else None


def test_dashboards_alert_and_report_on_the_local_stack(tmp_path: Path, live) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "pdfs"))
    from pdf_fixtures import make_pdf

    # max_model_len 8192: MinerU's layout request (~2,600 prompt tokens) exceeds the local default.
    stack = local_stack(tmp_path / "state", **{"inference_servers.0.engine": "sim",
                                               "inference_servers.0.max_model_len": 8192,
                                               "inference_servers.0.max_num_batched_tokens": 8192,
                                               "worker_pool.replicas": 1})
    try:
        state = stack.up()
        prom = state["components"]["prometheus"]["url"]
        live.wait_until(lambda: _query(prom, 'up{job="workers"} == 1'), 30, "worker scraped")
        env = {**os.environ, stack.spec.queue.url_env: queue_url(stack.spec, stack.paths)}  # with AUTH
        pdfs = [str(make_pdf(tmp_path / f"d{i}.pdf", 2, seed=i)) for i in range(4)]
        done = subprocess.run([sys.executable, "-m", "splitstack.cli.main", "submit", *pdfs,
                               "--wait", "--timeout-s", "120"],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stdout + done.stderr

        # Item 5: every panel of every dashboard returns data from the stack's Prometheus.
        pending = [(p.name, t, e) for p in sorted(DASHBOARD_DIR.glob("*.json"))
                   for t, e in panel_exprs(json.loads(p.read_text()))]

        def all_have_data() -> bool:
            nonlocal pending
            pending = [(b, t, e) for b, t, e in pending
                       if not any(r["value"][1] != "NaN" for r in _query(prom, e))]
            return not pending

        started = time.monotonic()
        try:
            live.wait_until(all_have_data, 150, "every panel to return data", interval_s=2)
        except AssertionError:
            raise AssertionError(f"panels without data: {pending}") from None
        print(f"all panels returned data {time.monotonic() - started:.0f} s after the PDFs were done")

        # Item 4: kill the inference server; the alert fires after `for`, no later than a scrape + evaluation.
        pid = stack.supervisor.process_info()[SERVER]["pid"]
        killed = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        live.wait_until(lambda: _alert_state(prom, "InferenceServerDown") == "firing", FOR_S + 30,
                        "InferenceServerDown firing", interval_s=0.2)
        elapsed = time.monotonic() - killed
        assert FOR_S <= elapsed <= FOR_S + SCRAPE_S + EVAL_S + 3, elapsed
        alert = _alert(prom, "InferenceServerDown")
        assert alert["labels"]["severity"] == "page" and alert["labels"]["job"] == "inference-server"
        assert alert["annotations"]["runbook_action"] == "restart-server"
        assert alert["annotations"]["runbook_url"] == "runbooks/pages/InferenceServerDown.md"
        print(f"InferenceServerDown fired {elapsed:.1f} s after SIGKILL of the server")
        stack.supervisor.start_process(SERVER)
        restarted = time.monotonic()
        live.wait_until(lambda: _alert_state(prom, "InferenceServerDown") is None, 60, "InferenceServerDown resolved")
        print(f"resolved {time.monotonic() - restarted:.1f} s after the restart")

        out = tmp_path / "report.json"
        r = CliRunner().invoke(app, ["report", "--prometheus", prom, "--window", "10m", "--current", "10m",
                                     "--step", "1s", "--json", str(out)])
        assert r.exit_code == 0, r.output
        rows = {s["slo"]: s for s in json.loads(out.read_text())["slos"]}
        assert rows["inference-server-uptime"]["status"] == "exhausted"  # a minute down in 10 min
        for name in ("availability", "ttft-p95", "inference-queue-depth", "pdf-latency-p99"):
            assert rows[name]["status"] != "no-data", rows[name]
    finally:
        stack.down()
    assert stack.processes() == []
