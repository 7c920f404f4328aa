"""`splitstack infra plan`: what `pulumi up` would create, for a person to check before paying.

Nodes by zone with what each keeps for itself and which pods land on it (contract's placement,
the same arithmetic the program sizes its pools with), GPUs, storage, operators and charts,
images and the cloud resources, from the program run under mocks. A spec that does not fit its
cluster gets the placement and the problems, and no render.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contract import clusters, naming, sizing
from contract.cluster_fit import (
    FitProblem,
    check_cluster_fit,
    installed_charts,
    prometheus_storage,
    scalers,
    storage_class,
    storage_needs,
    today,
    version_table,
)
from contract.cluster_placement import Pool, cloud_of, cpu_pool, gpu_pool, managed, zonal_location
from contract.outputs import store_root
from contract.spec import Spec
from infra import reachability
from infra.components.prometheus_crds import PATCH_FORCE, crds_chart
from infra.render import Capture, capture


@dataclass
class Plan:
    spec: Spec
    problems: list[FitProblem]
    pools: list[Pool]
    capture: Capture | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return not self.problems


def build_plan(spec: Spec, root: Path) -> Plan:
    problems = check_cluster_fit(spec)
    pools = [p for p in (gpu_pool(spec), cpu_pool(spec)) if p is not None]
    plan = Plan(spec, problems, pools)
    if not problems:
        plan.capture = capture(spec, root)
        missed = unselected_monitors(plan)
        if missed:
            plan.problems.append(FitProblem("observability.monitor_labels", (
                f"the installed Prometheus' selectors do not match {', '.join(missed)}: they "
                "would never be scraped or evaluated; set monitor_labels to what it selects")))
    pool = spec.gpu_node_pool
    if pool is not None and pool.cloud.value == "existing":
        plan.notes.append(
            "cloud 'existing': the program creates no nodes; GPU pods select "
            f"{pool.labels or '(no labels: any GPU node)'} and the fit of instance type "
            f"{pool.instance_type!r} is not checked (not in contract/clusters.yaml)")
    if spec.deployment_mode.value == "monolithic":
        w = spec.worker_pool
        plan.notes.append(
            f"deployment_mode monolithic: no inference server Deployment; each worker-gpu pod "
            f"({w.in_process.image}:{w.in_process.image_tag}) loads "
            f"{w.in_process.model_path or spec.worker_server.model.source} in-process with "
            f"backend {w.in_process.backend.value} on one GPU; their model and compile cache is "
            f"one {'ReadWriteMany' if sizing.worker_cache_shared(spec) else 'ReadWriteOnce'} claim "
            "that outlives the pods (a restart neither downloads nor compiles again); a "
            "PodDisruptionBudget lets a drain take one worker at a time")
    note = clusters.profile(pool.cloud.value).zones_unset_note if pool is not None else None
    if pool is not None and note and not pool.zones:
        plan.notes.append(f"{pool.cloud.value} without gpu_node_pool.zones ({pool.instance_type}): "
                          f"{note}")
    if spec.observability.install_kube_prometheus_stack:
        plan.notes.append(crd_upgrade_note())
    if managed(spec):
        plan.notes.append(
            f"Kubernetes {spec.cluster.kubernetes_version} is pinned at creation; a managed "
            "cluster's upgrade channel may move it later: run `splitstack spec validate` again "
            "before upgrading the charts or the cluster")
    return plan


def crd_upgrade_note() -> str:
    """How the Prometheus operator's CRDs are installed and upgraded (infra/components/prometheus_crds.py)."""
    stack = clusters.chart("kube-prometheus-stack")
    crds = crds_chart()
    return (f"Prometheus operator CRDs: {crds.name} {crds.version} (operator {crds.operator}, the "
            f"operator of {stack.name} {stack.version}) rendered by Pulumi, each CRD applied "
            f"server-side with {PATCH_FORCE} (a conflict with another field manager, such as an "
            "earlier Helm install, is overridden) and "
            f"retained on delete; {stack.name} installs none (skip_crds, crds.enabled false), "
            "since Helm never upgrades a chart's CRDs. A bump of both pins in "
            "contract/clusters.yaml upgrades the CRDs in the same `pulumi up`, before the release")


