"""Helpers of the local platform: what supervisord's RPC and log say about a program, and the
simulator's extra arguments."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from contract.spec import Engine, Spec
from runbooks.platforms.oom import oom_evidence, read_kernel_log
from stack.components import Component
from stack.topology import shared_servers


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
    for s in shared_servers(spec):  # none in monolithic mode
        ports[f"server-{s.name}"] = s.port
    return ports


def program_index(name: str) -> int:
    return int(name.rsplit("-", 1)[1])


def last_exit(supervisord_log: Path, program: str) -> tuple[str | None, int | None]:
    """How ``program`` last ended, from supervisord's log ("terminated by SIGKILL; not
    expected", "exit status 70; not expected"), and the pid it had (its last spawn before)."""
    last, pid, spawned = None, None, None
    try:
        for line in supervisord_log.read_text(errors="replace").splitlines():
            s = re.search(r"spawned: '" + re.escape(program) + r"' with pid (\d+)", line)
            if s:
                spawned = int(s.group(1))
            m = re.search(r"(?:exited|gave up): " + re.escape(program) + r" \(([^)]*)\)", line)
            if m:
                last, pid = m.group(1), spawned
    except OSError:
        pass
    return last, pid


def exit_reason(proc: dict, supervisord_log: Path,
                kernel_log: Callable[[], str | None] = read_kernel_log) -> tuple[str | None, int | None]:
    code = proc.get("exitstatus")
    last, pid = last_exit(supervisord_log, proc.get("name", ""))
    if last and "SIGKILL" in last:
        # A SIGKILL is an OOM kill only when the kernel says so (runbooks/platforms/oom.py).
        evidence = oom_evidence(pid, kernel_log())
        return (f"OOMKilled: {last} ({evidence.detail})" if evidence.found
                else f"{last} ({evidence.detail})"), code
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



def program_commands(conf_text: str) -> dict[str, list[str]]:
    """argv of every [program:x] in a supervisord config rendered by stack/supervisor.py."""
    out: dict[str, list[str]] = {}
    program = None
    for line in conf_text.splitlines():
        m = re.match(r"\[program:([^\]]+)\]", line)
        if m:
            program = m.group(1)
        elif program and line.startswith("command="):
            out[program] = shlex.split(line[len("command="):].replace("%%", "%"))
    return out


def server_mismatches(spec: Spec, commands: dict[str, list[str]]) -> list[str]:
    """How the running servers differ from the spec: engine and the flags both engines take.

    A stack started with `splitstack up --engine sim` runs the simulator although the spec file
    says vllm: acting on it with the file's spec would rebuild the server as vLLM.
    """
    problems = []
    for server in spec.inference_servers:
        argv = commands.get(f"server-{server.name}")
        if argv is None or server.replicas == 0:
            continue
        engine = "sim" if "splitstack.cli.sim" in argv else "vllm"
        if engine != server.engine.value:
            problems.append(
                f"server-{server.name} runs engine {engine!r}, the spec says {server.engine.value!r} "
                f"(started with --engine {engine}? pass --spec-override "
                f"inference_servers.{spec.server_names.index(server.name)}.engine={engine})")
            continue
        for flag, want in (("--max-num-seqs", server.max_num_seqs), ("--max-model-len", server.max_model_len)):
            if flag in argv and argv[argv.index(flag) + 1] != str(want):
                problems.append(f"server-{server.name} runs {flag} {argv[argv.index(flag) + 1]}, "
                                f"the spec says {want}")
    return problems
