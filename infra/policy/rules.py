"""The rules. Each returns a list of violations (empty = compliant), each naming the object,
what is wrong and the fix. Resource rules see one object; stack rules see all of them."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

GPU = "nvidia.com/gpu"
# Annotations the program writes on pod templates so a policy can check its derived numbers.
STARTUP_BUDGET_ANNOTATION = "splitstack.dev/startup-budget-s"
GPU_HEADROOM_ANNOTATION = "splitstack.dev/gpu-headroom"
MIN_STARTUP_BUDGET_S = 300  # below this no real model downloads + loads + compiles
SECRET_NAME = re.compile(r"(KEY|TOKEN|PASSWORD|SECRET|CREDENTIAL)", re.IGNORECASE)
SECRET_FLAGS = ("--api-key", "--hf-token", "--token", "--password")
WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "Job", "ReplicaSet"}

Obj = dict[str, Any]


def ident(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return f"{obj.get('kind')} {meta.get('namespace', '')}/{meta.get('name', '?')}"


def pod_template(obj: Obj) -> tuple[dict, dict] | None:
    """(template metadata, pod spec) of a workload or Pod, else None."""
    kind = obj.get("kind")
    spec = obj.get("spec") or {}
    if kind == "Pod":
        return obj.get("metadata") or {}, spec
    if kind in WORKLOADS:
        template = spec.get("template") or {}
        return template.get("metadata") or {}, template.get("spec") or {}
    if kind == "CronJob":
        template = ((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {}
        return template.get("metadata") or {}, template.get("spec") or {}
    return None


def containers(pod: dict, init: bool = True) -> Iterator[dict]:
    yield from pod.get("containers") or []
    if init:
        yield from pod.get("initContainers") or []


def gpu_count(pod: dict) -> int:
    total = 0
    for c in containers(pod):
        res = c.get("resources") or {}
        for part in ("limits", "requests"):
            value = (res.get(part) or {}).get(GPU)
            if value is not None:
                total = max(total, int(value))
    return total


def is_gpu_workload(obj: Obj) -> bool:
    found = pod_template(obj)
    return found is not None and gpu_count(found[1]) > 0


# ---- resource rules -------------------------------------------------------------------------

def probes_and_budgets(obj: Obj) -> list[str]:
    """GPU servers: startup probe budget >= the declared startup budget; readiness + liveness;
    the grace period covers preStop sleep + vLLM's --shutdown-timeout."""
    found = pod_template(obj)
    if found is None or gpu_count(found[1]) == 0:
        return []
    meta, pod = found
    out = []
    declared = int((meta.get("annotations") or {}).get(STARTUP_BUDGET_ANNOTATION, 0))
    need = max(declared, MIN_STARTUP_BUDGET_S)
    for c in pod.get("containers") or []:
        name = f"{ident(obj)} container {c.get('name')}"
        startup = c.get("startupProbe")
        if not startup:
            out.append(f"{name}: no startupProbe; a slow model load is killed by the liveness "
                       f"probe: add a startupProbe with a budget of at least {need} s")
        else:
            budget = int(startup.get("periodSeconds", 10)) * int(startup.get("failureThreshold", 3))
            if budget < need:
                out.append(f"{name}: startupProbe allows {budget} s (periodSeconds x "
                           f"failureThreshold) < {need} s; raise failureThreshold")
        for probe in ("readinessProbe", "livenessProbe"):
            if not c.get(probe):
                out.append(f"{name}: no {probe}; add one on /health")
        args = [str(a) for a in c.get("args") or []] + [str(a) for a in c.get("command") or []]
        if "--shutdown-timeout" in args:
            drain = int(args[args.index("--shutdown-timeout") + 1])
            pre = int((((c.get("lifecycle") or {}).get("preStop") or {}).get("sleep") or {})
                      .get("seconds", 0))
            grace = int(pod.get("terminationGracePeriodSeconds", 30))
            if grace <= pre + drain:
                out.append(f"{name}: terminationGracePeriodSeconds {grace} <= preStop {pre} s + "
                           f"--shutdown-timeout {drain} s: requests are cut mid-drain; raise it "
                           f"above {pre + drain}")
    return out