def _res(r: clusters.Resources) -> str:
    return f"{r.cpu_m}m CPU, {r.memory_mib / 1024:.1f} GiB" + (f", {r.gpus} GPU" if r.gpus else "")


def _zones_line(spec: Spec, pool: Pool) -> str:
    cloud = cloud_of(spec)
    per_zone = clusters.profile(cloud).node_count_per_zone
    if per_zone and not pool.zones and not zonal_location(spec):
        return (f"{pool.node_count} node(s) in EACH zone the regional cluster picks (3 in most "
                f"regions): {3 * pool.node_count} nodes, not {pool.node_count}")
    if not pool.zones:
        where = clusters.profile(cloud).zones_when_unset
        return f"{pool.node_count} node(s) in {where}"
    if pool.per_zone is not None:
        return (f"{pool.per_zone} node(s) in EACH of {', '.join(pool.zones)} = {pool.node_count} "
                f"({cloud} counts node_count per zone of a regional pool)")
    return f"{pool.node_count} node(s) spread over {', '.join(pool.zones)}"


def _pool_lines(spec: Spec, pool: Pool) -> list[str]:
    inst = pool.instance
    head = f"  {pool.name} pool: {pool.instance_type} x {pool.node_count}"
    if pool.name == "gpu" and spec.gpu_node_pool is not None:
        g = spec.gpu_node_pool
        head += (f" = {pool.node_count * g.gpus_per_node} x {g.accelerator} "
                 f"({g.gpu_memory_gib:g} GiB each)")
    lines = [head, f"    zones: {_zones_line(spec, pool)}"]
    if inst is None:
        return lines + ["    per node: unknown machine type, fit not checked"]
    lines.append(f"    per node: {inst.vcpu} vCPU, {inst.memory_gib:g} GiB, {inst.gpus} GPU; kubelet "
                 f"keeps {_res(pool.reserved)}; DaemonSets {_res(pool.daemonsets)}; "
                 f"left for our pods {_res(pool.nodes[0].capacity) if pool.nodes else '-'}")
    for node in pool.nodes:
        where = f" ({node.zone})" if node.zone else ""
        pods = Counter(p.who.split(" replica ")[0].split(" worker ")[0].split(" pod ")[0]
                       for p in node.pods)
        who = ", ".join(f"{n} x {name}" for name, n in pods.items()) or "(spare)"
        lines.append(f"    node {node.index + 1}{where}: {who}; free {_res(node.free)}")
    for pod in pool.unplaced:
        lines.append(f"    UNSCHEDULABLE: {pod.who} ({_res(pod.requests)})")
    return lines


def _objects(plan: Plan, kind: str) -> list[dict[str, Any]]:
    assert plan.capture is not None
    return [o for o in plan.capture.objects if o.get("kind") == kind]


