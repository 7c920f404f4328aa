"""worker/orphans.py: a render process dies with its worker, also when the worker is PID 1."""

from __future__ import annotations

import os
import subprocess
import sys

from worker.orphans import ENV_PARENT_PID

CHILD = "from worker.orphans import die_with_parent; print(die_with_parent())"


def _child(parent_pid: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, ENV_PARENT_PID: parent_pid}
    return subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=30)


def test_a_child_of_the_worker_keeps_running() -> None:
    # Its parent is this test process, whatever its pid: PID 1 in a container is no special case.
    done = _child(str(os.getpid()))
    assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr


def test_a_child_whose_worker_is_gone_exits_at_once() -> None:
    done = _child("999999999")  # not its parent: the worker died before the child asked the kernel
    assert done.returncode == 1 and done.stdout == ""
