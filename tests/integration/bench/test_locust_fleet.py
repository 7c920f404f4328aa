"""bench/locust/procs.Fleet stops every process within its grace + a few seconds, however many
processes it holds and however they treat SIGTERM (no Locust needed: plain Python processes)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import psutil
import pytest

from bench.locust.procs import AFTER_FIRST_S, Fleet

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

# ignores SIGTERM and starts a child in a session of its own (which a signal to the group misses)
STUBBORN = ("import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'], start_new_session=True); "
            "print('up', flush=True); time.sleep(300)")


def _started(fleet: Fleet) -> list[psutil.Process]:
    end = time.monotonic() + 20
    while not all("up" in p.log() for p in fleet.procs):
        assert time.monotonic() < end, [p.log() for p in fleet.procs]
        time.sleep(0.05)
    return [psutil.Process(pid) for pid in fleet.pids()]


def test_stops_processes_that_ignore_sigterm_together(tmp_path):
    grace = 3.0
    fleet = Fleet(tmp_path, grace_s=grace)
    for i in range(3):
        fleet.start(f"p{i}", [sys.executable, "-c", STUBBORN], {})
    procs = _started(fleet)
    assert len(procs) == 6  # three leaders, three children outside their groups
    t0 = time.monotonic()
    fleet.close()
    took = time.monotonic() - t0
    # one grace for the first process, AFTER_FIRST_S for the rest together, then SIGKILL: not one grace each
    assert took < grace + min(grace, AFTER_FIRST_S) + 2, took
    assert not [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def test_a_second_ctrl_c_kills_at_once(tmp_path):
    """Ctrl-C again while the fleet stops: no more grace, every process killed (the stop is not abandoned)."""
    fleet = Fleet(tmp_path, grace_s=30.0)
    fleet.start("p0", [sys.executable, "-c", STUBBORN], {})
    procs = _started(fleet)
    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
    t0 = time.monotonic()
    fleet.close()  # raises nothing: the signal only hurries the stop
    assert time.monotonic() - t0 < 5
    assert not [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
