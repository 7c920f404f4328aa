"""uvicorn's httptools protocol with one addition: each request's arrival time.

``on_message_begin`` is llhttp's first callback for a request, run inside ``data_received`` for
the read that carried the request's first bytes: the earliest point user code can see a request
without replacing uvicorn. The stamp travels in the ASGI scope's ``extensions`` (the spec's place
for server-specific additions); nothing on the wire changes.
"""

from __future__ import annotations

import time

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .timings import ARRIVAL_KEY


class ArrivalStampingProtocol(HttpToolsProtocol):
    def on_message_begin(self) -> None:
        now = time.monotonic_ns()
        super().on_message_begin()
        # uvicorn's ASGI types want each extension's value to be a dict; the stamp is a bare int,
        # the shape simulator/timings.py reads (and its tests pin).
        self.scope.setdefault("extensions", {})[ARRIVAL_KEY] = now  # type: ignore[assignment]
