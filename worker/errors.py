"""The worker's failures, by what happens to the job:

* :class:`PermanentError`: retrying cannot help. The input is bad (corrupt, encrypted, empty, not
  a PDF, too many pages, a URL outside the allow-list), or the server refused what it was sent
  (:class:`ServerAnswerError`). The job goes to the dead-letter stream with ``kind`` and
  ``reason`` and the worker moves on.
* :class:`TransientError`: the inference server is slow, down or overloaded, or its circuit
  breaker is open (:class:`CircuitOpenError`). The job is kept (never acked, never
  dead-lettered) and tried again later.
* :class:`RenderCrash`: the page-render process died under the document. Tried again in the
  same delivery; a document that breaks the pool again is dead-lettered ``render_crashed``.
"""

from __future__ import annotations


class PermanentError(Exception):
    """A job that can never succeed; ``kind`` is a short label for metrics (``bad_pdf`` ...)."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


class TransientError(Exception):
    """A failure of the inference tier that may pass; the job is retried, not dead-lettered."""


class RenderCrash(Exception):
    """A page-render process died under the document (BrokenProcessPool): killed from outside
    (memory) or crashed on a page. Tried again in the same delivery; a document that breaks
    the pool again is dead-lettered ``render_crashed``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class CircuitOpenError(TransientError):
    """The circuit breaker is open: the request was not sent."""


class ServerAnswerError(PermanentError):
    """The server answered a request with a non-retryable error (400, 404, 500, bad body).

    MinerU treats these as failing the whole document; so do we, as a permanent failure of the
    job (kind ``server_rejected``) so a document that the server cannot read does not loop."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__("server_rejected", f"inference server answered {status}: {detail[:300]}")
        self.status = status
