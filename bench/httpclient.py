"""A lean HTTP/1.1 client for the load engine's hot path.

Why not aiohttp here: a streamed answer of 64 tokens arrives as up to ~65 network reads, and with
a stream-reader client every read wakes a coroutine (future, task step, iterator), which costs
more CPU than everything else the bench does per request. This client is an asyncio.Protocol:
each read is one plain callback that stamps ``time.monotonic_ns()``; the body pieces llhttp
hands over are only appended, with the stamp of their read, to two lists (no splitting, no
parsing while the response is open: bench/sse.py does that once, after the last byte). HTTP
parsing (status line, headers, chunked transfer coding, keep-alive) is httptools, the llhttp
bindings uvicorn uses, one parser per connection (creating one costs more than a response's
parsing); connections are kept alive and reused.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from typing import cast
from urllib.parse import urlsplit

import httptools


class TransportError(Exception):
    """The connection failed or closed before the response was complete."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


class Response:
    __slots__ = ("status", "headers_ns", "end_ns", "content_type", "body", "parts", "times")

    def __init__(self) -> None:
        self.status = 0
        self.headers_ns = 0
        self.end_ns = 0
        self.content_type = ""
        self.body = bytearray()  # a non-streamed answer, or any non-200 one
        self.parts: list[bytes] = []  # a streamed 200 answer: body pieces as read ...
        self.times: list[int] = []  # ... and the stamp (ns - t0) of the read of each


class _Unbound:
    """Stands for a closed connection's parser: httptools' parser holds bound methods of its
    protocol, a reference cycle the collector would have to find; dropping it at close leaves
    the connection to reference counting (the engine runs with collections off)."""


_CLOSED_PARSER = httptools.HttpResponseParser(_Unbound())


class _Conn(asyncio.Protocol):
    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.fut: asyncio.Future | None = None
        self.resp = Response()
        self.stream = False  # keep a 200 answer's body as (piece, read stamp) pairs
        self.active = False  # a request is in flight: parser callbacks may touch resp and fut
        self.t0 = 0
        self.now = 0
        self.parser = _CLOSED_PARSER  # one per connection from connection_made: a refused connect leaves no cycle
        self.closed = False

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # create_connection gives a stream protocol a Transport
        self.parser = httptools.HttpResponseParser(self)

    def data_received(self, data: bytes) -> None:
        self.now = time.monotonic_ns()
        if not self.active:
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail("bad_http", f"malformed HTTP response: {exc}")

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.active:
            try:
                self.parser.feed_data(b"")  # a body delimited by close ends here
            except httptools.HttpParserError:
                pass
        self._fail("server_disconnected", f"connection closed before the response was complete ({exc})")
        # no cycle left behind (parser <-> protocol <-> transport), and the pool forgets it
        self.parser = _CLOSED_PARSER
        self.transport = None
        self.pool.all.discard(self)

    # httptools callbacks: they fire only while a request is in flight
    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"content-type":
            self.resp.content_type = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        resp = self.resp
        resp.status = self.parser.get_status_code()
        resp.headers_ns = self.now - self.t0

    def on_body(self, body: bytes) -> None:
        resp = self.resp
        if self.stream and resp.status == 200:
            resp.parts.append(body)
            resp.times.append(self.now - self.t0)
        else:
            resp.body += body

    def on_message_complete(self) -> None:
        resp, fut = self.resp, self.fut
        resp.end_ns = self.now - self.t0
        keep = self.parser.should_keep_alive()
        self.active = False
        self.fut = None
        if fut is not None and not fut.done():
            fut.set_result(resp)
        if keep and not self.closed:
            self.pool.idle.append(self)
        elif self.transport is not None:
            self.transport.close()

    def _fail(self, reason: str, detail: str) -> None:
        fut = self.fut
        self.active = False
        self.fut = None
        self.closed = True  # the parser is mid-message: this connection is never reused
        if fut is not None and not fut.done():
            fut.set_exception(TransportError(reason, detail))
        if self.transport is not None:
            self.transport.close()

    def expire(self, fut: asyncio.Future, timeout_s: float) -> None:
        """Fail the request ``fut`` stands for if it is still the one in flight on this connection."""
        if not fut.done() and self.fut is fut:
            self._fail("timeout", f"no complete response within {timeout_s:g} s")


class Pool:
    """Keep-alive connections to one origin; requests never share a connection at once."""

    def __init__(self, base_url: str, connect_timeout_s: float = 10.0) -> None:
        u = urlsplit(base_url)
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.ssl = ssl.create_default_context() if u.scheme == "https" else None
        self.prefix = u.path.rstrip("/")
        self.host_header = u.netloc
        self.connect_timeout_s = connect_timeout_s
        self.idle: list[_Conn] = []
        self.all: set[_Conn] = set()

    async def _acquire(self) -> _Conn:
        while self.idle:
            conn = self.idle.pop()
            if not conn.closed:
                return conn
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: _Conn(self), self.host, self.port, ssl=self.ssl),
                self.connect_timeout_s)
        except (TimeoutError, OSError) as exc:
            detail = f"cannot connect to {self.host}:{self.port}: {exc}"
            exc.__traceback__ = None  # its frames hold the future that holds it: a cycle per refused connect
        else:
            self.all.add(conn)
            return conn
        raise TransportError("connect_error", detail)

    def request_head(self, method: str, path: str, headers: dict[str, str], body_len: int) -> bytes:
        lines = [f"{method} {self.prefix}{path} HTTP/1.1", f"Host: {self.host_header}",
                 f"Content-Length: {body_len}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def send(self, request: bytes, t0: int, timeout_s: float, stream: bool = False) -> Response:
        """Write a prepared request (head and body); resolve when the whole response is in. Stamps
        are ns - t0; ``stream``: a 200 answer's body stays in pieces with the stamp of each read."""
        conn = self.idle.pop() if self.idle and not self.idle[-1].closed else await self._acquire()
        loop = asyncio.get_running_loop()
        conn.fut = fut = loop.create_future()
        conn.resp = Response()
        conn.stream = stream
        conn.t0 = t0
        conn.active = True
        conn.transport.write(request)  # type: ignore[union-attr]
        timer = loop.call_later(timeout_s, conn.expire, fut, timeout_s)
        try:
            return await fut
        finally:
            timer.cancel()
            # a failed future holds its exception, whose traceback holds this frame: no cycle
            fut = None  # type: ignore[assignment]

    def close(self) -> None:
        for conn in self.all:
            if conn.transport is not None:
                conn.transport.close()
        self.idle.clear()
        self.all.clear()
