"""Generate the Alertmanager configuration from the SLO spec. Pure: spec in, a dict out.

What reaches a person, and how often:
  * routing by severity: ``critical`` pages, ``warning`` opens a ticket (the SLO spec maps its
    page/ticket urgencies onto these kube-prometheus-stack severities), ``none`` goes nowhere;
  * grouping by namespace, service and SLO: one outage of one SLO is one notification, whatever
    number of burn-rate windows, instances or manual thresholds fire for it;
  * inhibition: while the inference server is unreachable (and for a while after it paged) the
    symptoms downstream of it are not notified; a page of an SLO silences that SLO's tickets;
  * the Watchdog, an always-firing alert, goes to a dead man's switch that alarms when it stops
    arriving (Prometheus, Alertmanager or the path between them is broken).

The deployment supplies the receivers' integrations (webhook, Slack, PagerDuty Events API v2,
e-mail) and the group timings (``observability.alertmanager`` of the deployment spec); the local
stack, Compose and kube-prometheus-stack all render it from here. No credential is ever rendered:
each SecretRef becomes a file path, ``<secrets_dir>/<secret name>/<key>``, which Alertmanager
reads itself (``*_file`` fields of Alertmanager 0.25): kube-prometheus-stack mounts the named
Secrets there (``alertmanagerSpec.secrets``), the local stack writes them from the environment.
Checked with ``amtool check-config`` and ``amtool config routes test`` (tests/unit/alerts), and
live against local sinks of each wire format (tests/integration/slo/test_live_receivers.py).
"""

from __future__ import annotations

from contract.spec import (
    Alertmanager,
    EmailIntegration,
    Integration,
    PagerDutyIntegration,
    SecretRef,
    SlackIntegration,
    WebhookIntegration,
)
from slo.spec import SLOSpec, UptimeSLI
from slo.windows import Severity

WATCHDOG = "Watchdog"
NULL_RECEIVER = "null"
GROUP_BY = ["namespace", "service", "slo"]
# Alerts on Prometheus itself and the Watchdog carry service "prometheus": never a symptom of the server.
SYMPTOM_SERVICES = ("pipeline", "workers", "inference-server")


# Where the prometheus-operator mounts the Secrets listed in alertmanagerSpec.secrets.
KUBE_SECRETS_DIR = "/etc/alertmanager/secrets"
RECEIVERS = ("page", "ticket", "watchdog")
# What a person reads first, per integration (Alertmanager's Go templates, data of the group).
TITLE = ('[{{ .Status | toUpper }}{{ if eq .Status "firing" }}:{{ .Alerts.Firing | len }}{{ end }}] '
         '{{ .CommonLabels.alertname }} {{ .CommonLabels.namespace }} {{ .CommonLabels.slo }}')
TEXT = ('{{ range .Alerts }}{{ .Annotations.summary }}\n{{ .Annotations.description }}\n'
        'runbook: {{ .Annotations.runbook_url }}\n{{ end }}')


# PagerDuty's own severities (critical, error, warning, info) from the alerts' severity label.
PD_SEVERITY = ('{{ if eq .CommonLabels.severity "critical" }}critical{{ else if eq .CommonLabels.severity '
               '"warning" }}warning{{ else }}info{{ end }}')


def secret_file(secrets_dir: str, ref: SecretRef) -> str:
    return f"{secrets_dir}/{ref.name}/{ref.key}"


def secret_refs(am: Alertmanager) -> list[SecretRef]:
    """Every SecretRef the receivers name (the files Alertmanager must find), without repeats."""
    refs: dict[tuple[str, str], SecretRef] = {}
    for name in RECEIVERS:
        for i in getattr(am.receivers, name):
            for ref in _refs(i):
                refs.setdefault((ref.name, ref.key), ref)
    return list(refs.values())


def _refs(i: Integration) -> list[SecretRef]:
    if isinstance(i, WebhookIntegration):
        return [i.bearer_token] if i.bearer_token else []
    if isinstance(i, SlackIntegration):
        return [i.webhook_url]
    if isinstance(i, PagerDutyIntegration):
        return [i.routing_key]
    return [i.password] if i.password else []


