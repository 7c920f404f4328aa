"""`splitstack up --engine sim --workers 2` then `splitstack down`, as a user runs them on an
80-column terminal: each idle worker leaves on SIGTERM by itself (exit 0, never supervisord's
SIGKILL after stopwaitsecs), `down` names every component as it stops, and the paths `up`
prints stay whole on one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testsupport.stack import ROOT, free_port_run, local_stack

pytestmark = pytest.mark.integration


def test_idle_workers_leave_on_sigterm_and_down_names_each_component(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text())
    spec = local_stack(tmp_path / "unused", **{"inference_servers.0.replicas": 0}).spec
    (project / "Pulumi.ci.yaml").write_text(
        "config:\n"
        "  splitstack:target: local\n"
        "  splitstack:inference_servers:\n"
        f"    - {{name: vlm, engine: sim, port: {spec.worker_server.port}, max_model_len: 8192, "
        "max_num_batched_tokens: 8192, model: {name: tiny, source: tiny}}\n"
        f"  splitstack:worker_pool: {{replicas: 2, metrics_port: {free_port_run(2)}}}\n"
        f"  splitstack:queue: {{port: {spec.queue.port}}}\n"
        f"  splitstack:observability: {{prometheus_port: {spec.observability.prometheus_port}, "
        f"alertmanager: {{port: {spec.observability.alertmanager.port}}}}}\n"
    )
    env = {**os.environ, "SPLITSTACK_ROOT": str(project), "COLUMNS": "80"}
    cli = [str(Path(sys.executable).parent / "splitstack")]

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(cli + list(args) + ["--stack", "ci"], env=env, capture_output=True,
                              text=True, timeout=180)

    try:
        up = run("up")
        assert up.returncode == 0, up.stdout + up.stderr
    finally:
        down = run("down")
    assert down.returncode == 0, down.stdout + down.stderr
    state = project / ".state" / "local"
    assert f"state and logs: {state}" in up.stdout.splitlines(), up.stdout  # whole, on one line
    assert f"logs: {state / 'logs'}" in up.stdout.splitlines(), up.stdout
    stopped = [line.split()[1] for line in down.stdout.splitlines() if line.startswith("stopped ")]
    assert set(stopped) == {"queue", "alertmanager", "prometheus", "server-vlm", "worker-0", "worker-1"}, down.stdout
    assert set(stopped[:2]) == {"worker-0", "worker-1"}, down.stdout  # drained first
    log = (state / "logs" / "supervisord.log").read_text()
    assert "SIGKILL" not in log, log[-2000:]
    for i in (0, 1):
        # exit status 0: the worker was not ended by its exit watchdog (worker/main.py exits 1)
        assert f"stopped: worker-{i} (exit status 0)" in log, log[-2000:]
        lines = [json.loads(ln) for ln in (state / "logs" / f"worker-{i}.log").read_text().splitlines()
                 if ln.startswith("{")]
        assert any(ln["msg"] == "stopped" for ln in lines), lines[-3:]
