"""Only suggest what the target will accept: a next step that the same stack refuses is worse
than none at 3 a.m.

Each suggested ``runbook ...`` action (a :class:`~runbooks.suggestion.Suggestion`: its action and
parameters, typed) is checked against what the platform and the spec allow:
the local stack cannot scale, move the server to another node or store Kubernetes secrets
(runbooks/platforms/local.py declares what it refuses; that table keeps those actions out of the
advice); a knob must be one the component has (a GPU memory
fraction means nothing to the simulator or to vLLM's CPU build); a Hugging Face token only
matters to a server that downloads with one.
"""

from __future__ import annotations

from contract.spec import Engine, InferenceServer, Spec
from runbooks.names import Action
from runbooks.platforms.local import REFUSES as LOCAL_REFUSES
from runbooks.platforms.specpatch import SERVER_SETTINGS, WORKER_SETTINGS
from runbooks.suggestion import NextStep, Suggestion


def memory_knob(spec: Spec, server: InferenceServer, platform_kind: str) -> Suggestion | None:
    """The setting that gives a server more memory headroom, for its engine and platform."""
    if server.engine is Engine.sim:
        return None  # the simulator holds no model in memory
    if platform_kind == "local":  # vLLM's CPU build: its KV cache is VLLM_CPU_KVCACHE_SPACE
        return Suggestion(action=Action.TUNE,
                          params={"set": {"kv_cache_space_gib": f"{max(0.25, server.kv_cache_space_gib / 2):g}"}},
                          comment="if the OOM recurs: a smaller KV cache")
    return Suggestion(action=Action.TUNE, params={"set": {"gpu_memory_utilization": "0.85"}},
                      comment="if the OOM recurs")


def refusal(spec: Spec, platform_kind: str, step: NextStep) -> str | None:
    """Why ``step`` would be refused on this target, or None when it would be accepted (a step in
    words is not a `runbook` action: nothing to check)."""
    if isinstance(step, str):
        return None
    action = step.action
    if platform_kind == "local" and action in LOCAL_REFUSES:
        return LOCAL_REFUSES[action]
    server = spec.worker_server
    if action is Action.UPDATE_HF_TOKEN and server.hf_token is None:
        return f"server {server.name!r} has no hf_token in the spec"
    if action is Action.TUNE:
        for knob in step.params.get("set", {}):
            if knob not in SERVER_SETTINGS and knob not in WORKER_SETTINGS:
                return f"{knob} is not a setting runbooks change"
            if knob == "gpu_memory_utilization" and (server.engine is Engine.sim or platform_kind == "local"):
                return f"engine {server.engine.value} on the {platform_kind} platform has no GPU memory fraction"
            if knob == "kv_cache_space_gib" and (server.engine is Engine.sim or platform_kind != "local"):
                return "kv_cache_space_gib sizes vLLM's CPU build only"
    return None