def _integration(i: Integration, secrets_dir: str) -> tuple[str, dict]:
    if isinstance(i, WebhookIntegration):
        body: dict = {"url": i.url, "send_resolved": True, "max_alerts": 0}
        if i.bearer_token:
            body["http_config"] = {"authorization": {
                "type": "Bearer", "credentials_file": secret_file(secrets_dir, i.bearer_token)}}
        return "webhook_configs", body
    if isinstance(i, SlackIntegration):
        body = {"api_url_file": secret_file(secrets_dir, i.webhook_url), "send_resolved": True,
                "title": TITLE, "text": TEXT}
        if i.channel:
            body["channel"] = i.channel
        return "slack_configs", body
    if isinstance(i, PagerDutyIntegration):
        # routing_key (not service_key) selects the Events API v2.
        return "pagerduty_configs", {"routing_key_file": secret_file(secrets_dir, i.routing_key), "url": i.url,
                                     "send_resolved": True, "description": TITLE, "severity": PD_SEVERITY}
    assert isinstance(i, EmailIntegration)
    body = {"to": i.to, "from": i.sender, "smarthost": i.smarthost, "require_tls": i.require_tls,
            "send_resolved": True, "headers": {"Subject": TITLE}}
    if i.username and i.password:
        body["auth_username"] = i.username
        body["auth_password_file"] = secret_file(secrets_dir, i.password)
    return "email_configs", body


def _receiver(name: str, integrations: list[Integration], url: str | None, secrets_dir: str) -> dict:
    out: dict = {"name": name}
    if url is not None:  # the older single-webhook shorthand (observability.alertmanager.<name>_webhook_url)
        integrations = [WebhookIntegration(kind="webhook", url=url), *integrations]
    for i in integrations:
        key, body = _integration(i, secrets_dir)
        out.setdefault(key, []).append(body)
    return out  # no integration: Alertmanager drops the notification


def _inhibit_rules(spec: SLOSpec) -> list[dict]:
    rules = []
    for slo in spec.slos:
        m = slo.manual_alert
        if m is None or m.inhibitor is None or not isinstance(slo.sli, UptimeSLI):
            continue
        rules.append({
            "source_matchers": [f'alertname="{m.inhibitor}"'],
            "target_matchers": [f'service=~"{"|".join(SYMPTOM_SERVICES)}"',
                                f'alertname!~"{m.alert}|{m.inhibitor}"'],
            "equal": ["namespace"],
        })
    page, ticket = spec.alerting.severity(Severity.page), spec.alerting.severity(Severity.ticket)
    rules.append({
        "source_matchers": [f'severity="{page}"', 'slo=~".+"'],
        "target_matchers": [f'severity="{ticket}"'],
        "equal": ["namespace", "slo"],
    })
    return rules


def alertmanager_config(spec: SLOSpec, am: Alertmanager, secrets_dir: str = KUBE_SECRETS_DIR) -> dict:
    page, ticket = spec.alerting.severity(Severity.page), spec.alerting.severity(Severity.ticket)
    return {
        "route": {
            "receiver": "ticket",  # an alert with an unknown severity still reaches someone
            "group_by": list(GROUP_BY),
            "group_wait": f"{am.group_wait_s}s",
            "group_interval": f"{am.group_interval_s}s",
            "repeat_interval": f"{am.repeat_interval_min}m",
            "routes": [
                {"receiver": "watchdog", "matchers": [f'alertname="{WATCHDOG}"'], "group_wait": "0s",
                 "group_interval": "1m", "repeat_interval": f"{am.watchdog_repeat_interval_min}m"},
                {"receiver": NULL_RECEIVER, "matchers": ['severity="none"']},
                {"receiver": "page", "matchers": [f'severity="{page}"']},
                {"receiver": "ticket", "matchers": [f'severity="{ticket}"']},
            ],
        },
        "inhibit_rules": _inhibit_rules(spec),
        "receivers": [
            *(_receiver(name, getattr(am.receivers, name), getattr(am, f"{name}_webhook_url"), secrets_dir)
              for name in RECEIVERS),
            {"name": NULL_RECEIVER},
        ],
    }