def _storage_lines(plan: Plan) -> list[str]:
    spec = plan.spec
    lines = []
    for kind, who in storage_needs(spec).items():
        if not who:
            continue
        choice = storage_class(spec, kind)
        fact = choice.fact
        origin = ("created by the program" if fact and fact.created_by_program
                  else "built into the cloud" if fact else "declared in cluster.*storage_class")
        lines.append(f"  {kind} class {choice.name} ({fact.provisioner if fact else '?'}, {origin})"
                     f": {'; '.join(who)}")
    store = spec.output_store
    if store.kind == "s3":
        creds = (f"keys from Secret {store.access_key_id.name!r}" if store.access_key_id
                 else "the pod's default credentials (IRSA / workload identity)")
        lines.append(f"  outputs: bucket {store_root(spec)}/ through "
                     f"{store.endpoint_url or 'AWS S3'} ({creds}); no volume; the bucket must "
                     "exist (the program does not create it)")
    if plan.capture is not None:
        for pvc in _objects(plan, "PersistentVolumeClaim"):
            s = pvc["spec"]
            size = s["resources"]["requests"]["storage"]
            raised = ""
            if pvc["metadata"]["name"] == "splitstack-outputs" and size != f"{spec.output_store.size_gib}Gi":
                raised = (f" (output_store.size_gib {spec.output_store.size_gib} raised to the "
                          "class's smallest volume)")
            lines.append(f"  PVC {pvc['metadata']['name']}: {size} "
                         f"{'/'.join(s['accessModes'])} on {s.get('storageClassName')}{raised}")
        for sts in _objects(plan, "StatefulSet"):
            for t in sts["spec"].get("volumeClaimTemplates") or []:
                s = t["spec"]
                lines.append(f"  PVC {t['metadata']['name']}-{sts['metadata']['name']}-0: "
                             f"{s['resources']['requests']['storage']} "
                             f"{'/'.join(s['accessModes'])} on {s.get('storageClassName')}")
    return lines


def _release_values(plan: Plan, chart: str) -> dict[str, Any] | None:
    assert plan.capture is not None
    for r in plan.capture.mocks.helm_releases:
        if r.get("chart") == chart:
            return r.get("values") or {}
    return None


def _persistence_lines(plan: Plan) -> list[str]:
    """Prometheus' and Alertmanager's volumes, from the rendered chart values, with the formula."""
    spec = plan.spec
    o = spec.observability
    tsdb = prometheus_storage(spec)
    if not o.install_kube_prometheus_stack:
        return [f"  Prometheus: not installed by the program; yours ({naming.prometheus_url(spec)}) "
                f"must keep {o.retention_h} h on a persistent volume: {tsdb.formula(spec)}"]
    if plan.capture is None:
        return []
    values = _release_values(plan, "kube-prometheus-stack") or {}
    prom = values.get("prometheus", {}).get("prometheusSpec", {})
    claim = (prom.get("storageSpec") or {}).get("volumeClaimTemplate", {}).get("spec", {})
    am = (values.get("alertmanager", {}).get("alertmanagerSpec", {}).get("storage") or {}
          ).get("volumeClaimTemplate", {}).get("spec", {})
    if not claim:
        return ["  Prometheus TSDB: NO VOLUME (emptyDir): every restart loses the SLO windows"]
    return [
        f"  Prometheus TSDB: {claim['resources']['requests']['storage']} "
        f"{'/'.join(claim['accessModes'])} on {claim.get('storageClassName')} (one claim per "
        f"Prometheus replica) = {tsdb.formula(spec)}; retentionSize {prom.get('retentionSize')} "
        f"drops the oldest block before the disk fills; retention {prom.get('retention')} "
        "survives restarts",
        f"  Alertmanager state: {am['resources']['requests']['storage']} "
        f"{'/'.join(am['accessModes'])} on {am.get('storageClassName')} (silences, "
        "notification log)" if am else "  Alertmanager state: NO VOLUME (emptyDir)",
    ]


MONITOR_KINDS = {"ServiceMonitor": "serviceMonitorSelector", "PodMonitor": "podMonitorSelector",
                 "PrometheusRule": "ruleSelector"}


def unselected_monitors(plan: Plan) -> list[str]:
    """Monitors and rules the installed Prometheus' rendered selectors do not match."""
    if plan.capture is None or not plan.spec.observability.install_kube_prometheus_stack:
        return []
    prom = (_release_values(plan, "kube-prometheus-stack") or {}).get(
        "prometheus", {}).get("prometheusSpec", {})
    out = []
    for m in plan.capture.objects:
        key = MONITOR_KINDS.get(m.get("kind", ""))
        if key is None:
            continue
        selector = prom.get(key)
        wanted = (selector or {}).get("matchLabels", {})
        if not selector or not wanted.items() <= m["metadata"].get("labels", {}).items():
            out.append(f"{m['kind']} {m['metadata']['name']}")
    return out


