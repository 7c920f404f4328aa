"""A real Prometheus 2.42 on loopback, scraping the vLLM simulator (job inference-server) and an
in-process exporter of the worker's real metric objects (job workers), with every rule file of
alerts/ loaded; scrape and evaluation every second.

These fixtures do not need the local-stack launcher. Once `splitstack up --stack local` runs
real workers, tests marked `switch_to_local_stack` should run against it instead.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client import CollectorRegistry, start_http_server

from testsupport.procs import free_port, running, wait_until
from testsupport.rules import live_rule_globs

ROOT = Path(__file__).resolve().parents[3]


@dataclass
class Prom:
    url: str
    client: httpx.Client

    def query(self, expr: str) -> list[dict]:
        r = self.client.get(f"{self.url}/api/v1/query", params={"query": expr})
        body = r.json()
        if body.get("status") != "success":
            raise AssertionError(f"query {expr!r} failed: {body.get('errorType')}: {body.get('error')}")
        return body["data"]["result"]

    def alerts(self) -> list[dict]:
        return self.client.get(f"{self.url}/api/v1/alerts").json()["data"]["alerts"]


def chat_traffic(url: str, n: int) -> None:
    """n chat completions against the server, every other one streamed: a short bench run."""
    with httpx.Client(timeout=30) as c:
        for i in range(n):
            body = {"model": "tiny", "messages": [{"role": "user", "content": f"page {i}"}], "max_tokens": 16,
                    "stream": i % 2 == 0}
            r = c.post(f"{url}/v1/chat/completions", json=body)
            assert r.status_code == 200, r.text


@pytest.fixture(scope="session")
def live():
    """Helpers for the tests (a fixture, so tests need no import of this conftest)."""
    return type("Live", (), {"wait_until": staticmethod(wait_until), "chat_traffic": staticmethod(chat_traffic)})


@pytest.fixture(scope="package")
def worker_metrics():
    """The worker's real metric objects (worker/metrics.py) served on a free port."""
    from worker.metrics import WorkerMetrics

    m = WorkerMetrics(CollectorRegistry())
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=m.registry)
    try:
        yield m, port
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="package")
def stack(tmp_path_factory, worker_metrics):
    tmp = tmp_path_factory.mktemp("slo-live")
    sim_port, prom_port = free_port(), free_port()
    # The project's rules; the generated ones rendered with their long-window groups evaluated
    # every second, so the dashboards' budget panels have data within the test's wait.
    rules = live_rule_globs(tmp / "rules")
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
        "rule_files": rules,
        "scrape_configs": [
            {"job_name": "prometheus", "static_configs": [{"targets": [f"127.0.0.1:{prom_port}"]}]},
            {"job_name": "inference-server", "static_configs": [{"targets": [f"127.0.0.1:{sim_port}"]}]},
            {"job_name": "workers", "static_configs": [{"targets": [f"127.0.0.1:{worker_metrics[1]}"]}]},
        ],
    }
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    sim_argv = [sys.executable, "-m", "splitstack.cli.sim", "serve", "--port", str(sim_port),
                "--profile", "instant", "--model-name", "tiny"]
    prom_argv = ["prometheus", f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'data'}",
                 f"--web.listen-address=127.0.0.1:{prom_port}"]
    with contextlib.ExitStack() as started, httpx.Client(timeout=10) as client:
        sim = started.enter_context(running("sim", sim_argv, tmp / "sim.log", port=sim_port, ready="/health"))
        prom = started.enter_context(running("prometheus", prom_argv, tmp / "prometheus.log", port=prom_port,
                                             ready="/-/ready"))
        p = Prom(prom.url, client)
        wait_until(lambda: len(p.query("up == 1")) == 3, 30, "all three targets up", interval_s=0.25)
        yield p, sim, tmp
