from contract import metrics as catalog
from worker.metrics import WorkerMetrics


def test_worker_exports_exactly_the_catalog_families_with_its_buckets() -> None:
    m = WorkerMetrics()
    m.pdf_duration.labels("vlm-http-client").observe(50)
    m.request_duration.labels("/v1/chat/completions").observe(0.2)
    families = {f.name: f for f in m.registry.collect()}
    # prometheus_client names a counter's family without its _total
    catalog_types = {(d.name.removesuffix("_total") if d.type is catalog.MetricType.counter else d.name): d.type.value
                     for d in catalog.WORKER_METRICS}
    assert {name: f.type for name, f in families.items()} == catalog_types
    pdf = next(d for d in catalog.WORKER_METRICS if d.name == catalog.PDF_PROCESSING_DURATION)
    bounds = {s.labels["le"] for s in families[catalog.PDF_PROCESSING_DURATION].samples
              if s.name.endswith("_bucket")}
    assert bounds == {str(float(b)) for b in pdf.buckets} | {"+Inf"}
    assert {"45.0", "90.0", "120.0"} <= bounds  # the PDF latency SLOs' thresholds are bucket bounds


def test_initialise_exports_every_series_the_rules_read_at_zero_before_the_first_pdf() -> None:
    m = WorkerMetrics()
    m.initialise("vlm-http-client")
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in m.registry.collect() for s in fam.samples if not s.name.endswith("_created")}
    backend = (("backend", "vlm-http-client"),)
    assert samples[(catalog.PDFS_PROCESSED, backend)] == 0
    assert samples[(catalog.PAGES_PROCESSED, backend)] == 0
    assert samples[(catalog.PDF_END_TO_END_DURATION + "_count", backend)] == 0
    assert samples[(catalog.PDF_PROCESSING_DURATION + "_count", backend)] == 0
    for kind in catalog.PDF_FAILURE_KINDS:
        assert samples[(catalog.PDFS_FAILED, (("backend", "vlm-http-client"), ("kind", kind)))] == 0
    for kind in catalog.CLIENT_FAILURE_KINDS:
        assert samples[(catalog.CLIENT_FAILURES, (("endpoint", catalog.CHAT_ENDPOINT), ("kind", kind)))] == 0
    assert samples[(catalog.CLIENT_REQUESTS, (("endpoint", catalog.CHAT_ENDPOINT),))] == 0


def test_the_worker_raises_only_failure_kinds_it_creates_at_start() -> None:
    import re
    from pathlib import Path

    src = "\n".join(p.read_text() for p in (Path(__file__).parents[3] / "worker").glob("*.py"))
    pdf_kinds = set(re.findall(r'PermanentError\(\s*"([a-z_]+)"', src)) | \
        set(re.findall(r'_dead_letter\(d, "([a-z_]+)"', src)) | {"server_rejected"}
    assert pdf_kinds <= set(catalog.PDF_FAILURE_KINDS), pdf_kinds - set(catalog.PDF_FAILURE_KINDS)
    client_kinds = set(re.findall(r'_fail\(t0, "([a-z_0-9]+)"\)', src)) | \
        set(re.findall(r'failures\.labels\(CHAT_PATH, "([a-z_0-9]+)"\)', src)) | {"http_5xx", "http_4xx"}
    assert client_kinds <= set(catalog.CLIENT_FAILURE_KINDS), client_kinds - set(catalog.CLIENT_FAILURE_KINDS)
