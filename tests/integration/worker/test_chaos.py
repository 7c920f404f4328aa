"""SIGTERM drains: the document in flight is finished, or released when the drain time is too
short. The other faults (server outages, kills, storms, a hang) are in test_chaos_suite.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from pdf_fixtures import make_pdf

from testsupport.procs import wait_until

pytestmark = pytest.mark.integration

def test_sigterm_finishes_in_flight_work_or_releases_it(make_harness, tmp_path: Path) -> None:
    h = make_harness()
    h.start_redis()
    h.start_sim("--fault", "added_latency_ms=100")
    # 1) enough drain time: the in-flight document is finished, acked, exit status 0.
    w1 = h.start_worker()
    first, = h.submit([make_pdf(tmp_path / "a.pdf", 2)])
    wait_until(lambda: h.states([first])[first].get("state") == "running", 30, "running")
    assert w1.stop() == 0  # SIGTERM
    assert h.states([first])[first]["state"] == "done"
    # 2) a drain too short for the document: released back to the queue, never acked as done.
    h.env_extra["SPLITSTACK_WORKER_DRAIN_TIMEOUT_S"] = "0.5"
    w2 = h.start_worker()
    second, = h.submit([make_pdf(tmp_path / "b.pdf", 8)])
    wait_until(lambda: h.states([second])[second].get("state") == "running", 30, "running")
    assert w2.stop() == 0
    assert h.states([second])[second]["state"] == "queued"
    assert not (h.outputs / second).exists()
    h.env_extra.clear()
    h.start_worker()
    assert h.wait_terminal([second], 90)[second]["state"] == "done"
    assert h.dead_letters() == []
