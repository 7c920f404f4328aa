"""A minimal streaming OpenAI-compatible server that is not the project's simulator.

    python benchmarks/stub_openai_server.py --port 8000 [--model tiny] [--itl-ms 0]

It answers ``POST /v1/chat/completions`` and ``POST /v1/completions`` (streamed or not) and
``GET /v1/models`` (and ``GET /stub/stats``: requests answered, for the benchmark scripts);
everything else is 404 -- in particular there is no ``/tokenize``, no
``/health`` and no ``/metrics``, like many hosted endpoints and proxies. A request gets exactly
``max_tokens`` (default 16) output tokens, one per SSE event, each a word; ``usage`` comes at
the end when ``stream_options.include_usage`` is set, and on every event as well with
``continuous_usage_stats`` (vLLM's extension). ``usage.prompt_tokens`` is a word count of the
prompt (the stub has no tokenizer).

One event is written per event-loop turn (``--itl-ms 0``) or every ``--itl-ms`` ms, so each event
is its own TCP send, as a token stream from a real server is. The server is uvloop + httptools
with pre-built bytes: it costs little CPU per request, and benchmarks/bench_client_overhead.py
reports how much (its CPU per request is part of the table). It prints ``listening on PORT`` on
stdout once bound.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

import httptools
import orjson
import uvloop

WORDS = b"the of and to in is that for it as was with be by on not this are or from at".split()
HEAD_SSE = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
            b"transfer-encoding: chunked\r\n\r\n")


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _json_response(status: int, body: bytes, keep_alive: bool = True) -> bytes:
    reason = {200: b"OK", 400: b"Bad Request", 404: b"Not Found", 405: b"Method Not Allowed"}[status]
    conn = b"" if keep_alive else b"connection: close\r\n"
    return (b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s\r\n"
            % (status, reason, len(body), conn)) + body


def _words(messages: object) -> int:
    n = 0
    for m in messages if isinstance(messages, list) else ():
        c = m.get("content") if isinstance(m, dict) else None
        if isinstance(c, str):
            n += len(c.split())
        elif isinstance(c, list):
            n += sum(len(p.get("text", "").split()) for p in c if isinstance(p, dict))
    return n


class Stub(asyncio.Protocol):
    def __init__(self, server: StubServer) -> None:
        self.server = server
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.body = bytearray()
        self.queue: list[tuple[bytes, bytes, bytes]] = []  # requests pipelined behind the one in progress
        self.busy = False

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.transport.write(_json_response(400, b'{"error":"bad request"}', keep_alive=False))
            self.transport.close()

    def connection_lost(self, exc) -> None:
        self.transport = None

    def on_message_begin(self) -> None:
        self.url, self.body = b"", bytearray()

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.queue.append((self.parser.get_method(), self.url, bytes(self.body)))
        if not self.busy:
            self.busy = True
            asyncio.ensure_future(self._serve())

    async def _serve(self) -> None:
        while self.queue and self.transport is not None:
            method, url, body = self.queue.pop(0)
            await self.server.answer(self, method, url.split(b"?", 1)[0], body)
        self.busy = False


class StubServer:
    def __init__(self, model: str, itl_s: float) -> None:
        self.model = model
        self.model_json = orjson.dumps(model)
        self.itl_s = itl_s
        self.created = int(time.time())
        self.n = 0

    async def answer(self, conn: Stub, method: bytes, path: bytes, raw: bytes) -> None:
        tr = conn.transport
        if path == b"/stub/stats" and method == b"GET":
            tr.write(_json_response(200, orjson.dumps({"requests": self.n})))
            return
        if path == b"/v1/models" and method == b"GET":
            body = orjson.dumps({"object": "list", "data": [{"id": self.model, "object": "model",
                                                             "created": self.created, "owned_by": "stub"}]})
            tr.write(_json_response(200, body))
            return
        kind = {b"/v1/chat/completions": "chat", b"/v1/completions": "completion"}.get(path)
        if kind is None:
            tr.write(_json_response(404, b'{"detail":"Not Found"}'))
            return
        if method != b"POST":
            tr.write(_json_response(405, b'{"detail":"Method Not Allowed"}'))
            return
        try:
            req = orjson.loads(raw)
            n_out = int(req.get("max_tokens") or req.get("max_completion_tokens") or 16)
        except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError):
            tr.write(_json_response(400, b'{"error":{"message":"body is not a JSON request","code":400}}'))
            return
        prompt = _words(req.get("messages")) if kind == "chat" else len(str(req.get("prompt", "")).split())
        self.n += 1
        rid = b"%s-%d-%d" % (b"chatcmpl" if kind == "chat" else b"cmpl", os.getpid(), self.n)
        if not req.get("stream"):
            text = " ".join(WORDS[i % len(WORDS)].decode() for i in range(n_out))
            usage = {"prompt_tokens": prompt, "total_tokens": prompt + n_out, "completion_tokens": n_out}
            choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
                      if kind == "chat" else {"index": 0, "text": text, "finish_reason": "length"})
            tr.write(_json_response(200, orjson.dumps({
                "id": rid.decode(), "object": "chat.completion" if kind == "chat" else "text_completion",
                "created": int(time.time()), "model": self.model, "choices": [choice], "usage": usage})))
            return
        opts = req.get("stream_options") or {}
        final_usage = bool(opts.get("include_usage"))
        continuous = final_usage and bool(opts.get("continuous_usage_stats"))
        obj = b"chat.completion.chunk" if kind == "chat" else b"text_completion"
        head = (b'data: {"id":"%s","object":"%s","created":%d,"model":%s,"choices":['
                % (rid, obj, int(time.time()), self.model_json))

        def usage(done: int) -> bytes:
            return (b'"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d}'
                    % (prompt, prompt + done, done))

        def event(choice: bytes, done: int) -> bytes:
            return _chunk(head + choice + b"]" + ((b"," + usage(done)) if continuous else b"") + b"}\n\n")

        tr.write(HEAD_SSE)
        if kind == "chat":
            tr.write(event(b'{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}', 0))
        for i in range(n_out):
            if self.itl_s > 0:
                await asyncio.sleep(self.itl_s)
            else:
                await asyncio.sleep(0)  # one event per loop turn: its own TCP send
            if conn.transport is None:
                return
            word = WORDS[i % len(WORDS)] if i == 0 else b" " + WORDS[i % len(WORDS)]
            finish = b'"length"' if i == n_out - 1 else b"null"
            if kind == "chat":
                choice = b'{"index":0,"delta":{"content":"%s"},"finish_reason":%s}' % (word, finish)
            else:
                choice = b'{"index":0,"text":"%s","finish_reason":%s}' % (word, finish)
            tr.write(event(choice, i + 1))
        tail = b""
        if final_usage:
            tail += _chunk(head + b"]," + usage(n_out) + b"}\n\n")
        tr.write(tail + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")


async def main(host: str, port: int, model: str, itl_ms: float) -> None:
    server = StubServer(model, itl_ms / 1000.0)
    loop = asyncio.get_running_loop()
    srv = await loop.create_server(lambda: Stub(server), host, port, backlog=4096)
    print(f"listening on {srv.sockets[0].getsockname()[1]}", flush=True)
    await srv.serve_forever()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--itl-ms", type=float, default=0.0, help="time between two events of a stream, ms "
                    "(0: one event per event-loop turn)")
    a = ap.parse_args()
    try:
        uvloop.run(main(a.host, a.port, a.model, a.itl_ms))
    except KeyboardInterrupt:
        sys.exit(0)
