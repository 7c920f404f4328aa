"""The formulas of bench/metrics.py on hand-built records (numbers checked by hand)."""

import pytest

from bench.metric_table import chunk_gaps_ms, derive, itl_gaps_ms
from bench.metrics import chat_summary, meets_slo
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
    # no per-event usage, 8 tokens by the final usage over 4 events: each event carries 2 of them
    r = rec(event_ns=[100, 200, 300, 400], event_tokens=[1, 1, 1, 1], event_content=[True] * 4, output_tokens=8)
    assert _tokens_between(r, 150, 400) == 4 and _tokens_between(r, 0, 1000) == 8


def test_goodput_is_never_above_completions():
    """Requests sent late in the window and finishing after it met the SLO but did not complete in
    it: goodput counts what completed, on the same clock as completed_rps."""
    from bench.metrics import chat_summary
    from bench.scenario import RequestSLO

    early = [rec(request_id=f"e{i}", sent_ns=i * MS, end_ns=i * MS + 51 * MS) for i in range(5)]
    late = [rec(request_id=f"l{i}", sent_ns=(900 + i) * MS, end_ns=(900 + i) * MS + 51 * MS,
                event_ns=[(911 + i) * MS, (921 + i) * MS, (941 + i) * MS]) for i in range(5)]
    s = chat_summary(early + late, 0, 950 * MS, RequestSLO(e2e_ms=100), tput_end_ns=950 * MS)
    assert s["goodput"]["good"] == 10  # all ten met the SLO
    assert s["throughput"]["goodput_rps"] <= s["throughput"]["completed_rps"]
    assert s["throughput"]["goodput_rps"] == s["throughput"]["completed_rps"]  # every completed one was good


def test_client_and_server_counts_are_put_side_by_side():
    from bench.agreement import count_agreement

    records = [rec(request_id=f"r{i}", prompt_tokens=128, server_prompt_tokens=42, output_tokens=4) for i in range(3)]
    server = {"counters": {"vllm:request_success_total": 3.0, "vllm:prompt_tokens_total": 126.0,
                           "vllm:generation_tokens_total": 13.0}}
    rows = {r["count"]: r for r in count_agreement(records, server)}
    assert rows["requests"] == {"count": "requests", "client": 3, "server": 3,
                                "counter": "vllm:request_success_total", "agrees": True}
    assert rows["prompt_tokens"]["agrees"] and rows["prompt_tokens"]["client_counted"] == 384  # the client's 128s
    assert rows["output_tokens"]["client"] == 12 and not rows["output_tokens"]["agrees"]
    assert count_agreement(records, None) == []


def test_event_gaps_of_a_run_are_each_records_gaps_in_order():
    # the summary and the report read every gap of a run at once (numpy); the values must be those of
    # chunk_gaps_ms / itl_gaps_ms record by record: no event, one event, multi-token events, first and last
    from bench.metric_table import event_gaps

    runs = [rec(event_ns=[], event_tokens=[], event_content=[]),
            rec(),  # 10 ms, then 20 ms carrying 2 tokens
            rec(event_ns=[7 * MS], event_tokens=[1], event_content=[True]),
            rec(event_ns=[3 * MS, 4 * MS, 9 * MS, 12 * MS], event_tokens=[1, 3, 1, 0], event_content=[True] * 4),
            rec(event_ns=[], event_tokens=[], event_content=[])]
    gaps = event_gaps(runs)
    for i, r in enumerate(runs):
        assert gaps.chunk[gaps.chunk_record == i].tolist() == chunk_gaps_ms(r)
        assert gaps.itl[gaps.itl_record == i].tolist() == itl_gaps_ms(r)
    assert gaps.itl_means() == [None, 10.0, None, pytest.approx((1 / 3 * 3 + 5 + 3) / 5), None]
    assert gaps.chunk_means() == [None, 15.0, None, 3.0, None]
    everything = [g for r in runs for g in itl_gaps_ms(r)]
    assert gaps.itl.tolist() == everything == [10.0, 10.0, 10.0, 1 / 3, 1 / 3, 1 / 3, 5.0, 3.0]
    import numpy as np

    picked = np.array([False, True, False, True, False])
    assert gaps.chunk_of(picked).tolist() == [10.0, 20.0, 1.0, 5.0, 3.0]
    only_one_token = event_gaps([rec(event_tokens=[1, 1, 1])])
    assert only_one_token.itl is only_one_token.chunk  # the usual stream: the chunk gaps themselves
