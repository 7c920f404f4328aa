"""`runbook migrate` refusals that need no live queue: a cluster stack that is not migrating (or
not yet `pulumi up`-ed, or without a way to its Redis), and the gate file."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from contract.spec_loader import load_stack
from runbooks.actions.migrate import criteria
from runbooks.audit import AuditLog
from runbooks.context import ActionContext
from runbooks.model import Refused
from runbooks.platforms.kubernetes import KubernetesPlatform
from runbooks.registry import invoke
from testsupport.fakekube import FakeKube

from .conftest import ROOT


def test_kubernetes_not_migrating_is_refused_naming_the_spec_change(make_ctx, kube) -> None:
    """prod renders one pool: only the program can start the migration; the refusal prints the
    exact stack-file change and the commands, and nothing is read from Redis or changed."""
    r = invoke(make_ctx(apply=True), "migrate", {"to": 10, "redis_url": "redis://127.0.0.1:1"})
    assert r.outcome == "refused"
    assert "stack 'prod' is not migrating" in r.summary
    assert ("set `splitstack:migration: {monolithic_workers: 1}` in Pulumi.prod.yaml, check it with "
            "`splitstack infra plan --stack prod`, then `pulumi up --stack prod`") in r.summary
    assert kube.changes() == []


def migrating_ctx(kube_for, tmp_path: Path, rendered: bool = True):
    spec = load_stack("prod", ROOT, overrides={"gpu_node_pool.node_count": 4, "migration.monolithic_workers": 2})
    kube = kube_for(spec)
    if rendered:  # what `pulumi up` creates while migrating (infra/components/migration.py)
        kube._deploy("router", {"app.kubernetes.io/name": "router"}, "router", "worker:0.1.0", [], [], 1)
        kube._deploy("worker-monolithic", {"app.kubernetes.io/instance": "worker-gpu"}, "worker", "gpu:0.1.0",
                     [], [], 2)
    platform = KubernetesPlatform(spec, kube, kube, context="fake")
    return kube, ActionContext(spec=spec, platform=platform, audit=AuditLog(tmp_path / "audit.jsonl", time.time),
                               apply=True, actor="oncall@test", use_real_nvml=False)


def test_kubernetes_without_the_rendered_pools_or_a_redis_url_is_refused(tmp_path: Path) -> None:
    kube, ctx = migrating_ctx(FakeKube, tmp_path, rendered=False)
    r = invoke(ctx, "migrate", {"to": 10})
    assert r.outcome == "refused"
    assert ("sets migration.monolithic_workers: 2 but kubernetes fake namespace splitstack has no Deployment "
            "router or worker-monolithic: run `pulumi up --stack prod` first") in r.summary
    kube, ctx = migrating_ctx(FakeKube, tmp_path)
    r = invoke(ctx, "migrate", {"to": 10, "redis_url": "notaurl"})
    assert r.outcome == "refused" and r.summary.startswith("--redis-url 'notaurl': not a Redis URL")
    kube, ctx = migrating_ctx(FakeKube, tmp_path)
    r = invoke(ctx, "migrate-guard", {})
    assert r.outcome == "refused"
    assert ("port-forward it (`kubectl -n splitstack port-forward svc/redis 6379`) and pass --redis-url "
            "redis://127.0.0.1:6379") in r.summary
    assert kube.changes() == []


def test_bad_share_and_gate_files_are_refused(make_ctx, tmp_path: Path) -> None:
    r = invoke(make_ctx(), "migrate", {"to": 25})
    assert r.outcome == "refused" and "to: Input should be 0, 10, 50 or 100" in r.summary
    assert criteria("migration-cohorts").max_error_fraction == 0.001
    with pytest.raises(Refused, match="--gate nope: gate file 'nope' not found"):
        criteria("nope")
    other = tmp_path / "g.yaml"
    other.write_text("name: g\nscenario: pipeline-smoke\ngates:\n  - kind: error_rate\n    max_fraction: 0.1\n")
    with pytest.raises(Refused, match="has no gate of kind `cohorts`"):
        criteria(str(other))
