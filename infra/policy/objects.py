"""Reading Kubernetes objects (camelCase dicts) for the policy rules: pod templates, containers,
GPU requests, and the annotations the program writes for the policies."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

GPU = "nvidia.com/gpu"
# Annotations the program writes on pod templates so a policy can check its derived numbers.
STARTUP_BUDGET_ANNOTATION = "splitstack.dev/startup-budget-s"
GPU_HEADROOM_ANNOTATION = "splitstack.dev/gpu-headroom"
# The spec field path of the workload (e.g. inference_servers[0]), so a policy names what to change.
SPEC_PATH_ANNOTATION = "splitstack.dev/spec-path"
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
