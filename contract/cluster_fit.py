"""Cluster-fit rules: would `pulumi up` of this spec come up on the cluster it names?

Each rule returns problems that name the field path to change and the fix. They run in
`splitstack spec validate`, before the Pulumi program creates anything (infra/components/
program.py), in `splitstack infra plan` and in the CrossGuard pack (infra/policy/cluster_rules.py),
for target 'kubernetes' only. They are not part of the spec model's own validation, because a
spec that does not fit today's cluster is still a well-formed spec (the bench and the runbooks
read it too).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from typing import TYPE_CHECKING

from contract import clusters, sizing
from contract.capacity import CatalogError, find_gpu
from contract.cluster_placement import (
    PodDemand,
    Pool,
    cloud_of,
    cpu_pool,
    gpu_operator_installed,
    gpu_pool,
    keda_installed,
    managed,
    zonal_location,
)
from contract.enums import Cloud, DeploymentMode, Engine, Target
from contract.image_refs import missing_digests

if TYPE_CHECKING:
    from contract.spec import Spec

GPU_MEMORY_TOLERANCE_GIB = 2.0  # marketing GB vs GiB rounding in the spec


@dataclass(frozen=True)
class FitProblem:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class ClusterFitError(ValueError):
    """The spec does not fit its cluster; ``problems`` holds one line per rule that failed."""

    def __init__(self, stack: str, problems: list[FitProblem]) -> None:
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"stack {stack!r} does not fit its cluster:\n{lines}")


# ---- storage -------------------------------------------------------------------------------

@dataclass(frozen=True)
class ClassChoice:
    name: str | None  # None: nothing known (cloud 'existing' without a declared class)
    fact: clusters.StorageClassFact | None  # None: declared by the user, not in our table


def storage_class(spec: Spec, kind: str) -> ClassChoice:
    """The StorageClass the program uses for ``kind`` ('block' or 'shared')."""
    declared = spec.cluster.storage_class if kind == "block" else spec.cluster.shared_storage_class
    table = clusters.storage(cloud_of(spec)).get(kind)
    if declared is not None:
        return ClassChoice(declared, table if table and table.name == declared else None)
    return ClassChoice(table.name if table else None, table)


def block_min_gib(spec: Spec) -> int:
    """Smallest volume the block class provisions (1 where the class is not in our table)."""
    fact = storage_class(spec, "block").fact
    return fact.min_gib if fact else 1


def prometheus_storage(spec: Spec) -> sizing.PrometheusStorage:
    return sizing.prometheus_storage(spec, block_min_gib(spec))


def server_cache_kind(spec: Spec, server_index: int) -> str:
    server = spec.inference_servers[server_index]
    return "shared" if sizing.cache_shared(spec, server) else "block"


def storage_needs(spec: Spec) -> dict[str, list[str]]:
    """'block' / 'shared' -> who needs that class (for the problems and the plan)."""
    needs: dict[str, list[str]] = {"block": [], "shared": []}
    if spec.queue.kind == "in-cluster":
        needs["block"].append("queue (Redis AOF)")
    if spec.observability.install_kube_prometheus_stack:
        needs["block"].append("Prometheus TSDB and Alertmanager state (kube-prometheus-stack)")
    if spec.output_store.kind == "directory":
        needs["shared"].append("output_store (kind directory: every worker writes)")
    if spec.deployment_mode is DeploymentMode.monolithic:
        if sizing.worker_cache_shared(spec):
            needs["shared"].append("worker_pool (monolithic: one model and compile cache every "
                                   "worker mounts)")
        else:
            needs["block"].append("worker_pool (monolithic: the worker's model and compile cache)")
    else:
        if sizing.migrating(spec):  # the monolithic pool beside the split one
            n = spec.migration.monolithic_workers
            needs["shared" if n > 1 else "block"].append(
                "migration.monolithic_workers (the monolithic pool's model and compile cache)")
        for i, server in enumerate(spec.inference_servers):
            if server.engine is Engine.vllm:
                kind = server_cache_kind(spec, i)
                who = f"inference_servers[{i}] {server.name!r} model cache"
                needs[kind].append(who + (" (more than one replica)" if kind == "shared" else ""))
    return needs


def _storage(spec: Spec) -> list[FitProblem]:
    out = []
    for kind, who in storage_needs(spec).items():
        if not who:
            continue
        choice = storage_class(spec, kind)
        field = "cluster.storage_class" if kind == "block" else "cluster.shared_storage_class"
        mode = "ReadWriteOnce" if kind == "block" else "ReadWriteMany"
        if choice.name is None:
            out.append(FitProblem(field, (
                f"unset on cloud {cloud_of(spec)!r} but {'; '.join(who)} need a {mode} "
                f"StorageClass; name one your cluster has (`kubectl get storageclass`)"
                + (", or set replicas to 1" if kind == "shared" and spec.output_store.kind != "directory"
                   else ""))))
        elif choice.fact is not None and mode not in choice.fact.access_modes:
            out.append(FitProblem(field, (
                f"{choice.name!r} ({choice.fact.provisioner}) provides "
                f"{'/'.join(choice.fact.access_modes)}, not {mode}, which {'; '.join(who)} need; "
                f"name a {mode} class")))
    return out


# ---- nodes ---------------------------------------------------------------------------------

def _same_gpu(a: str, b: str) -> bool:
    try:
        return find_gpu(a).name == find_gpu(b).name
    except CatalogError:
        return a.strip().lower() == b.strip().lower()


def _instance(spec: Spec) -> list[FitProblem]:
    pool = spec.gpu_node_pool
    if pool is None or not managed(spec):
        return []
    inst = clusters.instance(pool.cloud.value, pool.instance_type)
    if inst is None:
        known = ", ".join(n for n, i in clusters.instances(pool.cloud.value).items() if i.gpus)
        return [FitProblem("gpu_node_pool.instance_type", (
            f"{pool.instance_type!r} is not in the {pool.cloud.value} table of "
            f"contract/clusters.yaml, so its allocatable CPU, memory and GPUs are unknown; "
            f"choose one of {known}, or add a row citing the cloud's documentation"))]
    out = []
    if inst.accelerator and not _same_gpu(inst.accelerator, pool.accelerator):
        out.append(FitProblem("gpu_node_pool.accelerator", (
            f"{pool.accelerator!r}, but a {inst.name} carries {inst.accelerator}; the capacity "
            f"check and the node pool would disagree: set accelerator to {inst.accelerator!r} or "
            "choose an instance type with that GPU")))
    if inst.gpus != pool.gpus_per_node:
        out.append(FitProblem("gpu_node_pool.gpus_per_node", (
            f"{pool.gpus_per_node}, but a {inst.name} has {inst.gpus} GPU(s); set it to "
            f"{inst.gpus}")))
    if inst.gpu_memory_gib and abs(inst.gpu_memory_gib - pool.gpu_memory_gib) > GPU_MEMORY_TOLERANCE_GIB:
        out.append(FitProblem("gpu_node_pool.gpu_memory_gib", (
            f"{pool.gpu_memory_gib:g}, but a {inst.name}'s {inst.accelerator} has "
            f"{inst.gpu_memory_gib:g} GB; set it to {inst.gpu_memory_gib:g}")))
    return out


def _too_big(pod: PodDemand, pool: Pool) -> str | None:
    """Why one pod fits no empty node of the pool, or None."""
    if not pool.nodes:
        return None
    cap = pool.nodes[0].capacity
    inst = pool.instance
    assert inst is not None
    base = (f"a {inst.name} node ({inst.vcpu} vCPU, {inst.memory_gib:g} GiB) leaves "
            f"{cap.cpu_m}m CPU and {cap.memory_mib} MiB after kubelet reservations "
            f"({pool.reserved.cpu_m}m, {pool.reserved.memory_mib} MiB) and DaemonSets "
            f"({pool.daemonsets.cpu_m}m, {pool.daemonsets.memory_mib} MiB)")
    if pod.requests.cpu_m > cap.cpu_m:
        return f"{pod.who} requests {pod.requests.cpu_m}m CPU but {base}"
    if pod.requests.memory_mib > cap.memory_mib:
        return f"{pod.who} requests {pod.requests.memory_mib} MiB but {base}"
    if pod.requests.gpus > cap.gpus:
        return f"{pod.who} requests {pod.requests.gpus} GPU(s) but a {inst.name} has {cap.gpus}"
    return None


def _nodes_fit(spec: Spec) -> list[FitProblem]:
    out = []
    gpu = gpu_pool(spec)
    if gpu is not None and gpu.instance is not None and gpu.unplaced:
        first = gpu.unplaced[0]
        why = _too_big(first, gpu)
        if why:
            field = first.path + (".cpu_millicores" if "CPU but" in why else ".memory_mib")
            if first.path.startswith("worker_pool"):
                field = "worker_pool.cpu_millicores" if "CPU but" in why else "worker_pool.memory_mib"
            out.append(FitProblem(field, (
                f"{why}: lower it, or choose a larger gpu_node_pool.instance_type")))
        else:
            names = ", ".join(p.who for p in gpu.unplaced)
            out.append(FitProblem("gpu_node_pool.node_count", (
                f"{gpu.node_count} x {gpu.instance_type} cannot hold every GPU pod at its "
                f"ceiling: {names} fit on no node (CPU, memory and GPUs packed per node, "
                f"`splitstack infra plan` shows them); add nodes or need fewer replicas")))
    cpu = cpu_pool(spec)
    if cpu is not None and cpu.unplaced:
        first = cpu.unplaced[0]
        why = _too_big(first, cpu) or f"{first.who} fits on no CPU node"
        field = first.path
        if field in ("worker_pool", "queue", "cluster"):
            field = {"worker_pool": "worker_pool.memory_mib" if "MiB but" in why
                     else "worker_pool.cpu_millicores",
                     "queue": "queue", "cluster": "cluster"}[field]
        out.append(FitProblem(field, (
            f"{why}: the CPU pool is {cpu.instance_type}; lower the request")))
    return out


# ---- zones ---------------------------------------------------------------------------------

def _zones(spec: Spec) -> list[FitProblem]:
    """gpu_node_pool.zones against the cloud's profile: the zone names it has, and whether
    node_count counts nodes per zone (GKE's regional pools)."""
    pool = spec.gpu_node_pool
    if pool is None:
        return []
    zones = pool.zones
    prof = clusters.profile(pool.cloud.value)
    if prof.zone_pattern is None:
        return [FitProblem("gpu_node_pool.zones", (
            f"set for cloud {pool.cloud.value!r}, whose nodes the program does not create; "
            "remove it"))] if zones else []
    if len(set(zones)) != len(zones):
        return [FitProblem("gpu_node_pool.zones", f"{zones} names a zone twice; list each once")]
    if zonal_location(spec):  # a location that is itself a zone (GKE's zonal clusters)
        if zones and zones != [pool.region]:
            return [FitProblem("gpu_node_pool.zones", (
                f"{zones} with the zonal location {pool.region!r}: a zonal cluster's pools "
                f"live in its zone; remove zones or set region to the region"))]
        return []
    example = prof.example_zone(pool.region)
    if prof.node_count_per_zone and not zones:
        return [FitProblem("gpu_node_pool.zones", (
            f"empty with the regional location {pool.region!r}: {pool.cloud.value} creates "
            f"node_count ({pool.node_count}) nodes in EVERY zone of a regional cluster (3 zones: "
            f"{3 * pool.node_count} GPU nodes, {3 * pool.node_count * pool.gpus_per_node} "
            f"GPUs); list the zones that have {pool.accelerator} capacity, e.g. "
            f"[{example}], or set region to one zone"))]
    bad = [z for z in zones if not prof.zone_matches(z, pool.region)]
    if bad:
        return [FitProblem("gpu_node_pool.zones", (
            f"{bad} are not {pool.cloud.value} availability zones of {pool.region!r}; use zones "
            f"such as {example!r}"))]
    if prof.node_count_per_zone and pool.node_count % len(zones):
        return [FitProblem("gpu_node_pool.node_count", (
            f"{pool.node_count} over {len(zones)} zones: {pool.cloud.value} counts nodes per "
            f"zone, so the total must be a multiple of {len(zones)}; set node_count to "
            f"{math.ceil(pool.node_count / len(zones)) * len(zones)} or change zones"))]
    return []


# ---- operators -----------------------------------------------------------------------------

def workers_scaled(spec: Spec) -> bool:
    """The workers get a KEDA ScaledObject on the Redis stream's lag."""
    w = spec.worker_pool
    return (w.max_replicas or 0) > w.replicas


def scaled_servers(spec: Spec) -> list[int]:
    """Indexes of the servers that get a KEDA ScaledObject on Prometheus (into free GPUs)."""
    if spec.deployment_mode is not DeploymentMode.split:
        return []
    return [i for i, server in enumerate(spec.inference_servers)
            if server.engine is Engine.vllm
            and sizing.server_max_replicas(spec, server) > server.replicas]


def scalers(spec: Spec) -> list[str]:
    """Who gets a KEDA ScaledObject."""
    out = []
    if workers_scaled(spec):
        out.append("worker_pool (max_replicas > replicas)")
    for i in scaled_servers(spec):
        out.append(f"inference_servers[{i}] {spec.inference_servers[i].name!r} (scales into free GPUs)")
    return out


def _operators(spec: Spec) -> list[FitProblem]:
    out = []
    declared = set(spec.cluster.operators)
    existing = cloud_of(spec) == Cloud.existing.value
    if not (spec.observability.install_kube_prometheus_stack
            or "prometheus-operator" in declared):
        out.append(FitProblem("observability.install_kube_prometheus_stack", (
            "false and the Prometheus operator is not declared present, but the program "
            "creates ServiceMonitors and PrometheusRules (monitoring.coreos.com), which "
            "`pulumi up` refuses with 'no matches for kind' without the operator's CRDs; set "
            "it to true, or list prometheus-operator in cluster.operators if your cluster "
            "runs one")))
    who = scalers(spec)
    if who and not (keda_installed(spec) or "keda" in declared):
        out.append(FitProblem("cluster.operators", (
            f"{'; '.join(who)} get a KEDA ScaledObject (keda.sh), but cloud 'existing' runs no "
            "KEDA the program knows of; list keda in cluster.operators if it is installed, or "
            "remove worker_pool.max_replicas / the free GPUs")))
    gpu_pods = (bool(sizing.gpu_servers(spec)) or spec.deployment_mode is DeploymentMode.monolithic
                or sizing.migrating(spec))
    if existing and gpu_pods:
        sharing = spec.gpu_node_pool is not None and spec.gpu_node_pool.gpu_sharing != "none"
        if sharing and "nvidia-device-plugin" in declared:
            out.append(FitProblem("gpu_node_pool.gpu_sharing", (
                f"{spec.gpu_node_pool.gpu_sharing!r} on a cluster that already runs the NVIDIA "  # type: ignore[union-attr]
                "device plugin: the program would install a second GPU operator to configure "
                "sharing; configure time-slicing/MPS in your own device plugin and set "
                "gpu_sharing to 'none' (slices_per_gpu 1)")))
        if not sharing and "nvidia-device-plugin" not in declared:
            out.append(FitProblem("cluster.operators", (
                "nvidia-device-plugin is not declared: pods that request nvidia.com/gpu never "
                "schedule on a cluster without the NVIDIA device plugin (or GPU operator); list "
                "nvidia-device-plugin once your GPU nodes advertise nvidia.com/gpu")))
    return out


# ---- versions ------------------------------------------------------------------------------

def installed_charts(spec: Spec) -> list[str]:
    out = []
    if gpu_operator_installed(spec):
        out.append("gpu-operator")
    if keda_installed(spec):
        out.append("keda")
    if spec.observability.install_kube_prometheus_stack:
        stack = clusters.chart("kube-prometheus-stack")
        out += [stack.name, *([stack.crds_chart] if stack.crds_chart else [])]
    return out


def features_used(spec: Spec) -> list[str]:
    out = ["pod-security-admission"]
    if spec.deployment_mode is DeploymentMode.split:
        out.append("preStop.sleep")  # the servers' drain (contract/sizing.py PRESTOP_SLEEP_S)
    if spec.queue.kind == "in-cluster":
        out.append("statefulset-pvc-retention")  # Redis' claim goes with `pulumi destroy`
    return out


def today() -> date:
    """The day support windows are compared with (tests fix it)."""
    return date.today()


def charts_refusing(spec: Spec, version: str) -> list[str]:
    """The installed charts whose pinned release does not support ``version``."""
    out = []
    for name in installed_charts(spec):
        chart = clusters.chart(name)
        low, high = chart.kubernetes
        if not clusters.in_range(version, low, high):
            out.append(f"{name} {chart.version} ({low}{'-' + high if high else '+'})")
    return out


def version_table(spec: Spec) -> list[tuple[str, date, list[str]]]:
    """Every version the cloud lists: its end of standard support, the charts refusing it."""
    cloud = cloud_of(spec)
    if cloud not in clusters.MANAGED_CLOUDS:
        return []
    return [(v, end, charts_refusing(spec, v))
            for v, end in sorted(clusters.standard_support_ends(cloud).items(),
                                 key=lambda kv: clusters.minor(kv[0]))]


def _support(spec: Spec, version: str) -> list[FitProblem]:
    cloud = cloud_of(spec)
    if cloud not in clusters.MANAGED_CLOUDS:
        return []
    table = version_table(spec)
    ends = {v: end for v, end, _ in table}
    now = today()
    usable = [f"{v} (until {end})" for v, end, refusing in table if end >= now and not refusing]
    hint = (f"versions in standard support that every pinned chart supports: {', '.join(usable)}"
            if usable else "no version in standard support is in every pinned chart's range "
            f"({'; '.join(sorted({c for _, end, r in table if end >= now for c in r}))}): pin newer "
            "charts in contract/clusters.yaml")
    if version not in ends:
        return [FitProblem("cluster.kubernetes_version", (
            f"{version} is not a version {cloud} creates clusters at (contract/clusters.yaml lists "
            f"{', '.join(ends)}; {clusters.versions_source(cloud)}); {hint}"))]
    if ends[version] < now and not spec.cluster.allow_extended_support:
        return [FitProblem("cluster.kubernetes_version", (
            f"{version}: {cloud}'s standard support for it ended {ends[version]} "
            f"({clusters.versions_source(cloud)}), so the cluster would be in extended support "
            "(paid on EKS, the Extended channel on GKE, long-term support on AKS); " + hint
            + ", or set cluster.allow_extended_support: true to accept it"))]
    return []


def _versions(spec: Spec) -> list[FitProblem]:
    version = spec.cluster.kubernetes_version
    out = []
    for name in installed_charts(spec):
        chart = clusters.chart(name)
        low, high = chart.kubernetes
        if not clusters.in_range(version, low, high):
            out.append(FitProblem("cluster.kubernetes_version", (
                f"{version}, but {name} {chart.version} (pinned in contract/clusters.yaml) "
                f"supports Kubernetes {low}{'-' + high if high else '+'} ({chart.source}); choose "
                f"a version in that range or pin a {name} release that supports {version}")))
    out += _support(spec, version)
    for feature in features_used(spec):
        floor = clusters.feature_floor(feature)
        if clusters.minor(version) < clusters.minor(floor):
            out.append(FitProblem("cluster.kubernetes_version", (
                f"{version}, but the rendered objects use {feature}, on by default from "
                f"Kubernetes {floor}; upgrade the cluster to {floor} or later")))
    return out


# ---- security and what the worker implements ----------------------------------------------

def _security(spec: Spec) -> list[FitProblem]:
    out = []
    if spec.queue.kind == "in-cluster" and spec.queue.password is None:
        out.append(FitProblem("queue.password", (
            "unset: the in-cluster Redis would accept any client that reaches it (producers in "
            "queue.producer_namespaces, KEDA) without AUTH; give a SecretRef {name, key, env} "
            "whose Secret holds the password")))
    return out


def _images(spec: Spec) -> list[FitProblem]:
    missing = missing_digests(spec)
    if not missing:
        return []
    return [FitProblem("images.digests", (
        f"no digest recorded for {', '.join(missing)} in images.registry: the cluster could not "
        f"pull them; push them with `splitstack images push --stack {spec.stack}` (it records the "
        "digests in images/lock/<stack>.json), or unset images.registry"))]


RULES: list[Callable[[Spec], list[FitProblem]]] = [
    _instance, _nodes_fit, _zones, _storage, _operators, _versions, _security, _images]


def check_cluster_fit(spec: Spec) -> list[FitProblem]:
    """Every problem of ``spec`` on its cluster (empty: it fits). Target 'local' has none."""
    if spec.target is not Target.kubernetes or spec.gpu_node_pool is None:
        return []
    problems: list[FitProblem] = []
    for rule in RULES:
        problems += rule(spec)
    return problems


def require_cluster_fit(spec: Spec) -> None:
    problems = check_cluster_fit(spec)
    if problems:
        raise ClusterFitError(spec.stack, problems)
