"""`--output json` on status, spec show, infra plan and slo report: plain JSON a script can
read (numbers as numbers, nothing wrapped), through the real command lines."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from splitstack.cli import slo
from splitstack.cli.main import app
from testsupport.stack import ROOT

runner = CliRunner()


def test_spec_show_json_is_plain_and_complete():
    r = runner.invoke(app, ["spec", "show", "--stack", "dev", "--output", "json"], env={"COLUMNS": "40"})
    assert r.exit_code == 0, r.output
    spec = json.loads(r.output)
    assert spec["stack"] == "dev" and isinstance(spec["worker_pool"]["replicas"], int)


def test_infra_plan_json_has_the_verdict_pools_and_objects():
    r = runner.invoke(app, ["infra", "plan", "--stack", "dev", "--output", "json"])
    assert r.exit_code == 0, r.output
    plan = json.loads(r.output)
    assert plan["fits"] is True and plan["problems"] == []
    assert {p["name"] for p in plan["pools"]} == {"gpu", "cpu"}
    assert all(isinstance(p["node_count"], int) for p in plan["pools"])
    assert plan["resources"]["kubernetes:apps/v1:Deployment"] >= 2


def test_status_json_of_a_stack_that_is_not_running(tmp_path, monkeypatch):
    for name in ("Pulumi.yaml", "Pulumi.local.yaml"):  # a project of its own: no state, nothing running
        (tmp_path / name).write_text((ROOT / name).read_text())
    monkeypatch.setenv("SPLITSTACK_ROOT", str(tmp_path))
    r = runner.invoke(app, ["status", "--output", "json"])
    data = json.loads(r.output)
    assert r.exit_code == 1 and data["running"] is False and data["healthy"] is False and data["components"] == []


def test_slo_report_json_on_stdout(tmp_path):
    rows = [{"kind": "pdf", "t_s": 1e6 + i, "duration_s": 10.0, "ok": i % 10 != 0} for i in range(100)]
    rec = tmp_path / "r.jsonl"
    rec.write_text("\n".join(json.dumps(x) for x in rows))
    r = runner.invoke(slo.app, ["report", "--records", str(rec), "--output", "json"])
    assert r.exit_code == 0, r.output
    err = next(s for s in json.loads(r.output)["slos"] if s["slo"] == "pdf-error-rate")
    assert err["attainment"] == 0.9 and isinstance(err["burn_rate"], float)
