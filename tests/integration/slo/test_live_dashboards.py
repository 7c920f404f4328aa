"""Live proof: after a short run of traffic, every panel query of every
generated dashboard returns data from a real Prometheus scraping the simulator and the worker's
metric objects, with the generated recording rules loaded.

Switch to the full local stack once real workers run there (`splitstack up --stack local` and a
short `bench run` of the pipeline scenario), so the worker metrics come from real PDF jobs.
"""

import json
import math
import threading
import time

import pytest

from dashboards.generate import DASHBOARD_DIR, panel_exprs

pytestmark = pytest.mark.integration


def _worker_activity(m, stop: threading.Event) -> None:
    """What a busy worker records: PDFs and pages done, PDFs failed, client calls, retries, breaker,
    queue."""
    m.breaker_state.set(0)
    i = 0
    while not stop.is_set():
        for dur in (12.0, 40.0, 80.0, 100.0):
            m.pdf_duration.labels(backend="vlm-http-client").observe(dur)
            m.pdf_end_to_end.labels(backend="vlm-http-client").observe(dur + 5)
            m.pdfs_processed.labels(backend="vlm-http-client").inc()
            m.pages_processed.labels(backend="vlm-http-client").inc(3)  # the migration row's pages/s
        if i % 4 == 0:
            m.pdfs_failed.labels(backend="vlm-http-client", kind="permanent").inc()
        if i % 8 == 0:  # a job that kept killing its workers (the migration row's poison panel)
            m.pdfs_failed.labels(backend="vlm-http-client", kind="poison").inc()
        m.requests.labels(endpoint="chat").inc(10)
        m.request_duration.labels(endpoint="chat").observe(0.4)
        m.failures.labels(endpoint="chat", kind="timeout").inc()
        m.retries.labels(endpoint="chat").inc()
        m.queue_lag.set(3)
        m.in_flight.set(2)
        i += 1
        stop.wait(0.5)


def _has_data(result: list[dict]) -> bool:
    return any(not math.isnan(float(r["value"][1])) for r in result)


def test_every_dashboard_panel_returns_data(stack, worker_metrics, live):
    prom, sim, _ = stack
    stop = threading.Event()
    t = threading.Thread(target=_worker_activity, args=(worker_metrics[0], stop), daemon=True)
    t.start()
    try:
        live.chat_traffic(sim.url, 12)
        exprs = [(path.name, title, expr) for path in sorted(DASHBOARD_DIR.glob("*.json"))
                 for title, expr in panel_exprs(json.loads(path.read_text()))]
        assert len(exprs) > 40
        pending = list(exprs)
        started = time.monotonic()

        def remaining():
            nonlocal pending
            pending = [(b, title, e) for b, title, e in pending if not _has_data(prom.query(e))]
            return not pending

        # The 7-day throughput average is a 1-minute-step subquery: it needs one aligned minute of data.
        try:
            live.wait_until(remaining, 150, "every panel to return data", interval_s=2)
        except (AssertionError, TimeoutError):
            raise AssertionError(f"panels without data: {pending}") from None
        print(f"{len(exprs)} panel queries returned data after {time.monotonic() - started:.0f} s")
    finally:
        stop.set()
        t.join(timeout=5)
