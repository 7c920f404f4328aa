"""Typed view of clusters.yaml: machine types per cloud, what a node keeps for itself, storage
classes, operators and pinned charts, and the allocatable math on top of them.

The numbers live in the YAML file next to their sources; this module only parses, looks up and
computes, so a reviewer checks a constant in one place and the arithmetic in another.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import date
from functools import cache, lru_cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field

from contract.models import Strict

DATA_FILE = Path(__file__).with_name("clusters.yaml")


class Instance(Strict):
    name: str = Field(description="Machine type as the cloud spells it.")
    cloud: str = Field(description="eks, gke or aks.")
    vcpu: int = Field(gt=0, description="vCPUs (hyperthreads).")
    memory_gib: float = Field(gt=0, description="Memory, GiB.")
    gpus: int = Field(default=0, ge=0, description="GPUs on one machine.")
    accelerator: str | None = Field(default=None, description="GPU model (GKE accelerator name).")
    gpu_memory_gib: float | None = Field(default=None, description="Memory of one GPU, GB.")
    max_pods: int | None = Field(default=None, description="Pods per node (EKS ENI limit).")
    source: str = Field(description="Where the numbers come from.")


class StorageClassFact(Strict):
    name: str = Field(description="StorageClass name.")
    provisioner: str = Field(description="CSI driver.")
    access_modes: list[str] = Field(description="Access modes the driver provides.")
    created_by_program: bool = Field(description="True: the Pulumi program creates it.")
    min_gib: int = Field(ge=1, description="Smallest volume the class provisions, GiB.")
    expandable: bool = Field(default=True, description="Claims of this class can grow.")
    source: str = Field(description="Where this comes from.")


class Chart(Strict):
    name: str = Field(description="Helm chart name.")
    version: str = Field(description="Pinned chart version.")
    repo: str = Field(description="Helm repository URL.")
    kubernetes: tuple[str, str | None] = Field(
        description="Oldest and newest Kubernetes minor the release supports (None: no ceiling).")
    operator: str | None = Field(
        default=None, description="The Prometheus operator release the chart ships (appVersion).")
    crds_chart: str | None = Field(
        default=None, description="The chart that installs this chart's CRDs instead of it.")
    source: str = Field(description="Where the supported range comes from.")


class Operator(Strict):
    name: str
    kinds: list[str]
    api_group: str
    installed_by: str


@dataclass(frozen=True)
class Resources:
    """CPU (millicores), memory (MiB) and GPUs of a pod or a node."""

    cpu_m: int = 0
    memory_mib: int = 0
    gpus: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.cpu_m + other.cpu_m, self.memory_mib + other.memory_mib,
                         self.gpus + other.gpus)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.cpu_m - other.cpu_m, self.memory_mib - other.memory_mib,
                         self.gpus - other.gpus)

    def covers(self, other: Resources) -> bool:
        return (self.cpu_m >= other.cpu_m and self.memory_mib >= other.memory_mib
                and self.gpus >= other.gpus)

    def text(self) -> str:
        gpus = f", {self.gpus} GPU" if self.gpus else ""
        return f"{self.cpu_m}m CPU, {self.memory_mib / 1024:.1f} GiB{gpus}"


@lru_cache(maxsize=1)
def _data() -> dict[str, Any]:
    with open(DATA_FILE, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


@cache
def instances(cloud: str) -> dict[str, Instance]:
    rows = _data()["instances"].get(cloud, {})
    return {name: Instance(name=name, cloud=cloud, **row) for name, row in rows.items()}


def instance(cloud: str, name: str) -> Instance | None:
    return instances(cloud).get(name)


def storage(cloud: str) -> dict[str, StorageClassFact]:
    """``{"block": ..., "shared": ...}`` for a managed cloud; empty for 'existing'."""
    return {kind: StorageClassFact(**row) for kind, row in _data()["storage"].get(cloud, {}).items()}


def chart(name: str) -> Chart:
    row = dict(_data()["charts"][name])
    low, high = row.pop("kubernetes")
    return Chart(name=name, kubernetes=(str(low), None if high is None else str(high)), **row)


@lru_cache(maxsize=1)
def operators() -> dict[str, Operator]:
    return {name: Operator(name=name, **row) for name, row in _data()["operators"].items()}


def operator_of_kind(kind: str) -> Operator | None:
    return next((o for o in operators().values() if kind in o.kinds), None)


class Prerequisite(Strict):
    what: str = Field(description="What must hold before `pulumi up`.")
    how: str = Field(default="", description="The command that checks or provides it.")
    binary: str | None = Field(default=None, description="A program that must be on PATH here.")
    only_if: Literal["shared_storage"] | None = Field(
        default=None, description="Listed only when the stack needs a ReadWriteMany class.")


class ExcludedZones(Strict):
    zone_ids: dict[str, list[str]] = Field(
        description="Region -> zone IDs where the cloud refuses control-plane subnets ({}: none).")
    source: str = Field(description="Where this comes from, or why the cloud has none.")


class CloudProfile(Strict):
    """What the code knows about one cloud (contract/clusters.yaml `profiles`)."""

    cloud: str
    cpu_instance: str | None = Field(description="Machine type of the CPU pool the program creates.")
    reservation_formula: Literal["nodeadm", "gke-tiers", "aks-points"] | None = Field(
        description="How the kubelet's reservations are computed (`reservations`).")
    gpu_stack: Literal["gpu-operator", "cloud", "declared"] = Field(
        description="Who provides the GPU driver and device plugin: the GPU operator the program "
        "installs, the cloud itself, or what cluster.operators declares.")
    driver_on_node_image: bool = Field(description="The GPU node image has the driver and toolkit.")
    taints_gpu_nodes_itself: bool = Field(description="The cloud taints GPU nodes nvidia.com/gpu.")
    zones_when_unset: str = Field(description="Where nodes go without gpu_node_pool.zones (plan).")
    zone_pattern: str | None = Field(
        description="Regular expression a zone name of the cloud matches ({region}: the pool's "
        "region); None: the program creates no nodes, so zones must not be set.")
    zone_example: str | None = Field(description="A zone name the messages suggest ({region}).")
    zonal_location_pattern: str | None = Field(
        description="Regular expression of a location (gpu_node_pool.region) that is itself one "
        "zone, where the cluster and its pools live (GKE's zonal clusters); None: none is.")
    zones_unset_note: str | None = Field(
        description="What `infra plan` warns of when gpu_node_pool.zones is empty (None: nothing).")
    node_count_per_zone: bool = Field(
        description="gpu_node_pool.node_count counts nodes in each listed zone (GKE regional pools).")
    control_plane_excluded_zones: ExcludedZones = Field(
        description="Zones the cloud will not put a control plane in (stated for every cloud).")

    def zone_matches(self, zone: str, region: str) -> bool:
        if self.zone_pattern is None:
            return False
        return re.fullmatch(self.zone_pattern.replace("{region}", re.escape(region)), zone) is not None

    def zonal_location(self, region: str) -> bool:
        return (self.zonal_location_pattern is not None
                and re.fullmatch(self.zonal_location_pattern, region) is not None)

    def example_zone(self, region: str) -> str:
        return (self.zone_example or "").replace("{region}", region)


# The clouds whose clusters the program creates: those whose profile names a CPU machine.
MANAGED_CLOUDS = tuple(c for c, row in _data()["profiles"].items() if row.get("cpu_instance"))


def profile(cloud: str) -> CloudProfile:
    rows = _data()["profiles"]
    if cloud not in rows:
        raise KeyError(f"contract/clusters.yaml has no profile for cloud {cloud!r}; known: "
                       f"{', '.join(rows)}")
    return CloudProfile(cloud=cloud, **rows[cloud])


def standard_support_ends(cloud: str) -> dict[str, date]:
    """Kubernetes minor -> last day of the cloud's standard support (managed clouds)."""
    row = _data()["kubernetes_versions"].get(cloud)
    if row is None:
        raise KeyError(f"contract/clusters.yaml has no kubernetes_versions for cloud {cloud!r}")
    return {str(v): d for v, d in row["standard_support_ends"].items()}


