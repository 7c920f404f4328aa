"""Child processes that die with the worker.

MinerU renders pages in a ``ProcessPoolExecutor`` (spawn start method). When the worker is
SIGKILLed (the kernel's OOM killer, ``kill -9``) nothing tells those processes, and they live on
holding memory. Linux can: ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` makes the kernel kill a process
when its parent dies (prctl(2)). A spawned child imports the parent's main module as
``__mp_main__`` before it runs any task, so ``splitstack/cli/worker_process.py`` calls
:func:`die_with_parent` there.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# The worker's pid, set by the worker for the processes it spawns. A child cannot test "was I
# adopted by init" with getppid() == 1: in a container the worker itself is PID 1.
ENV_PARENT_PID = "SPLITSTACK_WORKER_PID"


def mark_parent() -> None:
    """Called by the worker before it spawns anything: its children know whom to die with."""
    os.environ[ENV_PARENT_PID] = str(os.getpid())


def die_with_parent() -> bool:
    """Ask the kernel to SIGKILL this process when its parent exits; exit now if the parent is
    gone already. False where prctl is not available (not Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
        return False
    parent = os.environ.get(ENV_PARENT_PID, "")
    if parent.isdigit() and os.getppid() != int(parent):  # it died before prctl: adopted already
        os._exit(1)
    return True
