"""`splitstack down` with idle workers: each worker leaves on SIGTERM by itself (exit 0, never
supervisord's SIGKILL after stopwaitsecs), and `down` names every component as it stops."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testsupport.stack import local_stack

pytestmark = pytest.mark.integration


def test_idle_workers_leave_on_sigterm_and_down_names_each_component(tmp_path: Path) -> None:
    stack = local_stack(tmp_path / "state", **{"inference_servers.0.engine": "sim",
                                               "inference_servers.0.max_model_len": 8192,
                                               "inference_servers.0.max_num_batched_tokens": 8192,
                                               "worker_pool.replicas": 2})
    stopped: list[tuple[str, str]] = []
    try:
        state = stack.up()
        components = set(state["components"])
        assert {"worker-0", "worker-1"} <= components
    finally:
        stack.down(on_stopped=lambda name, _s, st: stopped.append((name, st)))
    assert stack.processes() == []
    assert {name for name, _ in stopped} == components, stopped
    assert [name for name, _ in stopped][:2] in (["worker-0", "worker-1"], ["worker-1", "worker-0"])  # drained first
    log = stack.supervisord_log.read_text()
    assert "SIGKILL" not in log, log[-2000:]
    for i in (0, 1):
        # exit status 0: the worker was not ended by its exit watchdog (worker/main.py, exit 1)
        assert f"stopped: worker-{i} (exit status 0)" in log, log[-2000:]
        lines = [json.loads(ln) for ln in (stack.paths.logs / f"worker-{i}.log").read_text().splitlines()
                 if ln.startswith("{")]
        assert any(ln["msg"] == "stopped" for ln in lines), lines[-3:]
