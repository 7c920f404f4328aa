"""Chaos drills on the real local stack (engine sim): break it, diagnose, act, check recovery.

Each drill is bounded (well under a minute) and its stack is torn down by `make_stack`.
"""

from __future__ import annotations

import json
import os
import signal
import time

import httpx
import pytest

from runbooks.registry import invoke
from stack.preflight import resolve_api_key

pytestmark = pytest.mark.integration

SIM = {"inference_servers.0.engine": "sim"}
SERVER = "server-vlm"


def _sim_admin(stack, path: str, body: dict | None = None) -> dict:
    url = f"http://{stack.spec.local.host}:{stack.spec.worker_server.port}{path}"
    key = resolve_api_key(stack.spec, stack.paths)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    r = (httpx.put(url, json=body, headers=headers, timeout=5) if body is not None
         else httpx.get(url, headers=headers, timeout=5))
    r.raise_for_status()
    return r.json()


def test_kill_server_under_load_diagnose_restart_recover(make_stack, drill):
    stack = make_stack(**SIM)
    stack.up()
    ctx = drill.context(stack)
    with drill.load(stack, clients=4) as load:
        drill.wait_for("answers before the kill", lambda: load.snapshot()["200"] >= 20)
        pid = stack.supervisor.process_info()[SERVER]["pid"]
        os.kill(pid, signal.SIGKILL)  # the OOM killer's signal
        drill.wait_for("supervisord to see the server die", lambda: stack.supervisor.process_info()[SERVER][
            "statename"] in ("EXITED", "BACKOFF", "FATAL"))

        report = invoke(ctx, "diagnose", {"thresholds": {"rate_window": "30s"}})
        assert report.case in ("server-down", "server-down-oom"), report.render()
        assert any(f"{SERVER}: exited, NOT healthy" in e or f"{SERVER}: crashloop, NOT healthy" in e
                   for e in report.evidence), report.render()
        assert any("SIGKILL" in e for e in report.evidence), report.render()
        assert report.next_steps[0] == "runbook restart-server"
        # Prometheus sees the target down: the alert rule loaded from alerts/ goes pending.
        drill.wait_for("InferenceServerDown pending", lambda: "InferenceServerDown" in drill.alerts(stack))

        plan = invoke(ctx, "restart-server", {"reason": "drill"})
        assert plan.outcome == "planned" and stack.supervisor.process_info()[SERVER]["pid"] == 0
        ctx.apply = True
        fixed = invoke(ctx, "restart-server", {"reason": "drill"})
        assert fixed.outcome == "applied", fixed.render()
        # "starting" until supervisord's startsecs pass; healthy is what counts
        assert fixed.done[-1].startswith(f"check {SERVER}: {SERVER}: ") and ", healthy (HTTP 200)" in fixed.done[-1]

        before = load.snapshot()["200"]
        drill.wait_for("answers after the restart", lambda: load.snapshot()["200"] >= before + 20)
    drill.wait_for("InferenceServerDown resolved", lambda: "InferenceServerDown" not in drill.alerts(stack))
    assert invoke(ctx, "restart-server", {}).outcome == "noop"
    assert load.snapshot()["200"] > 40
    audit = [json.loads(x) for x in stack.paths.audit_log.read_text().splitlines()]
    assert [(r["action"], r["outcome"]) for r in audit] == [
        ("diagnose", "report"), ("restart-server", "planned"), ("restart-server", "applied"),
        ("restart-server", "noop")]


def test_latency_backlog_diagnosed_with_the_right_knob_then_tuned(make_stack, drill):
    stack = make_stack(**SIM, **{"inference_servers.0.sim_profile": "mineru25-rtx4090",
                                 "inference_servers.0.max_num_seqs": 4})
    stack.up()
    ctx = drill.context(stack)
    _sim_admin(stack, "/sim/faults", {"added_latency_ms": 1500})
    params = {"thresholds": {"queue_waiting_max": "5", "rate_window": "30s"}}
    with drill.load(stack, clients=24, max_tokens=200):
        drill.wait_for("a queue at the server", lambda: (ctx.prometheus.scalar(
            'sum(vllm:num_requests_waiting{job="inference-server"})') or 0) > 5, timeout_s=25)
        report = drill.wait_for("diagnose to name the backlog", lambda: (
            r := invoke(ctx, "diagnose", params)).case == "queue-backlog" and r, timeout_s=15)
        assert report.next_steps[0].startswith("runbook tune --set max_num_seqs=8"), report.render()
        assert "the batch is capped at max_num_seqs=4" in report.next_steps[0]
        assert any(e.startswith("vllm:num_requests_waiting = ") for e in report.evidence)

        ctx.apply = True
        tuned = invoke(ctx, "tune", {"set": {"max_num_seqs": "32"}})
        assert tuned.outcome == "applied", tuned.render()
    state = _sim_admin(stack, "/sim/state")
    assert state["limits"]["max_num_seqs"] == 32  # the restarted server runs the new knob
    assert ctx.platform.settings(SERVER)["max_num_seqs"] == 32


def test_broken_upgrades_roll_back_and_a_good_one_stays(make_stack, drill):
    stack = make_stack(**SIM)
    stack.up()
    ctx = drill.context(stack, apply=True)

    crash = invoke(ctx, "upgrade-server", {"to": {"sim_profile": "no-such-profile"}})
    assert crash.outcome == "rolled_back", crash.render()
    assert f"{SERVER} failed and will not become healthy" in crash.summary
    assert any(d.startswith(f"undo upgrade {SERVER}: back to sim_profile=instant") for d in crash.done)
    assert _sim_admin(stack, "/sim/state")["profile"] == "instant"

    bad = invoke(ctx, "upgrade-server", {"to": {"extra_args": ["--fault", "error_rate=1"]}})
    assert bad.outcome == "rolled_back", bad.render()
    assert "test inference: HTTP 503" in bad.summary
    assert _sim_admin(stack, "/sim/faults")["error_rate"] == 0.0

    good = invoke(ctx, "upgrade-server", {"to": {"sim_profile": "mineru25-h200"}})
    assert good.outcome == "applied", good.render()
    assert _sim_admin(stack, "/sim/state")["profile"] == "mineru25-h200"
    assert invoke(ctx, "upgrade-server", {"to": {"sim_profile": "mineru25-h200"}}).outcome == "noop"


def test_refuses_a_running_stack_that_is_not_the_specs(make_stack, drill):
    stack = make_stack(**SIM)
    stack.up()
    from dataclasses import replace

    from runbooks.platforms.specpatch import effective_spec

    moved = {"inference_servers.0.port": stack.spec.worker_server.port + 1}
    other = replace(stack, spec=effective_spec(stack.spec, moved))
    ctx = drill.context(other, apply=True)
    report = invoke(ctx, "restart-server", {"force": True})
    assert report.outcome == "refused"
    assert f"{SERVER}: the spec says port {stack.spec.worker_server.port + 1}, the running stack has " \
           f"{stack.spec.worker_server.port}" in report.summary
    started = stack.supervisor.process_info()[SERVER]["start"]
    time.sleep(1.1)
    assert stack.supervisor.process_info()[SERVER]["start"] == started  # nothing was restarted
