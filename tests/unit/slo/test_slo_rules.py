"""Rule generator details: le matchers, thresholds, and a non-default spec proven by promtool."""

import shutil
import subprocess
from decimal import Decimal

import pytest
import yaml

from slo.promql import le_matcher
from slo.rules import burn_alerts, generate_rules
from slo.spec import OBJECTIVES_PATH, load_spec, parse_spec
from slo.windows import load_burn_windows
from slo.writer import GENERATED_DIR, render_generated, write_tree

SPEC = load_spec()


def test_le_matcher_accepts_both_prometheus_spellings_of_whole_bounds():
    assert le_matcher(Decimal("90")) == r'le=~"90(\\.0)?"'
    assert le_matcher(2.5) == 'le="2.5"'
    assert le_matcher(0.005) == 'le="0.005"'


def test_thirty_day_thresholds_are_the_cited_factors_times_the_budget():
    alerts = burn_alerts(SPEC, SPEC.get("availability"), load_burn_windows())
    assert [(a.window.long, str(a.threshold)) for a in alerts] == [
        ("1h", "0.072"), ("6h", "0.03"), ("1d", "0.015"), ("3d", "0.005")]


def test_alert_expression_is_multiwindow_and_rounded():
    fast, slow = generate_rules(SPEC)["availability"]["groups"]
    page = [r for r in fast["rules"] if r.get("alert") == "SLOErrorBudgetBurnFast"][0]
    assert page["expr"] == ('round(slo:sli_error:ratio_rate1h{slo="availability"}, 0.000001) >= 0.072\nand\n'
                            'round(slo:sli_error:ratio_rate5m{slo="availability"}, 0.000001) >= 0.072\n'
                            # enough history: no page from a stack minutes old
                            'and on ()\ngroup(present_over_time('
                            'slo:sli_error:ratio_rate5m{slo="availability"}[1h] offset 54m))\n'
                            # resolved once a whole minute is good again
                            'and on ()\navg_over_time(slo:sli_good:indicator{slo="availability"}[1m]) < 1')
    records = [r["record"] for r in fast["rules"] if "record" in r]
    assert records[0] == "slo:sli_good:indicator"
    assert records[1:] == [f"slo:sli_error:ratio_rate{w}" for w in ("5m", "30m", "1h", "2h", "6h")] + \
        ["slo:current_burn_rate:ratio"]
    # the long windows and the tickets run in a slower group; so do the budget series
    assert (slow["name"], slow["interval"]) == ("slo-availability-long", "5m")
    slow_records = [r["record"] for r in slow["rules"] if "record" in r]
    assert slow_records[:3] == [f"slo:sli_error:ratio_rate{w}" for w in ("1d", "3d", "30d")]
    assert {"slo:objective:ratio", "slo:error_budget:ratio", "slo:period_burn_rate:ratio",
            "slo:period_error_budget_remaining:ratio", "slo:info"} <= set(slow_records)
    assert {r["alert"] for r in slow["rules"] if "alert" in r} == {"SLOErrorBudgetBurnSlow"}
    assert {r["alert"] for r in fast["rules"] if "alert" in r} == {"SLOErrorBudgetBurnFast", "SLOMetricAbsent"}


def test_a_vanished_target_is_down_without_naming_any_deployments_prometheus_job():
    fast, _ = generate_rules(SPEC)["inference-server-uptime"]["groups"]
    ind = next(r for r in fast["rules"] if r.get("record") == "slo:sli_good:indicator")
    assert ind["expr"] == '(max(up{job="inference-server"}) or on () 0 * group(up offset 1m))'
    down = next(r for r in fast["rules"] if r.get("alert") == "InferenceServerDown")
    assert down["expr"] == 'up{job="inference-server"} == 0 or absent(up{job="inference-server"})'
    assert down["for"] == "5m"
    assert 'job="prometheus"' not in "".join(f.read_text() for f in GENERATED_DIR.glob("*.rules.yml"))


def test_rules_scoped_to_a_namespace_match_and_carry_it():
    scoped = SPEC.scoped("splitstack-dev")
    fast, slow = generate_rules(scoped)["pdf-error-rate"]["groups"]
    rules = fast["rules"] + slow["rules"]
    for rule in rules:
        assert rule["labels"]["namespace"] == "splitstack-dev"
    with_job = [rule["expr"] for rule in rules if "job=" in rule["expr"]]
    assert len(with_job) >= len(rules) // 2  # the recording rules over the workers' counters
    for expr in with_job:
        assert 'job="workers", namespace="splitstack-dev"' in expr
    page = next(r for r in fast["rules"] if r.get("alert") == "PdfErrorRateHigh")
    assert page["labels"] == {"severity": "critical", "slo": "pdf-error-rate", "service": "pipeline",
                              "namespace": "splitstack-dev"}


def test_a_seven_day_spec_generates_rules_that_promtool_proves(tmp_path):
    data = yaml.safe_load(OBJECTIVES_PATH.read_text())
    for s in data["slos"]:
        s["window_d"] = 7
        if s["name"] == "pdf-error-rate":
            s["alerts"] = ["page", "ticket"]  # burn-rate pages beside the fixed threshold
    data["jobs"] = {"inference_server": "vllm", "workers": "mineru", "namespace": "ns1"}
    spec = parse_spec(data, "seven-day spec")
    alerts = burn_alerts(spec, spec.get("pdf-error-rate"), load_burn_windows())
    assert [str(a.factor.normalize()) for a in alerts] == ["3.36", "1.4", "0.7", "0.2333333333333333333333333333"]
    assert str(alerts[3].threshold) == "0.004667"  # 0.2333.. x 0.02 rounded to 1e-6
    write_tree(render_generated(spec), tmp_path)
    promtool = shutil.which("promtool") or pytest.fail("promtool not found: apt-get install prometheus")
    rules = sorted(tmp_path.glob("*.rules.yml"))
    r = subprocess.run([promtool, "check", "rules", *map(str, rules)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert 'job="mineru", namespace="ns1"' in (tmp_path / "pdf-error-rate.rules.yml").read_text()
    r = subprocess.run([shutil.which("amtool") or "amtool", "check-config", str(tmp_path / "alertmanager.yml")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    tests = sorted(p.name for p in (tmp_path / "tests").glob("*.test.yml"))
    r = subprocess.run([promtool, "test", "rules", *tests], cwd=tmp_path / "tests", capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout[-3000:]


def test_event_based_alerts_carry_a_minimum_traffic_guard():
    _, slow = generate_rules(SPEC)["pdf-error-rate"]["groups"]
    ticket = [r for r in slow["rules"] if r.get("alert") == "SLOErrorBudgetBurnSlow"][0]
    assert ticket["expr"].endswith(
        'and on ()\n(sum(increase(mineru_pdfs_processed_total{job="workers"}[1d])) or vector(0)) + '
        '(sum(increase(mineru_pdfs_failed_total{job="workers"}[1d])) or vector(0)) >= 20')
    assert "(Only with at least 20 events in 1d.)" in ticket["annotations"]["description"]
    uptime = [r for g in generate_rules(SPEC)["inference-server-uptime"]["groups"] for r in g["rules"]]
    assert all("increase" not in r["expr"] for r in uptime if r.get("alert", "").startswith("SLO"))
