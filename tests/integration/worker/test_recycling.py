"""Memory: the MinerU context is rebuilt every N documents; a worker over its RSS limit drains and
exits 75 for a restart, losing nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from pdf_fixtures import make_pdf

from testsupport.procs import wait_until

pytestmark = pytest.mark.integration


def test_context_recycled_every_n_documents(make_harness, tmp_path: Path) -> None:
    h = make_harness(**{"worker_pool.recycle_after_documents": 1})
    h.start_redis()
    h.start_sim()
    w = h.start_worker()
    ids = h.submit([make_pdf(tmp_path / f"d{i}.pdf", 1, seed=i) for i in range(3)])
    assert {r["state"] for r in h.wait_terminal(ids, 90).values()} == {"done"}
    # (logged just after the ack, so give the last one a moment)
    wait_until(lambda: w.log().count("recycled the MinerU context") == 3, 10, "3 recycles")


def test_worker_over_its_rss_limit_exits_for_a_restart_without_losing_jobs(make_harness, tmp_path: Path) -> None:
    h = make_harness()
    h.start_redis()
    h.start_sim()
    h.env_extra["SPLITSTACK_WORKER_RSS_LIMIT_FRACTION"] = "0.001"  # any RSS is over the limit
    w = h.start_worker()
    ids = h.submit([make_pdf(tmp_path / f"d{i}.pdf", 1, seed=i) for i in range(2)])
    wait_until(lambda: not w.alive(), 60, "worker exit after its first document")
    assert w.popen.returncode == 75
    assert "recycling the process" in w.log()
    states = h.states(ids)
    assert sorted(r["state"] for r in states.values()) == ["done", "queued"]
    h.env_extra.clear()
    h.start_worker()
    assert {r["state"] for r in h.wait_terminal(ids, 60).values()} == {"done"}
