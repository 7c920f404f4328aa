"""Specs for every cloud x deployment mode, and the Pulumi mocks that capture objects (fixtures
are re-exported by conftest.py).

Each test builds the real program (infra.components.program.build) under
``pulumi.runtime.set_mocks`` and asserts inside ``apply`` once every resource is registered.
"""

from __future__ import annotations

import copy
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pulumi
import pytest
from google.protobuf import json_format

from contract.spec import Spec
from contract.spec_loader import parse_spec
from infra.render import CaptureMocks, PlainMockMonitor, install_mocks

ROOT = Path(__file__).resolve().parents[3]

CLOUD_POOLS: dict[str, dict[str, Any]] = {
    "eks": {"cloud": "eks", "region": "us-east-1", "instance_type": "g6e.2xlarge",
            "accelerator": "nvidia-l40s", "gpu_memory_gib": 48},
    "gke": {"cloud": "gke", "region": "us-central1", "instance_type": "a3-highgpu-1g",
            "accelerator": "nvidia-h100-80gb", "gpu_memory_gib": 80,
            "zones": ["us-central1-a", "us-central1-c"]},
    "aks": {"cloud": "aks", "region": "eastus", "instance_type": "Standard_NC24ads_A100_v4",
            "accelerator": "nvidia-a100-80gb", "gpu_memory_gib": 80},
    "existing": {"cloud": "existing", "instance_type": "byo", "accelerator": "nvidia-l40s",
                 "gpu_memory_gib": 48, "labels": {"nvidia.com/gpu.product": "NVIDIA-L40S"}},
}
# An existing cluster declares what it runs and its storage classes (contract/cluster_fit.py).
EXISTING_CLUSTER: dict[str, Any] = {
    "operators": ["prometheus-operator", "keda", "nvidia-device-plugin"],
    "storage_class": "fast-rwo", "shared_storage_class": "nfs-rwx"}
REDIS_PASSWORD = {"name": "splitstack-redis-auth", "key": "password",
                  "env": "SPLITSTACK_REDIS_PASSWORD"}
CLOUD_SDK = {"eks": "pulumi_eks", "gke": "pulumi_gcp", "aks": "pulumi_azure_native"}
MODES = ["split", "monolithic"]

BASE: dict[str, Any] = {
    "stack": "test",
    "target": "kubernetes",
    "namespace": "splitstack-test",
    "inference_servers": [{
        "name": "mineru-vlm",
        "model": {"name": "mineru-vlm", "source": "opendatalab/MinerU2.5-2509-1.2B",
                  "catalog_name": "MinerU2.5-2509-1.2B", "size_gib": 2.5, "vision": True},
        "gpu_memory_utilization": 0.5, "max_model_len": 16384, "max_num_seqs": 64,
        "startup_budget_s": 600,
        "api_key": {"name": "splitstack-api-key", "key": "api-key", "env": "SPLITSTACK_API_KEY"},
        "hf_token": {"name": "splitstack-hf-token", "key": "token", "env": "HF_TOKEN"},
    }],
    "worker_pool": {"replicas": 1, "max_replicas": 2, "concurrency_per_worker": 16},
    "queue": {"password": REDIS_PASSWORD},
    # A cluster stack that installs Alertmanager must page someone and feed a dead man's switch.
    "observability": {"install_kube_prometheus_stack": True, "alertmanager": {"receivers": {
        "page": [{"kind": "webhook", "url": "http://pager-relay.monitoring.svc:8080/page"}],
        "watchdog": [{"kind": "webhook", "url": "http://pager-relay.monitoring.svc:8080/watchdog"}]}}},
    # 1.33 (the default; the pinned GPU operator's newest) is past standard support everywhere.
    "cluster": {"allow_extended_support": True},
}


def cloud_params() -> list[Any]:
    out = []
    for cloud in CLOUD_POOLS:
        sdk = CLOUD_SDK.get(cloud)
        missing = sdk is not None and importlib.util.find_spec(sdk) is None
        for mode in MODES:
            marks = [pytest.mark.skip(reason=f"{sdk} not installed (extra infra-{cloud})")] if missing else []
            out.append(pytest.param(cloud, mode, id=f"{cloud}-{mode}", marks=marks))
    return out


CLOUD_MODES = cloud_params()


def make_raw(cloud: str = "existing", mode: str = "split") -> dict[str, Any]:
    raw = copy.deepcopy(BASE)
    # Two GPU nodes: room for the monolithic workers' ceiling, and a free GPU in split mode so
    # the server's KEDA scaler (vLLM queue on model_name) is rendered too.
    raw["gpu_node_pool"] = {**copy.deepcopy(CLOUD_POOLS[cloud]), "node_count": 2}
    raw["deployment_mode"] = mode
    if cloud == "existing":
        raw["cluster"] = copy.deepcopy(EXISTING_CLUSTER)
        raw["observability"] = {"install_kube_prometheus_stack": False}
    return raw


def make_spec(cloud: str = "existing", mode: str = "split", **top: Any) -> Spec:
    raw = make_raw(cloud, mode)
    raw.update(top)
    return parse_spec(raw)


@pytest.fixture
def mocks() -> CaptureMocks:
    m = CaptureMocks()
    install_mocks(m, "test")
    return m


@pytest.fixture
def after_build() -> Callable[..., pulumi.Output]:
    """after_build(deployment, check): run check() once every resource of it is registered."""

    def run(deployment: Any, check: Callable[[], None]) -> pulumi.Output:
        urns = [r.urn for r in deployment.resources()]
        for pool in (r for r in deployment.roots if hasattr(r, "cloud_resources")):
            urns += [r.urn for r in pool.cloud_resources]
        return pulumi.Output.all(*urns).apply(lambda _: check())

    return run


class RecordingMonitor(PlainMockMonitor):
    """Keeps each resource's wire inputs (secrets still wrapped) and, by (type, name), its
    dependencies (a component and its Deployment share a name)."""

    def __init__(self, mocks: CaptureMocks) -> None:
        super().__init__(mocks)
        self.wire: dict[str, dict[str, Any]] = {}
        self.dependencies: dict[tuple[str, str], list[str]] = {}
        self.urns: dict[str, str] = {}

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802  (overrides the gRPC method of that name)
        self.wire[request.name] = json_format.MessageToDict(request.object)
        self.dependencies[(request.type, request.name)] = list(request.dependencies)
        response = super().RegisterResource(request)
        self.urns[request.name] = response.urn
        return response
