"""The load engine runs with collections off, so a request must leave no reference cycle behind,
failed or not: what it made is freed by reference counting, and the backlog guard can freeze an
overloaded run's requests without keeping garbage (bench/engine.py). Real sockets on loopback:
a streaming answer, a refused connect, a server that never answers (timeout) and one that
answers 500 and closes."""

from __future__ import annotations

import contextlib
import gc
import socket
from collections.abc import Iterator

import orjson
import pytest

from bench import engine
from bench.chat import ChatWorkload, PreparedRequest
from bench.load import LoadSpec
from bench.target import Target
from testsupport.canned_http import canned_server

SSE = b"".join([b'data: {"id":"c1","choices":[{"index":0,"delta":{"content":"w"},"finish_reason":null}]}\n\n'] * 4
               + [b'data: {"id":"c1","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}\n\n',
                  b"data: [DONE]\n\n"])
STREAM = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n" % len(SSE)) + SSE
ERROR = b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 5\r\nconnection: close\r\n\r\nerror"


def _refused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _target(case: str) -> Iterator[int]:
    if case == "refused":
        yield _refused_port()
        return
    answer, keep = {"stream": (STREAM, True), "timeout": (None, True), "500-close": (ERROR, False)}[case]
    with canned_server(answer, keep) as port:
        yield port


@pytest.mark.parametrize("case,error", [("stream", None), ("refused", "connect_error"), ("timeout", "timeout"),
                                        ("500-close", "http_500")])
def test_a_request_leaves_no_reference_cycle(case, error):
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True})
    with _target(case) as port:
        workload = ChatWorkload(Target(f"http://127.0.0.1:{port}", "m", None, 4096), [PreparedRequest(body, 3, 4)])
        spec = LoadSpec(rate_rps=400, count=120, arrival="constant", request_timeout_s=0.05 if case == "timeout" else 5)
        gc.collect()
        enabled = gc.isenabled()
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            res = engine.run(workload, spec)
            found = gc.collect()
            kinds = sorted({type(o).__name__ for o in gc.garbage})
        finally:
            gc.garbage.clear()
            gc.set_debug(0)
            if enabled:
                gc.enable()
    assert len(res.records) == 120 and {r.error for r in res.records} == {error}
    assert found == 0, f"{case}: {found} objects in reference cycles after 120 requests: {kinds}"
