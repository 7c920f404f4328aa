"""Per-request TTFT accuracy against the simulator process: the bench's records join the server's
GET /sim/timings by response id, and both sides' stamps obey causality on the shared monotonic clock."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench.runner import run_scenario
from bench.scenario import parse_scenario

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from benchmarks._ttft_accuracy import fetch_timings, join, summary, timings_mark  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.mark.parametrize("processes", [1, 2])
def test_every_request_joins_and_send_plus_receive_delay_is_the_error(instant_target, processes):
    t = instant_target
    mark = timings_mark(t.base_url, t.headers)
    scn = parse_scenario({"kind": "chat", "name": "acc", "prompt_tokens": {"mean": 16}, "output_tokens": {"mean": 16},
                          "prompt_pool": 4, "load": {"rate_rps": 40, "duration_s": 2, "warmup_s": 0.5,
                                                     "processes": processes}}, "test")
    out = run_scenario(scn, t)
    assert out.result.t0_ns > 0
    assert all(r.response_id and r.response_id.startswith("chatcmpl-") for r in out.records)
    timings = fetch_timings(t.base_url, mark, t.headers)["timings"]
    assert len(timings) == len(out.records)  # only this run's requests: since= excludes earlier ones
    j = join(out.records, out.result.t0_ns, timings)
    assert j.measured > 40 and j.unmatched == 0 and len(j.error_ms) == j.measured
    for err, send, recv, server in zip(j.error_ms, j.send_ms, j.recv_ms, j.server_ttft_ms):
        # causality on one clock: the server cannot parse a request before the client sent it, nor the
        # client read a token before the server wrote it (a wrong t0 or id join breaks one of these)
        assert send >= 0 and recv >= 0 and server > 0
        assert err == pytest.approx(send + recv, abs=1e-6)
    s = summary(j)
    assert s["joined"] == j.measured and s["error_ms"]["max"] >= s["error_ms"]["p99"] >= s["error_ms"]["p50"]

