"""The action commands' exit codes and messages, and the audit log's append-only format."""

from __future__ import annotations

import json
import os
import stat

import typer
from typer.testing import CliRunner

from runbooks.audit import AuditLog
from splitstack.cli.runbook_actions import register

runner = CliRunner()


def app() -> typer.Typer:
    a = typer.Typer()
    register(a)
    return a


def test_actions_lists_every_action_with_its_case():
    result = runner.invoke(app(), ["actions"])
    assert result.exit_code == 0
    assert "upgrade-server" in result.output and "vLLM server upgrade" in result.output


def test_unknown_stack_is_refused_with_the_known_ones():
    result = runner.invoke(app(), ["restart-server", "--stack", "nosuch"])
    assert result.exit_code == 2
    assert "stack 'nosuch' has no file Pulumi.nosuch.yaml" in result.output


def test_bad_set_syntax():
    result = runner.invoke(app(), ["tune", "--set", "oops"])
    assert result.exit_code == 2
    assert "--set 'oops': expected KNOB=VALUE" in result.output


def test_acting_on_a_stack_that_is_not_running_is_refused(tmp_path):
    result = runner.invoke(app(), ["restart-server", "--apply", "--spec-override",
                                   f"local.state_dir={tmp_path}"])
    assert result.exit_code == 2, result.output
    assert f"no local stack is running from {tmp_path}" in result.output
    record = json.loads((tmp_path / "audit.jsonl").read_text())
    assert record["outcome"] == "refused" and record["apply"] is True


def test_diagnose_without_a_stack_reports_it(tmp_path):
    result = runner.invoke(app(), ["diagnose", "--no-nvml", "--prometheus-url", "http://127.0.0.1:9",
                                   "--spec-override", f"local.state_dir={tmp_path}"])
    assert result.exit_code == 0, result.output
    assert "the local stack is not running" in result.output and "case: stack-down" in result.output
    assert "$ splitstack up --stack local" in result.output  # the action that fixes it
    assert "Prometheus at http://127.0.0.1:9 is unreachable" in result.output


def test_audit_log_appends_and_survives_a_torn_line(tmp_path):
    path = tmp_path / "a" / "audit.jsonl"
    log = AuditLog(path, lambda: 100.0)
    log.append({"action": "x", "apply": True, "target": "t", "restarted": ["server-a"]})
    with path.open("a") as fh:
        fh.write('{"torn": ')  # a full disk cut the last write
    log.append({"action": "y", "apply": False, "target": "t", "restarted": []})
    records = list(log.records())
    assert [r["action"] for r in records] == ["x", "y"]  # the torn line is skipped, not the next
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert len(log.restarts_since("t", "server-a", 50.0)) == 1
    assert log.restarts_since("t", "server-a", 101.0) == []
    assert log.restarts_since("other", "server-a", 0.0) == []


def test_no_kubernetes_credentials_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing-kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    result = runner.invoke(app(), ["restart-server", "--stack", "prod", "--apply",
                                   "--audit-log", str(tmp_path / "audit.jsonl")])
    assert result.exit_code == 2, result.output
    assert "no Kubernetes credentials" in result.output and "set KUBECONFIG or pass --kube-context" in result.output


def test_unreachable_cluster_is_a_clear_failure_with_no_change(tmp_path, monkeypatch):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "http://127.0.0.1:{port}"}}}}]
users: [{{name: u, user: {{token: t}}}}]
contexts: [{{name: ctx, context: {{cluster: c, user: u, namespace: splitstack}}}}]
current-context: ctx
""")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    audit = tmp_path / "audit.jsonl"
    result = runner.invoke(app(), ["restart-server", "--stack", "prod", "--apply", "--audit-log", str(audit)])
    assert result.exit_code == 1, result.output
    assert "platform error, nothing more was changed: the cluster is unreachable" in result.output
    assert "check the kube context 'current-context'" in result.output
    assert json.loads(audit.read_text())["outcome"] == "failed"


def test_audit_log_command_shows_the_last_runs(tmp_path):
    log = AuditLog(tmp_path / "audit.jsonl", lambda: 1_800_000_000.0)
    log.append({"actor": "a@h", "action": "restart-server", "apply": False, "outcome": "planned",
                "summary": "would restart"})
    log.append({"actor": "a@h", "action": "tune", "apply": True, "outcome": "applied", "summary": "set x"})
    result = runner.invoke(app(), ["audit-log", "--audit-log", str(tmp_path / "audit.jsonl"),
                                   "--action", "restart-server"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == ("2027-01-15T08:00:00+00:00 a@h restart-server [dry-run] planned: "
                                     "would restart")
