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
