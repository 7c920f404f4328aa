"""The local stack as a runbook platform: the same operations on its supervisord processes.

How a setting changes on a running local stack (the local equivalent of ``kubectl set env`` /
``set image``): the effective spec is the stack's spec plus the overrides earlier runbook runs
made, kept in ``<state_dir>/runbook-overrides.json``. The platform rebuilds the components from
that spec with the launcher's own builders (``stack.components.build_components``), renders
supervisord's config with the launcher's renderer, asks supervisord to re-read it
(``reloadConfig``) and swaps only the target's changed program groups
(``removeProcessGroup`` + ``addProcessGroup``, which starts them). Like drift made by kubectl,
the overrides last until the stack is brought down; ``splitstack up`` starts from the spec file.
"""

from __future__ import annotations

import json
import os
import socket
import time
import xmlrpc.client
from pathlib import Path
from typing import Any, cast

import httpx

from contract.spec import DeploymentMode, Engine, Spec
from runbooks.model import PlatformError, Refused
from runbooks.names import Action
from runbooks.platforms.base import WORKERS, ComponentState, HttpResult, NodeState
from runbooks.platforms.local_procs import (
    exit_reason,
    expected_ports,
    program_commands,
    program_index,
    restart_count,
    server_mismatches,
    with_sim_args,
)
from runbooks.platforms.specpatch import (
    SERVER_SETTINGS,
    WORKER_SETTINGS,
    effective_spec,
    get_path,
    prefix_of,
    typed_changes,
)
from stack.components import BuildContext, HealthCheck, SetupError, build_components
from stack.health import probe
from stack.launcher import LocalStack
from stack.preflight import resolve_api_key
from stack.supervisor import render_config, tail, write_config
from stack.topology import mode_overrides

_STATES = {"RUNNING": "running", "STARTING": "starting", "BACKOFF": "crashloop",
           "FATAL": "crashloop", "EXITED": "exited", "STOPPED": "stopped",
           "STOPPING": "stopping", "UNKNOWN": "missing"}


# What the local platform cannot do, by the runbook action that would need it: the platform
# refuses with these words (and the fix for the stack at hand), and `runbook diagnose` suggests
# none of these actions on a local stack (runbooks/diagnose/advice.py).
_NO_OTHER_NODE = "the local stack runs on one machine: there is no other node to move the server to"
REFUSES: dict[Action, str] = {
    Action.SCALE: "the local stack gives each replica its own port from the spec: set the replicas in the spec "
             "and restart the stack",
    Action.DRAIN_GPU_NODE: _NO_OTHER_NODE,
    Action.GPU_NODE_FAILURE: _NO_OTHER_NODE,
    Action.UPDATE_HF_TOKEN: "the local stack keeps no Kubernetes secrets and loads models from local folders "
                       "(no Hugging Face download, no HF token)",
}


