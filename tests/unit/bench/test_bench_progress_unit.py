"""The live view's rolling window: rate, errors and percentiles over the last seconds."""

from __future__ import annotations

from bench.progress import LiveWindow
from bench.records import RequestRecord, to_row

MS = 1_000_000


def test_live_window_reports_rate_errors_and_percentiles():
    live = LiveWindow(window_s=10)
    for i in range(20):
        ok = RequestRecord(request_id=f"r{i}", phase="measure", intended_ns=0, sent_ns=0, wall_sent_s=0.0,
                           event_ns=[(10 + i) * MS], event_tokens=[1], event_content=[True], end_ns=(100 + i) * MS,
                           status=200)
        live.add_row(to_row(ok))
    bad = RequestRecord(request_id="x", phase="measure", intended_ns=0, sent_ns=0, wall_sent_s=0.0, end_ns=5 * MS,
                        status=500, error="http_500")
    live.add_row(to_row(bad))
    now = live.items[-1][0]
    line = live.line(now=now + 2)
    assert "1 error" in line and "TTFT p50/p95 20 ms/28 ms" in line and "E2E p50/p95 110 ms/118 ms" in line
    assert live.line(now=now + 60) == "last 10 s: nothing finished"  # the window rolls
