"""The rules. Each returns a list of violations (empty = compliant), each naming the object,
what is wrong and the fix. Resource rules see one object; stack rules (stack_rules.py) see all."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from infra.policy.cluster_rules import cluster_fit, namespace_pod_security, pod_security
from infra.policy.objects import (  # noqa: F401  (re-exported for the pack and the tests)
    GPU,
    GPU_HEADROOM_ANNOTATION,
    MIN_STARTUP_BUDGET_S,
    SECRET_FLAGS,
    SECRET_NAME,
    SPEC_PATH_ANNOTATION,
    STARTUP_BUDGET_ANNOTATION,
    WORKLOADS,
    Obj,
    containers,
    gpu_count,
    ident,
    is_gpu_workload,
    pod_template,
)
from infra.policy.stack_rules import network_policy_coverage, service_monitor_selectors


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
    meta = pod_template(obj)[0]  # type: ignore[index]  # callers pass workloads, which have one
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
    no_latest, secrets_by_reference, keda_triggers, pod_security)]
STACK_RULES = [StackRule(fn.__name__.replace("_", "-"), _doc(fn), fn) for fn in (
    network_policy_coverage, service_monitor_selectors, cluster_fit, namespace_pod_security)]


def check_all(objs: list[Obj]) -> dict[str, list[str]]:
    """Rule name -> violations over a whole set of objects (the CLI and tests use this)."""
    report: dict[str, list[str]] = {r.name: [] for r in RESOURCE_RULES}
    for obj in objs:
        for rule in RESOURCE_RULES:
            report[rule.name] += rule.check(obj)
    for srule in STACK_RULES:
        report[srule.name] = srule.check(objs)
    return report
