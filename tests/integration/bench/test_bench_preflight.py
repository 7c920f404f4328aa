"""Preflight through the real `bench run` command line against real HTTP servers on loopback: a
`/health` behind the API key, a model the server does not serve, a URL nothing listens on, and
an address that never answers. Each is refused in about 2 s with advice for a --url target,
before any progress line."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from testsupport.procs import free_port
from testsupport.stack import ROOT

pytestmark = pytest.mark.timeout(120)
KEY = "preflight-key"


class _Guarded(BaseHTTPRequestHandler):
    """An OpenAI-style server that keeps every path, /health included, behind its key."""

    def do_GET(self) -> None:  # noqa: N802 - name fixed by http.server
        if self.headers.get("Authorization") != f"Bearer {KEY}":
            self._send(401, {"error": "unauthorized"})
        elif self.path == "/health":
            self._send(200, {})
        elif self.path == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": "served-model", "object": "model"}]})
        else:
            self._send(404, {"error": "not found"})

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


@contextmanager
def guarded_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Guarded)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def silent_listener() -> Iterator[str]:
    """A port that accepts connections and never answers (a server stuck before its first byte)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


def bench(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, float]:
    full = {**os.environ, "BENCH_PROGRESS_EVERY": "0.1", **(env or {})}
    t = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "splitstack.cli.bench", "run", "chat-smoke", *args], cwd=ROOT,
                       env=full, capture_output=True, text=True, timeout=60)
    return r, time.monotonic() - t


def refused(r: subprocess.CompletedProcess, *needles: str) -> str:
    text = " ".join((r.stdout + r.stderr).split())
    assert r.returncode == 2, text
    assert "Traceback" not in text and "Nothing was sent" in text, text
    assert " req " not in text and "ETA" not in text, f"a progress line before the refusal: {text}"
    for needle in needles:
        assert needle in text, text
    return text


def test_health_behind_the_key_is_judged_by_the_model_list():
    with guarded_server() as url:
        r, took = bench("--url", url, "--model", "other-model", "--api-key-env", "PF_KEY", env={"PF_KEY": KEY})
        text = refused(r, "does not serve the model 'other-model' (given with --model); it serves: served-model")
        r2, _ = bench("--url", url, "--model", "served-model", env={"PF_KEY": KEY})
        refused(r2, "needs an API key (401 without one)", "--api-key-env VAR")
    print(f"refused in {took:.2f} s (the command's start included): {text}")


def test_nothing_listening_gets_url_advice_not_the_stacks():
    r, took = bench("--url", f"http://127.0.0.1:{free_port()}", "--model", "m")
    text = refused(r, "is not healthy (ConnectError", "check the URL and that the server is up", "curl ")
    assert "splitstack up" not in text
    print(f"refused in {took:.2f} s: {text}")


def test_a_server_that_never_answers_is_refused_within_its_deadline():
    with silent_listener() as url:
        r, took = bench("--url", url, "--model", "m")
    text = refused(r, "is not healthy (ReadTimeout")
    print(f"refused in {took:.2f} s (preflight deadline 1 s per request): {text}")
