"""How much CPU this worker may use, and sizing MinerU's page-render pool to it.

MinerU renders pages in a process pool of ``min(os.cpu_count(), MINERU_PDF_RENDER_THREADS or 3)``
processes. ``os.cpu_count()`` is the host's count: in a pod limited to 1 CPU on a 64-core node
that is 3 render processes fighting over one CPU's quota (CFS throttling), and on the local stack
one worker spreads over every core, so a second worker has nothing left to add. The budget here
is what the kernel will actually give us: the CPU affinity mask and the cgroup CPU quota (v2
``cpu.max``, v1 ``cpu.cfs_quota_us``), whichever is smaller.

Kubernetes enforces ``worker_pool.cpu_limit_millicores`` with that cgroup quota. The local stack
has no cgroups of its own, so a local worker emulates the limit with CPU affinity: replica ``i``
takes ``ceil(limit / 1000)`` CPUs starting at ``i * that`` (round robin), only when the limit is
below the host's CPUs. With the default limit (4000 mCPU) on a small host nothing is pinned.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path

from contract.worker_env import ENV_RENDER_PROCESSES

CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class CpuBudget:
    cpus: float  # CPUs this process may use at once
    source: str  # what limited it: "affinity", "cgroup-v2", "cgroup-v1"

    @property
    def render_processes(self) -> int:
        """One render process per whole CPU of the budget (at least one)."""
        return max(1, math.floor(self.cpus + 1e-9))


def cgroup_quota_cpus(root: Path = CGROUP_ROOT) -> tuple[float, str] | None:
    """The cgroup CPU quota in CPUs, or None when there is none (or no cgroup fs)."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        if quota != "max" and float(period) > 0:
            return float(quota) / float(period), "cgroup-v2"
        return None
    except (OSError, ValueError):
        pass
    try:
        quota_us = float((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = float((root / "cpu" / "cpu.cfs_period_us").read_text())
        if quota_us > 0 and period_us > 0:
            return quota_us / period_us, "cgroup-v1"
    except (OSError, ValueError):
        pass
    return None


def cpu_budget(affinity: Callable[[], set[int]] | None = None, cgroup_root: Path = CGROUP_ROOT) -> CpuBudget:
    cpus = len((affinity or (lambda: os.sched_getaffinity(0)))())
    budget = CpuBudget(float(cpus), "affinity")
    quota = cgroup_quota_cpus(cgroup_root)
    if quota is not None and quota[0] < budget.cpus:
        budget = CpuBudget(quota[0], quota[1])
    return budget


def local_cpu_set(index: int, cpu_limit_millicores: int, host_cpus: list[int]) -> set[int] | None:
    """The CPUs local replica ``index`` is pinned to, or None when the limit covers the host."""
    want = math.ceil(cpu_limit_millicores / 1000)
    if want >= len(host_cpus):
        return None
    start = index * want
    return {host_cpus[(start + k) % len(host_cpus)] for k in range(want)}


def _threads() -> list[int]:
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return [0]


def pin_local_worker(index: int, cpu_limit_millicores: int,
                     setaffinity: Callable[[int, set[int]], None] = os.sched_setaffinity) -> set[int] | None:
    """Emulate the pod's CPU limit on the local stack. Affinity is per thread and inherited by
    threads and processes started later, so every thread that exists already is pinned too."""
    cpus = local_cpu_set(index, cpu_limit_millicores, sorted(os.sched_getaffinity(0)))
    if cpus is not None:
        for tid in _threads():
            setaffinity(tid, cpus)
    return cpus


def size_render_pool(budget: CpuBudget, env: MutableMapping[str, str] | None = None) -> int:
    """Set MinerU's render-process count to the budget unless the operator set it already."""
    if env is None:
        env = os.environ
    if env.get(ENV_RENDER_PROCESSES, "").strip():
        try:
            return int(env[ENV_RENDER_PROCESSES])
        except ValueError:
            raise ValueError(f"{ENV_RENDER_PROCESSES}={env[ENV_RENDER_PROCESSES]!r} is not a whole "
                             "number: set it to the page-render processes per worker (e.g. 1), "
                             "or unset it to size the pool to the worker's CPU budget") from None
    env[ENV_RENDER_PROCESSES] = str(budget.render_processes)
    return budget.render_processes
