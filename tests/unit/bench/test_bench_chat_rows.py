"""The chat sender's rows, built by field name (bench/records.py chat_row), read back as the
records the answers describe: a stream, a non-streamed JSON answer, a body that is not JSON, an
HTTP error and a refused connect. Real sockets on loopback, the real engine."""

from __future__ import annotations

import socket

import orjson
import pytest

from bench import engine
from bench.chat import ChatWorkload, PreparedRequest
from bench.load import LoadSpec
from bench.records import RequestRecord
from bench.target import Target
from testsupport.canned_http import canned_server

SSE = b"".join([b'data: {"id":"c1","choices":[{"index":0,"delta":{"content":"w"},"finish_reason":null}]}\n\n'] * 3
               + [b'data: {"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],'
                  b'"usage":{"prompt_tokens":3,"completion_tokens":3}}\n\n', b"data: [DONE]\n\n"])
JSON = orjson.dumps({"id": "c2", "choices": [{"index": 0, "message": {"role": "assistant", "content": "a b"},
                                              "finish_reason": "length"}],
                     "usage": {"prompt_tokens": 3, "completion_tokens": 2}})


def _http(status: str, ctype: bytes, body: bytes) -> bytes:
    return (f"HTTP/1.1 {status}\r\n".encode() + b"content-type: " + ctype
            + b"\r\ncontent-length: %d\r\n\r\n" % len(body) + body)


ANSWERS = {"stream": _http("200 OK", b"text/event-stream", SSE),
           "json": _http("200 OK", b"application/json", JSON),
           "bad_json": _http("200 OK", b"application/json", b"<html>oops</html>"),
           "http_503": _http("503 Service Unavailable", b"application/json", b'{"message": "busy"}')}


def _records(port: int) -> list[RequestRecord]:
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    workload = ChatWorkload(Target(f"http://127.0.0.1:{port}", "m", None, 4096), [PreparedRequest(body, 3, 4)])
    res = engine.run(workload, LoadSpec(rate_rps=100, count=3, arrival="constant", request_timeout_s=5))
    assert len(res.records) == 3
    return [r for r in res.records if isinstance(r, RequestRecord)]


def _common(r: RequestRecord) -> None:
    assert r.kind == "chat" and r.request_id.startswith("p0-") and r.process == 0
    assert r.phase == "measure" and r.prompt_tokens == 3 and r.max_tokens == 4
    assert 0 <= r.intended_ns <= r.sent_ns and r.wall_sent_s > 1e9
    assert r.end_ns is not None and r.end_ns >= r.sent_ns


@pytest.mark.parametrize("case", sorted(ANSWERS))
def test_each_answer_becomes_the_record_it_describes(case):
    with canned_server(ANSWERS[case]) as port:
        recs = _records(port)
    for r in recs:
        _common(r)
        assert r.headers_ns is not None and r.sent_ns <= r.headers_ns <= r.end_ns
        if case == "stream":
            assert (r.error, r.status, r.output_tokens, r.server_prompt_tokens) == (None, 200, 3, 3)
            assert len(r.event_ns) == 3 and r.event_tokens == [1, 1, 1] and r.event_content == [True] * 3
            assert (r.output_tokens_source, r.finish_reason, r.response_id) == ("usage", "stop", "c1")
        elif case == "json":  # the whole answer at the headers
            assert (r.error, r.status, r.output_tokens, r.server_prompt_tokens) == (None, 200, 2, 3)
            assert (r.event_ns, r.event_tokens, r.event_content) == ([r.headers_ns], [2], [True])
            assert (r.output_tokens_source, r.finish_reason, r.response_id, r.output_text) == (
                "usage", "length", "c2", None)
        elif case == "bad_json":
            assert (r.error, r.status, r.error_detail) == ("bad_json", 200, "<html>oops</html>")
            assert r.event_ns == [] and r.output_tokens is None
        else:
            assert (r.error, r.status, r.event_ns, r.output_tokens) == ("http_503", 503, [], None)
            assert r.error_detail and "busy" in r.error_detail


def test_a_refused_connect_is_recorded_with_its_reason():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for r in _records(port):
        _common(r)
        assert (r.error, r.status, r.headers_ns, r.event_ns, r.output_tokens) == ("connect_error", None, None, [], None)
        assert r.error_detail
