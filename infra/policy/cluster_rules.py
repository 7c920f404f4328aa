"""Cluster-fit and Pod Security policies over the rendered objects.

The spec comes from the objects themselves (the workers' spec ConfigMap holds the resolved
spec), so the pack checks what the program actually created against the cluster it names:
the spec-level rules of contract/cluster_fit.py, then each object: requests against the nodes'
allocatable, every claim's StorageClass and access mode, every custom resource's operator, a
ReadWriteOnce claim under more than one replica, feature floors, and the restricted Pod
Security profile. Violations name the spec field to change (annotation splitstack.dev/spec-path).
"""

from __future__ import annotations

import json
from typing import Any

from contract import clusters, naming
from contract.cluster_fit import check_cluster_fit, installed_charts, storage_class
from contract.cluster_placement import Pool, cpu_pool, gpu_pool
from contract.clusters import Resources
from contract.spec import Spec
from contract.spec_loader import SpecError, parse_spec
from infra.policy.objects import SPEC_PATH_ANNOTATION, Obj, containers, gpu_count, ident, pod_template

CHART_OF_OPERATOR = {"prometheus-operator": "kube-prometheus-stack", "keda": "keda"}


def spec_of(objs: list[Obj]) -> Spec | None:
    """The resolved spec the program wrote for the workers (ConfigMap worker-spec)."""
    for obj in objs:
        data = obj.get("data") or {}
        if obj.get("kind") == "ConfigMap" and naming.WORKER_SPEC_KEY in data:
            return parse_spec(json.loads(data[naming.WORKER_SPEC_KEY]))
    return None


def cpu_millicores(value: Any) -> int:
    text = str(value)
    return int(text[:-1]) if text.endswith("m") else int(float(text) * 1000)


UNITS = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024, "Ti": 1024 * 1024, "M": 1e6 / 2**20, "G": 1e9 / 2**20}


def memory_mib(value: Any) -> int:
    text = str(value)
    for unit, factor in UNITS.items():
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * factor)
    return int(int(text) / 2**20)


def pod_requests(pod: dict) -> Resources:
    """What the scheduler reserves: the containers' sum, or the largest init container."""
    def one(c: dict) -> Resources:
        req = (c.get("resources") or {}).get("requests") or {}
        return Resources(cpu_millicores(req.get("cpu", 0)), memory_mib(req.get("memory", 0)), 0)

    total = Resources()
    for c in pod.get("containers") or []:
        total = total + one(c)
    for c in pod.get("initContainers") or []:
        init = one(c)
        total = Resources(max(total.cpu_m, init.cpu_m), max(total.memory_mib, init.memory_mib), 0)
    return Resources(total.cpu_m, total.memory_mib, gpu_count(pod))


def _path(meta: dict, default: str) -> str:
    return (meta.get("annotations") or {}).get(SPEC_PATH_ANNOTATION, default)


def _requests_fit(objs: list[Obj], gpu: Pool | None, cpu: Pool | None) -> list[str]:
    out = []
    for obj in objs:
        found = pod_template(obj)
        if found is None:
            continue
        meta, pod = found
        req = pod_requests(pod)
        pool = gpu if req.gpus else cpu
        if pool is None or not pool.nodes:
            continue
        cap = pool.nodes[0].capacity
        if not cap.covers(req):
            out.append(
                f"{ident(obj)}: requests {req.text()} but a {pool.instance_type} node leaves "
                f"{cap.text()} after kubelet reservations and DaemonSets; the pod never "
                f"schedules: lower {_path(meta, 'its requests')}'s requests or choose a larger "
                "instance type (gpu_node_pool.instance_type)")
    return out


