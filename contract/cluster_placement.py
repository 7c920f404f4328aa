"""Where the pods of a spec land: node pools, zones, allocatable after DaemonSets, and a
first-fit packing of every pod (at its autoscaling ceiling) onto the nodes.

Pure functions of the spec and contract/clusters.yaml. The cluster-fit rules
(contract/cluster_fit.py), the node counts the Pulumi program creates and `splitstack infra
plan` all use them, so the plan a person reads is the arithmetic the program runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from contract import clusters, sizing
from contract.clusters import Instance, Resources
from contract.enums import Cloud, DeploymentMode, Engine

if TYPE_CHECKING:  # the spec model imports the rules that import this: types only
    from contract.spec import Spec

# The CPU node type of each managed cloud (the workers, Redis, Prometheus, KEDA): a general
# purpose 8 vCPU / 32 GiB machine.
CPU_INSTANCE = {cloud: clusters.profile(cloud).cpu_instance or "" for cloud in clusters.MANAGED_CLOUDS}
SPARE_CPU_NODES = 1  # CoreDNS, KEDA, kube-prometheus-stack and a drain's worth of room
# KEDA's three Deployments request 100m / 100Mi each (https://keda.sh/docs/2.19/operate/cluster/).
KEDA_PODS = 3
KEDA_POD = Resources(100, 100, 0)


@dataclass(frozen=True)
class PodDemand:
    who: str  # e.g. "inference_servers[0] 'mineru-vlm' (replica 1 of 2)"
    path: str  # the spec field that sets these requests
    requests: Resources


@dataclass
class Node:
    index: int
    zone: str | None
    capacity: Resources  # allocatable minus DaemonSets
    pods: list[PodDemand] = field(default_factory=list)

    @property
    def used(self) -> Resources:
        total = Resources()
        for pod in self.pods:
            total = total + pod.requests
        return total

    @property
    def free(self) -> Resources:
        return self.capacity - self.used


@dataclass
class Pool:
    name: str  # "gpu" or "cpu"
    instance_type: str
    instance: Instance | None  # None: not in contract/clusters.yaml (cloud 'existing')
    zones: list[str]
    per_zone: int | None  # GKE: nodes in each zone
    node_count: int
    reserved: Resources = field(default_factory=Resources)  # kubelet + eviction, per node
    daemonsets: Resources = field(default_factory=Resources)  # per node
    nodes: list[Node] = field(default_factory=list)
    unplaced: list[PodDemand] = field(default_factory=list)
    pods: list[PodDemand] = field(default_factory=list)


def cloud_of(spec: Spec) -> str:
    pool = spec.gpu_node_pool
    return pool.cloud.value if pool else Cloud.existing.value


def managed(spec: Spec) -> bool:
    return cloud_of(spec) in clusters.MANAGED_CLOUDS


def gpu_operator_installed(spec: Spec) -> bool:
    """EKS's NVIDIA AMI and AKS's GPU nodes have drivers but no device plugin; GKE brings its
    own (and shares GPUs natively); on an existing cluster only GPU sharing needs it."""
    pool = spec.gpu_node_pool
    if pool is None:
        return False
    stack = clusters.profile(pool.cloud.value).gpu_stack
    if stack == "gpu-operator":
        return True
    return stack == "declared" and pool.gpu_sharing != "none"


def keda_installed(spec: Spec) -> bool:
    return managed(spec)


def zonal_location(spec: Spec) -> bool:
    """The pool's location is itself one zone (the cloud's profile: GKE's zonal clusters)."""
    pool = spec.gpu_node_pool
    return pool is not None and clusters.profile(pool.cloud.value).zonal_location(pool.region)


def pool_zones(spec: Spec) -> list[str]:
    """The zones the node pools use ([] where the cloud picks)."""
    pool = spec.gpu_node_pool
    if pool is None:
        return []
    if pool.zones:
        return list(pool.zones)
    if zonal_location(spec):
        return [pool.region]
    return []


def gpu_pods(spec: Spec) -> list[PodDemand]:
    """Every pod that needs a GPU, at its ceiling (servers: replicas + KEDA's scale-up)."""
    pods: list[PodDemand] = []
    if spec.deployment_mode is DeploymentMode.monolithic:
        w = spec.worker_pool
        count = w.max_replicas or w.replicas
        req = Resources(w.cpu_millicores, w.memory_mib, 1)
        return [PodDemand(f"worker_pool (monolithic) worker {n + 1} of {count}",
                          "worker_pool.cpu_millicores", req) for n in range(count)]
    for i, server in enumerate(spec.inference_servers):
        if server.engine is not Engine.vllm:
            continue
        count = sizing.server_max_replicas(spec, server)
        req = Resources(sizing.server_cpu_millicores(server), sizing.server_memory_mib(server),
                        server.tensor_parallel_size)
        pods += [PodDemand(f"inference_servers[{i}] {server.name!r} replica {n + 1} of {count}",
                           f"inference_servers[{i}]", req) for n in range(count)]
    if sizing.migrating(spec):  # the monolithic pool beside the split one, one GPU per worker
        w = spec.worker_pool
        count = spec.migration.monolithic_workers
        req = Resources(w.cpu_millicores, w.memory_mib, 1)
        pods += [PodDemand(f"migration monolithic worker {n + 1} of {count}",
                           "migration.monolithic_workers", req) for n in range(count)]
    return pods


