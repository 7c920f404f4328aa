"""A loopback HTTP server that answers every request with the same canned bytes (tests of the
bench's HTTP client: streams, errors, keep-alive), one thread per connection, closed on exit."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def canned_server(answer: bytes | None, keep_alive: bool = True) -> Iterator[int]:
    """Yield the port of a server that reads a request and writes ``answer`` (None: nothing,
    ever), then keeps the connection for the next request or closes it."""
    srv = socket.create_server(("127.0.0.1", 0), backlog=512)
    conns: list[socket.socket] = []

    def serve(c: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while c.recv(65536):
                if answer is None:
                    continue
                c.sendall(answer)
                if not keep_alive:
                    break
        c.close()

    def accept() -> None:
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            conns.append(c)
            threading.Thread(target=serve, args=(c,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield srv.getsockname()[1]
    finally:
        srv.close()
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
            c.close()
