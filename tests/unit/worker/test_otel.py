import asyncio

import httpx
import pytest

from worker.breaker import CircuitBreaker
from worker.client import InferenceClient
from worker.metrics import WorkerMetrics
from worker.otel import Tracer, tracer_from_env
from worker.tracing import current_trace, parse_traceparent

sdk = pytest.importorskip("opentelemetry.sdk.trace")
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

OK = {"choices": [{"message": {"content": "x"}, "finish_reason": "stop"}]}


def test_exported_request_span_is_the_one_named_in_traceparent() -> None:
    exporter = InMemorySpanExporter()
    provider = sdk.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = Tracer(provider.get_tracer("test"))
    sent = []

    def handler(request):
        sent.append(request.headers["traceparent"])
        return httpx.Response(200, json=OK)

    c = InferenceClient("http://s", api_key=None, breaker=CircuitBreaker(5, 30), metrics=WorkerMetrics(),
                        concurrency=1, request_timeout_s=5, max_retries=0,
                        transport=httpx.MockTransport(handler), tracer=tracer)
    root = parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")

    async def job():
        with tracer.span("mineru.job", root) as job_span:
            current_trace.set(job_span)
            await c.post_chat({})

    asyncio.run(job())
    spans = {s.name: s for s in exporter.get_finished_spans()}
    request, job_span = spans["mineru.vllm.chat_completion"], spans["mineru.job"]
    assert format(job_span.context.trace_id, "032x") == root.trace_id
    assert format(job_span.parent.span_id, "016x") == root.span_id
    assert request.parent.span_id == job_span.context.span_id
    assert sent == [f"00-{root.trace_id}-{format(request.context.span_id, '016x')}-01"]


def test_export_is_off_without_an_endpoint() -> None:
    assert not tracer_from_env("w", env={}).exporting
    assert tracer_from_env("w", env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}).exporting
