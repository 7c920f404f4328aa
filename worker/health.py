"""/metrics, /healthz and /readyz on the worker's metrics port, served from a thread so a busy
event loop (PDF rendering) never makes Prometheus or the kubelet time out.

* ``/healthz``: the process is alive and its event loop turns (the probe loop ran < 15 s ago).
* ``/readyz``: 200 only when the inference server lists the spec's model on /v1/models, Redis
  answers, MinerU is loaded, the circuit breaker is not open and the worker is not draining;
  503 with the reason otherwise.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

if TYPE_CHECKING:
    from worker.runner import Worker

LIVENESS_S = 15.0


def serve(worker: Worker, host: str, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server API
            path = self.path.split("?")[0]
            if path == "/metrics":
                self._send(200, generate_latest(worker.metrics.registry), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                age = time.monotonic() - worker.last_probe
                ok = age < LIVENESS_S
                self._json(200 if ok else 503, {"alive": ok, "loop_age_s": round(age, 2)})
            elif path == "/readyz":
                ready, detail = worker.readiness()
                body = {
                    "ready": ready, "server": worker.server_ok, "redis": worker.redis_ok,
                    "mineru_loaded": worker.backend is not None, "breaker": worker.breaker.state.name,
                    "in_flight": len(worker.in_flight), "detail": detail,
                }
                self._json(200 if ready else 503, body)
            else:
                self._json(404, {"error": f"no route {path}; try /metrics, /healthz, /readyz"})

        def _json(self, code: int, body: dict) -> None:
            self._send(code, json.dumps(body).encode(), "application/json")

        def _send(self, code: int, data: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args) -> None:  # scrapes every 2 s: keep them out of the logs
            return

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="health", daemon=True).start()
    return server


def probe_self(path: str, port: int, timeout_s: float = 4.0) -> tuple[bool, str]:
    """GET ``path`` on this worker's own health port (a container's HEALTHCHECK): (ok, answer)."""
    url = f"http://127.0.0.1:{port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.status == 200, response.read(2000).decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return False, f"{exc.code}: {exc.read(2000).decode(errors='replace')}"
    except OSError as exc:
        return False, f"{url}: {exc}"
