"""Was a process killed for memory? Only evidence answers that: a SIGKILL alone is also what
`kill -9`, a supervisor's stop timeout or an operator does.

Evidence read, in order:
* the kernel log (``dmesg``): the OOM killer writes ``Out of memory: Killed process PID (name)``
  (or ``oom-kill:...,pid=PID,...`` from Linux 5.x: mm/oom_kill.c);
* the memory cgroup's OOM-kill counter of the process's cgroup: ``oom_kill`` in
  ``memory.events`` (cgroup v2) or ``memory.oom_control`` (cgroup v1), which counts kills by
  a memory limit (what a container limit does) without the kernel log;
* on Kubernetes the kubelet's own verdict, the container's last state reason ``OOMKilled``
  (runbooks/platforms/kubernetes.py).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

_KILLED = re.compile(r"(?:Out of memory|Memory cgroup out of memory): Killed process (\d+) \(([^)]*)\)")
_OOM_KILL = re.compile(r"oom-kill:.*\bpid=(\d+)\b")


@dataclass(frozen=True)
class OomEvidence:
    found: bool
    detail: str  # what was read and what it says


def kernel_oom_pids(text: str) -> dict[int, str]:
    """pid -> the kernel log line that reports its OOM kill."""
    out: dict[int, str] = {}
    for line in text.splitlines():
        m = _KILLED.search(line) or _OOM_KILL.search(line)
        if m:
            out[int(m.group(1))] = line.strip()
    return out


def read_kernel_log(timeout_s: float = 3.0) -> str | None:
    """``dmesg`` output, or None when it cannot be read here (not permitted, not installed)."""
    try:
        result = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout if result.returncode == 0 else None


def cgroup_oom_kills(cgroup_root: Path = Path("/sys/fs/cgroup"),
                     proc_cgroup: Path = Path("/proc/self/cgroup")) -> int | None:
    """OOM kills counted by the memory cgroup this stack runs in (None: not readable)."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "" and (cgroup_root / path.lstrip("/") / "memory.events").is_file():
            return _field(cgroup_root / path.lstrip("/") / "memory.events", "oom_kill")
        if "memory" in controllers.split(","):
            return _field(cgroup_root / "memory" / path.lstrip("/") / "memory.oom_control", "oom_kill")
    return None


def _field(path: Path, name: str) -> int | None:
    try:
        for line in path.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == name:
                return int(value)
    except (OSError, ValueError):
        return None
    return None


def oom_evidence(pid: int | None, kernel_log: str | None) -> OomEvidence:
    """Whether the kernel reports killing ``pid`` for memory."""
    if pid is None:
        return OomEvidence(False, "no PID recorded for the killed process: OOM not confirmed")
    if kernel_log is None:
        kills = cgroup_oom_kills()
        counter = (f"; the memory cgroup counts {kills} OOM kill(s) since it was created" if kills
                   else "; the memory cgroup counts no OOM kill" if kills == 0 else "")
        return OomEvidence(False, f"kernel log not readable here (dmesg): OOM of pid {pid} not "
                                  f"confirmed{counter}")
    line = kernel_oom_pids(kernel_log).get(pid)
    if line:
        return OomEvidence(True, f"kernel log: {line[:200]}")
    return OomEvidence(False, f"the kernel log reports no OOM kill of pid {pid}: killed by a signal "
                              "from a person or a program (kill -9, a stop timeout)")
