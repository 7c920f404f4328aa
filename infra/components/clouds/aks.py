"""AKS: a cluster (Azure CNI + Cilium enforce NetworkPolicy) at the spec's Kubernetes version with
a system CPU pool and a GPU user pool with an explicit taint (AKS does not taint GPU nodes by
itself), both in gpu_node_pool.zones when given. Storage is built in: managed-csi (Azure Disk,
ReadWriteOnce) and azurefile-csi (Azure Files, ReadWriteMany)."""

from __future__ import annotations

import base64

import pulumi

from contract.cluster_placement import cpu_node_count
from contract.naming import GPU_POOL_LABEL
from contract.spec import Spec
from infra.components.clouds import (
    CPU_INSTANCE,
    GPU_DISK_GIB,
    ClusterOut,
    missing_sdk,
    require_region,
    taint_text,
)


def create(parent: pulumi.Resource, name: str, spec: Spec) -> ClusterOut:
    try:
        import pulumi_azure_native as az
    except ImportError:
        raise missing_sdk("aks", "pulumi-azure-native") from None
    pool = spec.gpu_node_pool
    assert pool is not None
    region = require_region(pool)
    opts = pulumi.ResourceOptions(parent=parent)
    group = az.resources.ResourceGroup(f"{name}-rg", location=region, opts=opts)
    zones = list(pool.zones) or None
    version = spec.cluster.kubernetes_version
    cluster = az.containerservice.ManagedCluster(
        f"{name}-cluster",
        resource_group_name=group.name,
        location=region,
        # Pinned: the chart pins and feature floors are checked against it (contract/clusters.yaml).
        kubernetes_version=version,
        dns_prefix=f"{spec.namespace}-{spec.stack}",
        identity={"type": "SystemAssigned"},
        network_profile={"network_plugin": "azure", "network_plugin_mode": "overlay",
                         "network_dataplane": "cilium", "network_policy": "cilium"},
        agent_pool_profiles=[{
            "name": "system", "mode": "System", "vm_size": CPU_INSTANCE["aks"],
            "count": cpu_node_count(spec), "os_type": "Linux",
            "orchestrator_version": version, "availability_zones": zones,
        }],
        opts=opts,
    )
    gpu = az.containerservice.AgentPool(
        f"{name}-gpu",
        agent_pool_name="gpu",
        resource_group_name=group.name,
        resource_name_=cluster.name,
        mode="User",
        vm_size=pool.instance_type,
        count=pool.node_count,
        availability_zones=zones,
        orchestrator_version=version,
        os_type="Linux",
        os_disk_size_gb=GPU_DISK_GIB,
        node_labels={**pool.labels, GPU_POOL_LABEL: "true"},
        node_taints=[taint_text(t) for t in pool.taints],
        # No AKS GPU driver: the GPU operator installs the driver and the container toolkit
        # (Microsoft's "Use NVIDIA GPU Operator with AKS": skip the AKS driver install; the two
        # are mutually exclusive). The API's gpuProfile.driver, the CLI's --gpu-driver none.
        gpu_profile={"driver": "None"},
        opts=opts,
    )
    creds = az.containerservice.list_managed_cluster_user_credentials_output(
        resource_group_name=group.name, resource_name=cluster.name)
    config = creds.kubeconfigs.apply(lambda k: base64.b64decode(k[0].value).decode())
    return ClusterOut(kubeconfig=pulumi.Output.secret(config), name=cluster.name,
                      resources=[group, cluster, gpu], storage_ready=[cluster])