def cpu_pods(spec: Spec) -> list[PodDemand]:
    """Pods of the CPU pool at their ceiling: workers, Redis, simulated servers, KEDA."""
    w = spec.worker_pool
    pods: list[PodDemand] = []
    if spec.deployment_mode is DeploymentMode.split:
        count = w.max_replicas or w.replicas
        req = Resources(w.cpu_millicores, w.memory_mib, 0)
        pods += [PodDemand(f"worker_pool worker {n + 1} of {count}", "worker_pool", req)
                 for n in range(count)]
        for i, server in enumerate(spec.inference_servers):
            if server.engine is Engine.sim:
                req = Resources(sizing.server_cpu_millicores(server),
                                sizing.server_memory_mib(server), 0)
                pods += [PodDemand(f"inference_servers[{i}] {server.name!r} (sim) replica {n + 1}",
                                   f"inference_servers[{i}]", req) for n in range(server.replicas)]
    if sizing.migrating(spec):
        pods.append(PodDemand("migration: router", "migration.monolithic_workers",
                              Resources(sizing.ROUTER_CPU_MILLICORES, sizing.ROUTER_MEMORY_MIB, 0)))
    if spec.queue.kind == "in-cluster":
        pods.append(PodDemand("queue: redis", "queue",
                              Resources(sizing.REDIS_CPU_MILLICORES, sizing.REDIS_MEMORY_MIB, 0)))
    if keda_installed(spec):
        pods += [PodDemand(f"keda pod {n + 1} of {KEDA_PODS}", "cluster", KEDA_POD)
                 for n in range(KEDA_PODS)]
    return pods


def _daemonsets(spec: Spec, gpu_nodes: bool) -> Resources:
    cloud = cloud_of(spec)
    total = clusters.daemonset_requests(cloud)  # type: ignore[arg-type]
    if gpu_nodes and (gpu_operator_installed(spec)
                      or "nvidia-device-plugin" in spec.cluster.operators):
        total = total + clusters.daemonset_requests("gpu_operator")
    if spec.observability.install_kube_prometheus_stack:
        total = total + clusters.daemonset_requests("node_exporter")
    return total


def pack(pods: list[PodDemand], nodes: list[Node]) -> list[PodDemand]:
    """First fit, largest first (GPUs, then memory, then CPU); returns what fits nowhere."""
    unplaced = []
    for pod in sorted(pods, key=lambda p: (-p.requests.gpus, -p.requests.memory_mib,
                                           -p.requests.cpu_m)):
        node = next((n for n in nodes if n.free.covers(pod.requests)), None)
        if node is None:
            unplaced.append(pod)
        else:
            node.pods.append(pod)
    return unplaced


def _nodes(count: int, capacity: Resources, zones: list[str]) -> list[Node]:
    return [Node(i, zones[i % len(zones)] if zones else None, capacity) for i in range(count)]


def gpu_pool(spec: Spec) -> Pool | None:
    pool = spec.gpu_node_pool
    if pool is None:
        return None
    zones = pool_zones(spec)
    inst = clusters.instance(pool.cloud.value, pool.instance_type)
    per_zone = None
    if clusters.profile(pool.cloud.value).node_count_per_zone and zones:
        per_zone = pool.node_count // len(zones)
    out = Pool("gpu", pool.instance_type, inst, zones, per_zone, pool.node_count,
               pods=gpu_pods(spec))
    if inst is None:
        return out
    slices = pool.slices_per_gpu if pool.gpu_sharing != "none" else 1
    out.reserved = clusters.reserved(inst)
    out.daemonsets = _daemonsets(spec, gpu_nodes=True)
    alloc = clusters.allocatable(inst)
    capacity = Resources(alloc.cpu_m, alloc.memory_mib, inst.gpus * slices) - out.daemonsets
    out.nodes = _nodes(pool.node_count, capacity, zones)
    out.unplaced = pack(out.pods, out.nodes)
    return out


def cpu_pool(spec: Spec) -> Pool | None:
    """The CPU pool the program creates (managed clouds): as many nodes as the packing needs,
    plus a spare; on GKE rounded up to whole nodes per zone."""
    if not managed(spec):
        return None
    cloud = cloud_of(spec)
    inst = clusters.instance(cloud, CPU_INSTANCE[cloud])
    assert inst is not None, f"contract/clusters.yaml lacks the CPU instance of {cloud}"
    daemonsets = _daemonsets(spec, gpu_nodes=False)
    capacity = clusters.allocatable(inst) - daemonsets
    pods = cpu_pods(spec)
    probe = _nodes(len(pods) + 1, capacity, [])
    unplaced = pack(pods, probe)
    needed = sum(1 for n in probe if n.pods) + SPARE_CPU_NODES
    zones = pool_zones(spec)
    per_zone = None
    if clusters.profile(cloud).node_count_per_zone and zones:
        per_zone = math.ceil(needed / len(zones))
        needed = per_zone * len(zones)
    out = Pool("cpu", inst.name, inst, zones, per_zone, needed, reserved=clusters.reserved(inst),
               daemonsets=daemonsets, pods=pods)
    out.nodes = _nodes(needed, capacity, zones)
    out.unplaced = pack(pods, out.nodes) if not unplaced else unplaced
    return out


def cpu_node_count(spec: Spec) -> int:
    pool = cpu_pool(spec)
    assert pool is not None
    return pool.node_count
