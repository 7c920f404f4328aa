"""`bench run` against the monolithic twin: real Redis, `sim serve --private-engines 2` and two
real MinerU workers, each calling only its own engine; the run folder records the topology and
`bench compare` of it against itself says the topologies agree."""

from __future__ import annotations

import json

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from bench.pdfgen import make_pdf
from splitstack.cli.bench import app

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def test_pipeline_run_on_private_engines(tmp_path):
    pytest.importorskip("mineru", reason="the worker extra (mineru) is not installed")
    from testsupport.worker import API_KEY, Harness, metric_value

    h = Harness(tmp_path / "stack", sim_profile="mineru25-h200")
    try:
        h.start_redis()
        _, urls = h.start_private_engines(2, "--engine-load-scale", "0.02")  # 1.2 s per engine
        workers = [h.start_worker(i, wait_ready=False, server_url=urls[i]) for i in range(2)]
        for w in workers:
            h.wait_ready(w)
        docs = tmp_path / "docs"
        for i in range(3):
            make_pdf(docs / f"doc-{i}.pdf", 1, seed=i)
        scenario = tmp_path / "scenario.yaml"
        scenario.write_text(yaml.safe_dump({
            "kind": "pipeline", "name": "twin-short", "documents": {"directory": str(docs)},
            "job_timeout_s": 120, "stall_timeout_s": 60, "validity": {"lag_p99_ms_max": 1000},
            # open loop: the measured window gets its documents however long each takes on a busy host
            "load": {"mode": "open", "arrival": "constant", "rate_rps": 1.0, "duration_s": 6, "warmup_s": 1,
                     "cooldown_s": 1, "seed": 0}}))
        out = tmp_path / "run"
        env = {h.spec.worker_server.api_key.env: API_KEY} if h.spec.worker_server.api_key else {}
        res = CliRunner().invoke(app, [
            "run", str(scenario), "--stack", "local", "--queue-url", h.redis_url, "--url", urls[0], "--model", "tiny",
            "--outputs-at", str(h.outputs), "--out", str(out), "--topology", "monolithic"],
            env=env, catch_exceptions=False)
        s = json.loads((out / "summary.json").read_text())
        assert res.exit_code == 0, res.output
        assert s["run"]["topology"] == "monolithic"
        assert s["requests"]["ok"] == 6 and s["requests"]["errors"] == 0, s["errors_by_reason"]
        assert s["pipeline"]["verified"] == s["pipeline"]["done"] >= 1
        # each worker called its own engine: both engines served MinerU requests, counted apart
        served = [metric_value(httpx.get(f"{u}/metrics", timeout=5).text, "vllm:request_success_total",
                               {"engine": str(i)}) for i, u in enumerate(urls)]
        assert all(n > 0 for n in served), served
        busy = [metric_value(httpx.get(f"{u}/metrics", timeout=5).text, "sim:engine_busy_seconds_total")
                for u in urls]
        assert all(b > 0 for b in busy), busy
        cmp = CliRunner().invoke(app, ["compare", str(out), str(out), "--resamples", "100", "--allow-invalid"],
                                 catch_exceptions=False)  # a run on a busy 2-core machine may be INVALID (lag)
        assert cmp.exit_code == 0 and "topologies differ" not in cmp.output
    finally:
        h.close()
