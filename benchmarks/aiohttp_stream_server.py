"""A streaming OpenAI-style server written the way a user writes one: aiohttp, one write per chunk.

    python benchmarks/aiohttp_stream_server.py --port 8000 [--model tiny] [--itl-ms 0]

No tricks: aiohttp's own web server on asyncio's default event loop, ``request.json()``, a
``StreamResponse`` and one ``await response.write(...)`` per SSE event, each event built with
``json.dumps`` -- the common shape of a proxy, a mock or a small model server. It answers
``POST /v1/chat/completions`` (streamed or not), ``GET /v1/models`` and ``GET /stub/stats``
(requests answered, for the benchmark scripts). A request gets ``max_tokens`` output tokens, one
per event; ``usage`` comes at the end with ``stream_options.include_usage`` and on every event as
well with ``continuous_usage_stats``. Prints ``listening on PORT`` once bound.

benchmarks/bench_same_shape.py runs it as the server kind ``aiohttp`` beside the C stub
(benchmarks/stub_sse_server.c) and the uvloop stub (benchmarks/stub_openai_server.py): a
client's cost per request depends on how the server writes (see the script's ``table`` part).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from aiohttp import web

WORDS = "the of and to in is that for it as was with be by on not this are or from at".split()


class Server:
    def __init__(self, model: str, itl_s: float) -> None:
        self.model = model
        self.itl_s = itl_s
        self.requests = 0

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.model, "object": "model",
                                                              "owned_by": "aiohttp-stub"}]})

    async def stats(self, request: web.Request) -> web.Response:
        return web.json_response({"requests": self.requests})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
            n_out = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        except (ValueError, AttributeError, TypeError):
            return web.json_response({"error": {"message": "body is not a JSON request", "code": 400}}, status=400)
        prompt = sum(len(str(m.get("content", "")).split()) for m in body.get("messages") or [] if isinstance(m, dict))
        self.requests += 1
        rid = f"chatcmpl-{self.requests}"
        created = int(time.time())
        text = [WORDS[i % len(WORDS)] if i == 0 else " " + WORDS[i % len(WORDS)] for i in range(n_out)]
        if not body.get("stream"):
            return web.json_response({
                "id": rid, "object": "chat.completion", "created": created, "model": self.model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "".join(text)},
                             "finish_reason": "length"}],
                "usage": {"prompt_tokens": prompt, "completion_tokens": n_out, "total_tokens": prompt + n_out}})
        opts = body.get("stream_options") or {}
        final_usage = bool(opts.get("include_usage"))
        continuous = final_usage and bool(opts.get("continuous_usage_stats"))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)

        def event(choices: list, done: int) -> bytes:
            chunk = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": self.model,
                     "choices": choices}
            if continuous or (final_usage and not choices):
                chunk["usage"] = {"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done}
            return f"data: {json.dumps(chunk)}\n\n".encode()

        await response.write(event([{"index": 0, "delta": {"role": "assistant", "content": ""},
                                     "finish_reason": None}], 0))
        for i, word in enumerate(text):
            await asyncio.sleep(self.itl_s)  # 0: the next event on the next loop turn
            finish = "length" if i == n_out - 1 else None
            await response.write(event([{"index": 0, "delta": {"content": word}, "finish_reason": finish}], i + 1))
        if final_usage:
            await response.write(event([], n_out))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--itl-ms", type=float, default=0.0, help="time between two events of a stream, ms")
    a = ap.parse_args()
    server = Server(a.model, a.itl_ms / 1000.0)
    app = web.Application()
    app.router.add_get("/v1/models", server.models)
    app.router.add_get("/stub/stats", server.stats)
    app.router.add_post("/v1/chat/completions", server.chat)
    web.run_app(app, host=a.host, port=a.port, access_log=None, backlog=4096,
                print=lambda *_: print(f"listening on {a.port}", flush=True))


if __name__ == "__main__":
    main()
