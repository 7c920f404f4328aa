"""The cluster-fit rules and the real kube-scheduler agree on what fits.

For dev, prod and broken variants of them: the cluster's nodes are reshaped like the variant's
pools (stack/cluster/nodes.py: the machine's allocatable after reservations and DaemonSets), the
pods the program renders for it are created at their autoscaling ceiling (same requests, node
selector, tolerations; volumes left out), and the scheduler decides. A variant the rules accept
never leaves a pod Pending; one whose nodes rule refuses leaves at least one Pending. The table
is printed, a row per variant (`pytest -rA`).
"""

from __future__ import annotations

import copy
import time

import pytest
from kubernetes import client

from contract import cluster_fit, sizing
from contract.spec import Spec
from infra import render
from infra.components import program
from stack.cluster.cluster import LocalCluster
from testsupport.cluster import ROOT, variant

pytestmark = pytest.mark.integration
NS = "fit"


VARIANTS = {
    "dev": ("dev", {}),
    "prod": ("prod", {}),
    "dev: server asks 8 vCPUs of a g6e.2xlarge": ("dev", {"inference_servers.0.cpu_millicores": 8000}),
    "dev: server asks 70 GiB of a 64 GiB node": ("dev", {"inference_servers.0.memory_mib": 70000}),
    "dev, 2 GPU nodes: 2 server replicas": ("dev", {"gpu_node_pool.node_count": 2,
                                                    "inference_servers.0.replicas": 2}),
    "dev, a GPU time-sliced in 2: 2 servers of 5 vCPUs on one 8-vCPU node": (
        "dev", {"gpu_node_pool.gpu_sharing": "time-slicing", "gpu_node_pool.slices_per_gpu": 2,
                "inference_servers.0.replicas": 2, "inference_servers.0.cpu_millicores": 5000,
                "inference_servers.0.gpu_memory_utilization": 0.45}),
    "dev: worker asks 7.9 vCPUs of an m6i.2xlarge": ("dev", {"worker_pool.cpu_millicores": 7900,
                                                             "worker_pool.cpu_limit_millicores": 7900}),
    "prod: worker asks 40 GiB of an e2-standard-8": ("prod", {"worker_pool.memory_mib": 40000,
                                                             "worker_pool.memory_limit_mib": 40000}),
    "dev: server just fits (all CPU the node has left)": ("dev", {"inference_servers.0.cpu_millicores": 7610}),
    # Migrating: the server and the monolithic pool's GPU worker, each on its GPU node; the router
    # and the split workers on the CPU pool.
    "dev migrating on 2 GPU nodes: 1 monolithic worker beside the server": (
        "dev", {"gpu_node_pool.node_count": 2, "migration.monolithic_workers": 1}),
    "dev monolithic on 2 GPU nodes": ("dev", {"deployment_mode": "monolithic", "gpu_node_pool.node_count": 2}),
    "dev monolithic, workers ask 7.8 vCPUs of the GPU node": (
        "dev", {"deployment_mode": "monolithic", "gpu_node_pool.node_count": 2,
                "worker_pool.cpu_millicores": 7800, "worker_pool.cpu_limit_millicores": 7800}),
}


def rendered_pods(spec: Spec, monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """The program's pods at their ceiling: one per replica (KEDA's max where it scales)."""
    monkeypatch.setattr(program, "require_cluster_fit", lambda spec: None)  # the scheduler judges
    objects = render.capture(spec, ROOT).objects
    pods = []
    for obj in objects:
        if obj["kind"] not in ("Deployment", "StatefulSet"):
            continue
        name = obj["metadata"]["name"]
        count = obj["spec"].get("replicas", 1)
        if name == "worker" or name == "worker-gpu":
            count = spec.worker_pool.max_replicas or spec.worker_pool.replicas
        if name == "worker-monolithic":  # migrating: the monolithic pool's N fixed workers
            count = spec.migration.monolithic_workers
        for server in spec.inference_servers:
            if server.name == name:
                count = sizing.server_max_replicas(spec, server)
        template = obj["spec"]["template"]["spec"]
        for i in range(count):
            pods.append({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"{name}-{i}", "labels": {"fit": name}},
                "spec": {
                    "containers": [{"name": c["name"], "image": "fit",
                                    "resources": c.get("resources", {})} for c in template["containers"]],
                    **{k: template[k] for k in ("nodeSelector", "tolerations", "affinity") if k in template},
                },
            })
    return pods


def clean_namespace(cluster: LocalCluster, timeout_s: float = 60) -> None:
    """The previous variant's pods gone (while their nodes still run kwok, which lets them go)."""
    core = client.CoreV1Api(cluster.api())
    try:
        core.delete_namespace(NS)
    except client.exceptions.ApiException as exc:
        assert exc.status == 404
    deadline = time.monotonic() + timeout_s
    while NS in {n.metadata.name for n in core.list_namespace().items}:
        assert time.monotonic() < deadline, f"namespace {NS} not deleted in {timeout_s:g} s"
        time.sleep(0.3)


def schedule(cluster: LocalCluster, pods: list[dict], timeout_s: float = 30) -> tuple[list[str], list[str]]:
    core = client.CoreV1Api(cluster.api())
    core.create_namespace({"metadata": {"name": NS}})
    for pod in pods:
        core.create_namespaced_pod(NS, copy.deepcopy(pod))
    deadline = time.monotonic() + timeout_s
    while True:
        bound, pending = [], []
        for p in core.list_namespaced_pod(NS).items:
            if p.spec.node_name:
                bound.append(p.metadata.name)
            elif any(c.type == "PodScheduled" and c.reason == "Unschedulable"
                     for c in p.status.conditions or []):
                pending.append(p.metadata.name)
        if len(bound) + len(pending) == len(pods):
            return bound, pending
        if time.monotonic() > deadline:
            raise TimeoutError(f"scheduler undecided after {timeout_s:g} s: {len(bound)} bound, "
                               f"{len(pending)} unschedulable of {len(pods)}")
        time.sleep(0.3)


@pytest.mark.parametrize("label", list(VARIANTS))
def test_rules_and_scheduler_agree(label: str, cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    stack, changes = VARIANTS[label]
    spec = variant(stack, changes)
    refusals = [str(p) for p in cluster_fit._nodes_fit(spec)]
    clean_namespace(cluster)
    cluster.reshape(spec)
    pods = rendered_pods(spec, monkeypatch)
    bound, pending = schedule(cluster, pods)
    print(f"| {label} | {'refuse' if refusals else 'accept'} | {len(bound)}/{len(pods)} bound, "
          f"{len(pending)} Pending |")
    if refusals:
        assert pending, f"the rules refuse ({refusals}) but the scheduler bound every pod"
    else:
        assert not pending, f"the rules accept but the scheduler left {pending} Pending"
