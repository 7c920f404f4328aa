"""A local stack that runs monolithic (after `runbook rollback --to monolithic`) is a pipeline
target without a shared server."""

from __future__ import annotations

import json
from pathlib import Path

import bench.target as target_mod
from testsupport.stack import local_stack


def test_monolithic_state_gives_a_queue_only_target(tmp_path: Path, monkeypatch) -> None:
    stack = local_stack(tmp_path / "state", **{"inference_servers.0.engine": "sim"})
    state = {"deployment_mode": "monolithic", "components": {
        "queue": {"role": "queue", "url": "redis://127.0.0.1:1/0"},
        "engine-w0": {"role": "engine", "url": "http://127.0.0.1:2"}}}
    monkeypatch.setattr(target_mod, "verify_running", lambda local: state)
    t = target_mod.from_local(stack)
    assert t.base_url is None and t.queue_url is not None and "engine-w0" in t.components
    state["deployment_mode"] = "split"
    try:
        target_mod.from_local(stack)
    except target_mod.TargetError as exc:
        assert "has no component server-vlm" in str(exc)
    else:
        raise AssertionError(json.dumps(state))
