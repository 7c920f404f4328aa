"""GpuNodePool: where the GPUs come from.

eks / gke / aks create a cluster with a CPU pool and a tainted GPU pool (their SDKs are imported
only by the module of that cloud); ``existing`` creates nothing and uses the ambient kubeconfig,
expecting GPU nodes with the spec's labels and taints.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import pulumi

from contract.spec import Cloud, Spec


@dataclass(frozen=True)
class GpuNodePoolArgs:
    spec: Spec


def validate(args: GpuNodePoolArgs) -> None:
    pool = args.spec.gpu_node_pool
    if pool is None:
        raise ValueError(
            "gpu_node_pool: missing; the Kubernetes program needs GPU nodes, add "
            "splitstack:gpu_node_pool (cloud: existing for your own cluster)")
    if pool.gpu_sharing != "none" and pool.slices_per_gpu < 2:
        raise ValueError(
            f"gpu_node_pool.slices_per_gpu: {pool.slices_per_gpu} with gpu_sharing="
            f"{pool.gpu_sharing!r} shares nothing; set slices_per_gpu to 2 or more or "
            "gpu_sharing to 'none'")
    if pool.gpu_sharing == "none" and pool.slices_per_gpu != 1:
        raise ValueError(
            f"gpu_node_pool.slices_per_gpu: {pool.slices_per_gpu} has no effect with "
            "gpu_sharing 'none'; set gpu_sharing to 'time-slicing' or 'mps', or remove it")


class GpuNodePoolComponent(pulumi.ComponentResource):
    """``kubeconfig`` is None for ``existing`` (the default provider is used)."""

    def __init__(self, name: str, args: GpuNodePoolArgs,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("splitstack:infra:GpuNodePool", name, None, opts)
        validate(args)
        pool = args.spec.gpu_node_pool
        assert pool is not None
        self.cloud = pool.cloud
        self.kubeconfig: pulumi.Output[str] | None = None
        self.cluster_name: pulumi.Output[str] = pulumi.Output.from_input("<existing>")
        self.cloud_resources: list[pulumi.Resource] = []
        self.storage_ready: list[pulumi.Resource] = []
        self.shared_file_system_id: pulumi.Output[str] | None = None
        if pool.cloud is not Cloud.existing:
            module = importlib.import_module(f"infra.components.clouds.{pool.cloud.value}")
            out = module.create(self, name, args.spec)
            self.kubeconfig = out.kubeconfig
            self.cluster_name = out.name
            self.cloud_resources = out.resources
            self.storage_ready = out.storage_ready
            self.shared_file_system_id = out.shared_file_system_id
        self.register_outputs({"cluster_name": self.cluster_name})
