"""GET /sim/timings from the simulator as a real uvicorn process: the arrival stamp comes from the HTTP
protocol (before the app runs) and lies on the client's CLOCK_MONOTONIC, between its send and its read."""

from __future__ import annotations

import socket
import time

import httpx
import pytest

from .servers import API_KEY, sim_server

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]
AUTH = {"Authorization": f"Bearer {API_KEY}"}


def raw_request(port: int, body: bytes, request_id: str) -> tuple[int, int, bytes]:
    """One streamed chat request on a raw socket: (ns just before the send, ns of the read that
    brought the first SSE bytes, the whole response)."""
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {API_KEY}\r\nX-Request-Id: {request_id}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        sent = time.monotonic_ns()
        s.sendall(head + body)
        parts: list[bytes] = []
        first_ns = 0
        while chunk := s.recv(65536):
            now = time.monotonic_ns()
            parts.append(chunk)
            if not first_ns and b"data: " in b"".join(parts):  # headers are written before the first chunk
                first_ns = now
    return sent, first_ns, b"".join(parts)


def test_stamps_are_on_the_clients_monotonic_clock_and_arrival_precedes_the_app():
    body = (b'{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":4,"stream":true,'
            b'"stream_options":{"include_usage":true,"continuous_usage_stats":true}}')
    with sim_server("--timings-max-entries", "100") as server:
        sent, first_ns, resp = raw_request(server.port, body, "it-1")
        done_ns = time.monotonic_ns()
        r = httpx.get(f"{server.url}/sim/timings", headers=AUTH, timeout=10)
        assert r.status_code == 200
        [t] = r.json()["timings"]
        assert httpx.get(f"{server.url}/sim/timings", timeout=10).status_code == 401  # --api-key applies
    rid = resp.split(b'"id":"', 1)[1].split(b'"', 1)[0].decode()
    assert t["request_id"] == "it-1" and t["response_id"] == rid
    # one clock for both processes: client send <= server arrival < app < writes <= client reads
    assert sent <= t["arrival_ns"] < t["asgi_ns"] <= t["first_chunk_ns"] <= t["first_token_ns"] <= t["end_ns"]
    assert t["first_chunk_ns"] <= first_ns and t["end_ns"] <= done_ns
