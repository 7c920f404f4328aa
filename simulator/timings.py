"""Per-request server timestamps: when each inference request arrived and when its first bytes,
first token and last byte were written (``GET /sim/timings``).

A benchmark client that stamps its own send and receive times with ``time.monotonic_ns()`` joins
these by response id (``chatcmpl-...``/``cmpl-...``, the ``id`` of every SSE chunk) or by the
``X-Request-Id`` header it sent, and splits its TTFT error into send-side and receive-side delay
(docs/bench-metrics.md, "TTFT accuracy"). CLOCK_MONOTONIC is one clock for every process of a
Linux host, so no offset is needed while client and simulator share the machine.

Arrival is stamped by ``arrival.ArrivalStampingProtocol`` (uvicorn's httptools protocol) when the
HTTP parser starts the request, i.e. in the same event-loop callback that read its first bytes;
served by anything else (tests use httpx's ASGI transport) arrival falls back to the first moment
the ASGI app sees the request (``asgi_ns`` is always recorded too). Writes are stamped just
before ``send()``, which hands the bytes to the transport synchronously (uvicorn). The kernel's
receive time is earlier by the simulator's event-loop latency; that part is not observable here.

The log is a bounded ring (oldest entries dropped): a long run keeps the newest ``max_entries``.
An entry is added when its response has ended (finished, failed or aborted). Ended entries are
kept as tuples of ints and strings, which CPython's garbage collector stops tracking: as objects
(a dataclass each) 100k entries made every full collection scan them all, and those collections
stalled the simulator's event loop for 50-100 ms, right inside the TTFT being measured.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, fields

from .asgi import header

ARRIVAL_KEY = "splitstack.arrival_ns"  # key in scope["extensions"], set by simulator/arrival.py
TIMING_KEY = "splitstack.timing"  # key in the ASGI scope: the request's RequestTiming
TIMED_PATHS = frozenset({"/v1/chat/completions", "/v1/completions"})
CLOCK = "CLOCK_MONOTONIC"


@dataclass(slots=True)
class RequestTiming:
    """One request's stamps (``time.monotonic_ns()``; 0 = did not happen). orjson serialises it."""

    path: str
    request_id: str | None  # the client's X-Request-Id header, when it sent one
    arrival_ns: int  # HTTP parser began the request (or asgi_ns, see module doc)
    asgi_ns: int  # the app was called with the request
    response_id: str | None = None  # id of the response body / of every SSE chunk
    status: int = 0
    first_chunk_ns: int = 0  # first response body bytes of any kind (chat: the role chunk)
    first_token_ns: int = 0  # first write carrying a generated token (any text, even empty)
    first_content_ns: int = 0  # first write carrying a token with non-empty text
    end_ns: int = 0  # the response ended (last write returned, or the error/abort)
    seq: int = 0  # position in the log, numbered from 1 in the order responses ended


FIELDS = tuple(f.name for f in fields(RequestTiming))
SEQ = FIELDS.index("seq")


class TimingLog:
    """Bounded ring of ended :class:`RequestTiming` (as tuples, see the module doc);
    ``max_entries=0`` records nothing."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self.entries: deque[tuple] = deque(maxlen=max_entries or 1)
        self.seq = 0  # seq of the newest entry
        self.dropped = 0  # entries pushed out of the full ring (not counting clear())

    @property
    def enabled(self) -> bool:
        return self.max_entries > 0

    def start(self, scope: dict) -> RequestTiming:
        now = time.monotonic_ns()
        ext = scope.get("extensions")
        arrival = ext.get(ARRIVAL_KEY) if ext else None
        rid = header(scope, b"x-request-id")
        return RequestTiming(scope["path"], rid.decode("latin-1") if rid is not None else None, arrival or now, now)

    def finish(self, timing: RequestTiming, status: int) -> None:
        timing.status = status
        timing.end_ns = time.monotonic_ns()
        self.seq += 1
        timing.seq = self.seq
        if len(self.entries) == self.max_entries:
            self.dropped += 1
        self.entries.append(tuple([getattr(timing, f) for f in FIELDS]))

    def since(self, seq: int) -> list[dict]:
        """Entries that ended after the one numbered ``seq`` (a previous answer's ``last_seq``):
        polling with the last answer's ``last_seq`` sees every request exactly once."""
        return [dict(zip(FIELDS, t)) for t in self.entries if t[SEQ] > seq]

    def clear(self) -> int:
        n = len(self.entries)
        self.entries.clear()
        return n

    def body(self, seq: int) -> dict:
        entries = self.since(seq)
        return {"clock": CLOCK, "unit": "ns", "max_entries": self.max_entries, "recorded": self.seq,
                "dropped": self.dropped, "last_seq": self.seq, "timings": entries}


def stamp_tokens(timing: RequestTiming, has_content: bool) -> None:
    """Called just before a write that carries generated tokens."""
    now = time.monotonic_ns()
    if not timing.first_chunk_ns:
        timing.first_chunk_ns = now
    if not timing.first_token_ns:
        timing.first_token_ns = now
    if has_content and not timing.first_content_ns:
        timing.first_content_ns = now
