"""OpenSLO v1 export / import."""

import pytest
import yaml

from slo.openslo import OpenSLOError, export_openslo, import_openslo
from slo.spec import load_spec, parse_spec

SPEC = load_spec()

FOREIGN = """
apiVersion: openslo/v1
kind: SLO
metadata: {name: pdf-errors, displayName: PDF errors}
spec:
  service: pdf
  indicator:
    metadata: {name: pdf-errors-sli}
    spec:
      ratioMetric:
        counter: true
        good: {metricSource: {type: Prometheus, spec: {query: 'sum(mineru_pdfs_processed_total{job="workers"})'}}}
        total:
          metricSource:
            type: Prometheus
            spec:
              query: >-
                sum(mineru_pdfs_processed_total{job="workers"}) + sum(mineru_pdfs_failed_total{job="workers"})
  timeWindow: [{duration: 7d, isRolling: true}]
  budgetingMethod: Occurrences
  objectives: [{target: 0.99}]
---
apiVersion: openslo/v1
kind: SLO
metadata: {name: fast-pdfs}
spec:
  indicator:
    spec:
      ratioMetric:
        counter: true
        good:
          metricSource:
            type: Prometheus
            spec: {query: 'sum(rate(mineru_pdf_processing_duration_seconds_bucket{job="workers",le="60"}[5m]))'}
        total:
          metricSource:
            type: Prometheus
            spec: {query: 'sum(rate(mineru_pdf_processing_duration_seconds_count{job="workers"}[5m]))'}
  timeWindow: [{duration: 28d, isRolling: true}]
  objectives: [{target: 0.95}]
---
apiVersion: openslo/v1
kind: SLO
metadata: {name: kv}
spec:
  indicator:
    spec:
      thresholdMetric:
        metricSource: {type: Prometheus, spec: {query: 'vllm:kv_cache_usage_perc{job="inference-server"}'}}
  timeWindow: [{duration: 30d, isRolling: true}]
  budgetingMethod: Timeslices
  objectives: [{op: lte, value: 0.95, timeSliceTarget: 0.99, timeSliceWindow: 5m}]
"""


def test_export_is_openslo_v1_with_a_service_and_one_slo_per_objective():
    docs = list(yaml.safe_load_all(export_openslo(SPEC)))
    assert docs[0]["kind"] == "Service"
    slos = docs[1:]
    assert [d["metadata"]["name"] for d in slos] == [s.name for s in SPEC.slos]
    assert all(d["apiVersion"] == "openslo/v1" and d["kind"] == "SLO" for d in slos)
    err = next(d for d in slos if d["metadata"]["name"] == "pdf-error-rate")
    assert err["spec"]["budgetingMethod"] == "Occurrences"
    assert err["spec"]["objectives"] == [{"displayName": "PDF error rate < 2 %", "target": 0.98}]
    assert err["spec"]["indicator"]["spec"]["ratioMetric"]["bad"]["metricSource"]["spec"]["query"] == \
        'sum(mineru_pdfs_failed_total{job="workers"})'
    q = next(d for d in slos if d["metadata"]["name"] == "inference-queue-depth")
    assert q["spec"]["budgetingMethod"] == "Timeslices"
    assert q["spec"]["objectives"][0] | {} == {"displayName": "Inference queue depth <= 50", "op": "lte", "value": 50.0,
                                               "timeSliceTarget": 0.99, "timeSliceWindow": "5m"}


def test_export_then_import_gives_back_the_same_spec():
    back = parse_spec(yaml.safe_load(import_openslo(export_openslo(SPEC))))
    assert back.model_dump() == SPEC.model_dump()


def test_foreign_slos_without_annotations_are_mapped_to_the_model():
    spec = parse_spec(yaml.safe_load(import_openslo(FOREIGN)))
    errors, fast, kv = spec.slos
    assert (errors.sli.kind, errors.sli.bad, errors.window_d, str(errors.target)) == (
        "event_ratio", ("mineru_pdfs_failed_total",), 7, "0.99")
    assert (fast.sli.kind, fast.sli.histogram, str(fast.sli.threshold_s), fast.window_d) == (
        "latency", "mineru_pdf_processing_duration_seconds", "60", 28)
    assert (kv.sli.kind, kv.sli.metric, kv.sli.measure, kv.sli.comparison, str(kv.sli.threshold), kv.sli.slice_min) == (
        "threshold", "vllm:kv_cache_usage_perc", "max", "lte", "0.95", 5)


@pytest.mark.parametrize("mutate, expected", [
    (lambda t: t.replace('le="60"', 'le="61"'),
     "threshold 61 s is not a bucket bound of mineru_pdf_processing_duration_seconds"),
    (lambda t: t.replace("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
     "'vllm:gpu_cache_usage_perc' is not in the catalog"),
    (lambda t: t.replace('job="inference-server"', 'job="vllm-server"'),
     "OpenSLO SLO 'kv': job 'vllm-server' is neither the inference server job"),
    (lambda t: t.replace("duration: 7d", "duration: 12h"),
     "OpenSLO SLO 'pdf-errors': timeWindow 12h is not whole days"),
    (lambda t: t.replace("objectives: [{target: 0.95}]", "objectives: [{target: 0.9}, {target: 0.95}]"),
     "OpenSLO SLO 'fast-pdfs': 2 objectives; split them into one SLO each"),
    (lambda t: t.replace("apiVersion: openslo/v1\nkind: SLO\nmetadata: {name: kv}",
                         "apiVersion: openslo/v2alpha\nkind: SLO\nmetadata: {name: kv}"),
     "SLO 'kv' has apiVersion 'openslo/v2alpha'; only openslo/v1 is supported"),
])
def test_slos_that_do_not_fit_are_rejected_by_name(mutate, expected):
    with pytest.raises(OpenSLOError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        import_openslo(mutate(FOREIGN))


def test_indicator_ref_and_empty_input():
    with pytest.raises(OpenSLOError, match="indicatorRef is not supported; inline the SLI"):
        import_openslo("apiVersion: openslo/v1\nkind: SLO\nmetadata: {name: x}\n"
                       "spec: {indicatorRef: x-sli, objectives: [{target: 0.9}]}\n")
    with pytest.raises(OpenSLOError, match="no OpenSLO documents of kind SLO"):
        import_openslo("apiVersion: openslo/v1\nkind: Service\nmetadata: {name: s}\n")
