"""The SLO spec: the shipped objectives load; bad specs fail naming the field path and the fix."""

import copy
from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from slo.spec import OBJECTIVES_PATH, SpecError, load_spec, parse_spec
from slo.windows import BurnWindows, load_burn_windows

SPECS = Path(__file__).parent / "fixtures" / "specs"


def test_shipped_objectives_hold_the_manual_slos():
    spec = load_spec()
    by = {s.name: s for s in spec.slos}
    assert by["availability"].target == Decimal("0.995") and by["availability"].window_d == 30
    latency = ("pdf-latency-p50", "pdf-latency-p95", "pdf-latency-p99")
    assert [(by[n].sli.threshold_s, by[n].target) for n in latency] == [
        (Decimal("45"), Decimal("0.50")), (Decimal("90"), Decimal("0.95")), (Decimal("120"), Decimal("0.99"))]
    assert by["pdf-throughput"].sli.threshold == Decimal("60")
    assert by["pdf-error-rate"].error_budget == Decimal("0.02")
    assert by["inference-server-uptime"].target == Decimal("0.999")
    assert {"ttft-p95", "inference-queue-depth"} <= set(by)
    assert spec.jobs.inference_server == "inference-server" and spec.jobs.workers == "workers"


def test_good_minimal_fixture_gets_defaults():
    spec = load_spec(SPECS / "good_minimal.yaml")
    s = spec.slos[0]
    assert (s.window_d, s.min_events, s.runbook_action, s.service, s.manual_alert) == (
        30, 20, "slo-status", "pipeline", None)
    assert spec.jobs.namespace is None
    assert spec.alerting.severity_labels == {"page": "critical", "ticket": "warning"}


@pytest.mark.parametrize("fixture, expected", [
    ("bad_threshold_not_bucket.yaml",
     "slos[0 pdf-latency].sli: threshold 100 s is not a bucket bound of mineru_pdf_processing_duration_seconds "
     "(bounds: 1, 2.5, 5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600, 1200); pick one of them"),
    ("bad_unknown_metric.yaml",
     "slos[0 kv].sli: metric 'vllm:gpu_cache_usage_perc' is not in the catalog contract/metrics.py "
     "(did you mean vllm:kv_cache_usage_perc?)"),
    ("bad_misspelled_key.yaml", "slos[0 errors].taget: unknown key; did you mean 'target'?"),
    ("bad_window_too_short.yaml",
     "slos[0] (slo 'uptime'): window_d 1 is shorter than the longest burn-rate window (3 d); "
     "use window_d >= 3 or set alerts: []"),
    ("bad_alert_cannot_fire.yaml",
     "slos[0] (slo 'median'): page burn rate 14.4x over 1h times error budget 0.5 = 7.2 >= 1: an error ratio cannot "
     "exceed 1, so this alert could never fire; raise target or drop 'page' from alerts"),
])
def test_bad_fixtures_name_the_field_and_the_fix(fixture, expected):
    with pytest.raises(SpecError) as e:
        load_spec(SPECS / fixture)
    assert str(SPECS / fixture) in str(e.value)
    assert expected in str(e.value)


def test_misspelled_key_also_reports_the_missing_one():
    with pytest.raises(SpecError, match=r"slos\[0 errors\]\.target: required key is missing; add it"):
        load_spec(SPECS / "bad_misspelled_key.yaml")


def _shipped() -> dict:
    return yaml.safe_load(OBJECTIVES_PATH.read_text())


def test_duplicate_names_are_rejected():
    data = _shipped()
    data["slos"].append(copy.deepcopy(data["slos"][0]))
    with pytest.raises(SpecError, match=r"duplicate SLO name 'availability'; names must be unique"):
        parse_spec(data)


def test_wrong_metric_type_is_named():
    data = _shipped()
    data["slos"][5]["sli"]["bad"] = ["vllm:num_requests_waiting"]
    with pytest.raises(SpecError, match=r"slos\[5 pdf-error-rate\]\.sli\.bad: metric 'vllm:num_requests_waiting' "
                                        r"is a gauge, expected counter"):
        parse_spec(data)


def test_target_out_of_range_and_unknown_kind():
    data = _shipped()
    data["slos"][0]["target"] = "1"
    data["slos"][1]["sli"]["kind"] = "ratio"
    with pytest.raises(SpecError) as e:
        parse_spec(data)
    assert "slos[0 availability].target: Input should be less than 1" in str(e.value)
    assert ("slos[1 pdf-latency-p50].sli: Input tag 'ratio' found using 'kind' does not match any of the "
            "expected tags") in str(e.value)


