"""Where the load goes: an inference server (and the stack around it) by URL or by stack name.

``--stack local`` reads the deployment spec and the running local stack's state file, so the
bench never repeats a port or a model name; ``--url`` points at any OpenAI-compatible server.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class TargetError(ValueError):
    pass


@dataclass(frozen=True)
class Target:
    base_url: str
    model: str
    api_key: str | None = None
    max_model_len: int | None = None
    prometheus_url: str | None = None
    queue_url: str | None = None
    stack: str | None = None
    components: dict[str, dict] = field(default_factory=dict)
    state_dir: Path | None = None
    output_dir: Path | None = None  # the workers' output store, when this host can read it
    spec: Any = None  # infra.spec.Spec of a local stack (with any overrides it was started with)

    def stack_spec(self):
        if self.spec is not None:
            return self.spec
        from infra.spec_loader import load_stack

        return load_stack(self.stack or "local")

    @property
    def headers(self) -> dict[str, str]:
        h = {"Content-Type": "application/json"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h


def from_url(url: str, model: str, api_key_env: str | None = None,
             max_model_len: int | None = None) -> Target:
    key = os.environ.get(api_key_env) if api_key_env else None
    if api_key_env and not key:
        raise TargetError(f"--api-key-env {api_key_env}: that environment variable is not set")
    return Target(base_url=url.rstrip("/"), model=model, api_key=key, max_model_len=max_model_len)


def from_stack(stack: str, root: Path | None = None) -> Target:
    from infra.spec_loader import load_stack, project_root
    from stack.launcher import LocalStack

    root = root or project_root()
    spec = load_stack(stack, root)
    if spec.target.value != "local":
        raise TargetError(
            f"stack {stack!r} is a {spec.target.value} stack: pass its server with --url (the "
            "bench reaches deployed stacks through their service URL or a port-forward)")
    local = LocalStack(spec, root)
    state = local.read_state()
    if state and "spec" in state:
        # The stack as it was started (`--engine sim` and other overrides), not the bare file.
        from infra.spec_loader import parse_spec

        local = LocalStack(parse_spec(state["spec"], str(local.paths.state_file)), root)
    return from_local(local)


def from_local(local) -> Target:  # local: stack.launcher.LocalStack
    """A running local stack: URLs from its state file, the API key the stack generated."""
    from stack.preflight import resolve_api_key

    spec = local.spec
    server = spec.worker_server
    state = local.read_state()
    if state is None:
        raise TargetError(f"stack {spec.stack!r} is not running (no {local.paths.state_file}); start it "
                          f"with `splitstack up --stack {spec.stack}`")
    comps = state.get("components", {})
    srv = comps.get(f"server-{server.name}")
    if srv is None:
        raise TargetError(f"stack {spec.stack!r} state has no component server-{server.name}; "
                          f"components: {sorted(comps)}")
    return Target(base_url=srv["url"].rstrip("/"), model=server.model.name,
                  api_key=resolve_api_key(spec, local.paths), max_model_len=server.max_model_len,
                  prometheus_url=comps.get("prometheus", {}).get("url"),
                  queue_url=comps.get("queue", {}).get("url"), stack=spec.stack, components=comps,
                  state_dir=local.paths.root, output_dir=local.paths.data / spec.output_store.path,
                  spec=spec)
