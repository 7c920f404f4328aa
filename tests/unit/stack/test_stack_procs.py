"""stack/procs.py with real processes: free ports, and a group stop that leaves nothing behind."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

import psutil

from stack.procs import _CURSOR, ENV_PORT_BLOCK, _ephemeral_low, free_port, free_port_run, stop_group

# A leader that spawns a child into its own group, then both sleep; the child's pid goes to stdout.
LEADER_AND_CHILD = [sys.executable, "-c", "import subprocess, sys, time; "
                    "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
                    "print(c.pid, flush=True); time.sleep(60)"]
IGNORES_SIGTERM = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                   "print('ready', flush=True); time.sleep(60)"]


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE  # an orphan's zombie is dead
    except psutil.NoSuchProcess:
        return False


def _group_leader(argv: list[str]) -> subprocess.Popen:
    return subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, start_new_session=True)


def test_free_port_can_be_bound():
    port = free_port()
    assert 1024 <= port < _ephemeral_low()  # unprivileged, and no client's outgoing connection takes it
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # raises OSError (EADDRINUSE) when something holds it
        assert sock.getsockname() == ("127.0.0.1", port)


def test_free_ports_lie_below_the_ephemeral_range_and_never_repeat():
    # an outgoing connection takes its local port from the ephemeral range: a reserved port
    # there can be held by a client when its server binds it minutes later
    ports = [free_port() for _ in range(200)] + [free_port_run(3)]
    assert all(p < _ephemeral_low() for p in ports)
    assert len(set(ports)) == len(ports)
    # a stack derives ports from those it was given (metrics_port + replicas + i): the next pick
    # leaves room for them
    _CURSOR._next = _CURSOR.block().start  # not near the block's end, where the picks wrap around
    first = free_port_run(2)
    assert free_port() >= first + 2 + 64


def test_parallel_runs_take_disjoint_port_blocks(monkeypatch):
    seen = []
    for k in range(2):
        monkeypatch.setenv(ENV_PORT_BLOCK, f"{k}/2")
        seen.append({free_port() for _ in range(50)})
    assert seen[0] and seen[1] and not seen[0] & seen[1]
    assert max(seen[0]) < min(seen[1])


def test_stop_group_stops_the_leader_and_its_children():
    proc = _group_leader(LEADER_AND_CHILD)
    child = int(proc.stdout.readline())
    t0 = time.monotonic()
    stop_group(proc, timeout_s=10)
    assert time.monotonic() - t0 < 5  # both exit on SIGTERM: no wait for the timeout
    assert proc.returncode == -signal.SIGTERM
    assert not _running(child)
    proc.stdout.close()


def test_stop_group_kills_what_ignores_sigterm_after_the_timeout():
    proc = _group_leader(IGNORES_SIGTERM)
    assert proc.stdout.readline() == "ready\n"
    t0 = time.monotonic()
    stop_group(proc, timeout_s=0.5)
    assert 0.5 <= time.monotonic() - t0 < 5
    assert proc.returncode == -signal.SIGKILL
    proc.stdout.close()


def test_stop_group_takes_a_pid_and_a_group_already_gone_is_fine():
    proc = _group_leader(LEADER_AND_CHILD)
    child = int(proc.stdout.readline())
    stop_group(proc.pid, timeout_s=10)
    assert not _running(proc.pid) and not _running(child)
    t0 = time.monotonic()
    stop_group(proc, timeout_s=10)  # nothing left: returns at once
    assert time.monotonic() - t0 < 1
    # the pid form reaped the leader itself, so Popen never saw its status (pass the Popen for that)
    assert proc.returncode is not None
    proc.stdout.close()


# On SIGTERM the leader checks that its child still runs (nobody else signalled it), then stops it.
DRAINS_ITS_CHILD = [sys.executable, "-c", "import signal, subprocess, sys, time\n"
                    "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
                    "def drain(*_):\n"
                    "    print('child running' if c.poll() is None else 'child gone', flush=True)\n"
                    "    c.terminate(); c.wait(); sys.exit(0)\n"
                    "signal.signal(signal.SIGTERM, drain); print(c.pid, flush=True); time.sleep(60)\n"]


def test_term_leader_only_lets_the_leader_stop_its_children():
    proc = _group_leader(DRAINS_ITS_CHILD)
    child = int(proc.stdout.readline())
    stop_group(proc, timeout_s=10, term_leader_only=True)
    assert proc.returncode == 0
    assert proc.stdout.read() == "child running\n"
    assert not _running(child)
    proc.stdout.close()
