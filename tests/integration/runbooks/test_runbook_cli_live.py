"""The `runbook` action commands against a running local stack (spec overrides as it was started)."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from splitstack.cli.runbook_actions import register

pytestmark = pytest.mark.integration


def _app() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


def _overrides(stack) -> list[str]:
    s = stack.spec
    pairs = {"local.state_dir": s.local.state_dir, "queue.port": s.queue.port,
             "observability.prometheus_port": s.observability.prometheus_port,
             "inference_servers.0.port": s.worker_server.port, "inference_servers.0.engine": "sim",
             "worker_pool.metrics_port": s.worker_pool.metrics_port}
    return [x for k, v in pairs.items() for x in ("--spec-override", f"{k}={v}")]


def test_cli_dry_run_apply_json_and_slo_status(make_stack, drill):
    stack = make_stack(**{"inference_servers.0.engine": "sim"})
    stack.up()
    runner = CliRunner()
    args = _overrides(stack)

    healthy = runner.invoke(_app(), ["diagnose", "--no-nvml", "--output", "json", *args])
    assert healthy.exit_code == 0, healthy.output
    assert json.loads(healthy.output)["case"] == "healthy"

    # Only where the stack keeps its state (what `splitstack up` gives a stack on this machine):
    # everything else (engine sim, ports, workers) comes from the running stack's effective spec,
    # not from Pulumi.local.yaml, which says vllm.
    locator = ["--spec-override", f"local.state_dir={stack.spec.local.state_dir}"]
    found = runner.invoke(_app(), ["diagnose", "--no-nvml", "--output", "json", *locator])
    assert found.exit_code == 0, found.output
    report = json.loads(found.output)
    assert report["case"] == "healthy", found.output
    assert not any("not suggested" in e for e in report["evidence"]), found.output
    sim_plan = runner.invoke(_app(), ["restart-server", "--force", *locator])
    assert sim_plan.exit_code == 0 and "dry run" in sim_plan.output, sim_plan.output

    plan = runner.invoke(_app(), ["restart-server", "--force", "--reason", "weekly cache clear", *args])
    assert plan.exit_code == 0, plan.output
    assert "1. restart server-vlm: weekly cache clear" in plan.output
    assert "dry run: nothing was changed; add --apply" in plan.output

    pid = stack.supervisor.process_info()["server-vlm"]["pid"]
    done = runner.invoke(_app(), ["restart-server", "--force", "--apply", *args])
    assert done.exit_code == 0, done.output
    assert stack.supervisor.process_info()["server-vlm"]["pid"] != pid

    bad = runner.invoke(_app(), ["tune", "--set", "max_num_seqs=0", "--apply", *args])
    assert bad.exit_code == 2
    assert "inference_servers.0.max_num_seqs: Input should be greater than or equal to 1" in bad.output

    drill.wait_for("a scrape of the server", lambda: (drill.context(stack).prometheus.scalar(
        'up{job="inference-server"}') or 0) == 1)
    slo = runner.invoke(_app(), ["slo-status", "--current", "5m", *args])
    assert slo.exit_code == 0, slo.output
    from slo.spec import load_spec

    assert f"[report] slo-status: {len(load_spec().slos)} SLOs (" in slo.output
    assert "  - inference-server-uptime: " in slo.output and "(target 0.999," in slo.output
