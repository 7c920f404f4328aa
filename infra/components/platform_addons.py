"""Cluster add-ons the pipeline relies on: the NVIDIA GPU operator (device plugin, GPU sharing)
and KEDA (queue-lag scaling), as pinned Helm releases, where the platform needs them."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s
import yaml

from contract import naming
from contract.spec import Cloud, Spec
from infra.components.base import child

GPU_OPERATOR_CHART = "gpu-operator"
GPU_OPERATOR_VERSION = "v24.9.0"
GPU_OPERATOR_REPO = "https://helm.ngc.nvidia.com/nvidia"
GPU_OPERATOR_NAMESPACE = "gpu-operator"
SHARING_CONFIG = "splitstack-gpu-sharing"
KEDA_CHART = "keda"
KEDA_VERSION = "2.15.1"
KEDA_REPO = "https://kedacore.github.io/charts"


def needs_gpu_operator(spec: Spec) -> bool:
    """EKS's NVIDIA AMI and AKS's GPU nodes have drivers but no device plugin; GKE brings its
    own (and shares GPUs natively); on an existing cluster only GPU sharing needs it."""
    pool = spec.gpu_node_pool
    if pool is None:
        return False
    if pool.cloud in (Cloud.eks, Cloud.aks):
        return True
    return pool.cloud is Cloud.existing and pool.gpu_sharing != "none"


def sharing_config(spec: Spec) -> str:
    """NVIDIA device-plugin sharing config: one GPU advertised as slices_per_gpu nvidia.com/gpu."""
    pool = spec.gpu_node_pool
    assert pool is not None
    key = "timeSlicing" if pool.gpu_sharing == "time-slicing" else "mps"
    return yaml.safe_dump({"version": "v1", "sharing": {key: {"resources": [
        {"name": naming.GPU_RESOURCE, "replicas": pool.slices_per_gpu}]}}}, sort_keys=False)


def gpu_operator_values(spec: Spec) -> dict:
    pool = spec.gpu_node_pool
    assert pool is not None
    managed = pool.cloud in (Cloud.eks, Cloud.aks)  # driver + toolkit already on the node image
    values: dict = {
        "driver": {"enabled": not managed},
        "toolkit": {"enabled": not managed},
        "daemonsets": {"tolerations": naming.gpu_tolerations_camel(spec)},
    }
    if pool.gpu_sharing != "none":
        values["devicePlugin"] = {"config": {"name": SHARING_CONFIG, "default": "any"}}
    return values


@dataclass(frozen=True)
class PlatformAddonsArgs:
    spec: Spec
    install_keda: bool  # derived until the spec has a field: True on clusters we create


class PlatformAddonsComponent(pulumi.ComponentResource):
    def __init__(self, name: str, args: PlatformAddonsArgs,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("splitstack:infra:PlatformAddons", name, None, opts)
        spec = args.spec
        self.gpu_operator: k8s.helm.v3.Release | None = None
        self.keda: k8s.helm.v3.Release | None = None
        if needs_gpu_operator(spec):
            deps = []
            if spec.gpu_node_pool and spec.gpu_node_pool.gpu_sharing != "none":
                ns = k8s.core.v1.Namespace(
                    f"{name}-gpu-operator-ns",
                    metadata={"name": GPU_OPERATOR_NAMESPACE,
                              "labels": naming.labels("gpu-operator", GPU_OPERATOR_NAMESPACE)},
                    opts=child(self))
                deps.append(k8s.core.v1.ConfigMap(
                    f"{name}-gpu-sharing",
                    metadata={"name": SHARING_CONFIG, "namespace": GPU_OPERATOR_NAMESPACE,
                              "labels": naming.labels("gpu-operator", SHARING_CONFIG)},
                    data={"any": sharing_config(spec)},
                    opts=child(self, depends_on=[ns])))
            self.gpu_operator = k8s.helm.v3.Release(
                f"{name}-gpu-operator",
                name=GPU_OPERATOR_CHART, chart=GPU_OPERATOR_CHART, version=GPU_OPERATOR_VERSION,
                repository_opts={"repo": GPU_OPERATOR_REPO},
                namespace=GPU_OPERATOR_NAMESPACE, create_namespace=not deps,
                values=gpu_operator_values(spec),
                opts=child(self, depends_on=deps),
            )
        if args.install_keda:
            self.keda = k8s.helm.v3.Release(
                f"{name}-keda",
                name=KEDA_CHART, chart=KEDA_CHART, version=KEDA_VERSION,
                repository_opts={"repo": KEDA_REPO},
                namespace=naming.KEDA_NAMESPACE, create_namespace=True,
                opts=child(self),
            )
        self.register_outputs({})
