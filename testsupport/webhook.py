"""A webhook receiver on loopback that records what Alertmanager posts (tests of the alerting path).

    with webhook_receiver() as hook:
        ... Alertmanager configured with page_webhook_url=f"{hook.url}/page" ...
        hook.wait_for(lambda n: n.path == "/page" and n.body["status"] == "resolved", 60)
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from stack.procs import free_port


@dataclass(frozen=True)
class Notification:
    path: str
    body: dict
    received_s: float  # time.monotonic()
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def alertnames(self) -> list[str]:
        return [a["labels"]["alertname"] for a in self.body.get("alerts", [])]


@dataclass
class Receiver:
    url: str
    notifications: list[Notification] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, n: Notification) -> None:
        with self._lock:
            self.notifications.append(n)

    def on(self, path: str) -> list[Notification]:
        with self._lock:
            return [n for n in self.notifications if n.path == path]

    def wait_for(self, match: Callable[[Notification], bool], timeout_s: float) -> Notification:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                found = next((n for n in self.notifications if match(n)), None)
            if found is not None:
                return found
            time.sleep(0.1)
        with self._lock:
            seen = [(n.path, n.body.get("status"), n.alertnames) for n in self.notifications]
        raise AssertionError(f"no matching notification within {timeout_s:.0f} s; received: {seen}")


@contextlib.contextmanager
def webhook_receiver() -> Iterator[Receiver]:
    port = free_port()
    receiver = Receiver(f"http://127.0.0.1:{port}")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            length = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(length) or b"{}")
            receiver.record(Notification(self.path, body, time.monotonic(), dict(self.headers.items())))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
