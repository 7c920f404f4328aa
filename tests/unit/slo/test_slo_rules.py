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
from slo.writer import render_generated, write_tree

SPEC = load_spec()


def test_le_matcher_accepts_both_prometheus_spellings_of_whole_bounds():
    assert le_matcher(Decimal("90")) == r'le=~"90(\\.0)?"'
    assert le_matcher(2.5) == 'le="2.5"'
    assert le_matcher(0.005) == 'le="0.005"'


def test_thirty_day_thresholds_are_the_cited_factors_times_the_budget():
    alerts = burn_alerts(SPEC.get("inference-server-uptime"), load_burn_windows())
    assert [(a.window.long, str(a.threshold)) for a in alerts] == [
        ("1h", "0.0144"), ("6h", "0.006"), ("1d", "0.003"), ("3d", "0.001")]


def test_alert_expression_is_multiwindow_and_rounded():
    group = generate_rules(SPEC)["availability"]["groups"][0]
    fast = [r for r in group["rules"] if r.get("alert") == "SLOErrorBudgetBurnFast"][0]
    assert fast["expr"] == ('round(slo:sli_error:ratio_rate1h{slo="availability"}, 0.000001) >= 0.072\nand\n'
                            'round(slo:sli_error:ratio_rate5m{slo="availability"}, 0.000001) >= 0.072')
    records = [r["record"] for r in group["rules"] if "record" in r]
    assert records[0] == "slo:sli_good:indicator"
    assert records[1:] == [f"slo:sli_error:ratio_rate{w}" for w in ("5m", "30m", "1h", "2h", "6h", "1d", "3d", "30d")]


def test_a_seven_day_spec_generates_rules_that_promtool_proves(tmp_path):
    data = yaml.safe_load(OBJECTIVES_PATH.read_text())
    for s in data["slos"]:
        s["window_d"] = 7
        if s["name"] == "pdf-latency-p95":
            s["alerts"] = ["ticket"]  # 3.36 x 0.05 fine, but keep the page off to vary the shape
    data["jobs"] = {"inference_server": "vllm", "workers": "mineru", "prometheus": "prom"}
    spec = parse_spec(data, "seven-day spec")
    alerts = burn_alerts(spec.get("pdf-error-rate"), load_burn_windows())
    assert [str(a.factor.normalize()) for a in alerts] == ["3.36", "1.4", "0.7", "0.2333333333333333333333333333"]
    assert str(alerts[3].threshold) == "0.004667"  # 0.2333.. x 0.02 rounded to 1e-6
    write_tree(render_generated(spec), tmp_path)
    promtool = shutil.which("promtool") or pytest.fail("promtool not found: apt-get install prometheus")
    rules = sorted(tmp_path.glob("*.rules.yml"))
    r = subprocess.run([promtool, "check", "rules", *map(str, rules)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert 'job="mineru"' in (tmp_path / "pdf-error-rate.rules.yml").read_text()
    tests = sorted(p.name for p in (tmp_path / "tests").glob("*.test.yml"))
    r = subprocess.run([promtool, "test", "rules", *tests], cwd=tmp_path / "tests", capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout[-3000:]


def test_event_based_alerts_carry_a_minimum_traffic_guard():
    group = generate_rules(SPEC)["pdf-error-rate"]["groups"][0]
    fast = [r for r in group["rules"] if r.get("alert") == "SLOErrorBudgetBurnFast"][0]
    assert fast["expr"].endswith(
        'and on ()\n(sum(increase(mineru_pdfs_processed_total{job="workers"}[1h])) or vector(0)) + '
        '(sum(increase(mineru_pdfs_failed_total{job="workers"}[1h])) or vector(0)) >= 20')
    assert "(Only with at least 20 events in 1h.)" in fast["annotations"]["description"]
    uptime = generate_rules(SPEC)["inference-server-uptime"]["groups"][0]
    assert all("increase" not in r["expr"] for r in uptime["rules"] if "alert" in r)  # slices, not events
