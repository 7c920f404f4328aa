"""Free loopback ports and process groups, for code that starts local processes and must leave
none behind (bench/probes.py, bench/locust/procs.py; testsupport/procs.py builds on it for the
tests and benchmark scripts).

A process started with ``subprocess.Popen(..., start_new_session=True)`` leads a process group
whose id is its pid, so one signal to the group also reaches the children it spawned (vLLM's
engine core, a Locust worker's helpers), which a signal to the pid alone would orphan.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import psutil

KILL_WAIT_S = 5.0  # after SIGKILL nothing can delay the exit; this only bounds the reaping
_POLL_S = 0.05


ENV_PORT_BLOCK = "SPLITSTACK_PORT_BLOCK"  # "k/n": pick ports from block k of n (parallel test runs)
_EPHEMERAL_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST_PORT = 10000
_PORT_GAP = 64  # ports left free after each pick (see _PortCursor.take)


class _PortCursor:
    """Hands out ports below the kernel's ephemeral range, one after another.

    A port the kernel picked for ``bind(0)`` lies in the ephemeral range, which is also where every
    outgoing connection takes its local port: a port reserved now and bound minutes later (a
    private engine started by a rollback) can by then be held by some client's connection, and the
    server's bind fails. Below the range only listeners take ports. Walking forward from a random
    start never hands one process the same port twice (until the block wraps), and
    ``SPLITSTACK_PORT_BLOCK=k/n`` keeps parallel runs (pytest-xdist workers) in disjoint blocks."""

    def __init__(self) -> None:
        self._next: int | None = None

    def block(self) -> range:
        low = _ephemeral_low()
        if low - _LOWEST_PORT < 2000:  # no room below the range: the kernel's pick it is
            return range(0)
        index, count = _block_of(os.environ.get(ENV_PORT_BLOCK, ""))
        size = (low - _LOWEST_PORT) // count
        return range(_LOWEST_PORT + index * size, _LOWEST_PORT + (index + 1) * size)

    def take(self, host: str, count: int) -> int:
        ports = self.block()
        if not ports:
            return _kernel_port(host)
        if self._next is None or self._next not in ports:
            self._next = ports.start + random.randrange(len(ports))
        for _ in range(len(ports)):
            first = self._next
            # the next pick starts past a gap: a stack derives more ports from the ones it was
            # given (monolithic workers listen on metrics_port + replicas + i during a migration)
            after = first + count + _PORT_GAP
            self._next = after if after < ports.stop else ports.start
            if first + count <= ports.stop and all(_bindable(host, first + i) for i in range(count)):
                return first
        raise OSError(f"no run of {count} free port(s) on {host} in {ports.start}..{ports.stop - 1}")


def _ephemeral_low() -> int:
    try:
        return int(_EPHEMERAL_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default range starts here


def _block_of(raw: str) -> tuple[int, int]:
    try:
        index, count = (int(x) for x in raw.split("/"))
    except ValueError:
        return 0, 1
    return (index, count) if 0 <= index < count <= 64 else (0, 1)


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _kernel_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


_CURSOR = _PortCursor()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listens on right now, below the ephemeral range (see
    _PortCursor). Another process may take it before the caller binds it, so bind it (or start
    the server on it) soon."""
    return _CURSOR.take(host, 1)


def free_port_run(count: int, host: str = "127.0.0.1") -> int:
    """A port P with P .. P+count-1 all free right now (worker i listens on metrics_port + i)."""
    return _CURSOR.take(host, count)


def stop_group(proc_or_pid: subprocess.Popen | int, timeout_s: float, *, term_leader_only: bool = False) -> None:
    """SIGTERM the process group led by ``proc_or_pid`` (started with ``start_new_session=True``),
    wait up to ``timeout_s`` until no process of the group runs any more, then SIGKILL the group
    and wait up to KILL_WAIT_S. A group that is already gone is not an error.

    ``term_leader_only``: the SIGTERM goes to the leader alone, for a leader that shuts its own
    children down in order (the worker drains the document in flight with its PDF render pool;
    SIGTERM to the pool too breaks that document). The SIGKILL still goes to the whole group.

    Pass the Popen when there is one: the leader is then reaped here (``returncode`` is set),
    where a bare pid can only be reaped when it is a child of this process."""
    pgid = proc_or_pid.pid if isinstance(proc_or_pid, subprocess.Popen) else proc_or_pid
    reap = _reaper(proc_or_pid)
    for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, KILL_WAIT_S)):
        reap()
        if not group_runs(pgid):
            break
        try:
            if sig == signal.SIGTERM and term_leader_only:
                _kill_leader_or_group(pgid, sig)
            else:
                os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        if _wait_gone(pgid, reap, wait_s):
            break
    if isinstance(proc_or_pid, subprocess.Popen):
        # A multi-threaded leader shows as a zombie while its other threads still exit, and only
        # then can it be reaped: wait for that (moments) rather than returning with it unreaped.
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc_or_pid.wait(timeout=KILL_WAIT_S)
    reap()


def _kill_leader_or_group(pgid: int, sig: int) -> None:
    try:
        os.kill(pgid, sig)  # the group id is the leader's pid
    except ProcessLookupError:  # the leader is gone already: what it left behind gets the signal
        os.killpg(pgid, sig)


def _reaper(proc_or_pid: subprocess.Popen | int) -> Callable[[], object]:
    """What collects the leader's exit status, so that it does not linger as a zombie."""
    if isinstance(proc_or_pid, subprocess.Popen):
        return proc_or_pid.poll

    def reap_pid() -> None:
        try:
            os.waitpid(proc_or_pid, os.WNOHANG)
        except ChildProcessError:  # not our child (or reaped already): its parent reaps it
            pass
    return reap_pid


def _wait_gone(pgid: int, reap: Callable[[], object], wait_s: float) -> bool:
    deadline = time.monotonic() + wait_s
    while True:
        reap()
        if not group_runs(pgid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_S)


def group_runs(pgid: int) -> bool:
    """Whether a process of the group is still running. Zombies do not count: an orphan's zombie
    waits for pid 1 to reap it, which in a container may take a while or never happen."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member runs as another user: it runs
        return True
    for pid in psutil.pids():
        try:
            if os.getpgid(pid) == pgid and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return False
