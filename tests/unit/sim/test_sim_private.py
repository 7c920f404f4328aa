"""The monolithic twin (--private-engines): N engines with no batching across them, time-sharing
one simulated GPU, against one shared batcher under the same total load; routing by port, load
time before /health 200, and the per-engine footprint on /metrics."""

from __future__ import annotations

import asyncio
import statistics
import time

import httpx
import pytest
from typer.testing import CliRunner

from simulator.app import SimApp
from simulator.config import SimConfig
from simulator.engine import VirtualClock
from simulator.private import PrivateEnginesApp, build_engines
from simulator.profile import load_profile
from simulator.scheduler import SimRequest
from simulator.server import ServeError, private_ports
from splitstack.cli.sim import app as sim_cli

pytestmark = pytest.mark.anyio

PROFILE = "mineru25-h200"


async def closed_loop(engines: list[SimApp], clock: VirtualClock, workers: int, per_worker: int,
                      requests: int) -> tuple[float, list[float]]:
    """``workers`` clients, each keeping ``per_worker`` requests in flight, worker w on engine
    w % len(engines); returns (simulated makespan, request latencies)."""
    latencies: list[float] = []

    async def user(engine: SimApp) -> None:
        for _ in range(requests):
            req = SimRequest("r", 200, 60, clock.now())
            handle = engine.engine.submit(req)
            while not handle.done:
                await handle.event.wait()
                handle.event.clear()
            latencies.append(req.finished_s - req.arrival_s)

    for e in engines:
        e.engine.start()
    try:
        await asyncio.gather(*(user(engines[w % len(engines)]) for w in range(workers) for _ in range(per_worker)))
    finally:
        for e in engines:
            await e.engine.stop()
    return clock.now(), latencies


async def run_topology(private: bool, workers: int = 4, per_worker: int = 2, requests: int = 10):
    profile = load_profile(PROFILE)
    clock = VirtualClock()
    if private:
        engines = build_engines(SimConfig(private_engines=workers, engine_load_scale=0), profile, clock)
    else:
        engines = [SimApp(SimConfig(), profile, clock=clock)]
    makespan, lat = await closed_loop(engines, clock, workers, per_worker, requests)
    return workers * per_worker * requests / makespan, statistics.mean(lat), engines


async def test_private_engines_lose_to_one_shared_batcher_at_small_per_engine_load():
    shared_tput, shared_lat, _ = await run_topology(private=False)
    private_tput, private_lat, engines = await run_topology(private=True)
    # 4 engines with 2 sequences each pay 4 step bases per round where the shared engine pays one
    assert private_tput < 0.6 * shared_tput
    assert private_lat > 1.5 * shared_lat
    # the engines really ran one at a time: their GPU time adds up to the simulated wall time
    busy = sum(e.engine.busy_s for e in engines)
    assert busy == pytest.approx(engines[0].engine.clock.now(), rel=0.01)


async def test_one_private_engine_is_the_shared_engine():
    """Same load, one worker: the private engine behaves exactly like the shared server."""
    shared = await run_topology(private=False, workers=1, per_worker=4)
    private = await run_topology(private=True, workers=1, per_worker=4)
    assert private[0] == pytest.approx(shared[0]) and private[1] == pytest.approx(shared[1])


def test_every_private_engine_answers_a_page_as_the_shared_server_does():
    """Copies of the same weights: the same image and prompt, the same MinerU answer everywhere."""
    from simulator.mineru import PROMPT_KINDS

    profile = load_profile(PROFILE)
    layout_prompt = next(suffix for suffix, kind in PROMPT_KINDS.items() if kind == "layout")
    engines = build_engines(SimConfig(private_engines=3, engine_load_scale=0), profile)
    shared = SimApp(SimConfig(), profile)
    for image in (b"page-one", b"page-two"):
        want = shared.answerer.answer(layout_prompt, image, None).text
        assert want and [e.answerer.answer(layout_prompt, image, None).text for e in engines] == [want] * 3


