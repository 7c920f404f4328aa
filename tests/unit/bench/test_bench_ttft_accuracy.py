"""The TTFT-accuracy join (benchmarks/_ttft_accuracy.py) on constructed records and server entries."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest

from bench.records import RequestRecord

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from benchmarks._ttft_accuracy import fetch_timings, join, summary  # noqa: E402

T0 = 1_000_000_000


def rec(i: int, sent: int, first: int, phase: str = "measure", rid: str | None = "auto", **kw) -> RequestRecord:
    return RequestRecord(request_id=f"p0-{i}", phase=phase, intended_ns=sent, sent_ns=sent, wall_sent_s=0.0,
                         event_ns=[first, first + 10], event_tokens=[1, 1], event_content=[True, True],
                         response_id=f"chatcmpl-{i}" if rid == "auto" else rid, **({"status": 200} | kw))


def timing(i: int, arrival: int, first_token: int) -> dict:
    return {"response_id": f"chatcmpl-{i}", "arrival_ns": T0 + arrival, "first_token_ns": T0 + first_token}


def test_error_is_client_minus_server_ttft_and_splits_into_send_and_receive():
    # sent at 0, server got it at 0.2 ms, wrote the first token at 0.5 ms, client read it at 1.0 ms
    j = join([rec(1, 0, 1_000_000)], T0, [timing(1, 200_000, 500_000)])
    assert j.client_ttft_ms == [1.0] and j.server_ttft_ms == [0.3]
    assert j.error_ms == [pytest.approx(0.7)] and j.send_ms == [0.2] and j.recv_ms == [0.5]


def test_only_successful_measured_records_count_and_missing_entries_are_unmatched():
    records = [rec(1, 0, 1_000_000), rec(2, 0, 1_000_000, phase="warmup"),
               rec(3, 0, 1_000_000, error="http_503", status=503), rec(4, 0, 900_000),
               rec(5, 0, 900_000, rid=None)]
    j = join(records, T0, [timing(1, 100, 200), timing(2, 100, 200), timing(3, 100, 200)])
    assert j.measured == 3 and j.unmatched == 2 and len(j.error_ms) == 1
    s = summary(j)
    assert s["joined"] == 1 and s["error_ms"]["p50"] == s["error_ms"]["max"] and "Hyndman-Fan" in s["percentiles"]
    assert summary(join([], T0, []))["error_ms"] == {"p50": None, "p99": None, "max": None}


def test_a_server_without_timings_is_named():
    http = httpx.Client(transport=httpx.MockTransport(lambda req: httpx.Response(404)))  # vLLM has no /sim/*
    with pytest.raises(RuntimeError, match="http://vllm:8000 has no /sim/timings: TTFT accuracy needs the "
                                           "splitstack simulator"):
        fetch_timings("http://vllm:8000", 0, http=http)


def test_pinned_sets_and_restores_affinity_and_names_unavailable_cpus():
    import os

    from benchmarks._bench_servers import pinned

    me, before = os.getpid(), os.sched_getaffinity(0)
    cpu = min(before)
    with pinned({me: {cpu}}) as now:
        assert now == {me: {cpu}} and os.sched_getaffinity(0) == {cpu}
    assert os.sched_getaffinity(0) == before
    with pytest.raises(ValueError, match=r"CPU\(s\) \[4096\] for pid \d+ are not available to this process"):
        with pinned({me: {4096}}):
            pass
