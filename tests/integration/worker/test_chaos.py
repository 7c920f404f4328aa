"""Chaos: the inference server dies for 20 s; a worker is SIGKILLed mid-document; SIGTERM drains."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from pdf_fixtures import make_corpus, make_pdf

from testsupport.procs import wait_until
from testsupport.worker import metric_value
from worker.store import METADATA

pytestmark = pytest.mark.integration

FAST_BREAKER = {
    "worker_pool.circuit_breaker.failure_threshold": 3,
    "worker_pool.circuit_breaker.recovery_timeout_s": 2.0,
    "worker_pool.max_retries": 2,
}


def test_server_outage_of_20_s_loses_nothing(make_harness, tmp_path: Path) -> None:
    h = make_harness(**FAST_BREAKER)
    h.start_redis()
    sim = h.start_sim()
    workers = [h.start_worker(), h.start_worker()]
    ids = h.submit(make_corpus(tmp_path / "pdfs", 12, max_pages=3))
    wait_until(lambda: sum(r.get("state") == "done" for r in h.states(ids).values()) >= 2, 60, "2 done")
    sim.kill()
    outage_started = time.monotonic()
    breaker_seen: set[float] = set()
    while time.monotonic() - outage_started < 20:
        for w in workers:
            breaker_seen.add(metric_value(h.metrics(w), "mineru_vllm_circuit_breaker_state"))
        time.sleep(0.5)
    states_during = h.states(ids)
    assert not any(r.get("state") == "dead_lettered" for r in states_during.values())
    h.start_sim()
    rows = h.wait_terminal(ids, 120)
    assert {r["state"] for r in rows.values()} == {"done"}, rows
    assert 2.0 in breaker_seen  # open was visible in the metrics during the outage
    assert h.dead_letters() == []
    texts = [h.metrics(w) for w in workers]
    assert sum(metric_value(t, "mineru_pdfs_processed_total") for t in texts) == 12
    assert sum(metric_value(t, "mineru_pdfs_failed_total") for t in texts) == 0
    assert sum(metric_value(t, "mineru_vllm_client_failures_total", {"kind": "connect"}) for t in texts) > 0
    wait_until(lambda: all(metric_value(h.metrics(w), "mineru_vllm_circuit_breaker_state") == 0
                           for w in workers), 10, "breakers closed again")
    for job_id in ids:
        json.loads((h.outputs / job_id / METADATA).read_text())


def test_sigkilled_worker_job_is_reclaimed_by_another(make_harness, tmp_path: Path) -> None:
    h = make_harness(**{"queue.visibility_timeout_s": 3.0})
    h.start_redis()
    h.start_sim("--fault", "added_latency_ms=150")  # ~10 s document: time to kill it mid-way
    a = h.start_worker()
    job_id, = h.submit([make_pdf(tmp_path / "doc.pdf", 8)])
    wait_until(lambda: h.states([job_id])[job_id].get("state") == "running", 30, "job running")
    time.sleep(1.5)
    a.kill()
    assert h.states([job_id])[job_id]["state"] == "running"  # nobody finished it
    b = h.start_worker()
    row = h.wait_terminal([job_id], 120)[job_id]
    assert row["state"] == "done"
    meta = json.loads((h.outputs / job_id / METADATA).read_text())
    assert meta["deliveries"] == 2 and meta["worker"] == row["consumer"]
    assert metric_value(h.metrics(b), "mineru_pdfs_processed_total") == 1
    assert h.redis().xpending(h.spec.queue.stream, h.spec.queue.group)["pending"] == 0
    assert h.dead_letters() == []


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
