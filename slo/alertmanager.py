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

The deployment supplies receivers' URLs and the group timings (``observability.alertmanager`` of
the deployment spec); the local stack, Compose and kube-prometheus-stack all render it from here.
Checked with ``amtool check-config`` and ``amtool config routes test`` (tests/unit/alerts).
"""

from __future__ import annotations

from contract.spec import Alertmanager
from slo.spec import SLOSpec, UptimeSLI
from slo.windows import Severity

WATCHDOG = "Watchdog"
NULL_RECEIVER = "null"
GROUP_BY = ["namespace", "service", "slo"]
# Alerts on Prometheus itself and the Watchdog carry service "prometheus": never a symptom of the server.
SYMPTOM_SERVICES = ("pipeline", "workers", "inference-server")


def _receiver(name: str, url: str | None) -> dict:
    if url is None:
        return {"name": name}  # no integration: Alertmanager drops the notification
    return {"name": name, "webhook_configs": [{"url": url, "send_resolved": True, "max_alerts": 0}]}


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


def alertmanager_config(spec: SLOSpec, am: Alertmanager) -> dict:
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
            _receiver("page", am.page_webhook_url),
            _receiver("ticket", am.ticket_webhook_url),
            _receiver("watchdog", am.watchdog_webhook_url),
            _receiver(NULL_RECEIVER, None),
        ],
    }
