"""The 1 Hz gauge sampler asks the server for its three gauges only (name[]), and still samples
them from a server that ignores the filter and answers with the whole exposition."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from bench.sampler import SAMPLED, GaugeSampler

FULL = (Path(__file__).resolve().parents[1] / "sim" / "data" / "metrics.txt").read_text()  # real vLLM 0.32


def test_sampler_requests_only_its_gauges_and_filters_a_full_answer() -> None:
    asked: list[list[str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.params.get_list("name[]"))
        return httpx.Response(200, text=FULL)  # a server that ignores name[]

    client = httpx.Client(transport=httpx.MockTransport(handler))
    with GaugeSampler("http://server", interval_s=0.02, client=client) as s:
        deadline = time.monotonic() + 5
        while len(s.samples) < 2 * len(SAMPLED) and time.monotonic() < deadline:
            time.sleep(0.02)
    assert asked and all(a == list(SAMPLED) for a in asked)
    assert {x["metric"] for x in s.samples} == set(SAMPLED)
    assert set(s.summary()) == set(SAMPLED)


def test_scenario_can_turn_gauge_sampling_off() -> None:
    from bench.scenario import parse_scenario
    from bench.server_view import NoSamples, ServerView

    base = {"kind": "chat", "name": "x", "prompt_tokens": {"mean": 8}, "output_tokens": {"mean": 4},
            "load": {"rate_rps": 1, "duration_s": 1}}
    assert parse_scenario(base, "x").server_gauge_interval_s == 1.0
    scn = parse_scenario({**base, "server_gauge_interval_s": 0}, "x")
    view = ServerView.__new__(ServerView)  # a server whose /metrics answered (source = its URL)
    view.source = "http://server/metrics"
    assert isinstance(view.sampler(scn.server_gauge_interval_s), NoSamples)
    sampler = view.sampler.__func__  # the same view with the default interval samples
    view.target = type("T", (), {"base_url": "http://server", "headers": {}})()
    assert isinstance(sampler(view, 1.0), GaugeSampler) and sampler(view, 1.0).interval_s == 1.0
