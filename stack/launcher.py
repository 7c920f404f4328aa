"""Bring the local stack up and down, and report its state.

`up` is health-gated: it returns only when every component answers its health check, and on
any failure it stops everything it started and raises :class:`StackError` naming the
component, what happened and its log path. `down` is safe to run any time, also after the
launcher or supervisord itself was killed.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract.spec import Spec
from localvllm.command import OVERRIDING_ENV, explain_vllm_failure
from stack.components import BuildContext, Component, HealthCheck, SetupError, build_components
from stack.containers import sweep_containers
from stack.health import probe
from stack.paths import StackPaths
from stack.preflight import check_ports_free, resolve_api_key
from stack.supervisor import FAILED_STATES, Supervisor, stack_processes, sweep_strays, tail

WAIT_PROGRESS_EVERY_S = 5.0  # while a component is not healthy yet, `up` says so this often
# vLLM's "(APIServer pid=7) INFO 11-27 11:53:00 [loader.py:12] " says nothing a reader needs here
_LOG_PREFIX = re.compile(r"^(\(\w+ pid=\d+\) )?((DEBUG|INFO|WARNING|ERROR) [\d-]+ [\d:.]+ (\[[^]]*\] )?)?")
LOADING_LINE_CHARS = 48  # of the component's last log line: "worker-0 starting 12/600 s: ..." in 80 columns


class StackError(Exception):
    """A component failed to start or become healthy; the message names it and its log."""


@dataclass
class LocalStack:
    spec: Spec
    project_root: Path
    rule_globs: list[str] | None = None  # None: the project's alerts/ (see BuildContext)

    @property
    def paths(self) -> StackPaths:
        return StackPaths.at(self.spec.local.state_dir, self.project_root)

    @property
    def supervisor(self) -> Supervisor:
        return Supervisor(self.paths)

    @property
    def supervisord_log(self) -> Path:
        return self.paths.logs / "supervisord.log"

    # -- up ---------------------------------------------------------------------------------
    def up(self, on_progress: Callable[[str, str], None] | None = None) -> dict[str, Any]:
        progress = on_progress or (lambda component, message: None)
        paths = self.paths
        if self.supervisor.running():
            raise StackError(
                f"a local stack is already running from {paths.root}; "
                "`splitstack status` shows it, `splitstack down` stops it"
            )
        # Leftovers of a crashed launcher would hold the ports: its containers first (killing the
        # podman processes that watch them would leave them running), then its processes.
        sweep_containers(paths)
        sweep_strays(paths.stack_id, supervisord_log=self.supervisord_log)
        paths.make()
        # Changes runbooks made to an earlier run (a rollback's deployment_mode included) end
        # with it: this run is the spec file's.
        paths.runbook_overrides.unlink(missing_ok=True)
        check_ports_free(self.spec)
        api_key = resolve_api_key(self.spec, paths)
        ctx = BuildContext(self.spec, paths, self.project_root, api_key, rule_globs=self.rule_globs)
        components = build_components(ctx, warn=lambda message: progress("images", message))
        started = time.monotonic()
        env = _child_env(self.project_root)
        progress("stack", f"starting {len(components)} components under supervisord")
        try:
            self.supervisor.start(components, env)
            late = [c for c in components if c.start_after_others]
            self._wait_healthy([c for c in components if not c.start_after_others], progress)
            for c in late:
                self.supervisor.start_process(c.name)
            self._wait_healthy(late, progress)
        except BaseException:
            self.down()
            raise
        state = self._state(components, time.monotonic() - started)
        paths.state_file.write_text(json.dumps(state, indent=2))
        return state

    def _wait_healthy(
        self, components: list[Component], progress: Callable[[str, str], None]
    ) -> None:
        budget = {c.name: self._budget_s(c) for c in components}
        t0 = time.monotonic()
        next_progress = t0 + WAIT_PROGRESS_EVERY_S
        pending = {c.name: c for c in components}
        while pending:
            said = time.monotonic() >= next_progress
            if said:
                next_progress = time.monotonic() + WAIT_PROGRESS_EVERY_S
            info = self.supervisor.process_info()
            if not info:
                raise StackError(
                    f"supervisord stopped answering; see {self.paths.logs / 'supervisord.log'}"
                )
            for name, component in list(pending.items()):
                state = info.get(name, {}).get("statename", "UNKNOWN")
                if state in FAILED_STATES:
                    raise StackError(self._failure(component, f"exited while starting ({state})"))
                healthy, detail = probe(component.health)
                if healthy:
                    progress(name, f"healthy after {time.monotonic() - t0:.1f} s at {component.url}")
                    del pending[name]
                elif time.monotonic() - t0 > budget[name]:
                    raise StackError(self._failure(
                        component, f"not healthy after {budget[name]:.0f} s (last probe: {detail})"
                    ))
                elif said:  # a server loading its model takes minutes: say what it is doing
                    progress(name, self._loading_line(component, time.monotonic() - t0, budget[name]))
            if pending:
                time.sleep(0.25)

    def _loading_line(self, component: Component, waited_s: float, budget_s: float) -> str:
        """``starting 12/600 s: <its log's last line>``, short enough for an 80-column terminal."""
        last = tail(self.paths.log(component.name), 1).strip()
        last = re.sub(r"\s+", " ", _LOG_PREFIX.sub("", last))
        if len(last) > LOADING_LINE_CHARS:
            last = last[:LOADING_LINE_CHARS - 3] + "..."
        return f"starting {waited_s:.0f}/{budget_s:.0f} s" + (f": {last}" if last else "")

    def _budget_s(self, component: Component) -> float:
        overall = self.spec.local.startup_timeout_s
        if component.role == "server":
            server = next(s for s in self.spec.inference_servers if f"server-{s.name}" == component.name)
            return min(overall, server.startup_budget_s)
        return min(overall, 60.0)

    def _failure(self, component: Component, what: str) -> str:
        log = self.paths.log(component.name)
        text = tail(log, 15)
        hint = explain_failure(component, text)
        return (
            f"{component.name} {what}.{(' ' + hint) if hint else ''}\n"
            f"log: {log}\n--- last lines ---\n{text}"
        )

    def _state(self, components: list[Component], elapsed_s: float) -> dict[str, Any]:
        info = self.supervisor.process_info()
        return {
            "stack": self.spec.stack,
            "started_at": time.time(),
            "startup_s": round(elapsed_s, 3),
            "supervisord_pid": self.supervisor.pid(),
            "runtime": self.spec.local.runtime.value,
            "deployment_mode": self.spec.deployment_mode.value,
            # What was started (SecretRefs only): runbooks compare it with the spec they act on.
            "spec": json.loads(self.spec.model_dump_json()),
            "components": {
                c.name: {
                    "role": c.role,
                    "url": c.url,
                    "port": c.port,
                    "pid": info.get(c.name, {}).get("pid"),
                    "log": str(self.paths.log(c.name)),
                    "health": c.health.to_state(),
                }
                for c in components
            },
        }

    def record_topology(self, spec: Spec, components: list[Component]) -> dict[str, Any]:
        """Rewrite the state file for a topology changed while running (a rollback between
        deployment modes): its components and deployment_mode; the start time stays."""
        old = self.read_state() or {}
        state = self._state(components, float(old.get("startup_s", 0.0)))
        state["started_at"] = old.get("started_at", state["started_at"])
        state["spec"] = old.get("spec", state["spec"])  # what `up` started; overrides are separate
        state["deployment_mode"] = spec.deployment_mode.value
        tmp = self.paths.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        os.replace(tmp, self.paths.state_file)
        return state

    def processes(self) -> list:
        """Every live process that belongs to this stack (see `stack.supervisor.stack_processes`)."""
        return stack_processes(self.paths.stack_id, self.supervisord_log)

    # -- down / status ----------------------------------------------------------------------
    def stop_order(self) -> list[list[str]]:
        """Programs in the order `down` stops them: the workers first (they drain: finish their
        documents or release them), then the servers they call, then Prometheus and Alertmanager
        (still scraping the drain), then the queue the workers ack into."""
        state = self.read_state() or {}
        roles = {name: c.get("role", "") for name, c in state.get("components", {}).items()}
        for name in self.supervisor.process_info():
            roles.setdefault(name, _role_of(name))
        return [sorted(n for n, r in roles.items() if r == role) for role in STOP_ORDER
                if any(r == role for r in roles.values())]

    def down(self, on_stopped: Callable[[str, float, str], None] | None = None) -> list[int]:
        """Stop everything in order (see ``stop_order``), calling ``on_stopped(component,
        seconds, state)`` as each one ends; returns PIDs that had to be swept up outside
        supervisord."""
        if self.supervisor.running():
            for group in self.stop_order():
                self.supervisor.stop_and_wait(group, on_stopped=on_stopped)
        self.supervisor.shutdown()
        sweep_containers(self.paths)  # left running when supervisord or `podman run` was killed
        strays = sweep_strays(self.paths.stack_id, supervisord_log=self.supervisord_log)
        sock = self.paths.socket
        if sock.exists() and not self.supervisor.running():
            sock.unlink(missing_ok=True)
        return strays

    def read_state(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.paths.state_file.read_text())
        except (OSError, ValueError):
            return None

    def deployment_mode(self) -> str | None:
        """The running stack's deployment_mode (a rollback changes it), from its state file."""
        state = self.read_state()
        return None if state is None else state.get("deployment_mode", "split")

    def status(self) -> list[dict[str, Any]]:
        state = self.read_state()
        if state is None:
            return []
        info = self.supervisor.process_info()
        rows = []
        for name, c in state["components"].items():
            healthy, detail = probe(HealthCheck.from_state(c["health"]), 1.0)
            proc = info.get(name, {})
            rows.append({
                "component": name,
                "role": c["role"],
                "process": proc.get("statename", "NOT RUNNING"),
                "pid": proc.get("pid") or None,
                "healthy": healthy,
                "detail": detail,
                "url": c["url"],
                "log": c["log"],
            })
        return rows


STOP_ORDER = ("worker", "server", "engine", "prometheus", "alertmanager", "queue")


def _role_of(program: str) -> str:
    if program.startswith("engine-"):
        return "engine"
    for role in STOP_ORDER:
        if program == role or program.startswith(f"{role}-"):
            return role
    return "queue" if program == "redis" else program


def _child_env(project_root: Path) -> dict[str, str]:
    # Inherited variables that would silently override a component's argv (vLLM's legacy
    # VLLM_CPU_KVCACHE_SPACE beats --kv-cache-memory-bytes); components set their own.
    env = {k: v for k, v in os.environ.items() if k not in OVERRIDING_ENV}
    env["SPLITSTACK_ROOT"] = str(project_root)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def explain_failure(component: Component, log_tail: str) -> str:
    """One line that says what a known startup failure means and how to fix it."""
    if component.role == "server":
        return explain_vllm_failure(log_tail) or ""
    if "Address already in use" in log_tail:
        return f"Port {component.port} is taken by another process; stop it or change the port."
    return ""


__all__ = ["LocalStack", "SetupError", "StackError"]
