"""The formulas of bench/metrics.py on hand-built records (numbers checked by hand)."""

import pytest

from bench.metrics import chat_summary, chunk_gaps_ms, derive, itl_gaps_ms, meets_slo
from bench.records import RequestRecord
from bench.scenario import RequestSLO

MS = 1_000_000


def rec(**kw) -> RequestRecord:
    base = dict(request_id="r", phase="measure", intended_ns=0, sent_ns=1 * MS, wall_sent_s=0.0,
                headers_ns=5 * MS, event_ns=[11 * MS, 21 * MS, 41 * MS], event_tokens=[1, 1, 2],
                event_content=[False, True, True], end_ns=51 * MS, status=200, output_tokens=4,
                prompt_tokens=10, server_prompt_tokens=10)
    base.update(kw)
    return RequestRecord(**base)


def test_per_request_formulas():
    d = derive(rec())
    assert d.ttfb_ms == 4.0          # headers 5 - sent 1
    assert d.ttft_ms == 10.0         # first token event 11 - 1 (even without content)
    assert d.ttfc_ms == 20.0         # first content event 21 - 1
    assert d.e2e_ms == 50.0          # end 51 - 1
    assert d.tpot_ms == pytest.approx((50 - 10) / 3)
    assert d.lag_ms == 1.0


def test_itl_spreads_a_multi_token_chunk_over_its_tokens():
    r = rec()
    assert chunk_gaps_ms(r) == [10.0, 20.0]
    assert itl_gaps_ms(r) == [10.0, 10.0, 10.0]  # chunk of 2 tokens after 20 ms: two 10 ms gaps
    assert sum(itl_gaps_ms(r)) == (r.event_ns[-1] - r.event_ns[0]) / MS


def test_tpot_undefined_for_one_token():
    assert derive(rec(output_tokens=1, event_ns=[11 * MS], event_tokens=[1], event_content=[True])).tpot_ms is None


def test_goodput_counts_errors_as_failing():
    slo = RequestSLO(ttft_ms=15)
    assert meets_slo(derive(rec()), True, slo)
    assert not meets_slo(derive(rec()), False, slo)
    assert not meets_slo(derive(rec()), True, RequestSLO(ttft_ms=5))


def test_summary_window_and_phases():
    records = [rec(request_id="w", phase="warmup"),
               rec(request_id="a"),
               rec(request_id="e", error="http_500", status=500, event_ns=[], event_tokens=[], event_content=[])]
    s = chat_summary(records, 0, 1000 * MS, RequestSLO(ttft_ms=100))
    assert s["requests"] == {"sent": 2, "ok": 1, "errors": 1, "error_rate": 0.5, "all_phases": 3}
    assert s["errors_by_reason"] == {"http_500": 1}
    assert s["latency"]["ttft_ms"]["n"] == 1
    # throughput counts what was delivered in the window from every phase (warmup + measured)
    assert s["throughput"]["completed_rps"] == pytest.approx(2.0)
    assert s["throughput"]["output_tokens_per_s"] == pytest.approx(8.0)
    assert s["goodput"]["good"] == 1 and s["goodput"]["fraction"] == 0.5


def test_ecdf_points_are_the_sorted_values_and_their_shares():
    import random

    from bench.report.plots import MAX_POINTS, _ecdf

    small = [3.0, 1.0, 2.0, 2.0]
    assert _ecdf(small) == ([1.0, 2.0, 2.0, 3.0], [0.25, 0.5, 0.75, 1.0])
    rng = random.Random(7)
    vals = [rng.random() for _ in range(10 * MAX_POINTS)]
    xs, ys = _ecdf(vals)
    s = sorted(vals)
    assert len(xs) <= MAX_POINTS and xs[0] == s[0] and xs[-1] == s[-1] and ys[-1] == 1.0
    for x, y in zip(xs, ys):  # every point is (k-th smallest value, k / n)
        assert s[round(y * len(s)) - 1] == x


def test_tokens_between_counts_events_in_the_window():
    from bench.metrics import _tokens_between

    r = rec(event_ns=[100, 200, 300, 400], event_tokens=[1, 1, 1, 1], event_content=[True] * 4)
    assert _tokens_between(r, 150, 400) == 2
    r = rec(event_ns=[100, 200, 300, 400], event_tokens=[1, 3, 1, 2], event_content=[True] * 4)
    assert _tokens_between(r, 150, 401) == 6 and _tokens_between(r, 0, 100) == 0
