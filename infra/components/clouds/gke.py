"""GKE: a Dataplane V2 cluster (enforces NetworkPolicy) at the spec's Kubernetes version, a CPU
pool and a GPU pool with managed drivers, both in gpu_node_pool.zones; GPU sharing is native there
(gpu_sharing_config), no GPU operator needed. The Filestore CSI add-on is enabled when
something needs ReadWriteMany (its `standard-rwx` class)."""

from __future__ import annotations

import shutil
from collections.abc import Callable

import pulumi

from contract.cluster_fit import storage_class, storage_needs
from contract.cluster_placement import cpu_pool, pool_zones, zonal_location
from contract.naming import GPU_POOL_LABEL, GPU_RESOURCE
from contract.spec import Spec
from infra.components.clouds import (
    CPU_INSTANCE,
    GPU_DISK_GIB,
    ClusterOut,
    missing_sdk,
    require_region,
    taint_effect_enum,
)

SHARING = {"time-slicing": "TIME_SHARING", "mps": "MPS"}
FILESTORE_CLASS = "standard-rwx"


def kubeconfig(name: str, endpoint: str, ca: str) -> str:
    """Kubeconfig for the Pulumi provider; authenticates with gke-gcloud-auth-plugin."""
    return f"""apiVersion: v1
kind: Config
clusters:
- name: {name}
  cluster: {{server: "https://{endpoint}", certificate-authority-data: "{ca}"}}
contexts:
- name: {name}
  context: {{cluster: {name}, user: {name}}}
current-context: {name}
users:
- name: {name}
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      command: gke-gcloud-auth-plugin
      provideClusterInfo: true
"""


def required_apis(filestore: bool) -> list[str]:
    """Google APIs the program enables: Kubernetes Engine, and Filestore for standard-rwx."""
    return ["container.googleapis.com", *(["file.googleapis.com"] if filestore else [])]


AUTH_PLUGIN = "gke-gcloud-auth-plugin"


def check_auth_plugin(which: Callable[[str], str | None] = shutil.which) -> None:
    """The kubeconfig below runs the plugin: without it every Kubernetes call fails late."""
    if which(AUTH_PLUGIN) is None:
        raise RuntimeError(
            f"{AUTH_PLUGIN} is not on PATH: the GKE kubeconfig the program hands its Kubernetes "
            f"provider runs it; install it with `gcloud components install {AUTH_PLUGIN}` (Debian: "
            "`apt-get install google-cloud-cli-gke-gcloud-auth-plugin`) and run `pulumi up` again")


def preflight() -> None:
    """What `pulumi up` on GKE needs on this machine (infra/entry.py runs it first)."""
    check_auth_plugin()


def per_zone(total: int, zones: list[str]) -> int:
    """GKE's node_count is per zone of the pool's locations (spec rules make it divide)."""
    return total // len(zones) if zones else total


def create(parent: pulumi.Resource, name: str, spec: Spec) -> ClusterOut:
    try:
        import pulumi_gcp as gcp
    except ImportError:
        raise missing_sdk("gke", "pulumi-gcp") from None
    pool = spec.gpu_node_pool
    assert pool is not None
    region = require_region(pool)
    # A zone (us-central1-a) makes a zonal cluster; a region needs gpu_node_pool.zones, or
    # every pool would get node_count nodes in each of the region's zones.
    zones = pool_zones(spec)
    node_locations = zones if not zonal_location(spec) else None
    opts = pulumi.ResourceOptions(parent=parent)
    filestore = bool(storage_needs(spec)["shared"]) and \
        storage_class(spec, "shared").name == FILESTORE_CLASS
    # A new project has neither API on: enable them (and leave them on at `pulumi destroy`,
    # other things in the project may use them).
    services = [gcp.projects.Service(f"{name}-{api.split('.')[0]}-api", service=api,
                                     disable_on_destroy=False, opts=opts)
                for api in required_apis(filestore)]
    cluster = gcp.container.Cluster(
        f"{name}-cluster",
        location=region,
        node_locations=node_locations,
        # Pinned: the chart pins and feature floors are checked against it (contract/clusters.yaml).
        min_master_version=spec.cluster.kubernetes_version,
        remove_default_node_pool=True,
        initial_node_count=1,
        datapath_provider="ADVANCED_DATAPATH",
        # A version past GKE's standard support is served only on the Extended channel
        # (cluster.allow_extended_support, checked in contract/cluster_fit.py).
        release_channel={"channel": "EXTENDED"} if spec.cluster.allow_extended_support else None,
        addons_config={"gcp_filestore_csi_driver_config": {"enabled": filestore},
                       "gce_persistent_disk_csi_driver_config": {"enabled": True}},
        deletion_protection=False,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=services),
    )
    cpu_plan = cpu_pool(spec)
    assert cpu_plan is not None
    cpu = gcp.container.NodePool(
        f"{name}-cpu",
        cluster=cluster.name, location=region, node_locations=node_locations,
        node_count=cpu_plan.per_zone or cpu_plan.node_count,
        node_config={"machine_type": CPU_INSTANCE["gke"]},
        opts=opts,
    )
    accelerator: dict = {
        "type": pool.accelerator, "count": pool.gpus_per_node,
        "gpu_driver_installation_config": {"gpu_driver_version": "LATEST"},
    }
    if pool.gpu_sharing != "none":
        accelerator["gpu_sharing_config"] = {
            "gpu_sharing_strategy": SHARING[pool.gpu_sharing],
            "max_shared_clients_per_gpu": pool.slices_per_gpu,
        }
    gpu = gcp.container.NodePool(
        f"{name}-gpu",
        cluster=cluster.name, location=region, node_locations=node_locations,
        node_count=per_zone(pool.node_count, zones),
        node_config={
            "machine_type": pool.instance_type,
            "disk_size_gb": GPU_DISK_GIB,
            "guest_accelerators": [accelerator],
            "labels": {**pool.labels, GPU_POOL_LABEL: "true"},
            # GKE adds nvidia.com/gpu=present:NoSchedule to GPU nodes itself: only the others.
            "taints": [{"key": t.key, "value": t.value, "effect": taint_effect_enum(t.effect)}
                       for t in pool.taints
                       if not (t.key == GPU_RESOURCE and t.effect == "NoSchedule")],
        },
        opts=opts,
    )
    config = pulumi.Output.all(cluster.name, cluster.endpoint, cluster.master_auth).apply(
        lambda a: kubeconfig(a[0], a[1], a[2]["cluster_ca_certificate"]))
    return ClusterOut(kubeconfig=pulumi.Output.secret(config), name=cluster.name,
                      resources=[*services, cluster, cpu, gpu], storage_ready=[cpu])
