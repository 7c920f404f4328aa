"""Telling a dead worker from a live one, and cleaning up after it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from worker.queue import process_gone
from worker.store import DirectoryStore


def test_a_consumer_whose_process_is_gone_on_this_host_is_dead() -> None:
    host = socket.gethostname()
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert process_gone(f"{host}-w0-{child.pid}")
    assert not process_gone(f"{host}-w1-{os.getpid()}")  # alive
    assert not process_gone(f"another-host-w0-{child.pid}")  # cannot tell: the silence rule decides
    assert not process_gone("not-a-worker-name")


def test_only_the_jobs_own_staging_folders_are_removed(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    mine, other = store.staging("a"), store.staging("a-b")
    assert store.discard_job_staging("a") == 1
    assert not mine.exists() and other.exists()
