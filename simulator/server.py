"""Run the simulator as a process: bind, then serve with uvicorn (the same server vLLM uses)."""

from __future__ import annotations

import errno
import logging
import socket
import sys
import time

from contract.extras import require

from .config import SimConfig
from .profile import load_profile

log = logging.getLogger("simulator")


class ServeError(RuntimeError):
    """Bad input to ``serve`` (exit status 2) or an unusable address (exit status 1)."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ServeError(f"port {port} on {host} is already in use: pick another --port or stop the process "
                             f"listening there", 1) from exc
        raise ServeError(f"cannot listen on {host}:{port}: {exc.strerror}", 1) from exc
    sock.set_inheritable(True)
    return sock


def serve(config: SimConfig) -> None:
    uvicorn = require("uvicorn", "sim", "the simulator's HTTP server")
    # httptools with an arrival stamp per request (GET /sim/timings); the wire is unchanged
    arrival = require("simulator.arrival", "sim", "the simulator's HTTP server")
    sim_app = require("simulator.app", "sim", "the simulator (Pillow reads image headers)")
    profile = load_profile(config.profile)  # ProfileError lists the valid names
    if config.private_engines:
        serve_private(config, profile, uvicorn, arrival)
        return
    app = sim_app.SimApp(config, profile)  # validates everything before the port opens
    startup_s = profile.latency.startup_s + config.faults.slow_start_s
    if startup_s:
        log.warning("slow start: listening in %.1f s", startup_s)
        time.sleep(startup_s)
    sock = bind(config.host, config.port)
    host, port = sock.getsockname()[:2]
    log.warning("simulator serving model '%s' (profile %s, seed %d) on http://%s:%d", config.model_name,
                profile.name, config.seed, host, port)
    uv = uvicorn.Config(app, loop="uvloop", http=arrival.ArrivalStampingProtocol, lifespan="on", log_level="warning",
                        access_log=False, timeout_keep_alive=30, backlog=4096)
    uvicorn.Server(uv).run(sockets=[sock])


def setup_logging() -> None:
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def private_ports(config: SimConfig) -> list[int]:
    """Engine i listens on ``port + i`` (port 0: any free port for each)."""
    n = config.private_engines or 1
    if config.port and config.port + n - 1 > 65535:
        raise ServeError(f"--port {config.port} with --private-engines {n}: engine ports run past 65535; "
                         "pick a lower --port")
    return [config.port + i if config.port else 0 for i in range(n)]


def serve_private(config: SimConfig, profile, uvicorn, arrival) -> None:
    """The monolithic twin: N private engines (simulator/private.py), one port each, one process."""
    from .private import PrivateEnginesApp, build_engines

    app = PrivateEnginesApp(build_engines(config, profile))
    startup_s = profile.latency.startup_s + config.faults.slow_start_s  # the process's own, before any port opens
    if startup_s:
        log.warning("slow start: listening in %.1f s", startup_s)
        time.sleep(startup_s)
    socks: list[socket.socket] = []
    try:
        for port in private_ports(config):
            socks.append(bind(config.host, port))
    except ServeError:
        for s in socks:
            s.close()
        raise
    ports = [s.getsockname()[1] for s in socks]
    app.bind_ports(ports)
    load_s = profile.footprint.engine_load_s * config.engine_load_scale
    for i, port in enumerate(ports):
        log.warning("private engine %d of model '%s' (profile %s) on http://%s:%d, loading for %.1f s",
                    i, config.model_name, profile.name, config.host, port, load_s)
    uv = uvicorn.Config(app, loop="uvloop", http=arrival.ArrivalStampingProtocol, lifespan="on", log_level="warning",
                        access_log=False, timeout_keep_alive=30, backlog=4096)
    uvicorn.Server(uv).run(sockets=socks)
