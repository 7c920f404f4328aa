"""kwok Node objects shaped like a stack's node pools, so the real scheduler decides what fits.

Each node's capacity is the machine's (contract/clusters.yaml); its allocatable is what the fit
model leaves for our pods: the machine's allocatable after the kubelet's reservations and the
eviction threshold, minus the cloud's DaemonSets (contract/cluster_placement.py, the numbers
`splitstack infra plan` prints). GPU nodes carry the spec's labels and taints, the pool label of
a managed cloud, and the labels and taints the cloud itself puts on its GPU nodes.
"""

from __future__ import annotations

from contract import naming
from contract.cluster_placement import Node, Pool, cloud_of, cpu_pool, gpu_pool
from contract.clusters import Instance
from contract.spec import Spec

# kwok manages the nodes that carry this label (its --manage-nodes-with-label-selector): change the
# value and the node's heartbeats stop, so the node controller marks it NotReady, as a node whose
# kubelet died.
MANAGED_LABEL, MANAGED_VALUE = "type", "kwok"
POOL_LABEL = "splitstack.dev/pool"  # gpu | cpu: what the end-to-end tests check placement by
DEFAULT_MAX_PODS = 110  # the kubelet's default --max-pods (GKE and AKS pools in our table)
# Labels each cloud puts on its GPU nodes (GKE and AKS from their node pools; NVIDIA's GPU feature
# discovery on every cloud that runs the operator).
CLOUD_GPU_LABELS = {
    "eks": lambda acc: {"eks.amazonaws.com/nodegroup": "gpu", "nvidia.com/gpu.present": "true"},
    "gke": lambda acc: {"cloud.google.com/gke-accelerator": acc, "cloud.google.com/gke-nodepool": "gpu"},
    "aks": lambda acc: {"kubernetes.azure.com/accelerator": "nvidia", "kubernetes.azure.com/agentpool": "gpu"},
}


class ShapeError(ValueError):
    """The stack cannot shape nodes; the message names the field and the fix."""


def _instance(pool: Pool, path: str) -> Instance:
    if pool.instance is None:
        raise ShapeError(
            f"{path}: instance type {pool.instance_type!r} is not in contract/clusters.yaml, so its "
            "CPU, memory and GPUs are unknown; shape the cluster from a stack on eks, gke or aks "
            "(`splitstack cluster up --shape dev`)")
    return pool.instance


def _quantities(cpu_m: int, memory_mib: int, gpus: int, pods: int) -> dict[str, str]:
    out = {"cpu": f"{cpu_m}m", "memory": f"{memory_mib}Mi", "pods": str(pods),
           "ephemeral-storage": "200Gi"}
    if gpus:
        out[naming.GPU_RESOURCE] = str(gpus)
    return out


def _node(name: str, pool: Pool, node: Node, spec: Spec, labels: dict[str, str],
          taints: list[dict]) -> dict:
    inst = _instance(pool, "gpu_node_pool.instance_type")
    region = spec.gpu_node_pool.region if spec.gpu_node_pool else ""
    cloud = cloud_of(spec)
    # The cloud's spelling of a first zone: us-central1-a (GKE), us-east-1a (EKS), 1 (AKS).
    zone = node.zone or {"gke": f"{region}-a", "eks": f"{region}a", "aks": "1"}.get(cloud, "local-a")
    gpus = node.capacity.gpus
    pods = inst.max_pods or DEFAULT_MAX_PODS
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64", MANAGED_LABEL: MANAGED_VALUE,
                "node.kubernetes.io/instance-type": inst.name,
                "topology.kubernetes.io/zone": zone,
                **({"topology.kubernetes.io/region": region} if region else {}),
                POOL_LABEL: pool.name, **labels,
            },
        },
        "spec": {"taints": taints} if taints else {},
        "status": {
            "capacity": _quantities(inst.vcpu * 1000, int(inst.memory_gib * 1024), gpus, pods),
            "allocatable": _quantities(node.capacity.cpu_m, node.capacity.memory_mib, gpus, pods),
            "phase": "Running",
        },
    }


def gpu_labels(spec: Spec) -> dict[str, str]:
    pool = spec.gpu_node_pool
    assert pool is not None
    cloud = cloud_of(spec)
    labels = dict(CLOUD_GPU_LABELS[cloud](pool.accelerator)) if cloud in CLOUD_GPU_LABELS else {}
    return {**labels, **naming.gpu_node_selector(spec)}


def gpu_taints(spec: Spec) -> list[dict]:
    """The spec's taints, and GKE's own nvidia.com/gpu=present:NoSchedule."""
    pool = spec.gpu_node_pool
    assert pool is not None
    taints = [{"key": t.key, **({"value": t.value} if t.value else {}), "effect": t.effect}
              for t in pool.taints]
    if pool.cloud.value == "gke" and not any(t["key"] == naming.GPU_RESOURCE for t in taints):
        taints.append({"key": naming.GPU_RESOURCE, "value": "present", "effect": "NoSchedule"})
    return taints


def shaped_nodes(spec: Spec) -> list[dict]:
    """Every node of the stack's pools: GPU nodes ``gpu-<i>``, CPU nodes ``cpu-<i>``."""
    gpu = gpu_pool(spec)
    if gpu is None:
        raise ShapeError(f"stack {spec.stack!r} has no gpu_node_pool: nothing to shape nodes from; "
                         "use a stack with one (dev, prod)")
    _instance(gpu, "gpu_node_pool.instance_type")
    out = [_node(f"gpu-{n.index}", gpu, n, spec, gpu_labels(spec), gpu_taints(spec))
           for n in gpu.nodes]
    cpu = cpu_pool(spec)
    if cpu is not None:
        out += [_node(f"cpu-{n.index}", cpu, n, spec, {}, []) for n in cpu.nodes]
    return out