def shm(obj: Obj) -> list[str]:
    """GPU pods mount a memory-backed /dev/shm with a sizeLimit (Docker's 64 MiB breaks NCCL)."""
    found = pod_template(obj)
    if found is None or gpu_count(found[1]) == 0:
        return []
    pod = found[1]
    volumes = {v.get("name"): v for v in pod.get("volumes") or []}
    out = []
    for c in pod.get("containers") or []:
        mount = next((m for m in c.get("volumeMounts") or [] if m.get("mountPath") == "/dev/shm"),
                     None)
        where = f"{ident(obj)} container {c.get('name')}"
        if mount is None:
            out.append(f"{where}: /dev/shm is not mounted; mount an emptyDir "
                       "{medium: Memory, sizeLimit: ...} there")
            continue
        empty = (volumes.get(mount.get("name")) or {}).get("emptyDir")
        if not empty or empty.get("medium") != "Memory" or not empty.get("sizeLimit"):
            out.append(f"{where}: /dev/shm volume {mount.get('name')!r} must be an emptyDir with "
                       "medium Memory and a sizeLimit")
    return out


def service_links(obj: Obj) -> list[str]:
    """enableServiceLinks: false (a Service named vllm injects VLLM_PORT and crashes vLLM)."""
    found = pod_template(obj)
    if found is None or found[1].get("enableServiceLinks") is False:
        return []
    return [f"{ident(obj)}: enableServiceLinks is not false; set it to false so Service env "
            "vars (VLLM_PORT from a Service named vllm) never reach the container"]


def rollout_strategy(obj: Obj) -> list[str]:
    """GPU Deployments never surge unless the program declared spare GPUs."""
    if obj.get("kind") != "Deployment" or not is_gpu_workload(obj):
        return []
    strategy = (obj.get("spec") or {}).get("strategy") or {}
    if strategy.get("type") == "Recreate":
        return []
    surge = str((strategy.get("rollingUpdate") or {}).get("maxSurge", "25%"))
    meta = pod_template(obj)[0]  # type: ignore[index]
    headroom = (meta.get("annotations") or {}).get(GPU_HEADROOM_ANNOTATION) == "true"
    if surge in ("0", "0%") or headroom:
        return []
    return [f"{ident(obj)}: rolling update with maxSurge {surge} on a GPU workload: the surge "
            "pod waits for a GPU that is not free and the rollout deadlocks; use Recreate or "
            "maxSurge 0"]


def gpu_requests(obj: Obj) -> list[str]:
    """Only inference servers (and monolithic workers) request GPUs, with requests == limits."""
    found = pod_template(obj)
    if found is None:
        return []
    meta, pod = found
    labels = meta.get("labels") or {}
    allowed = (labels.get("app.kubernetes.io/name") == "inference-server"
               or labels.get("app.kubernetes.io/instance") == "worker-gpu")
    out = []
    for c in containers(pod):
        res = c.get("resources") or {}
        req = (res.get("requests") or {}).get(GPU)
        lim = (res.get("limits") or {}).get(GPU)
        if req is None and lim is None:
            continue
        where = f"{ident(obj)} container {c.get('name')}"
        if not allowed:
            out.append(f"{where}: requests {GPU} but is not an inference server; CPU workers "
                       "must not hold GPUs (remove the GPU request)")
        if str(req) != str(lim):
            out.append(f"{where}: {GPU} request {req} != limit {lim}; set both to the tensor "
                       "parallel size")
    return out


def tolerations(obj: Obj) -> list[str]:
    """GPU pods tolerate the GPU taint; CPU pods do not (they must stay off GPU nodes)."""
    found = pod_template(obj)
    if found is None:
        return []
    pod = found[1]
    tolerates_gpu = any(t.get("key") == GPU or t.get("operator") == "Exists" and not t.get("key")
                        for t in pod.get("tolerations") or [])
    if gpu_count(pod) > 0 and not pod.get("tolerations"):
        return [f"{ident(obj)}: requests GPUs but has no tolerations; GPU nodes are tainted "
                "(gpu_node_pool.taints): add matching tolerations"]
    if gpu_count(pod) == 0 and tolerates_gpu:
        return [f"{ident(obj)}: tolerates the GPU taint without requesting a GPU: it would take "
                "room on a GPU node; remove the toleration"]
    return []


