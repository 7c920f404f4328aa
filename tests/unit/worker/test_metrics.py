from contract import metrics as catalog
from worker.metrics import WorkerMetrics


def test_worker_exports_exactly_the_catalog_families_with_its_buckets() -> None:
    m = WorkerMetrics()
    m.pdf_duration.labels("vlm-http-client").observe(50)
    m.request_duration.labels("/v1/chat/completions").observe(0.2)
    families = {f.name: f for f in m.registry.collect()}
    for defn in catalog.WORKER_METRICS:
        base = defn.name.removesuffix("_total") if defn.type is catalog.MetricType.counter else defn.name
        assert base in families, defn.name
        assert families[base].type == defn.type.value
    bounds = {s.labels["le"] for s in families[catalog.PDF_PROCESSING_DURATION].samples
              if s.name.endswith("_bucket")}
    for slo_threshold in ("45.0", "90.0", "120.0"):
        assert slo_threshold in bounds