def _claims(spec: Spec, objs: list[Obj]) -> list[str]:
    """Every claim names a class the cluster has, with the access mode it asks for."""
    created = {o["metadata"]["name"] for o in objs if o.get("kind") == "StorageClass"}
    known = {c.name: c for c in clusters.storage(spec.gpu_node_pool.cloud.value).values()} \
        if spec.gpu_node_pool else {}
    declared = {c for c in (spec.cluster.storage_class, spec.cluster.shared_storage_class) if c}
    claims: list[tuple[str, dict]] = []
    for obj in objs:
        if obj.get("kind") == "PersistentVolumeClaim":
            claims.append((ident(obj), obj.get("spec") or {}))
        for t in (obj.get("spec") or {}).get("volumeClaimTemplates") or []:
            claims.append((f"{ident(obj)} volumeClaimTemplate {t['metadata']['name']}", t["spec"]))
        found = pod_template(obj)
        for v in (found[1].get("volumes") or []) if found else []:
            template = (v.get("ephemeral") or {}).get("volumeClaimTemplate")
            if template:
                claims.append((f"{ident(obj)} ephemeral volume {v['name']}", template["spec"]))
    out = []
    for where, claim in claims:
        name = claim.get("storageClassName")
        modes = claim.get("accessModes") or []
        if not name:
            out.append(f"{where}: no storageClassName: it falls to the cluster's default class, "
                       "which a new EKS cluster lacks and which nowhere provides ReadWriteMany; "
                       "name the class (cluster.storage_class / shared_storage_class)")
            continue
        fact = known.get(name)
        built_in = fact is not None and not fact.created_by_program
        if name not in created and not built_in and name not in declared:
            out.append(f"{where}: StorageClass {name!r} is neither created by the program, built "
                       "into the cloud (contract/clusters.yaml) nor declared in the spec; the "
                       "claim stays Pending: declare it in cluster.storage_class / "
                       "shared_storage_class")
        elif fact is not None and not set(modes) <= set(fact.access_modes):
            out.append(f"{where}: asks {modes} of {name!r} ({fact.provisioner}), which provides "
                       f"{fact.access_modes}; the claim stays Pending: use the "
                       f"{storage_class(spec, 'shared').name!r} class for ReadWriteMany")
    return out


def _shared_mounts(objs: list[Obj]) -> list[str]:
    """A ReadWriteOnce claim mounted by a Deployment that can run more than one pod."""
    rwo = {o["metadata"]["name"] for o in objs if o.get("kind") == "PersistentVolumeClaim"
           and (o.get("spec") or {}).get("accessModes") == ["ReadWriteOnce"]}
    ceilings = {(o.get("spec") or {}).get("scaleTargetRef", {}).get("name"):
                (o.get("spec") or {}).get("maxReplicaCount", 1)
                for o in objs if o.get("kind") == "ScaledObject"}
    out = []
    for obj in objs:
        if obj.get("kind") != "Deployment":
            continue
        name = obj["metadata"]["name"]
        most = max(int((obj.get("spec") or {}).get("replicas", 1)), int(ceilings.get(name, 1)))
        meta, pod = pod_template(obj)  # type: ignore[misc]
        for v in pod.get("volumes") or []:
            claim = (v.get("persistentVolumeClaim") or {}).get("claimName")
            if most > 1 and claim in rwo:
                out.append(f"{ident(obj)}: up to {most} pods mount the ReadWriteOnce claim "
                           f"{claim!r}; pods on a second node never attach it: "
                           f"{_path(meta, 'the workload')} needs a ReadWriteMany class "
                           "(cluster.shared_storage_class) or one replica")
    return out


def _custom_resources(spec: Spec, objs: list[Obj]) -> list[str]:
    provided: set[str] = set(spec.cluster.operators)
    charts = set(installed_charts(spec))
    provided |= {op for op, chart in CHART_OF_OPERATOR.items() if chart in charts}
    out = []
    for obj in objs:
        op = clusters.operator_of_kind(str(obj.get("kind")))
        if op is not None and op.name not in provided:
            out.append(f"{ident(obj)}: {op.api_group}/{obj.get('kind')} needs {op.name}, which "
                       f"the program does not install here and cluster.operators does not "
                       f"declare; `pulumi up` fails with 'no matches for kind': "
                       f"{op.installed_by}, or declare it")
    return out