def no_latest(obj: Obj) -> list[str]:
    """Every image is pinned by a tag other than latest, or by digest."""
    found = pod_template(obj)
    if found is None:
        return []
    out = []
    for c in containers(found[1]):
        image = str(c.get("image", ""))
        if "@sha256:" in image:
            continue
        tag = image.rsplit(":", 1)[1] if ":" in image.rsplit("/", 1)[-1] else ""
        if tag in ("", "latest"):
            out.append(f"{ident(obj)} container {c.get('name')}: image {image!r} is not pinned; "
                       "use a release tag (e.g. vllm/vllm-openai:v0.32.0) or a digest")
    return out


def secrets_by_reference(obj: Obj) -> list[str]:
    """Secrets reach containers only as secretKeyRef; the program never writes Secret data."""
    if obj.get("kind") == "Secret" and (obj.get("data") or obj.get("stringData")):
        return [f"{ident(obj)}: carries secret values in the program's state; create the Secret "
                "outside Pulumi and reference it with secretKeyRef"]
    found = pod_template(obj)
    if found is None:
        return []
    out = []
    for c in containers(found[1]):
        where = f"{ident(obj)} container {c.get('name')}"
        for env in c.get("env") or []:
            if "value" in env and SECRET_NAME.search(str(env.get("name", ""))):
                out.append(f"{where}: env {env['name']} holds a literal value; take it from a "
                           "Secret with valueFrom.secretKeyRef")
        args = [str(a) for a in (c.get("args") or []) + (c.get("command") or [])]
        for i, arg in enumerate(args):
            flag, _, inline = arg.partition("=")
            if flag in SECRET_FLAGS:
                value = inline or (args[i + 1] if i + 1 < len(args) else "")
                if not value.startswith("$("):
                    out.append(f"{where}: {flag} is given a literal value; pass it from a "
                               "secretKeyRef env var, e.g. $(VLLM_API_KEY)")
    return out


def keda_triggers(obj: Obj) -> list[str]:
    """ScaledObjects: vLLM queries select model_name (vLLM's label, not 'model'); Redis stream
    triggers scale on the consumer group's lag."""
    if obj.get("kind") != "ScaledObject":
        return []
    out = []
    for t in (obj.get("spec") or {}).get("triggers") or []:
        meta = t.get("metadata") or {}
        if t.get("type") == "prometheus":
            query = str(meta.get("query", ""))
            if "vllm:" in query and not re.search(r"\bmodel_name\s*=", query):
                out.append(f"{ident(obj)}: query {query!r} does not select model_name; vLLM "
                           "labels its metrics model_name, so the query matches nothing")
            if re.search(r"[{,]\s*model\s*=", query):
                out.append(f"{ident(obj)}: query {query!r} selects label 'model', which vLLM "
                           "metrics do not have; use model_name")
        if t.get("type") == "redis-streams":
            missing = [k for k in ("stream", "consumerGroup", "lagCount") if not meta.get(k)]
            if missing:
                out.append(f"{ident(obj)}: redis-streams trigger lacks {missing}; queue-lag "
                           "scaling needs stream, consumerGroup and lagCount")
    return out


# ---- stack rules ----------------------------------------------------------------------------

def _selects(selector: dict, labels: dict) -> bool:
    match = selector.get("matchLabels") or {}
    return all(labels.get(k) == v for k, v in match.items()) and not selector.get(
        "matchExpressions")


