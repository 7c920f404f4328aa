"""The asyncio engine loop on an injected virtual clock: same timeline as the pure model."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from simulator.app import SimApp
from simulator.config import SimConfig
from simulator.engine import VirtualClock
from simulator.profile import load_profile
from simulator.scheduler import Scheduler, SimRequest, simulate

pytestmark = pytest.mark.anyio


async def test_engine_timeline_equals_the_model_and_runs_at_cpu_speed():
    profile = load_profile("mineru25-a100")
    clock = VirtualClock()
    app = SimApp(SimConfig(max_num_seqs=2), profile, registry=CollectorRegistry(auto_describe=False), clock=clock)
    app.engine.start()
    try:
        reqs = [SimRequest(f"r{i}", 100, 50, 0.0) for i in range(8)]
        streams = [app.engine.submit(r) for r in reqs]
        loop = asyncio.get_running_loop()
        wall = loop.time()
        while not all(s.done for s in streams):
            await asyncio.sleep(0)
        wall = loop.time() - wall
    finally:
        await app.engine.stop()

    twins = [SimRequest(f"r{i}", 100, 50, 0.0) for i in range(8)]
    simulate(Scheduler(app.limits, profile.latency), twins)
    assert [r.first_token_s for r in reqs] == pytest.approx([t.first_token_s for t in twins])
    assert [r.finished_s for r in reqs] == pytest.approx([t.finished_s for t in twins])
    assert clock.now() > 3.0 > wall  # seconds of simulated queueing, far less wall time

    text = (await _metrics(app)).decode()
    assert 'vllm:request_queue_time_seconds_count{engine="0",model_name="tiny"} 8.0' in text
    queue_sum = sum(r.queue_time_s for r in reqs)
    assert f'vllm:request_queue_time_seconds_sum{{engine="0",model_name="tiny"}} {queue_sum}' in text


async def _metrics(app: SimApp) -> bytes:
    from prometheus_client import generate_latest

    return generate_latest(app.registry)