class LocalPlatform:
    kind = "local"

    def __init__(self, stack: LocalStack, http: httpx.Client | None = None,
                 rolling_timeout_s: float = 60.0) -> None:
        self.stack = stack
        self.rolling_timeout_s = rolling_timeout_s  # per replica, when several roll one by one
        self.base_spec = stack.spec
        self._http = http or httpx.Client(timeout=30.0)

    # -- the effective spec -------------------------------------------------------------------
    @property
    def overrides_file(self) -> Path:
        return self.stack.paths.runbook_overrides

    def overrides(self) -> dict[str, Any]:
        try:
            return json.loads(self.overrides_file.read_text())
        except (OSError, ValueError):
            return {}

    @property
    def spec(self) -> Spec:
        return effective_spec(self.base_spec, self.overrides())

    def target(self) -> str:
        return f"local stack {self.base_spec.stack!r} at {self.stack.paths.root}"

    def verify_target(self) -> list[str]:
        state = self.stack.read_state()
        if state is None or not self.stack.supervisor.running():
            return [f"no local stack is running from {self.stack.paths.root}: start it with "
                    f"`splitstack up --stack {self.base_spec.stack}`"]
        problems = []
        if state.get("stack") != self.base_spec.stack:
            problems.append(f"the stack running at {self.stack.paths.root} is "
                            f"{state.get('stack')!r}, not the spec's {self.base_spec.stack!r}")
        running = state.get("components", {})
        # The effective spec: a rollback changes which servers run (monolithic runs none).
        for name, port in expected_ports(self.spec).items():
            got = running.get(name, {}).get("port")
            if got != port:
                problems.append(f"{name}: the spec says port {port}, the running stack has "
                                f"{got if got is not None else 'no such component'}")
        commands = program_commands(self.stack.paths.supervisord_conf.read_text())
        problems += server_mismatches(self.spec, commands)
        return problems

    # -- reading --------------------------------------------------------------------------------
    def _programs(self, component: str) -> list[str]:
        state = self.stack.read_state()
        if state is None:
            raise PlatformError(f"no local stack is running from {self.stack.paths.root}: start it "
                                f"with `splitstack up --stack {self.base_spec.stack}`")
        names = list(state["components"])
        if component == WORKERS:
            return sorted((n for n in names if n.startswith("worker-")), key=program_index)
        if component not in names:
            raise Refused(f"component {component!r} is not part of {self.target()}; "
                          f"known: {', '.join(names) or 'none'}")
        return [component]

    def _info(self) -> dict[str, dict]:
        if not self.stack.supervisor.running():
            raise PlatformError(f"supervisord of {self.target()} is not running: start the "
                                "stack with `splitstack up`")
        return self.stack.supervisor.process_info()

    def state(self, component: str) -> ComponentState:
        programs = self._programs(component)
        info = self._info()
        state = self.stack.read_state() or {"components": {}}
        parts = [self._one(p, info.get(p, {}), state["components"].get(p, {})) for p in programs]
        if len(parts) == 1 and component != WORKERS:
            return parts[0]
        healthy = bool(parts) and all(p.healthy for p in parts)
        worst = next((p for p in parts if not p.healthy), parts[0] if parts else None)
        return ComponentState(
            name=component, state=worst.state if worst else "missing", healthy=healthy,
            detail=f"{sum(p.healthy for p in parts)}/{len(parts)} healthy"
                   + (f"; {worst.name}: {worst.detail}" if worst and not worst.healthy else ""),
            exit_reason=worst.exit_reason if worst else None,
            failed=any(p.failed for p in parts),
            restarts=sum(p.restarts for p in parts),
            pids_or_pods=[x for p in parts for x in p.pids_or_pods],
            nodes=[socket.gethostname()], version=self._version(component))

    def _one(self, name: str, proc: dict, recorded: dict) -> ComponentState:
        statename = proc.get("statename", "UNKNOWN")
        health = recorded.get("health") or {}
        healthy, detail = (probe(HealthCheck.from_state(health), 1.0)
                           if health else (False, "no health check recorded"))
        ended = statename in ("EXITED", "FATAL", "BACKOFF")
        reason, code = (exit_reason(proc, self.stack.paths.logs / "supervisord.log") if ended
                        else (None, None))
        # Servers are not restarted by supervisord (autorestart=false, like a pod left in
        # CrashLoopBackOff): once EXITED they stay down. Workers come back by themselves.
        failed = statename == "FATAL" or (statename == "EXITED" and name.startswith("server-"))
        return ComponentState(
            name=name, state=_STATES.get(statename, statename.lower()), healthy=healthy,
            detail=detail, exit_reason=reason, exit_code=code, failed=failed,
            restarts=restart_count(self.stack.paths.logs / "supervisord.log", name),
            pids_or_pods=[str(proc["pid"])] if proc.get("pid") else [],
            nodes=[socket.gethostname()], version=self._version(name))

    def _version(self, component: str) -> str:
        s = self.spec
        if component.startswith("server-"):
            server = s.server(component[len("server-"):])
            label = server.sim_profile if server.engine is Engine.sim else server.model.name
            return f"{server.image_tag} ({server.engine.value} {label})"
        return s.worker_pool.image_tag

    def logs(self, component: str, tail_lines: int = 200) -> str:
        return "\n".join(tail(self.stack.paths.log(p), tail_lines) for p in self._programs(component))

    def settings(self, component: str) -> dict[str, Any]:
        s = self.spec
        if component.startswith("server-"):
            server = s.server(component[len("server-"):]).model_dump(mode="json")
            return {k: server[k] for k in SERVER_SETTINGS}
        if component == WORKERS:
            pool = s.worker_pool.model_dump(mode="json")
            return {k: get_path(pool, k) for k in WORKER_SETTINGS}
        raise Refused(f"component {component!r} has no settings runbooks change; use "
                      "server-<name> or workers")

    # -- acting -------------------------------------------------------------------------------
    def units(self, component: str) -> list[str]:
        return self._programs(component)

    def restart(self, component: str) -> None:
        rpc = self.stack.supervisor.rpc()
        for program in self._programs(component):
            try:
                if self._info().get(program, {}).get("statename") in ("RUNNING", "STARTING"):
                    rpc.supervisor.stopProcess(program, True)
                rpc.supervisor.startProcess(program, False)
            except (OSError, xmlrpc.client.Fault) as exc:
                raise PlatformError(f"supervisord could not restart {program}: {exc}") from exc

    def apply_settings(self, component: str, changes: dict[str, Any]) -> None:
        typed = typed_changes(self.spec, component, changes)  # Refused naming a bad field
        prefix = prefix_of(self.base_spec, component)
        new = {**self.overrides(), **{f"{prefix}.{k}": v for k, v in typed.items()}}
        spec = effective_spec(self.base_spec, new)
        self._write_overrides(new)
        self._reload(spec, self._programs(component))

    def _write_overrides(self, overrides: dict[str, Any]) -> None:
        tmp = self.overrides_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(overrides, indent=1, sort_keys=True))
        os.replace(tmp, self.overrides_file)

    def _reload(self, spec: Spec, programs: list[str]) -> None:
        paths = self.stack.paths
        ctx = BuildContext(spec, paths, self.stack.project_root, resolve_api_key(spec, paths))
        components = [with_sim_args(c, spec) for c in build_components(ctx)]
        write_config(paths.supervisord_conf, render_config(components, paths))
        rpc = self.stack.supervisor.rpc()
        try:
            # supervisord's API: reloadConfig() returns [[added, changed, removed]] program names
            [[_added, changed, _removed]] = cast(list[list[list[str]]], rpc.supervisor.reloadConfig())
            for program in programs:
                running = self._info().get(program, {}).get("statename") in ("RUNNING", "STARTING")
                if program in changed:  # a new command line or environment: swap the group
                    if running:
                        rpc.supervisor.stopProcessGroup(program, True)
                    rpc.supervisor.removeProcessGroup(program)
                    rpc.supervisor.addProcessGroup(program)  # autostart=true: starts it
                else:
                    # Same program section, new files (the workers read the resolved spec from
                    # a file the builders rewrote): a restart makes it read them.
                    if running:
                        rpc.supervisor.stopProcess(program, True)
                    rpc.supervisor.startProcess(program, False)
                if len(programs) > 1:
                    self._wait_one(program)  # rolling: the next replica waits for this one
        except (OSError, xmlrpc.client.Fault) as exc:
            raise PlatformError(f"supervisord could not reload {', '.join(programs)}: {exc}") from exc

    def set_deployment_mode(self, mode: DeploymentMode) -> list[str]:
        """Switch the running stack's topology (stack/topology.py) without losing documents:
        start the new engines, then roll the workers one at a time (each drains on SIGTERM:
        it finishes its documents or releases them to the queue, where the next worker claims
        them), then stop the engines nobody calls any more. Returns what was done."""
        new = {k: v for k, v in self.overrides().items()
               if k not in ("deployment_mode", "worker_pool.in_process.backend")}
        new |= mode_overrides(mode)
        spec = effective_spec(self.base_spec, new)
        paths = self.stack.paths
        ctx = BuildContext(spec, paths, self.stack.project_root, resolve_api_key(spec, paths))
        try:
            components = [with_sim_args(c, spec) for c in build_components(ctx)]
        except SetupError as exc:
            raise Refused(f"deployment_mode {mode.value}: {exc}") from None
        old = set((self.stack.read_state() or {}).get("components", {}))
        self._write_overrides(new)
        write_config(paths.supervisord_conf, render_config(components, paths))
        self.stack.record_topology(spec, components)
        done: list[str] = []
        rpc = self.stack.supervisor.rpc()
        try:
            [[added, changed, removed]] = cast(list[list[list[str]]], rpc.supervisor.reloadConfig())
            for program in sorted(p for p in added if not p.startswith("worker-")):
                rpc.supervisor.addProcessGroup(program)  # autostart: starts it
                self._wait_one(program)
                done.append(f"started {program}")
            workers = sorted((p for p in set(changed) | set(added) | (old - set(removed))
                              if p.startswith("worker-")), key=program_index)
            for program in workers:
                if self._info().get(program, {}).get("statename") in ("RUNNING", "STARTING"):
                    rpc.supervisor.stopProcessGroup(program, True)  # the worker drains first
                if program in changed or program in added:
                    if program in changed:
                        rpc.supervisor.removeProcessGroup(program)
                    rpc.supervisor.addProcessGroup(program)
                else:
                    rpc.supervisor.startProcess(program, False)  # rereads the rewritten spec file
                self._wait_one(program)
                done.append(f"rolled {program} (drained, restarted, ready)")
            for program in sorted(p for p in removed if not p.startswith("worker-")):
                rpc.supervisor.stopProcessGroup(program, True)
                rpc.supervisor.removeProcessGroup(program)
                done.append(f"stopped {program}")
            # Prometheus rereads its rewritten config (the engines it scrapes) on SIGHUP.
            if self._info().get("prometheus", {}).get("statename") == "RUNNING":
                rpc.supervisor.signalProcess("prometheus", "HUP")
        except (OSError, xmlrpc.client.Fault) as exc:
            raise PlatformError(f"supervisord could not switch to deployment_mode {mode.value}: "
                                f"{exc}") from exc
        return done

    def _wait_one(self, program: str) -> None:
        deadline = time.monotonic() + self.rolling_timeout_s
        while time.monotonic() < deadline:
            if self.state(program).healthy:
                return
            time.sleep(0.25)
        raise PlatformError(f"{program} not healthy {self.rolling_timeout_s:g} s after the change "
                            f"(rolling update stopped; log: {self.stack.paths.log(program)})")

    def http(self, component: str, method: str, path: str, json_body: Any = None,
             timeout_s: float = 30.0) -> HttpResult:
        state = self.stack.read_state() or {"components": {}}
        url = state["components"].get(component, {}).get("url")
        if url is None:
            raise Refused(f"component {component!r} has no URL in {self.target()}")
        headers = {}
        key = resolve_api_key(self.base_spec, self.stack.paths) if component.startswith("server-") else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        try:
            r = self._http.request(method, url + path, json=json_body, headers=headers,
                                   timeout=timeout_s)
        except httpx.HTTPError as exc:
            return HttpResult(0, f"{type(exc).__name__}: {exc}")
        return HttpResult(r.status_code, r.text)

    def scale(self, component: str, replicas: int) -> None:
        raise Refused(f"cannot scale {component}: {REFUSES[Action.SCALE]} (replicas in "
                      f"Pulumi.{self.base_spec.stack}.yaml, then `splitstack down && splitstack up`)")

    def nodes(self) -> list[NodeState]:
        return [NodeState(socket.gethostname(), ready=True, schedulable=True, gpu_allocatable=0)]

    def cordon(self, node: str, on: bool = True) -> None:
        raise Refused(f"{REFUSES[Action.DRAIN_GPU_NODE]}; on a GPU fault, stop the stack and check the driver "
                      "(`runbook gpu-probe`)")

    def evict_component_pods(self, component: str, node: str, force: bool = False) -> list[str]:
        self.cordon(node)
        return []

    def secret_value(self, name: str, key: str) -> str | None:
        raise Refused(f"{REFUSES[Action.UPDATE_HF_TOKEN]}; check model.source in Pulumi.{self.base_spec.stack}.yaml")

    def set_secret_value(self, name: str, key: str, value: str) -> None:
        self.secret_value(name, key)


__all__ = ["REFUSES", "LocalPlatform", "effective_spec"]