def _features(spec: Spec, objs: list[Obj]) -> list[str]:
    version = spec.cluster.kubernetes_version
    floor = clusters.feature_floor("preStop.sleep")
    if clusters.minor(version) >= clusters.minor(floor):
        return []
    return [f"{ident(o)}: uses preStop.sleep, on by default from Kubernetes {floor}, on "
            f"cluster.kubernetes_version {version}: the pod is rejected; upgrade the cluster"
            for o in objs if (found := pod_template(o)) and any(
                ((c.get("lifecycle") or {}).get("preStop") or {}).get("sleep")
                for c in containers(found[1]))]


def cluster_fit(objs: list[Obj]) -> list[str]:
    """The objects fit the cluster the spec names: spec rules (contract/cluster_fit.py), pod
    requests against allocatable after DaemonSets, StorageClasses and access modes, operators of
    custom resources, ReadWriteOnce claims under several replicas, feature floors."""
    if not any(pod_template(o) for o in objs):
        return []
    try:
        spec = spec_of(objs)
    except (SpecError, ValueError) as exc:
        return [f"ConfigMap {naming.WORKER_NAME}-spec: the resolved spec does not parse: {exc}"]
    if spec is None:
        return [f"no ConfigMap with {naming.WORKER_SPEC_KEY}: the cluster-fit policy reads the "
                "resolved spec from it (WorkerPoolComponent writes it)"]
    out = [str(p) for p in check_cluster_fit(spec)]
    out += _requests_fit(objs, gpu_pool(spec), cpu_pool(spec))
    out += _claims(spec, objs) + _shared_mounts(objs) + _custom_resources(spec, objs)
    return out + _features(spec, objs)


ALLOWED_CAPABILITIES = {"NET_BIND_SERVICE"}


def pod_security(obj: Obj) -> list[str]:
    """Pods meet the restricted Pod Security profile (non-root, seccomp RuntimeDefault, no
    privilege escalation, every capability dropped, no host namespaces or paths) and do not
    mount a service-account token they never use."""
    found = pod_template(obj)
    if found is None:
        return []
    pod = found[1]
    psc = pod.get("securityContext") or {}
    where = ident(obj)
    out = []
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            out.append(f"{where}: {key} is true; restricted pods keep to their own namespaces")
    if any("hostPath" in v for v in pod.get("volumes") or []):
        out.append(f"{where}: mounts a hostPath volume, which the restricted profile forbids")
    if pod.get("automountServiceAccountToken") is not False:
        out.append(f"{where}: automountServiceAccountToken is not false; no container here "
                   "talks to the Kubernetes API: set it to false")
    for c in containers(pod):
        csc = c.get("securityContext") or {}
        name = f"{where} container {c.get('name')}"
        if not (csc.get("runAsNonRoot", psc.get("runAsNonRoot"))):
            out.append(f"{name}: runAsNonRoot is not true; set it (with a numeric runAsUser)")
        if csc.get("runAsUser", psc.get("runAsUser")) == 0:
            out.append(f"{name}: runAsUser 0 (root)")
        seccomp = (csc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"{name}: no seccompProfile RuntimeDefault; set it on the pod")
        if csc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{name}: allowPrivilegeEscalation is not false")
        if csc.get("privileged"):
            out.append(f"{name}: privileged")
        caps = csc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(f"{name}: capabilities.drop lacks ALL")
        extra = set(caps.get("add") or []) - ALLOWED_CAPABILITIES
        if extra:
            out.append(f"{name}: adds capabilities {sorted(extra)}")
    return out


def namespace_pod_security(objs: list[Obj]) -> list[str]:
    """Each namespace holding workloads enforces the restricted Pod Security profile."""
    namespaces = {o["metadata"]["name"]: o for o in objs if o.get("kind") == "Namespace"}
    used = {(o.get("metadata") or {}).get("namespace") for o in objs if pod_template(o)}
    out = []
    for ns in sorted(n for n in used if n):
        labels = ((namespaces.get(ns) or {}).get("metadata") or {}).get("labels") or {}
        if ns not in namespaces:
            continue  # not created by this stack
        if labels.get("pod-security.kubernetes.io/enforce") != naming.POD_SECURITY_LEVEL:
            out.append(f"Namespace {ns}: no pod-security.kubernetes.io/enforce: "
                       f"{naming.POD_SECURITY_LEVEL} label; Pod Security admission would admit "
                       "a root or privileged pod there")
    return out
