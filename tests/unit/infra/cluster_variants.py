"""Specs derived from the real Pulumi.dev.yaml / Pulumi.prod.yaml (never made up here): the
stack file as `pulumi up` reads it, with a few fields changed the way a user would."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml

from contract.spec import Spec
from contract.spec_loader import config_to_mapping, parse_spec, set_path, stack_file

from .infra_helpers import ROOT


def stack_raw(stack: str) -> dict[str, Any]:
    path = stack_file(stack, ROOT)
    raw = config_to_mapping(yaml.safe_load(path.read_text())["config"], str(path))
    raw["stack"] = stack
    return raw


def derive(stack: str, changes: dict[str, Any] | None = None,
           edit: Callable[[dict[str, Any]], None] | None = None) -> Spec:
    """The real stack with ``changes`` (dotted path -> value) and ``edit`` applied."""
    raw = copy.deepcopy(stack_raw(stack))
    for dotted, value in (changes or {}).items():
        set_path(raw, dotted, value)
    if edit is not None:
        edit(raw)
    return parse_spec(raw, f"Pulumi.{stack}.yaml (variant)")


def _existing_without_operators(raw: dict[str, Any]) -> None:
    pool = raw["gpu_node_pool"]
    pool.update(cloud="existing", instance_type="byo",
                labels={"nvidia.com/gpu.product": "NVIDIA-L40S"})
    pool.pop("region", None)
    raw.setdefault("observability", {})["install_kube_prometheus_stack"] = False


def _existing_rwo_only(raw: dict[str, Any]) -> None:
    """An existing cluster with its operators and a block class, but nothing ReadWriteMany."""
    _existing_without_operators(raw)
    raw["cluster"] = {"operators": ["prometheus-operator", "keda", "nvidia-device-plugin"],
                      "storage_class": "gp3"}
    raw["observability"]["install_kube_prometheus_stack"] = False
    raw.pop("output_store", None)


def _regional_gke(raw: dict[str, Any]) -> None:
    raw["gpu_node_pool"].pop("zones")


def _old_dev_defaults(raw: dict[str, Any]) -> None:
    """Pulumi.dev.yaml as it was: g6e.xlarge, no kube-prometheus-stack, Redis without AUTH."""
    raw["gpu_node_pool"]["instance_type"] = "g6e.xlarge"
    raw.pop("observability")
    raw["queue"].pop("password")


@dataclass(frozen=True)
class Variant:
    id: str
    stack: str
    changes: dict[str, Any]
    edit: Callable[[dict[str, Any]], None] | None
    path: str  # the field path the refusal must blame
    says: str  # a fragment of its message

    def spec(self) -> Spec:
        return derive(self.stack, self.changes, self.edit)


# Each is a way the real stacks break on a real cluster; each must be refused before `pulumi up`.
BROKEN: list[Variant] = [
    Variant("dev-small-instance-cpu", "dev", {"gpu_node_pool.instance_type": "g6e.xlarge"}, None,
            "inference_servers[0].cpu_millicores", "requests 6000m CPU but a g6e.xlarge node"),
    Variant("dev-small-instance-memory", "dev",
            {"gpu_node_pool.instance_type": "g6.xlarge", "gpu_node_pool.accelerator": "nvidia-l4",
             "gpu_node_pool.gpu_memory_gib": 24, "inference_servers.0.cpu_millicores": 3000},
            None, "inference_servers[0].memory_mib", "requests 18432 MiB but a g6.xlarge node"),
    Variant("dev-wrong-gpu-model", "dev", {"gpu_node_pool.accelerator": "nvidia-h100-80gb",
                                           "gpu_node_pool.gpu_memory_gib": 80}, None,
            "gpu_node_pool.accelerator", "carries nvidia-l40s"),
    Variant("dev-without-kube-prometheus-stack", "dev",
            {"observability.install_kube_prometheus_stack": False}, None,
            "observability.install_kube_prometheus_stack", "no matches for kind"),
    Variant("dev-old-kubernetes", "dev", {"cluster.kubernetes_version": "1.29"}, None,
            "cluster.kubernetes_version", "preStop.sleep"),
    Variant("dev-redis-without-auth", "dev", {"queue.password": None}, None,
            "queue.password", "without AUTH"),
    Variant("existing-without-operators", "dev", {}, _existing_without_operators,
            "cluster.operators", "nvidia-device-plugin is not declared"),
    Variant("existing-without-storage-classes", "dev", {}, _existing_without_operators,
            "cluster.storage_class", "need a ReadWriteOnce StorageClass"),
    Variant("prod-regional-gke", "prod", {}, _regional_gke,
            "gpu_node_pool.zones", "6 GPU nodes"),
    Variant("prod-2-server-replicas-3-nodes", "prod",
            {"inference_servers.0.replicas": 2, "gpu_node_pool.node_count": 3}, None,
            "gpu_node_pool.node_count", "multiple of 2"),
    Variant("existing-2-replicas-rwo-only", "dev",
            {"inference_servers.0.replicas": 2, "gpu_node_pool.node_count": 2}, _existing_rwo_only,
            "cluster.shared_storage_class", "(more than one replica)"),
]