def versions_source(cloud: str) -> str:
    return str(_data()["kubernetes_versions"][cloud]["source"])


def excluded_zone_ids(cloud: str, region: str) -> list[str]:
    """Zone IDs of ``region`` where ``cloud`` refuses control-plane subnets, from the cloud's
    profile (none where the region is not listed; a cloud without a profile is an error)."""
    return list(profile(cloud).control_plane_excluded_zones.zone_ids.get(region, []))


def prerequisites(cloud: str) -> list[Prerequisite]:
    rows = _data()["prerequisites"]
    if cloud not in rows:
        raise KeyError(f"contract/clusters.yaml has no prerequisites for cloud {cloud!r}")
    return [Prerequisite(**row) for row in rows[cloud]]


def feature_floor(feature: str) -> str:
    return str(_data()["features"][feature]["kubernetes"])


def minor(version: str) -> tuple[int, int]:
    """'1.33' or 'v1.33.2' -> (1, 33)."""
    major, minor_, *_ = version.lstrip("v").split(".")
    return int(major), int(minor_)


def in_range(version: str, low: str, high: str | None) -> bool:
    return minor(low) <= minor(version) and (high is None or minor(version) <= minor(high))


def _tiers(total: float, tiers: list[list[Any]]) -> float:
    """Sum of fraction x the part of ``total`` inside each successive tier (None: the rest)."""
    reserved, start = 0.0, 0.0
    for size, fraction in tiers:
        end = math.inf if size is None else start + size
        reserved += max(0.0, min(total, end) - start) * fraction
        start = end
    return reserved


