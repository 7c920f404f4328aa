"""Cluster add-ons the pipeline relies on: the NVIDIA GPU operator (device plugin, GPU sharing)
and KEDA (queue-lag scaling), as Helm releases pinned in contract/clusters.yaml (where their
supported Kubernetes versions are checked), where the platform needs them."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s
import yaml

from contract import clusters, naming
from contract.cluster_placement import gpu_operator_installed, keda_installed
from contract.spec import Cloud, Spec
from infra.components.base import child

GPU_OPERATOR_CHART = "gpu-operator"
GPU_OPERATOR_NAMESPACE = "gpu-operator"
SHARING_CONFIG = "splitstack-gpu-sharing"
KEDA_CHART = "keda"
# helm install --wait: the GPU operator's operands start only once GPU nodes have joined, which
# takes longer than Helm's 300 s default on a fresh node pool.
GPU_OPERATOR_TIMEOUT_S = 900
KEDA_TIMEOUT_S = 600


def needs_gpu_operator(spec: Spec) -> bool:
    return gpu_operator_installed(spec)


def sharing_config(spec: Spec) -> str:
    """NVIDIA device-plugin sharing config: one GPU advertised as slices_per_gpu nvidia.com/gpu."""
    pool = spec.gpu_node_pool
    assert pool is not None
    key = "timeSlicing" if pool.gpu_sharing == "time-slicing" else "mps"
    return yaml.safe_dump({"version": "v1", "sharing": {key: {"resources": [
        {"name": naming.GPU_RESOURCE, "replicas": pool.slices_per_gpu}]}}}, sort_keys=False)


# Node Feature Discovery's worker labels the GPU nodes the operator's operands select on; the
# chart's default tolerations cover only nvidia.com/gpu and the control plane, so a GPU pool with
# another taint (AKS pools carry the spec's taints, e.g. sku=gpu:NoSchedule) would never be labelled.
NFD_DEFAULT_TOLERATIONS = [
    {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
    {"key": naming.GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"},
]


def driver_preinstalled(pool_cloud: Cloud) -> bool:
    """EKS's NVIDIA AMI ships the driver and the container toolkit: the operator leaves them.
    AKS: the program creates the GPU pool with gpuProfile.driver None (Microsoft's guidance for
    the GPU operator: skip the AKS driver install, since AKS' driver and the operator's are
    mutually exclusive), so the operator installs both. GKE installs its own and needs no operator."""
    return clusters.profile(pool_cloud.value).driver_on_node_image


def nfd_tolerations(spec: Spec) -> list[dict]:
    extra = [t for t in naming.gpu_tolerations_camel(spec) if t not in NFD_DEFAULT_TOLERATIONS]
    return [*NFD_DEFAULT_TOLERATIONS, *extra]


def gpu_operator_values(spec: Spec) -> dict:
    pool = spec.gpu_node_pool
    assert pool is not None
    preinstalled = driver_preinstalled(pool.cloud)
    values: dict = {
        "driver": {"enabled": not preinstalled},
        "toolkit": {"enabled": not preinstalled},
        "daemonsets": {"tolerations": naming.gpu_tolerations_camel(spec)},
        "node-feature-discovery": {"worker": {"tolerations": nfd_tolerations(spec)}},
    }
    if pool.gpu_sharing != "none":
        values["devicePlugin"] = {"config": {"name": SHARING_CONFIG, "default": "any"}}
    return values


def privileged_namespace(name: str) -> dict:
    """The GPU operator's operands mount host paths and run privileged: its namespace must admit
    them where Pod Security is enforced cluster-wide
    (https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/getting-started.html)."""
    return {"name": name, "labels": {**naming.labels("gpu-operator", name),
                                     "pod-security.kubernetes.io/enforce": "privileged"}}


@dataclass(frozen=True)
class PlatformAddonsArgs:
    spec: Spec


class PlatformAddonsComponent(pulumi.ComponentResource):
    def __init__(self, name: str, args: PlatformAddonsArgs,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("splitstack:infra:PlatformAddons", name, None, opts)
        spec = args.spec
        self.gpu_operator: k8s.helm.v3.Release | None = None
        self.keda: k8s.helm.v3.Release | None = None
        if needs_gpu_operator(spec):
            chart = clusters.chart(GPU_OPERATOR_CHART)
            ns = k8s.core.v1.Namespace(f"{name}-gpu-operator-ns",
                                       metadata=privileged_namespace(GPU_OPERATOR_NAMESPACE),
                                       opts=child(self))
            deps: list[pulumi.Resource] = [ns]
            if spec.gpu_node_pool and spec.gpu_node_pool.gpu_sharing != "none":
                deps.append(k8s.core.v1.ConfigMap(
                    f"{name}-gpu-sharing",
                    metadata={"name": SHARING_CONFIG, "namespace": GPU_OPERATOR_NAMESPACE,
                              "labels": naming.labels("gpu-operator", SHARING_CONFIG)},
                    data={"any": sharing_config(spec)},
                    opts=child(self, depends_on=[ns])))
            self.gpu_operator = k8s.helm.v3.Release(
                f"{name}-gpu-operator",
                name=GPU_OPERATOR_CHART, chart=GPU_OPERATOR_CHART, version=chart.version,
                repository_opts={"repo": chart.repo},
                namespace=GPU_OPERATOR_NAMESPACE, create_namespace=False,
                timeout=GPU_OPERATOR_TIMEOUT_S,
                values=gpu_operator_values(spec),
                opts=child(self, depends_on=deps),
            )
        if keda_installed(spec):
            chart = clusters.chart(KEDA_CHART)
            self.keda = k8s.helm.v3.Release(
                f"{name}-keda",
                name=KEDA_CHART, chart=KEDA_CHART, version=chart.version,
                repository_opts={"repo": chart.repo},
                namespace=naming.keda_namespace(spec), create_namespace=True,
                timeout=KEDA_TIMEOUT_S,
                opts=child(self),
            )
        self.register_outputs({})