def network_policy_coverage(objs: list[Obj]) -> list[str]:
    """Each namespace with workloads has default deny (ingress + egress), and every container
    port of every workload is opened by some ingress rule of a policy selecting its pods."""
    policies = [o for o in objs if o.get("kind") == "NetworkPolicy"]
    out = []
    namespaces = {(o.get("metadata") or {}).get("namespace") for o in objs if pod_template(o)}
    for ns in sorted(n for n in namespaces if n):
        deny = [p for p in policies if (p["metadata"].get("namespace") == ns
                and (p.get("spec") or {}).get("podSelector") in ({}, None)
                and set((p.get("spec") or {}).get("policyTypes") or []) >= {"Ingress", "Egress"}
                and not p["spec"].get("ingress") and not p["spec"].get("egress"))]
        if not deny:
            out.append(f"namespace {ns}: no default-deny NetworkPolicy (podSelector {{}}, "
                       "policyTypes [Ingress, Egress], no rules); add one")
    for obj in objs:
        found = pod_template(obj)
        if found is None:
            continue
        labels = found[0].get("labels") or {}
        ns = obj["metadata"].get("namespace")
        opened: set[Any] = set()
        for p in policies:
            spec = p.get("spec") or {}
            if p["metadata"].get("namespace") != ns or not _selects(spec.get("podSelector") or {}, labels):
                continue
            for rule in spec.get("ingress") or []:
                for port in rule.get("ports") or []:
                    opened.add(port.get("port"))
        for c in found[1].get("containers") or []:
            for port in c.get("ports") or []:
                if port.get("containerPort") not in opened and port.get("name") not in opened:
                    out.append(f"{ident(obj)}: container port {port.get('containerPort')} is "
                               "not opened by any NetworkPolicy ingress rule; with default deny "
                               "nothing reaches it (add the allowed flow)")
    return out


def service_monitor_selectors(objs: list[Obj]) -> list[str]:
    """Every ServiceMonitor selects a Service in its namespaces, by labels it really has, and
    scrapes a port name that Service defines."""
    services = [o for o in objs if o.get("kind") == "Service"]
    out = []
    for sm in (o for o in objs if o.get("kind") == "ServiceMonitor"):
        spec = sm.get("spec") or {}
        names = ((spec.get("namespaceSelector") or {}).get("matchNames")
                 or [sm["metadata"].get("namespace")])
        hits = [s for s in services if s["metadata"].get("namespace") in names
                and _selects(spec.get("selector") or {}, s["metadata"].get("labels") or {})]
        if not hits:
            out.append(f"{ident(sm)}: selector {spec.get('selector')} matches no Service's "
                       "labels; Prometheus would scrape nothing: copy the Service's labels")
            continue
        ports = {p.get("name") for s in hits for p in (s.get("spec") or {}).get("ports") or []}
        for ep in spec.get("endpoints") or []:
            if ep.get("port") and ep["port"] not in ports:
                out.append(f"{ident(sm)}: endpoint port {ep['port']!r} is not a port name of "
                           f"the selected Service(s) (have {sorted(p for p in ports if p)})")
        job = spec.get("jobLabel")
        if job and not all(job in (s["metadata"].get("labels") or {}) for s in hits):
            out.append(f"{ident(sm)}: jobLabel {job!r} is missing from a selected Service's "
                       "labels; the job label (used by alerts/) would fall back to the name")
    return out


@dataclass(frozen=True)
class Rule:
    name: str
    description: str
    check: Callable[[Obj], list[str]]


@dataclass(frozen=True)
class StackRule:
    name: str
    description: str
    check: Callable[[list[Obj]], list[str]]


def _doc(fn: Callable) -> str:
    return " ".join((fn.__doc__ or "").split())


RESOURCE_RULES = [Rule(fn.__name__.replace("_", "-"), _doc(fn), fn) for fn in (
    probes_and_budgets, shm, service_links, rollout_strategy, gpu_requests, tolerations,
    no_latest, secrets_by_reference, keda_triggers)]
STACK_RULES = [StackRule(fn.__name__.replace("_", "-"), _doc(fn), fn) for fn in (
    network_policy_coverage, service_monitor_selectors)]


def check_all(objs: list[Obj]) -> dict[str, list[str]]:
    """Rule name -> violations over a whole set of objects (the CLI and tests use this)."""
    report: dict[str, list[str]] = {r.name: [] for r in RESOURCE_RULES}
    for obj in objs:
        for rule in RESOURCE_RULES:
            report[rule.name] += rule.check(obj)
    for srule in STACK_RULES:
        report[srule.name] = srule.check(objs)
    return report
