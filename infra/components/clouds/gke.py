"""GKE: a Dataplane V2 cluster (enforces NetworkPolicy), a CPU pool and a GPU pool with managed
drivers; GPU sharing is native there (gpu_sharing_config), no GPU operator needed."""

from __future__ import annotations

import pulumi

from contract.naming import GPU_POOL_LABEL
from contract.spec import Spec
from infra.components.clouds import (
    CPU_INSTANCE,
    GPU_DISK_GIB,
    ClusterOut,
    cpu_node_count,
    missing_sdk,
    require_region,
    taint_effect_enum,
)

SHARING = {"time-slicing": "TIME_SHARING", "mps": "MPS"}


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


def create(parent: pulumi.Resource, name: str, spec: Spec) -> ClusterOut:
    try:
        import pulumi_gcp as gcp
    except ImportError:
        raise missing_sdk("gke", "pulumi-gcp") from None
    pool = spec.gpu_node_pool
    assert pool is not None
    region = require_region(pool)
    opts = pulumi.ResourceOptions(parent=parent)
    cluster = gcp.container.Cluster(
        f"{name}-cluster",
        location=region,
        remove_default_node_pool=True,
        initial_node_count=1,
        datapath_provider="ADVANCED_DATAPATH",
        deletion_protection=False,
        opts=opts,
    )
    w = spec.worker_pool
    cpu = gcp.container.NodePool(
        f"{name}-cpu",
        cluster=cluster.name, location=region,
        node_count=cpu_node_count(w.cpu_millicores, w.max_replicas or w.replicas),
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
        cluster=cluster.name, location=region, node_count=pool.node_count,
        node_config={
            "machine_type": pool.instance_type,
            "disk_size_gb": GPU_DISK_GIB,
            "guest_accelerators": [accelerator],
            "labels": {**pool.labels, GPU_POOL_LABEL: "true"},
            "taints": [{"key": t.key, "value": t.value, "effect": taint_effect_enum(t.effect)}
                       for t in pool.taints],
        },
        opts=opts,
    )
    config = pulumi.Output.all(cluster.name, cluster.endpoint, cluster.master_auth).apply(
        lambda a: kubeconfig(a[0], a[1], a[2]["cluster_ca_certificate"]))
    return ClusterOut(kubeconfig=pulumi.Output.secret(config), name=cluster.name,
                      resources=[cluster, cpu, gpu])
