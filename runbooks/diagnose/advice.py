"""Only suggest what the target will accept: a next step that the same stack refuses is worse
than none at 3 a.m.

Each suggested ``runbook ...`` command is checked against what the platform and the spec allow:
the local stack cannot scale, move the server to another node or store Kubernetes secrets
(runbooks/platforms/local.py declares what it refuses; that table keeps those actions out of the
advice); a knob must be one the component has (a GPU memory
fraction means nothing to the simulator or to vLLM's CPU build); a Hugging Face token only
matters to a server that downloads with one.
"""

from __future__ import annotations

import shlex

from contract.spec import Engine, InferenceServer, Spec
from runbooks.platforms.local import REFUSES as LOCAL_REFUSES
from runbooks.platforms.specpatch import SERVER_SETTINGS, WORKER_SETTINGS


def memory_knob(spec: Spec, server: InferenceServer, platform_kind: str) -> str | None:
    """The setting that gives a server more memory headroom, for its engine and platform."""
    if server.engine is Engine.sim:
        return None  # the simulator holds no model in memory
    if platform_kind == "local":  # vLLM's CPU build: its KV cache is VLLM_CPU_KVCACHE_SPACE
        return (f"runbook tune --set kv_cache_space_gib={max(0.25, server.kv_cache_space_gib / 2):g}"
                "  # if the OOM recurs: a smaller KV cache")
    return "runbook tune --set gpu_memory_utilization=0.85  # if the OOM recurs"


def refusal(spec: Spec, platform_kind: str, command: str) -> str | None:
    """Why ``command`` would be refused on this target, or None when it would be accepted."""
    try:
        words = shlex.split(command.split("#", 1)[0])
    except ValueError:
        return None
    if len(words) < 2 or words[0] != "runbook":
        return None
    action = words[1]
    if platform_kind == "local" and action in LOCAL_REFUSES:
        return LOCAL_REFUSES[action]
    server = spec.worker_server
    if action == "update-hf-token" and server.hf_token is None:
        return f"server {server.name!r} has no hf_token in the spec"
    if action == "tune":
        knobs = [w.split("=", 1)[0] for i, w in enumerate(words) if i and words[i - 1] == "--set"]
        for knob in knobs:
            if knob not in SERVER_SETTINGS and knob not in WORKER_SETTINGS:
                return f"{knob} is not a setting runbooks change"
            if knob == "gpu_memory_utilization" and (server.engine is Engine.sim or platform_kind == "local"):
                return f"engine {server.engine.value} on the {platform_kind} platform has no GPU memory fraction"
            if knob == "kv_cache_space_gib" and (server.engine is Engine.sim or platform_kind != "local"):
                return "kv_cache_space_gib sizes vLLM's CPU build only"
    return None
