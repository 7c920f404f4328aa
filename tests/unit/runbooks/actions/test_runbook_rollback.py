"""`runbook rollback` on Kubernetes (a fake API): the dry run's plan, the GPU check, and the
switch itself left to Pulumi. The local switch runs for real in the rollback drill."""

from __future__ import annotations

from contract.spec_loader import load_stack
from runbooks.audit import AuditLog
from runbooks.context import ActionContext
from runbooks.platforms.kubernetes import KubernetesPlatform
from runbooks.registry import invoke
from runbooks.settings import SafetySettings
from testsupport.stack import ROOT


def test_prod_rollback_is_refused_for_lack_of_gpus(make_ctx):
    report = invoke(make_ctx(), "rollback", {"to": "monolithic"})
    assert report.outcome == "refused"
    assert "needs 12 GPU slots but the pool has 2" in report.summary, report.summary


def _dev_ctx(kube_cls, tmp_path, clock, apply=False):
    spec = load_stack("dev", ROOT, overrides={"gpu_node_pool.node_count": 2})
    kube = kube_cls(spec)
    platform = KubernetesPlatform(spec, kube, kube, context="fake")
    return ActionContext(spec=spec, platform=platform, audit=AuditLog(tmp_path / "audit.jsonl", clock),
                         apply=apply, actor="oncall@test", safety=SafetySettings(ready_timeout_s=30),
                         use_real_nvml=False, clock=clock, sleep=clock.sleep)


def test_dry_run_lists_the_change_gpus_and_cluster_fit(kube, clock, tmp_path):
    ctx = _dev_ctx(type(kube), tmp_path, clock)
    report = invoke(ctx, "rollback", {"to": "monolithic"})
    assert report.outcome == "planned", report.render()
    text = "\n".join(report.evidence)
    assert "deployment_mode: split -> monolithic" in text
    assert "each loads 'mineru-vlm' itself (vlm-vllm-engine)" in text
    assert "stopped (monolithic runs no shared server)" in text
    assert "GPUs needed: 2 (before: 1); the cluster has 2 GPU(s)" in text
    assert "cluster fit: fits" in text
    assert [s.verb for s in report.plan] == ["set", "check"]


def test_apply_on_kubernetes_names_the_pulumi_change(kube, clock, tmp_path):
    ctx = _dev_ctx(type(kube), tmp_path, clock, apply=True)
    report = invoke(ctx, "rollback", {"to": "monolithic"})
    assert report.outcome == "refused", report.render()
    assert "splitstack:deployment_mode: monolithic" in report.render()
    assert "pulumi up --stack dev" in report.render()


def test_bad_mode_is_refused(make_ctx):
    report = invoke(make_ctx(), "rollback", {"to": "hybrid"})
    assert report.outcome == "refused" and "to: Input should be 'split' or 'monolithic'" in report.summary
