"""The generated Alertmanager config: amtool accepts it, and amtool's own router sends every alert
the rules can raise to the receiver its severity means (page, ticket, the dead man's switch, or
nowhere). Inhibition is proven live (tests/integration/slo/test_full_stack_slo.py)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from contract.spec import Alertmanager
from slo.alertmanager import alertmanager_config
from slo.spec import load_spec
from slo.writer import GENERATED_DIR

ROOT = Path(__file__).resolve().parents[3]
SPEC = load_spec()
RECEIVER = {"critical": "page", "warning": "ticket", "none": "null"}


def amtool() -> str:
    path = shutil.which("amtool")
    if path is None:
        pytest.fail("amtool not found: install the Debian package `prometheus-alertmanager`")
    return path


def _all_alerts() -> list[dict]:
    files = sorted((ROOT / "alerts").glob("*.rules.yml")) + sorted(GENERATED_DIR.glob("*.rules.yml"))
    return [r for f in files for g in yaml.safe_load(f.read_text())["groups"] for r in g["rules"] if "alert" in r]


def _route(config: Path, labels: dict[str, str]) -> str:
    args = [f"{k}={v}" for k, v in labels.items()]
    r = subprocess.run([amtool(), "config", "routes", "test", f"--config.file={config}", *args],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout.strip()


def test_committed_config_passes_amtool_check_config():
    r = subprocess.run([amtool(), "check-config", str(GENERATED_DIR / "alertmanager.yml")],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 inhibit rules" in r.stdout and "4 receivers" in r.stdout


def test_every_alert_routes_by_severity(tmp_path):
    config = tmp_path / "alertmanager.yml"
    config.write_text(yaml.safe_dump(alertmanager_config(SPEC, Alertmanager(
        page_webhook_url="http://127.0.0.1:1/page", ticket_webhook_url="http://127.0.0.1:1/ticket",
        watchdog_webhook_url="http://127.0.0.1:1/watchdog"))))
    seen = set()
    for rule in _all_alerts():
        labels = {"alertname": rule["alert"], **rule["labels"]}
        key = (rule["alert"], labels["severity"])
        if key in seen:
            continue
        seen.add(key)
        want = "watchdog" if rule["alert"] == "Watchdog" else RECEIVER[labels["severity"]]
        assert _route(config, labels) == want, labels
    assert ("InferenceServerDown", "critical") in seen and ("InferenceServerUnreachable", "none") in seen
    # An alert with a severity nobody planned for still reaches a person (as a ticket).
    assert _route(config, {"alertname": "Unplanned", "severity": "info"}) == "ticket"


def test_grouping_and_inhibition_name_the_labels_the_rules_carry():
    config = alertmanager_config(SPEC, Alertmanager())
    assert config["route"]["group_by"] == ["namespace", "service", "slo"]
    server, page_silences_tickets = config["inhibit_rules"]
    assert server["source_matchers"] == ['alertname="InferenceServerUnreachable"']
    assert server["target_matchers"] == ['service=~"pipeline|workers|inference-server"',
                                         'alertname!~"InferenceServerDown|InferenceServerUnreachable"']
    assert page_silences_tickets["equal"] == ["namespace", "slo"]
    services = {r["labels"]["service"] for r in _all_alerts()}
    assert services == {"pipeline", "workers", "inference-server", "prometheus"}


def test_deployment_timings_and_receivers_come_from_the_deployment_spec():
    am = Alertmanager(group_wait_s=2, group_interval_s=3, repeat_interval_min=60,
                      page_webhook_url="https://relay.example/pd")
    config = alertmanager_config(SPEC, am)
    assert (config["route"]["group_wait"], config["route"]["group_interval"], config["route"]["repeat_interval"]) == \
        ("2s", "3s", "60m")
    page = next(r for r in config["receivers"] if r["name"] == "page")
    assert page["webhook_configs"] == [{"url": "https://relay.example/pd", "send_resolved": True, "max_alerts": 0}]
    assert next(r for r in config["receivers"] if r["name"] == "ticket") == {"name": "ticket"}
