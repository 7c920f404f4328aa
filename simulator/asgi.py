"""Small ASGI helpers shared by the simulator's endpoints (no framework: see app.py)."""

from __future__ import annotations

from collections.abc import Callable

from . import wire

JSON = [(b"content-type", b"application/json"), (b"vary", b"Origin")]
SSE = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"vary", b"Origin")]


class HTTPError(Exception):
    def __init__(self, status: int, body: bytes, headers: list | None = None) -> None:
        self.status, self.body, self.headers = status, body, headers or JSON


def bad_request(message: str, param: str | None = None) -> HTTPError:
    return HTTPError(400, wire.error_body(message, "BadRequestError", 400, param))


class InjectedReset(Exception):
    """Raised after a partial response: uvicorn then drops the connection (the client sees a reset)."""


def header(scope: dict, name: bytes) -> bytes | None:
    for k, v in scope["headers"]:
        if k == name:
            return v
    return None


async def read_body(receive: Callable) -> bytes:
    msg = await receive()
    body = msg.get("body", b"")
    if not msg.get("more_body"):
        return body
    parts = [body]
    while msg.get("more_body"):
        msg = await receive()
        parts.append(msg.get("body", b""))
    return b"".join(parts)


async def wait_disconnect(receive: Callable) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def respond(send: Callable, status: int, body: bytes, headers: list = JSON) -> tuple[int, int]:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-length", str(len(body)).encode()), *headers]})
    await send({"type": "http.response.body", "body": body})
    return status, len(body)
