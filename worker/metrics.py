"""The worker's Prometheus metrics. Names, labels, help and histogram buckets come from the SLO
metric catalog (contract/metrics.py) so the latency SLO thresholds 45/90/120 s are always bucket
bounds and alert rules can never reference a name the worker does not export."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from contract import metrics as catalog
from contract.metrics import MetricDef, MetricType

_DEFS = {m.name: m for m in catalog.WORKER_METRICS}


def _make(defn: MetricDef, registry: CollectorRegistry):
    if defn.type is MetricType.histogram:
        return Histogram(defn.name, defn.help, defn.labels, registry=registry, buckets=defn.buckets)
    if defn.type is MetricType.counter:
        # prometheus_client appends _total itself.
        return Counter(defn.name.removesuffix("_total"), defn.help, defn.labels, registry=registry)
    return Gauge(defn.name, defn.help, defn.labels, registry=registry)


class WorkerMetrics:
    """All metric objects of one worker, on an injected registry (tests build fresh ones)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        m = {name: _make(defn, self.registry) for name, defn in _DEFS.items()}
        self.pdf_duration: Histogram = m[catalog.PDF_PROCESSING_DURATION]
        self.pdf_end_to_end: Histogram = m[catalog.PDF_END_TO_END_DURATION]
        self.pdfs_processed: Counter = m[catalog.PDFS_PROCESSED]
        self.pages_processed: Counter = m[catalog.PAGES_PROCESSED]
        self.pdfs_failed: Counter = m[catalog.PDFS_FAILED]
        self.request_duration: Histogram = m[catalog.CLIENT_REQUEST_DURATION]
        self.requests: Counter = m[catalog.CLIENT_REQUESTS]
        self.failures: Counter = m[catalog.CLIENT_FAILURES]
        self.retries: Counter = m[catalog.CLIENT_RETRIES]
        self.breaker_state: Gauge = m[catalog.BREAKER_STATE]
        self.queue_lag: Gauge = m[catalog.QUEUE_LAG]
        self.queue_pending: Gauge = m[catalog.QUEUE_PENDING]
        self.in_flight: Gauge = m[catalog.PDFS_IN_FLIGHT]
        self.requests_in_flight: Gauge = m[catalog.CLIENT_IN_FLIGHT]
        self.oldest_request: Gauge = m[catalog.CLIENT_OLDEST_S]
        self.deadline: Gauge = m[catalog.CLIENT_DEADLINE_S]
        self.info: Gauge = m[catalog.WORKER_INFO]

    def set_info(self, mode: str, engine_loaded: bool) -> None:
        """One series of mineru_worker_info: the mode, and whether the engine has loaded."""
        self.info.clear()
        self.info.labels(mode, "1" if engine_loaded else "0").set(1)

    def initialise(self, backend: str) -> None:
        """Create every labelled series the alert rules read, at 0, before the first PDF.

        prometheus_client exports a labelled counter or histogram only once a label set is
        used: a worker restarted on an idle queue would show no mineru_pdfs_processed_total
        (SLOMetricAbsent) and rate() would miss the first failure of each kind.
        """
        for hist in (self.pdf_duration, self.pdf_end_to_end):
            hist.labels(backend)
        self.pdfs_processed.labels(backend)
        self.pages_processed.labels(backend)
        for kind in catalog.PDF_FAILURE_KINDS:
            self.pdfs_failed.labels(backend, kind)
        endpoint = catalog.CHAT_ENDPOINT
        self.request_duration.labels(endpoint)
        self.requests.labels(endpoint)
        self.retries.labels(endpoint)
        for kind in catalog.CLIENT_FAILURE_KINDS:
            self.failures.labels(endpoint, kind)
