"""The pipeline workload and the demo's gate path on real processes: Redis, the simulator as
engine and two MinerU workers (testsupport/worker.py's harness: the same commands and environment
as the local stack), as `make demo` runs them, only shorter."""

from __future__ import annotations

import pytest

from bench.gating.run import run_gate
from bench.report.writer import load_summary
from bench.target import Target
from contract.spec import Engine
from testsupport.summary_shape import assert_shape

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

GATES = """name: pipeline-short
scenario: pipeline-smoke
load: {arrival: constant, rate_rps: 1.0, duration_s: 20, warmup_s: 2, cooldown_s: 2}
validity: {lag_p99_ms_max: 500}
gates:
  - {kind: health}
  - {kind: slo, slo: pdf-latency-p95}
  - {kind: slo, slo: pdf-latency-p99}
  - {kind: slo, slo: pdf-throughput}
  - {kind: error_rate, max_fraction: 0.2}
  - {kind: worker_startup, max_s: 30}
  - {kind: breaker, open_within_s: 60, recover_within_s: 120}
"""


@pytest.fixture
def pipeline_target(tmp_path):
    pytest.importorskip("mineru", reason="the worker extra (mineru) is not installed")
    from testsupport.worker import API_KEY, Harness

    h = Harness(tmp_path / "stack")
    try:
        h.start_redis()
        h.start_sim()
        workers = [h.start_worker(), h.start_worker()]
        comps = {w.name: {"role": "worker", "url": f"http://127.0.0.1:{w.port}",
                          "health": {"kind": "http", "url": f"http://127.0.0.1:{w.port}/readyz"}} for w in workers}
        yield Target(f"http://127.0.0.1:{h.server_port}", "tiny", API_KEY, 2048, queue_url=h.redis_url,
                     stack="local", components=comps, state_dir=tmp_path / "stack", output_dir=h.outputs,
                     spec=h.spec)
    finally:
        h.close()


def test_pipeline_gate_go(pipeline_target, tmp_path):
    gate_file = tmp_path / "gates.yaml"
    gate_file.write_text(GATES)
    code = run_gate(str(gate_file), target=pipeline_target, out_dir=tmp_path / "run").exit_code
    s = load_summary(tmp_path / "run")
    assert_shape(s)  # the keys and types bench/summary.py declares
    results = {r["name"]: r for r in s["gates"]["results"]}
    assert code == 0, s["gates"]
    assert s["kind"] == "pipeline" and s["requests"]["sent"] == 20 and s["requests"]["errors"] == 0
    assert s["throughput"]["documents_per_h"] > 2000
    assert s["requests_per_page"]["mean"] > 1  # MinerU: one layout + one request per block
    assert results["worker_startup"]["status"] == "pass" and results["breaker"]["status"] == "pass"
    assert "opened" in results["breaker"]["reason"]
    # plots: document latency CDF and over time, throughput, every request, schedule lag
    assert (tmp_path / "run" / "report.html").read_text().count('class="plotly-graph-div"') >= 4


DEMO_SHORT = """name: demo-short
scenario: pipeline-smoke
load: {arrival: constant, rate_rps: 1.0, duration_s: 15, warmup_s: 2, cooldown_s: 2}
validity: {lag_p99_ms_max: 500}
gates:
  - {kind: health}
  - {kind: slo, slo: pdf-latency-p95}
  - {kind: slo, slo: pdf-throughput}
  - {kind: error_rate, max_fraction: 0.2}
"""


def test_demo_path_on_the_real_local_stack(make_stack, tmp_path):
    """What `make demo` runs (bench.demo.run_demo): up with the simulator and 2 workers, a real
    request, Prometheus scraping it, the gate and its report, down (here with a short gate)."""
    pytest.importorskip("mineru", reason="the worker extra (mineru) is not installed")
    from bench.demo import DEMO_WORKERS, run_demo
    from stack.presets import engine_overrides

    stack = make_stack(**engine_overrides("sim"), **{"worker_pool.replicas": DEMO_WORKERS[Engine.sim]})
    gate_file = tmp_path / "demo-short.yaml"
    gate_file.write_text(DEMO_SHORT)
    said: list[str] = []
    code = run_demo(stack, said.append, gate=str(gate_file), out_dir=tmp_path / "demo").exit_code
    s = load_summary(tmp_path / "demo")
    assert code == 0, s["gates"]
    assert any(line.startswith("Prometheus scraped vllm:request_success_total") for line in said)
    assert said[-1] == "stack down" and stack.processes() == []
    assert (tmp_path / "demo" / "report.html").is_file()
    assert s["requests"]["sent"] == 15 and s["requests"]["errors"] == 0
    passed = {r["name"] for r in s["gates"]["results"] if r["status"] == "pass"}
    assert passed >= {"health", "error_rate", "pdf-latency-p95"}
    assert len(s["gates"]["results"][0]["reason"].split(",")) >= 4  # server, prometheus, 2 workers