def _monitoring_lines(plan: Plan) -> list[str]:
    """Which Prometheus scrapes the stack, and whether it selects the monitors and rules."""
    spec = plan.spec
    o = spec.observability
    labels = naming.monitor_labels(spec)
    text = ", ".join(f"{k}={v}" for k, v in labels.items())
    who = (f"installed by the program in namespace {o.prometheus_namespace}"
           if o.install_kube_prometheus_stack
           else f"your cluster's, in namespace {o.prometheus_namespace}")
    out = [f"  Prometheus: {naming.prometheus_url(spec)} ({who})"]
    if plan.capture is None:
        return out
    kinds = ("ServiceMonitor", "PodMonitor", "PrometheusRule")
    monitors = [m for m in plan.capture.objects if m.get("kind") in kinds]
    counts = Counter(m["kind"] for m in monitors)
    out.append(f"  {', '.join(f'{n} {k}' for k, n in sorted(counts.items()))} carry {text} "
               "(observability.monitor_labels)")
    if o.install_kube_prometheus_stack:
        if not unselected_monitors(plan):
            out.append("  checked: its serviceMonitorSelector, podMonitorSelector and ruleSelector "
                       f"select {text} in every namespace")
    else:
        out.append(f"  not checked here: your Prometheus must select {text}; compare with "
                   "`kubectl get prometheus -A -o jsonpath='{range .items[*]}{.metadata.name}: "
                   "{.spec.serviceMonitorSelector} {.spec.ruleSelector}{\"\\n\"}{end}'`")
    return out


def _network_lines(plan: Plan) -> list[str]:
    if plan.capture is None:
        return []
    spec = plan.spec
    cells = reachability.matrix(spec, plan.capture.objects)
    wrong = reachability.unmet(spec, plan.capture.objects)
    out = ["  computed from the rendered NetworkPolicies; rows: source pod, columns: "
           "destination:port; Y allowed and needed, . denied, - no policy of ours on either end",
           *(f"  {line}" for line in reachability.render_matrix(cells))]
    out += [f"  WRONG: {w}" for w in wrong] or ["  every flow the stack needs is allowed, every "
                                                "other flow into or out of its pods denied"]
    return out


def _prerequisite_lines(spec: Spec) -> list[str]:
    out = []
    for item in clusters.prerequisites(cloud_of(spec)):
        if item.only_if == "shared_storage" and not storage_needs(spec)["shared"]:
            continue
        line = f"  {item.what}"
        if item.how:
            line += f" ({item.how})"
        if item.binary:
            found = shutil.which(item.binary)
            line += f"; on this machine: {found or 'NOT FOUND on PATH'}"
        out.append(line)
    return out


def _images(plan: Plan) -> list[str]:
    if plan.capture is None:
        return []
    spec = plan.spec
    if spec.images.registry is None:
        head = ["  by tag from the spec's repositories (images.registry unset): the cluster must be able "
                "to pull these as named; to push them to your registry and deploy them by digest set "
                "images.registry and run `splitstack images push`"]
    else:
        secret = spec.images.pull_secret or "none (the nodes' own credentials)"
        head = [f"  by digest from {spec.images.registry} (images/lock/{spec.stack}.json), pull secret "
                f"{secret}; "
                f"`splitstack images check --stack {spec.stack}` confirms the registry still holds them"]
    seen: dict[str, set[str]] = {}
    for obj in plan.capture.objects:
        pod = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
        for c in (pod.get("containers") or []) + (pod.get("initContainers") or []):
            seen.setdefault(c["image"], set()).add(obj["metadata"]["name"])
    return head + [f"  {image} ({', '.join(sorted(users))})" for image, users in sorted(seen.items())]


# Resources whose count the account decides at `pulumi up` (one per subnet / zone found there):
# under mocks the count is the mock's, so the plan says what it depends on instead.
PER_ACCOUNT = {"aws:efs/mountTarget:MountTarget":
               "one per control-plane subnet of the default VPC (one per zone), found at `pulumi up`"}


