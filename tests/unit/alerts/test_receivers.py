"""Receivers from the deployment spec: webhook, Slack, PagerDuty (Events API v2) and e-mail, every
credential by SecretRef rendered as a file path Alertmanager reads (never the value); amtool
accepts what is rendered; a cluster stack without a page or a watchdog receiver is refused,
naming the field. The live delivery: tests/integration/slo/test_live_receivers.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from contract.spec import Alertmanager
from contract.spec_loader import SpecError, load_stack
from infra.components.observability import kube_prometheus_stack_values
from slo.alertmanager import KUBE_SECRETS_DIR, alertmanager_config, secret_refs
from slo.spec import load_spec

ROOT = Path(__file__).resolve().parents[3]
SPEC = load_spec()


def _ref(key: str) -> dict:
    return {"name": "splitstack-alerting", "key": key, "env": f"SECRET_{key.upper().replace('-', '_')}"}


EVERY_KIND = Alertmanager.model_validate({"receivers": {
    "page": [
        {"kind": "pagerduty", "routing_key": _ref("pd")},
        {"kind": "email", "to": "oncall@example.com", "sender": "am@example.com", "smarthost": "smtp.example.com:587",
         "username": "am", "password": _ref("smtp")},
    ],
    "ticket": [{"kind": "slack", "channel": "#alerts", "webhook_url": _ref("slack")}],
    "watchdog": [{"kind": "webhook", "url": "https://deadman.example.com/x", "bearer_token": _ref("deadman")}],
}})


def test_every_integration_renders_file_references_that_amtool_accepts(tmp_path, monkeypatch):
    for ref in secret_refs(EVERY_KIND):
        monkeypatch.setenv(ref.env, f"VALUE-OF-{ref.key}")
    config = alertmanager_config(SPEC, EVERY_KIND)
    page, ticket, watchdog = (next(r for r in config["receivers"] if r["name"] == n) for n in ("page", "ticket",
                                                                                               "watchdog"))
    d = f"{KUBE_SECRETS_DIR}/splitstack-alerting"
    assert page["pagerduty_configs"][0]["routing_key_file"] == f"{d}/pd"
    assert page["pagerduty_configs"][0]["url"] == "https://events.pagerduty.com/v2/enqueue"
    assert page["email_configs"][0]["auth_password_file"] == f"{d}/smtp"
    assert ticket["slack_configs"][0]["api_url_file"] == f"{d}/slack"
    assert watchdog["webhook_configs"][0]["http_config"]["authorization"]["credentials_file"] == f"{d}/deadman"
    text = yaml.safe_dump(config)
    assert "VALUE-OF-" not in text  # the values stay in the environment / the Secret
    path = tmp_path / "alertmanager.yml"
    path.write_text(text)
    amtool = shutil.which("amtool")
    if amtool is None:
        pytest.fail("amtool not found: install the Debian package `prometheus-alertmanager`")
    r = subprocess.run([amtool, "check-config", str(path)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr


def test_kube_prometheus_stack_mounts_the_named_secrets():
    values = kube_prometheus_stack_values(load_stack("prod", ROOT))
    assert values["alertmanager"]["alertmanagerSpec"]["secrets"] == ["splitstack-alerting"]
    receivers = {r["name"]: r for r in values["alertmanager"]["config"]["receivers"]}
    assert receivers["page"]["pagerduty_configs"][0]["routing_key_file"].startswith(KUBE_SECRETS_DIR + "/")


@pytest.mark.parametrize("receiver", ["page", "watchdog"])
@pytest.mark.parametrize("stack", ["prod", "dev"])
def test_a_cluster_stack_without_a_page_or_watchdog_receiver_is_refused(stack, receiver):
    with pytest.raises(SpecError) as e:
        load_stack(stack, ROOT, overrides={f"observability.alertmanager.receivers.{receiver}": []})
    assert f"observability.alertmanager.receivers.{receiver}: no integration" in str(e.value)


def test_the_local_stack_may_keep_its_alerts_to_itself():
    assert load_stack("local", ROOT).observability.alertmanager.receivers.page == []


@pytest.mark.parametrize(("integration", "message"), [
    ({"kind": "webhook", "url": "https://user:pw@relay.example/x"}, "carries credentials; give them by SecretRef"),
    ({"kind": "webhook", "url": "relay.example/x"}, "is not an http(s) URL"),
    ({"kind": "email", "to": "a@b.c", "sender": "d@e.f", "smarthost": "smtp:25", "username": "u"},
     "set username and password (a SecretRef) together"),
    ({"kind": "slack", "webhook_url": "https://hooks.slack.com/services/T/B/X"}, "webhook_url"),
])
def test_a_credential_in_clear_or_a_half_configured_integration_is_refused(integration, message):
    with pytest.raises(SpecError) as e:
        load_stack("prod", ROOT, overrides={"observability.alertmanager.receivers.ticket": [integration]})
    assert message in str(e.value)


def test_the_local_stack_writes_each_credential_from_its_variable_or_names_the_missing_one(tmp_path, monkeypatch):
    from stack.paths import StackPaths
    from stack.secrets import alertmanager_secrets_dir

    spec = load_stack("local", ROOT, overrides={"observability.alertmanager.receivers.page": [
        {"kind": "pagerduty", "routing_key": _ref("pd"), "url": "http://127.0.0.1:9/v2/enqueue"}]})
    paths = StackPaths.at(tmp_path / "state", ROOT)
    paths.make()
    monkeypatch.delenv("SECRET_PD", raising=False)
    with pytest.raises(ValueError, match="secret splitstack-alerting/pd is read from the environment variable "
                                         "SECRET_PD, which is not set"):
        alertmanager_secrets_dir(spec, paths)
    monkeypatch.setenv("SECRET_PD", "0123456789abcdef0123456789abcdef")
    root = alertmanager_secrets_dir(spec, paths)
    written = root / "splitstack-alerting" / "pd"
    assert written.read_text() == "0123456789abcdef0123456789abcdef"
    assert written.stat().st_mode & 0o777 == 0o600
    config = alertmanager_config(SPEC, spec.observability.alertmanager, str(root))
    page = next(r for r in config["receivers"] if r["name"] == "page")
    assert page["pagerduty_configs"][0]["routing_key_file"] == str(written)
