"""One module per managed cloud. Each imports its SDK lazily (inside ``create``) so that
``existing`` clusters and other clouds never need it installed."""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi

from contract.spec import GpuNodePool

# The CPU pool that runs the workers, Redis and Prometheus (derived until the spec has a
# cpu_node_pool section): a general-purpose 8 vCPU / 32 GiB machine per cloud.
CPU_INSTANCE = {"eks": "m6i.2xlarge", "gke": "e2-standard-8", "aks": "Standard_D8s_v5"}
CPU_NODE_MILLICORES = 7000  # allocatable of an 8 vCPU node after system reservations
GPU_DISK_GIB = 200  # image layers of vllm-openai (~10 GiB) plus the HF cache overflow


@dataclass(frozen=True)
class ClusterOut:
    kubeconfig: pulumi.Output[str]
    name: pulumi.Output[str]
    resources: list[pulumi.Resource] = field(default_factory=list)  # for tests to wait on


def cpu_node_count(worker_millicores: int, max_workers: int) -> int:
    """CPU nodes for the worker pool at its ceiling, plus one for Redis/Prometheus/system pods."""
    need = worker_millicores * max_workers
    return max(1, -(-need // CPU_NODE_MILLICORES)) + 1


def taint_effect_enum(effect: str) -> str:
    """NoSchedule -> NO_SCHEDULE (EKS and GKE spell effects this way)."""
    return {"NoSchedule": "NO_SCHEDULE", "PreferNoSchedule": "PREFER_NO_SCHEDULE",
            "NoExecute": "NO_EXECUTE"}[effect]


def require_region(pool: GpuNodePool) -> str:
    if not pool.region:
        raise ValueError(
            f"gpu_node_pool.region: empty for cloud {pool.cloud.value!r}; set the region "
            "(e.g. us-east-1, us-central1, eastus) where the GPU nodes are created")
    return pool.region


def missing_sdk(cloud: str, package: str) -> ImportError:
    return ImportError(
        f"gpu_node_pool.cloud is {cloud!r} but {package} is not installed; install it with "
        f"`pip install -e '.[infra-{cloud}]'` (or use cloud 'existing' with your own cluster)")