def _interpolate(x: float, points: list[list[float]]) -> float:
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    (x0, y0), (x1, y1) = points[-2], points[-1]
    return y1 + (y1 - y0) * (x - x1) / (x1 - x0)  # past the table: extend the last slope


def reserved(inst: Instance) -> Resources:
    """kube-reserved CPU and memory plus the hard memory eviction threshold of one node, by the
    formula the cloud's profile names (no default: a cloud without one is an error)."""
    formula = profile(inst.cloud).reservation_formula
    if formula is None:
        raise KeyError(f"cloud {inst.cloud!r} has no reservation formula in contract/clusters.yaml")
    r = _data()["reservations"][inst.cloud]
    cores = inst.vcpu
    if formula == "nodeadm":  # EKS nodeadm: CPU tiers, 11 MiB x max pods + 255 MiB
        cpu = _tiers(cores, r["cpu_tiers"]) * 1000
        memory = r["memory_per_pod_mib"] * (inst.max_pods or 110) + r["memory_base_mib"]
    elif formula == "gke-tiers":
        cpu = _tiers(cores, r["cpu_tiers"]) * 1000
        memory = _tiers(inst.memory_gib, r["memory_tiers_gib"]) * 1024
    else:  # aks-points; memory in MB as the page states them, converted to MiB
        cpu = _interpolate(cores, r["cpu_points_millicores"])
        by_pods = (r["memory_per_pod_mb"] * r["max_pods"] + r["memory_base_mb"]) * 1e6 / 2**20
        memory = min(by_pods, inst.memory_gib * 1024 * r["memory_max_fraction"])
    return Resources(math.ceil(cpu), math.ceil(memory + r["eviction_mib"]), 0)


def allocatable(inst: Instance) -> Resources:
    total = Resources(inst.vcpu * 1000, int(inst.memory_gib * 1024), inst.gpus)
    return total - reserved(inst)


DaemonSetKind = Literal["eks", "gke", "aks", "existing", "gpu_operator", "node_exporter"]


def daemonset_requests(kind: DaemonSetKind) -> Resources:
    row = _data()["daemonsets"][kind]
    return Resources(int(row["cpu_millicores"]), int(row["memory_mib"]), 0)


def daemonset_source(kind: DaemonSetKind) -> str:
    return str(_data()["daemonsets"][kind]["source"])