def _cloud_lines(plan: Plan) -> list[str]:
    if plan.capture is None:
        return []
    counts = Counter(r.type for r in plan.capture.mocks.resources
                     if not r.type.startswith(("kubernetes:", "splitstack:")))
    return [f"  {t}: {PER_ACCOUNT[t]} (the {n} here are the mock's subnets, not your account's)"
            if t in PER_ACCOUNT else f"  {n} x {t}" for t, n in sorted(counts.items())]


def _range(chart: clusters.Chart) -> str:
    low, high = chart.kubernetes
    return f"{low}-{high}" if high else f"{low}+"


def render_plan(plan: Plan) -> str:
    spec = plan.spec
    pool = spec.gpu_node_pool
    where = f"{pool.cloud.value} {pool.region}".strip() if pool else "?"
    out = [f"stack {spec.stack}: {where}, Kubernetes {spec.cluster.kubernetes_version}, "
           f"namespace {spec.namespace}, mode {spec.deployment_mode.value}", "", "Nodes"]
    for p in plan.pools:
        out += _pool_lines(spec, p)
    out += ["", "Storage", *_storage_lines(plan), *_persistence_lines(plan)]
    charts = [f"  {c} {clusters.chart(c).version} (Kubernetes {_range(clusters.chart(c))}) "
              "installed by the program" for c in installed_charts(spec)]
    declared = [f"  {o} declared present (cluster.operators)" for o in spec.cluster.operators]
    out += ["", "Operators", *charts, *declared]
    if scalers(spec):
        out.append(f"  KEDA ScaledObjects: {'; '.join(scalers(spec))}")
    table = version_table(spec)
    if table:
        now = today()
        out += ["", f"Kubernetes versions on {pool.cloud.value if pool else '?'} (standard support; "
                    "the pinned charts that refuse each)"]
        for v, end, refusing in table:
            mark = "<- this stack" if v == spec.cluster.kubernetes_version else ""
            state = f"standard support until {end}" if end >= now else f"standard support ENDED {end}"
            charts_text = "charts: all support it" if not refusing else "refused by " + ", ".join(refusing)
            out.append(f"  {v}: {state}; {charts_text} {mark}".rstrip())
        if spec.cluster.allow_extended_support:
            out.append("  cluster.allow_extended_support: true (a version past standard support is accepted)")
    out += ["", "Monitoring", *_monitoring_lines(plan)]
    out += ["", "Prerequisites", *_prerequisite_lines(spec)]
    if plan.capture is not None:
        out += ["", "Network paths", *_network_lines(plan)]
        out += ["", "Images", *_images(plan), "", "Cloud resources", *(_cloud_lines(plan) or
                                                                       ["  none (cloud 'existing')"])]
        kinds = Counter(o["kind"] for o in plan.capture.objects)
        out += ["", "Kubernetes objects: " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))]
    if plan.notes:
        out += ["", "Notes", *(f"  {n}" for n in plan.notes)]
    if plan.problems:
        out += ["", f"REFUSED: stack {spec.stack!r} does not fit its cluster",
                *(f"  - {p}" for p in plan.problems)]
    return "\n".join(out) + "\n"


def plan_dict(plan: Plan) -> dict[str, Any]:
    """The plan as data (what ``infra plan --output json`` prints): the fit verdict and problems,
    node pools with their nodes and pods, the rendered objects by kind, and the notes."""
    objects: dict[str, int] = {}
    for r in plan.capture.mocks.resources if plan.capture is not None else []:
        if r.custom:  # cloud and Kubernetes resources, not the program's components
            objects[r.type] = objects.get(r.type, 0) + 1
    return {"stack": plan.spec.stack, "fits": plan.fits, "problems": [str(p) for p in plan.problems],
            "pools": [dataclasses.asdict(p) for p in plan.pools], "resources": dict(sorted(objects.items())),
            "notes": plan.notes}
