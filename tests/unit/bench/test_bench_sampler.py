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