def test_threshold_must_be_exact_to_a_millionth():
    data = _shipped()
    data["slos"][0]["target"] = "0.9995"  # 14.4 x 0.0005 = 0.0072: fine
    parse_spec(data)
    data["slos"][0]["target"] = "0.99999"  # 14.4 x 0.00001 = 0.000144: fine
    parse_spec(data)
    data["slos"][0]["target"] = "0.9999999"
    with pytest.raises(SpecError, match=r"target 0.9999999 has more than 6 decimals"):
        parse_spec(data)


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(SpecError, match=r"SLO spec not found; pass --spec PATH"):
        load_spec(tmp_path / "nope.yaml")
    (tmp_path / "x.yaml").write_text("slos: [\n")
    with pytest.raises(SpecError, match=r"x.yaml: not valid YAML"):
        load_spec(tmp_path / "x.yaml")


def test_burn_windows_are_the_cited_workbook_values():
    w = load_burn_windows()
    assert [(x.severity.value, x.long, x.short, x.factor) for x in w.windows] == [
        ("page", "1h", "5m", Decimal("14.4")), ("page", "6h", "30m", Decimal("6")),
        ("ticket", "1d", "2h", Decimal("3")), ("ticket", "3d", "6h", Decimal("1"))]
    # a 7-day SLO keeps the same budget share per alert: 0.02 * 168 h / 1 h
    assert w.windows[0].factor_for(7) == Decimal("3.36")


def test_burn_windows_reject_a_factor_that_contradicts_its_citation():
    data = yaml.safe_load((Path(__file__).parents[3] / "slo" / "burn_windows.yaml").read_text())
    data["windows"][0]["factor"] = "14"
    with pytest.raises(ValueError, match=r"burn window 1h/5m: factor 14 does not match "
                                         r"budget_consumed_ratio 0.02 x 30 d / 1h = 14.4"):
        BurnWindows.model_validate(data)


def test_the_manual_paging_choice_is_explicit_per_slo():
    by = {s.name: s for s in load_spec().slos}
    pages = {n: s.manual_alert.alert for n, s in by.items() if s.manual_alert}
    assert pages == {"pdf-latency-p95": "PdfLatencyHigh", "pdf-throughput": "PdfThroughputLow",
                     "pdf-error-rate": "PdfErrorRateHigh", "inference-server-uptime": "InferenceServerDown"}
    # where a fixed threshold (ALERT-1..ALERT-4) pages, burn rate only opens tickets
    assert all([a.value for a in by[n].alerts] == ["ticket"] for n in pages)
    assert [a.value for a in by["availability"].alerts] == ["page", "ticket"]
    down = by["inference-server-uptime"].manual_alert
    assert (down.for_s, down.inhibitor, down.inhibit_after_min) == (300, "InferenceServerUnreachable", 30)
    assert by["pdf-latency-p95"].sli.histogram == "mineru_pdf_end_to_end_duration_seconds"
    assert by["pdf-latency-p95"].sli.failures == ("mineru_pdfs_failed_total",)


@pytest.mark.parametrize("mutate, expected", [
    (lambda s: s["slos"][5]["manual_alert"].pop("threshold"),
     "slos[5 pdf-error-rate]: manual_alert: set over_min (minutes the condition holds), window_min (minutes "
     "measured) and threshold"),
    (lambda s: s["slos"][5]["manual_alert"].update(window_min=10),
     "manual_alert.window_min 10 must be shorter than over_min 10: a burst must leave the window"),
    (lambda s: s["slos"][5]["manual_alert"].update(threshold="5"),
     "manual_alert.threshold 5 is a bad-event share; use 0 < threshold < 1"),
    (lambda s: s["slos"][4]["sli"].pop("backlog_gauge"),
     "manual_alert: a throughput alert needs sli.backlog_gauge (no page without demand)"),
    (lambda s: s["slos"][6]["manual_alert"].update(over_min=5),
     "an uptime alert fires on up == 0 or a vanished target for for_s; remove over_min, window_min and threshold"),
    (lambda s: s["slos"][0].update(window_d=60),
     "slos[0 availability].window_d: 60 d is longer than the 30 d of history the deployments keep"),
    (lambda s: s.update(alerting={"runbook_base_url": "runbooks/pages"}),
     "alerting.runbook_base_url: 'runbooks/pages' is not an absolute http(s) URL"),
    (lambda s: s["slos"][5]["manual_alert"].update(alert="InferenceServerDown"),
     "manual alert names ['InferenceServerDown'] are used twice"),
])
def test_bad_paging_settings_are_named(mutate, expected):
    data = _shipped()
    mutate(data)
    with pytest.raises(SpecError) as e:
        parse_spec(data)
    assert expected in str(e.value)
