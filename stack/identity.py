"""Is the stack a state file describes the one that answers on its ports?

The state file stays after `splitstack down` or a crash, and another stack (another checkout, a
test) may have been started on the same ports since. So a port that answers proves nothing. The
proof used here: the stack's supervisord (its pid file, in the stack's own state dir) is alive,
and the process listening on each port the state file names carries this stack's id
(``SPLITSTACK_STACK_ID``, a hash of the state dir that supervisord puts in every child's
environment; children inherit it), sits in a process group this stack's supervisord spawned, or
(container runtime) runs in a container labelled with this stack's id. Another stack has another
state dir, so another id; a process of another user shows no owner at all. Either way the port is
not this stack's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import psutil

if TYPE_CHECKING:
    from stack.launcher import LocalStack


class StackIdentityError(ValueError):
    """The state file does not describe what runs: the stack is stopped or its ports are foreign."""


# Components a client of the stack talks to: without them listening there is no stack to use.
REQUIRED_ROLES = ("server", "queue")


def listeners(port: int) -> set[int | None]:
    """PIDs listening on TCP ``port`` on any local address (None: a socket whose owner this user
    cannot see, i.e. another user's process)."""
    return {c.pid for c in psutil.net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port}


def container_pids(stack_id: str) -> set[int]:
    """PIDs of the processes in running podman containers labelled with ``stack_id`` (each
    container's main process and its descendants); empty without podman."""
    import shutil

    from stack.podman import LABEL_STACK, podman

    if shutil.which("podman") is None:
        return set()
    out = podman(["ps", "--filter", f"label={LABEL_STACK}={stack_id}", "--format", "{{.Pid}}"], check=False).stdout
    found: set[int] = set()
    for word in out.split():
        if not word.isdigit() or int(word) == 0:
            continue
        found.add(int(word))
        try:
            found |= {c.pid for c in psutil.Process(int(word)).children(recursive=True)}
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def _describe(pid: int | None) -> str:
    if pid is None:
        return "a process of another user"
    try:
        proc = psutil.Process(pid)
        cmd = " ".join(proc.cmdline())[:120] or proc.name()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return f"pid {pid}"
    return f"pid {pid} ({cmd})"


def verify_running(local: LocalStack, state: dict[str, Any] | None = None) -> dict[str, Any]:
    """The state of ``local`` when the stack runs as its state file says; else StackIdentityError
    with the command that fixes it. Checks, in order: the state file, this stack's supervisord,
    then each component's port (a required one must listen; any listener must be this stack's)."""
    spec, paths = local.spec, local.paths
    up = f"`splitstack up --stack {spec.stack}`"
    state = state if state is not None else local.read_state()
    if state is None:
        raise StackIdentityError(f"stack {spec.stack!r} is not running (no {paths.state_file}); start it with "
                                 f"{up}. Nothing was sent.")
    if not local.supervisor.running():
        raise StackIdentityError(
            f"stack {spec.stack!r} is stopped: its state file {paths.state_file} is left from an earlier run "
            f"(`splitstack down` or a crash) and its supervisord ({paths.supervisord_pid}) is not running, so "
            f"whatever answers on its ports is not this stack; start it with {up}. Nothing was sent.")
    ours: set[int] | None = None
    for name, comp in sorted(state.get("components", {}).items()):
        port = comp.get("port")
        if not isinstance(port, int):
            continue
        pids = listeners(port)
        if not pids:
            if comp.get("role") in REQUIRED_ROLES:
                raise StackIdentityError(
                    f"stack {spec.stack!r}: {name} does not listen on port {port} (its supervisord runs, the "
                    f"component does not); see `splitstack status --stack {spec.stack}` and "
                    f"`splitstack logs --stack {spec.stack}`, or restart with `splitstack down --stack "
                    f"{spec.stack}` and {up}. Nothing was sent.")
            continue
        if ours is None:
            ours = {p.pid for p in local.processes()}
        if any(p is None or p not in ours for p in pids) and state.get("runtime") == "podman":
            ours |= container_pids(paths.stack_id)  # a container's processes do not inherit the tag
        foreign = sorted((p for p in pids if p is None or p not in ours), key=lambda p: p or 0)
        if foreign:
            raise StackIdentityError(
                f"stack {spec.stack!r}: port {port} of {name} is held by {_describe(foreign[0])}, which is not "
                f"part of this stack (stack id {paths.stack_id}, state dir {paths.root}): another stack or "
                "program listens on it. Stop that one, or give this stack other ports in its spec, then "
                f"{up}. Nothing was sent.")
    return state
