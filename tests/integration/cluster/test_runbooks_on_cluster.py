"""The Kubernetes runbook actions against a real API server, on the localk8s stack deployed by the
real Pulumi engine onto two GPU nodes (a spare for the drain) and dev's CPU pool.

Each action runs as on-call runs it (the `runbook` command, KUBECONFIG in the environment) and
each test reads the outcome from the API server: evictions through the Eviction API honouring the
PodDisruptionBudget, a NotReady node whose heartbeats stopped, the rollback of a failed upgrade,
patched Secrets, audit records. kwok runs no process in the pods, so the server's HTTP (the
upgrade's test inference) is unreachable through the API server's service proxy: that is the
failed upgrade this file drills.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes.client.exceptions import ApiException

from contract.spec_loader import load_stack
from stack.cluster.cluster import LocalCluster
from stack.cluster.nodes import MANAGED_LABEL
from testsupport.cluster import ROOT, Cluster, edit_stack, session, variant

pytestmark = pytest.mark.integration
STACK, NS, SERVER, WORKERS = "localk8s", "splitstack-localk8s", "mineru-vlm", "worker"


@pytest.fixture(scope="module")
def deployed(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster.reshape(variant("dev", {"gpu_node_pool.node_count": 2}))  # gpu-0 and a spare gpu-1
    s = session(tmp_path_factory.mktemp("pulumi"), STACK, cluster)
    edit_stack(s, {"gpu_node_pool.node_count": 2})
    for key, value in {"splitstack-secrets:splitstack-api-key.api-key": "k",
                       "splitstack-secrets:splitstack-hf-token.token": "hf_old",
                       "splitstack-secrets:splitstack-redis-auth.password": "r"}.items():
        s.set_secret(key, value)
    stack = s.stack_handle()
    stack.up(color="never")
    kube = Cluster(cluster, NS)
    kube.wait_available(SERVER)
    kube.wait_available(WORKERS)
    try:
        yield kube
    finally:
        stack.destroy(color="never")


@pytest.fixture
def runbook(cluster: LocalCluster, tmp_path: Path):
    audit = tmp_path / "audit.jsonl"

    def run(*args: str, env: dict[str, str] | None = None, timeout_s: float = 180) -> subprocess.CompletedProcess[str]:
        # The stack file of this deployment has two GPU nodes (the session's copy; see `deployed`).
        argv = [sys.executable, "-m", "splitstack.cli.runbook", *args, "--stack", STACK,
                "--spec-override", "gpu_node_pool.node_count=2", "--audit-log", str(audit)]
        return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s,
                              env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "COLUMNS": "200",
                                   **(env or {})})

    run.audit = audit  # type: ignore[attr-defined]
    return run


def audit_records(run) -> list[dict]:
    return [json.loads(line) for line in run.audit.read_text().splitlines()]


def server_node(kube: Cluster) -> str:
    (pod,) = kube.pods(f"app.kubernetes.io/instance={SERVER}")
    return pod.spec.node_name


def test_diagnose_reads_the_cluster(deployed: Cluster, runbook) -> None:
    r = runbook("diagnose", "--no-nvml")
    assert r.returncode in (0, 1), r.stderr
    assert SERVER in r.stdout, r.stdout


def test_restart_server_rolls_a_new_pod(deployed: Cluster, runbook) -> None:
    (old,) = deployed.pods(f"app.kubernetes.io/instance={SERVER}")
    r = runbook("restart-server", "--force", "--reason", "e2e", "--apply")
    assert r.returncode == 0, r.stdout + r.stderr
    (new,) = deployed.pods(f"app.kubernetes.io/instance={SERVER}")
    assert new.metadata.name != old.metadata.name
    annotations = deployed.deployment(SERVER).spec.template.metadata.annotations
    assert "kubectl.kubernetes.io/restartedAt" in annotations
    assert audit_records(runbook)[-1]["action"] == "restart-server"


def test_drain_moves_the_server_through_the_eviction_api(deployed: Cluster, runbook) -> None:
    node = server_node(deployed)
    r = runbook("drain-gpu-node", "--node", node, "--force", "--apply")
    assert r.returncode == 0, r.stdout + r.stderr
    assert deployed.core.read_node(node).spec.unschedulable is True
    deployed.wait_available(SERVER)
    assert server_node(deployed) != node
    # The drained node is the only other GPU node: a second drain has no spare and is refused.
    deployed.core.patch_node(node, {"spec": {"unschedulable": False}})
    other = server_node(deployed)
    deployed.core.patch_node(node, {"spec": {"unschedulable": True}})
    r = runbook("drain-gpu-node", "--node", other, "--force", "--apply")
    assert r.returncode != 0, r.stdout
    assert "no other ready, schedulable gpu node" in r.stdout.lower(), r.stdout + r.stderr
    assert server_node(deployed) == other  # refused before it evicted anything
    deployed.core.patch_node(node, {"spec": {"unschedulable": False}})


def test_a_notready_gpu_node_is_cordoned_and_the_server_rescheduled(deployed: Cluster, runbook) -> None:
    node = server_node(deployed)
    # kwok stops its heartbeats (the node leaves its label selector), as a dead kubelet's: the
    # node controller marks the node NotReady after its grace period (20 s here).
    deployed.core.patch_node(node, {"metadata": {"labels": {MANAGED_LABEL: "failed"}}})
    deadline = time.monotonic() + 90
    while not any(c.type == "Ready" and c.status != "True"
                  for c in deployed.core.read_node(node).status.conditions):
        assert time.monotonic() < deadline, "node never went NotReady"
        time.sleep(1)
    r = runbook("gpu-node-failure", "--apply")
    assert r.returncode == 0, r.stdout + r.stderr
    assert deployed.core.read_node(node).spec.unschedulable is True, r.stdout
    deployed.wait_available(SERVER, timeout_s=90)
    assert server_node(deployed) != node
    assert audit_records(runbook)[-1]["action"] == "gpu-node-failure"


def test_a_failed_upgrade_rolls_back(deployed: Cluster, runbook) -> None:
    before = deployed.deployment(SERVER).spec.template.spec.containers[0].image
    r = runbook("upgrade-server", "--set", "image_tag=v0.33.0", "--apply", timeout_s=300)
    assert r.returncode != 0, r.stdout
    assert "roll" in r.stdout.lower(), r.stdout
    deployed.wait_available(SERVER)
    assert deployed.deployment(SERVER).spec.template.spec.containers[0].image == before
    assert audit_records(runbook)[-1]["action"] == "upgrade-server"


def test_patch_workers_rolls_the_new_image(deployed: Cluster, runbook) -> None:
    r = runbook("patch-workers", "--image-tag", "0.1.1-cve-2026-1234", "--apply", timeout_s=300)
    assert r.returncode == 0, r.stdout + r.stderr
    dep = deployed.wait_available(WORKERS)
    assert dep.spec.template.spec.containers[0].image.endswith(":0.1.1-cve-2026-1234")
    assert all(p.spec.containers[0].image.endswith(":0.1.1-cve-2026-1234")
               for p in deployed.pods(f"app.kubernetes.io/instance={WORKERS}"))


def test_update_hf_token_patches_the_secret(deployed: Cluster, runbook) -> None:
    import base64

    r = runbook("update-hf-token", "--force", "--apply", env={"HF_TOKEN": "hf_new"})
    assert r.returncode == 0, r.stdout + r.stderr
    secret = deployed.core.read_namespaced_secret("splitstack-hf-token", NS)
    assert base64.b64decode(secret.data["token"]).decode() == "hf_new"
    assert "hf_new" not in run_text(runbook)


def run_text(runbook) -> str:
    return runbook.audit.read_text()


def test_rollback_is_a_pulumi_change_on_kubernetes(deployed: Cluster, runbook) -> None:
    dry = runbook("rollback", "--to", "monolithic")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "worker" in dry.stdout
    applied = runbook("rollback", "--to", "monolithic", "--apply")
    assert applied.returncode != 0
    assert "pulumi up" in applied.stdout + applied.stderr
    with pytest.raises(ApiException):
        deployed.deployment("worker-gpu")  # nothing was switched behind Pulumi's back
    assert load_stack(STACK, ROOT).deployment_mode.value == "split"


def test_migrate_on_a_stack_that_does_not_migrate_names_the_pulumi_change(deployed: Cluster, runbook) -> None:
    """localk8s renders one pool: `runbook migrate` on the cluster refuses (exit 2) with the exact
    stack-file line and commands, and creates nothing (docs/migration.md)."""
    r = runbook("migrate", "--to", "10", "--redis-url", "redis://127.0.0.1:1", "--apply")
    assert r.returncode == 2, r.stdout + r.stderr
    text = " ".join((r.stdout + r.stderr).split())
    assert "stack 'localk8s' is not migrating" in text
    assert ("set `splitstack:migration: {monolithic_workers: 1}` in Pulumi.localk8s.yaml, check it with "
            "`splitstack infra plan --stack localk8s`, then `pulumi up --stack localk8s`") in text
    for name in ("router", "worker-monolithic"):
        with pytest.raises(ApiException):
            deployed.deployment(name)
