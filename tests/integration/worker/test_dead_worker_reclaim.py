"""A dead worker's document comes back in seconds, not at the visibility timeout (120 s here):
its process is gone (or it stopped announcing itself), another worker takes the job over and
removes the dead one's staging folder; until then `jobs` shows the job waiting, not running."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pdf_fixtures import make_pdf

from testsupport.procs import wait_until

pytestmark = pytest.mark.integration
TAKEOVER_TARGET_S = 15.0


def _row(h, job_id: str) -> dict[str, str]:
    return h.states([job_id])[job_id]


def _staging(h, job_id: str) -> list[Path]:
    return list(h.outputs.glob(f".staging-{job_id}-*"))


def test_a_sigkilled_workers_job_is_taken_over_in_seconds(make_harness, tmp_path: Path) -> None:
    h = make_harness()  # queue.visibility_timeout_s: the spec's 120 s
    assert h.spec.queue.visibility_timeout_s >= 120
    h.start_redis()
    h.start_sim("--fault", "added_latency_ms=300")
    # 1) Two workers: the survivor takes the job over.
    workers = [h.start_worker(), h.start_worker()]
    job, = h.submit([make_pdf(tmp_path / "a.pdf", 8)])
    wait_until(lambda: _row(h, job).get("state") == "running" and _staging(h, job), 60, "job running")
    holder = _row(h, job)["consumer"]
    victim = next(w for w in workers if holder.endswith(f"-{w.pid}"))
    victim.kill()  # SIGKILL, as the kernel's OOM killer would
    t0 = time.monotonic()
    wait_until(lambda: _row(h, job).get("consumer") not in (None, holder), 60, "job taken over")
    takeover_s = time.monotonic() - t0
    print(f"\nreclaim after SIGKILL of the worker holding the job: {takeover_s:.1f} s "
          f"(visibility timeout {h.spec.queue.visibility_timeout_s:g} s)")
    assert takeover_s < TAKEOVER_TARGET_S
    assert h.wait_terminal([job], 120)[job]["state"] == "done"
    assert _staging(h, job) == [], "the dead worker's staging folder was left"
    # 2) The only worker dies: `jobs` shows its job waiting; a new worker takes it at once.
    survivor = next(w for w in workers if w is not victim)
    second, = h.submit([make_pdf(tmp_path / "b.pdf", 8, seed=2)])
    wait_until(lambda: _row(h, second).get("state") == "running" and _staging(h, second), 60, "running")
    survivor.kill()
    row = _row(h, second)
    assert row["state"] == "queued" and "waiting: its worker" in row["reason"], row
    assert _staging(h, second)
    h.start_worker()
    t1 = time.monotonic()
    wait_until(lambda: _row(h, second).get("state") in ("running", "done")
               and _row(h, second).get("consumer") != row["consumer"], 60, "taken over")
    print(f"taken over {time.monotonic() - t1:.1f} s after a new worker was ready")
    assert h.wait_terminal([second], 120)[second]["state"] == "done"
    assert _staging(h, second) == []
    assert h.dead_letters() == []
