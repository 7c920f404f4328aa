"""Spec fields a runbook may change at run time, and the spec with such changes applied.

Every change is validated by the spec model itself (field bounds, cross-field rules such as
oversubscription and model fit), so a runbook cannot set what `pulumi up` would reject.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from contract.models import describe, dotted_loc
from contract.spec import Spec
from runbooks.model import Refused

SERVER_SETTINGS = ("max_num_batched_tokens", "max_num_seqs", "max_model_len",
                   "gpu_memory_utilization", "kv_cache_space_gib", "sim_profile", "image_tag",
                   "extra_args")
WORKER_SETTINGS = ("concurrency_per_worker", "jobs_per_worker", "request_timeout_s",
                   "max_retries", "circuit_breaker.recovery_timeout_s",
                   "circuit_breaker.failure_threshold", "image_tag")


def prefix_of(spec: Spec, component: str) -> str:
    if component.startswith("server-"):
        name = component[len("server-"):]
        if name not in spec.server_names:
            raise Refused(f"{component}: no server {name!r} in the spec ({', '.join(spec.server_names)})")
        return f"inference_servers.{spec.server_names.index(name)}"
    if component == "workers":
        return "worker_pool"
    raise Refused(f"component {component!r} has no settings; use server-<name> or workers")


def settable(component: str) -> tuple[str, ...]:
    return SERVER_SETTINGS if component.startswith("server-") else WORKER_SETTINGS


def effective_spec(base: Spec, overrides: dict[str, Any]) -> Spec:
    """The spec with dotted-path overrides applied and validated again."""
    data = base.model_dump(mode="json", exclude_none=True)
    for dotted, value in overrides.items():
        set_path(data, dotted, value)
    try:
        return Spec.model_validate(data)
    except ValidationError as exc:
        problems = describe(exc, root="spec", loc=dotted_loc)  # the overrides' own spelling
        raise Refused(f"the change makes the spec invalid ({problems}); nothing was changed") from exc


def typed_changes(spec: Spec, component: str, changes: dict[str, Any]) -> dict[str, Any]:
    """Validate `changes` (strings from the CLI are fine) and return them as the spec types."""
    allowed = settable(component)
    unknown = sorted(set(changes) - set(allowed))
    if unknown:
        raise Refused(f"{component}: cannot set {', '.join(unknown)}; settable: {', '.join(allowed)}")
    prefix = prefix_of(spec, component)
    new = effective_spec(spec, {f"{prefix}.{k}": v for k, v in changes.items()})
    data = new.model_dump(mode="json")
    return {k: get_path(data, f"{prefix}.{k}") for k in changes}


def set_path(data: dict, dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node: Any = data
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    node[parts[-1]] = value


def get_path(data: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        data = data[int(part)] if isinstance(data, list) else data[part]
    return data
