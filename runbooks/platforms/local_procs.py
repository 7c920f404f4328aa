"""Helpers of the local platform: what supervisord's RPC and log say about a program, and the
simulator's extra arguments."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from infra.spec import Engine, Spec
from stack.components import Component


def with_sim_args(component: Component, spec: Spec) -> Component:
    # The launcher passes extra_args to vLLM only; simulator flags (e.g. `--fault ...`) in
    # extra_args reach the simulator here, so an upgrade drill can carry them.
    if component.role != "server":
        return component
    server = next(s for s in spec.inference_servers if f"server-{s.name}" == component.name)
    if server.engine is not Engine.sim or not server.extra_args:
        return component
    return replace(component, argv=[*component.argv, *server.extra_args])


def expected_ports(spec: Spec) -> dict[str, int]:
    ports = {"queue": spec.queue.port, "prometheus": spec.observability.prometheus_port}
    for s in spec.inference_servers:
        if s.replicas > 0:
            ports[f"server-{s.name}"] = s.port
    return ports


def program_index(name: str) -> int:
    return int(name.rsplit("-", 1)[1])


def exit_reason(proc: dict, supervisord_log: Path) -> tuple[str | None, int | None]:
    code = proc.get("exitstatus")
    # supervisord's own log says how the process ended: "exited: server-vlm (terminated by
    # SIGKILL; not expected)" or "(exit status 70; not expected)"; the RPC only has the code.
    last = None
    try:
        for line in supervisord_log.read_text(errors="replace").splitlines():
            m = re.search(r"(?:exited|gave up): " + re.escape(proc.get("name", "")) + r" \(([^)]*)\)", line)
            if m:
                last = m.group(1)
    except OSError:
        pass
    if last and "SIGKILL" in last:
        return f"{last} (the kernel OOM killer, or kill -9)", code
    if last:
        return last, code
    spawnerr = proc.get("spawnerr") or proc.get("description") or ""
    return (f"spawn error: {spawnerr}" if spawnerr else f"exit status {code}"), code


def restart_count(supervisord_log: Path, program: str) -> int:
    # supervisord logs "spawned: 'name'" per start; more than one is a restart.
    try:
        text = supervisord_log.read_text(errors="replace")
    except OSError:
        return 0
    return max(0, text.count(f"spawned: '{program}'") - 1)

