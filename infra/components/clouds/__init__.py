"""One module per managed cloud. Each imports its SDK lazily (inside ``create``) so that
``existing`` clusters and other clouds never need it installed."""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi

from contract.cluster_placement import CPU_INSTANCE
from contract.spec import GpuNodePool, Taint

__all__ = ["CPU_INSTANCE", "GPU_DISK_GIB", "ClusterOut", "missing_sdk", "require_region",
           "taint_effect_enum"]

GPU_DISK_GIB = 200  # image layers of vllm-openai (~10 GiB) plus the HF cache overflow


@dataclass(frozen=True)
class ClusterOut:
    kubeconfig: pulumi.Output[str]
    name: pulumi.Output[str]
    resources: list[pulumi.Resource] = field(default_factory=list)  # for tests to wait on
    # CSI drivers (and what they need) the program's StorageClasses and PVCs must wait for.
    storage_ready: list[pulumi.Resource] = field(default_factory=list)
    # EKS: the EFS file system behind the ReadWriteMany StorageClass (None elsewhere).
    shared_file_system_id: pulumi.Output[str] | None = None


def taint_effect_enum(effect: str) -> str:
    """NoSchedule -> NO_SCHEDULE (EKS and GKE spell effects this way)."""
    return {"NoSchedule": "NO_SCHEDULE", "PreferNoSchedule": "PREFER_NO_SCHEDULE",
            "NoExecute": "NO_EXECUTE"}[effect]


def taint_text(t: Taint) -> str:
    return f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}"


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
