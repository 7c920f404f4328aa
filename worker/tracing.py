"""W3C Trace Context (https://www.w3.org/TR/trace-context/): one trace per job.

A job carries a ``traceparent`` (given by the submitter, or made at intake). Every request to
the inference server sends a child ``traceparent`` with the job's trace id and a fresh span id,
so server-side logs and traces line up with the job. The current job's trace lives in a
contextvar, so MinerU's own concurrency (asyncio tasks) inherits it without plumbing.
"""

from __future__ import annotations

import contextvars
import os
import re
from dataclasses import dataclass

_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


@dataclass(frozen=True)
class TraceContext:
    trace_id: str
    span_id: str
    flags: str = "01"

    @property
    def traceparent(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-{self.flags}"

    def child(self) -> TraceContext:
        return TraceContext(self.trace_id, os.urandom(8).hex(), self.flags)


def new_trace() -> TraceContext:
    return TraceContext(os.urandom(16).hex(), os.urandom(8).hex())


def parse_traceparent(value: str | None) -> TraceContext | None:
    """A valid version-00 traceparent, else None (the spec says: ignore and start a new trace)."""
    if not value:
        return None
    match = _TRACEPARENT.match(value.strip().lower())
    if not match or set(match.group(1)) == {"0"} or set(match.group(2)) == {"0"}:
        return None
    return TraceContext(match.group(1), match.group(2), match.group(3))


current_trace: contextvars.ContextVar[TraceContext | None] = contextvars.ContextVar(
    "splitstack_trace", default=None
)
