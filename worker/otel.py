"""Optional OTLP span export. Off unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set and the ``otel``
extra is installed; then each job is a span (``mineru.job``) and each request to the inference
server a child span (``mineru.vllm.chat_completion``) whose id is the one sent in ``traceparent``,
so the server's spans hang under the worker's. Without it, the same trace ids still travel in
``traceparent`` (see worker/tracing.py)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from worker.tracing import TraceContext

logger = logging.getLogger("worker")


class Tracer:
    def __init__(self, otel_tracer: Any | None = None) -> None:
        self._tracer = otel_tracer

    @property
    def exporting(self) -> bool:
        return self._tracer is not None

    @contextmanager
    def span(self, name: str, parent: TraceContext, **attributes: Any) -> Iterator[TraceContext]:
        """A child of ``parent``: a recorded span when exporting, else just a new span id."""
        if self._tracer is None:
            yield parent.child()
            return
        from opentelemetry import trace
        from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

        remote = SpanContext(trace_id=int(parent.trace_id, 16), span_id=int(parent.span_id, 16),
                             is_remote=True, trace_flags=TraceFlags(int(parent.flags, 16)))
        context = trace.set_span_in_context(NonRecordingSpan(remote))
        with self._tracer.start_as_current_span(name, context=context, attributes=attributes) as span:
            sc = span.get_span_context()
            yield TraceContext(format(sc.trace_id, "032x"), format(sc.span_id, "016x"), parent.flags)


def tracer_from_env(service_name: str, env: dict[str, str] | None = None) -> Tracer:
    env = dict(os.environ if env is None else env)
    if not env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return Tracer()
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        logger.warning("OTEL_EXPORTER_OTLP_ENDPOINT is set but the otel extra is missing (%s); "
                       "install it with `pip install -e '.[otel]'`; spans are not exported", exc)
        return Tracer()
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))  # reads OTEL_* env
    return Tracer(provider.get_tracer("splitstack.worker"))
