"""`runbook migrate` on the local stack while migrating: both pools and the router under
supervisord, the share moved live, documents routed to both cohorts and finished once each with
their topology, and the monolithic pool decommissioned."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from pdf_fixtures import make_pdf

from contract.migration import MONOLITHIC, SPLIT, cohort_of
from runbooks.cohorts import ABORT_ALERT
from runbooks.connect import local_cohort_control
from runbooks.registry import invoke
from stack.secrets import alertmanager_auth, queue_url
from worker.jobs_view import connect, list_jobs, submit

pytestmark = pytest.mark.integration

MIGRATING = {
    "inference_servers.0.engine": "sim",
    "inference_servers.0.max_model_len": 8192,
    "inference_servers.0.max_num_batched_tokens": 8192,
    "worker_pool.replicas": 1,
    "local.migration_monolithic_workers": 1,
    "local.private_engine_load_scale": 0.02,
}


def test_migrate_on_the_local_stack(make_stack, drill, tmp_path: Path) -> None:
    stack = make_stack(**MIGRATING)
    stack.up()
    running = stack.supervisor.process_info()
    assert {"router", "mono-worker-0", "engine-w0", "worker-0", "server-vlm"} <= set(running)
    ctx = drill.context(stack)
    ctx.migration = local_cohort_control(stack)
    assert invoke(ctx, "migrate", {"to": 10}).outcome == "planned" and ctx.migration.share() == 0
    ctx.apply = True
    r = invoke(ctx, "migrate", {"to": 50})
    assert r.outcome == "refused" and "--to 10` first" in r.summary
    assert invoke(ctx, "migrate", {"to": 10}).outcome == "applied" and ctx.migration.share() == 10

    client = connect(stack.spec, queue_url(stack.spec, stack.paths))
    ids = submit(client, stack.spec, [make_pdf(tmp_path / f"d{i}.pdf", 1, seed=i) for i in range(8)])

    def finished():
        rows = list_jobs(client, stack.spec, ids=ids)
        return rows if all(row.get("state") == "done" for row in rows) else None

    rows = drill.wait_for("8 documents done", finished, timeout_s=240, interval_s=0.5)
    outputs = stack.paths.data / stack.spec.output_store.path
    for row in rows:
        assert row["topology"] == cohort_of(row["job_id"], 10), row
        meta = json.loads((outputs / row["job_id"] / "metadata.json").read_text())
        assert meta["topology"] == row["topology"]
    assert {row["topology"] for row in rows} <= {SPLIT, MONOLITHIC}

    assert invoke(ctx, "migrate", {"to": 0}).outcome == "applied" and ctx.migration.share() == 0
    records = [json.loads(x) for x in stack.paths.audit_log.read_text().splitlines()]
    assert [(x["action"], x["outcome"]) for x in records if x["action"] == "migrate"] == [
        ("migrate", "planned"), ("migrate", "refused"), ("migrate", "applied"), ("migrate", "applied")]
    # The abort's page goes through the stack's Alertmanager (its v2 API), labelled to page.
    said = ctx.migration.page("drill: split share 10 % -> 0 %")
    assert said.startswith("paged through"), said
    am = f"http://127.0.0.1:{stack.spec.observability.alertmanager.port}/api/v2/alerts"
    alerts = drill.wait_for("the page in Alertmanager", lambda: [
        a for a in httpx.get(am, timeout=5, auth=alertmanager_auth(stack.paths)).json()
        if a["labels"]["alertname"] == ABORT_ALERT] or None)
    assert alerts[0]["labels"]["severity"] == "page"
    assert alerts[0]["annotations"]["summary"] == "drill: split share 10 % -> 0 %"
    stopped = ctx.migration.decommission()
    assert sorted(stopped) == ["engine-w0", "mono-worker-0"]
    info = stack.supervisor.process_info()
    assert info["mono-worker-0"]["statename"] == "STOPPED" and info["worker-0"]["statename"] == "RUNNING"
