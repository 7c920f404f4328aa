"""The monolithic twin: N private engines in one process, one port each.

In monolithic mode every worker runs its own in-process engine on the GPU. The twin serves N
independent :class:`~simulator.app.SimApp` engines, engine ``i`` on its own port, so each worker
is pointed at its engine's URL exactly as it is pointed at the shared server (same paths, same
``/health``, a Prometheus target per engine), and nothing in the worker changes. Per engine:

* its own continuous batcher: requests of different workers never share a step;
* its own KV budget: the profile's ``kv_cache_tokens`` split evenly by default (the engines share
  one GPU's memory), or ``private_kv_cache_tokens``;
* its own copy of the weights (``footprint.weights_bytes``, exported as
  ``sim:model_weights_memory_bytes{engine="i"}``);
* its own load time (``footprint.engine_load_s`` x ``engine_load_scale``): ``/health`` answers 503
  until it has passed, like a monolithic worker that is not ready before its engine has loaded.

The engines time-share one simulated GPU (one step at a time, ``engine.py``), the setting of a
monolithic deployment with several workers per GPU. Routing is by the local port the request came
in on (``scope["server"]``), one dict lookup per request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from .app import SimApp
from .asgi import HTTPError, respond
from .config import SimConfig
from .engine import Clock
from .profile import Profile


def build_engines(config: SimConfig, profile: Profile, clock: Clock | None = None) -> list[SimApp]:
    """The N private engines ``config.private_engines`` asks for, sharing one GPU lock."""
    n = config.private_engines or 1
    gpu = asyncio.Lock()
    kv = config.private_kv_cache_tokens or max(profile.engine.block_size_tokens, profile.engine.kv_cache_tokens // n)
    load_s = profile.footprint.engine_load_s * config.engine_load_scale
    engines = []
    for i in range(n):
        # One seed for all: each engine is a copy of the same weights, so the same page gets the
        # same answer from every engine, and from the shared server at that seed (the migration's
        # shadow sample compares the two topologies' outputs).
        engines.append(SimApp(config, profile, engine_id=str(i), load_s=load_s, gpu=gpu, kv_cache_tokens=kv,
                              clock=clock))
    return engines


class PrivateEnginesApp:
    """ASGI: a request goes to the engine that owns the port it arrived on."""

    def __init__(self, engines: list[SimApp]) -> None:
        self.engines = engines
        self.by_port: dict[int, SimApp] = {}

    def bind_ports(self, ports: list[int]) -> None:
        self.by_port = dict(zip(ports, self.engines, strict=True))

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        server = scope.get("server")
        engine = self.by_port.get(server[1]) if server else None
        if engine is None:
            err = HTTPError(404, b'{"detail":"no engine on this port"}')
            await respond(send, err.status, err.body)
            return
        await engine(scope, receive, send)

    async def _lifespan(self, receive: Callable, send: Callable) -> None:
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                for engine in self.engines:
                    engine.start()
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                for engine in self.engines:
                    await engine.engine.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return