def test_kv_budget_split_and_weights_per_engine():
    profile = load_profile(PROFILE)
    engines = build_engines(SimConfig(private_engines=4), profile)
    assert [e.limits.kv_cache_tokens for e in engines] == [profile.engine.kv_cache_tokens // 4] * 4
    assert [e.footprint.weights_bytes for e in engines] == [profile.footprint.weights_bytes] * 4
    assert {e.load_s for e in engines} == {profile.footprint.engine_load_s} == {60.0}
    own = build_engines(SimConfig(private_engines=2, private_kv_cache_tokens=1000, engine_load_scale=0.5), profile)
    assert [e.limits.kv_cache_tokens for e in own] == [1000, 1000] and own[0].load_s == 30.0


class PortTransport(httpx.ASGITransport):
    """httpx's ASGI transport with scope['server'] set to the URL's port (uvicorn sets the local address)."""

    async def handle_async_request(self, request):
        app = self.app

        async def with_server(scope, receive, send):
            await app({**scope, "server": ("127.0.0.1", request.url.port)}, receive, send)

        self.app = with_server
        try:
            return await super().handle_async_request(request)
        finally:
            self.app = app


async def test_routing_by_port_load_time_and_footprint_metrics():
    profile = load_profile(PROFILE)
    engines = build_engines(SimConfig(private_engines=2, engine_load_scale=0.02), profile)  # 1.2 s
    app = PrivateEnginesApp(engines)
    app.bind_ports([9100, 9101])
    for e in engines:
        e.start()
    try:
        async with httpx.AsyncClient(transport=PortTransport(app=app)) as c:
            assert (await c.get("http://sim:9100/health")).status_code == 503
            chat = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
            loading = await c.post("http://sim:9101/v1/chat/completions", json=chat)
            assert loading.status_code == 503 and "loading" in loading.json()["error"]["message"]
            while (await c.get("http://sim:9100/health")).status_code == 503:
                assert time.monotonic() - engines[0].footprint.started < 10
                await asyncio.sleep(0.05)
            assert time.monotonic() - engines[0].footprint.started >= 1.2
            assert (await c.post("http://sim:9101/v1/chat/completions", json=chat)).status_code == 200
            assert (await c.get("http://sim:9102/health")).status_code == 404
            m1 = (await c.get("http://sim:9101/metrics")).text
            m0 = (await c.get("http://sim:9100/metrics")).text
    finally:
        for e in engines:
            await e.engine.stop()
    assert 'sim:model_weights_memory_bytes{engine="1",model_name="tiny"} 3e+09' in m1
    assert 'vllm:request_success_total{engine="1",finished_reason="length",model_name="tiny"} 1.0' in m1
    assert 'vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny"} 0.0' in m0
    assert 'sim:engine_ready{engine="0",model_name="tiny"} 1.0' in m0
    busy1 = [ln for ln in m1.splitlines() if ln.startswith("sim:engine_busy_seconds_total")]
    assert busy1 and float(busy1[0].split()[-1]) > 0


def test_ports_and_bad_input():
    assert private_ports(SimConfig(port=8100, private_engines=3)) == [8100, 8101, 8102]
    assert private_ports(SimConfig(port=0, private_engines=2)) == [0, 0]
    with pytest.raises(ServeError, match="run past 65535"):
        private_ports(SimConfig(port=65535, private_engines=2))
    res = CliRunner().invoke(sim_cli, ["serve", "--private-engines", "0"])
    assert res.exit_code == 2 and "--private-engines" in res.output and "Traceback" not in res.output
    res = CliRunner().invoke(sim_cli, ["serve", "--private-engines", "2", "--engine-load-scale", "-1"])
    assert res.exit_code == 2 and "--engine-load-scale" in res.output


def test_private_engine_flags_without_private_engines_are_refused():
    res = CliRunner().invoke(sim_cli, ["serve", "--engine-load-scale", "0.1"])
    assert res.exit_code == 2 and "add --private-engines N" in res.output
