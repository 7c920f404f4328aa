"""The generated Alertmanager config in a real Alertmanager (0.25, Debian) on loopback, its page
receiver wired to all four integrations the deployment spec offers, each delivering to a local
sink of that integration's wire format: a webhook server; fake Slack and PagerDuty endpoints that
check the payload shape each service documents (Slack incoming webhooks: a JSON object with
`attachments`; PagerDuty Events API v2: `routing_key`, `event_action`, `dedup_key`, `payload`
with `summary`, `source`, `severity`); an SMTP sink (aiosmtpd) that requires AUTH. Every
credential reaches Alertmanager as a file (SecretRef -> *_file), never in the config.

A server outage is fed in the way Prometheus sends it (POST /api/v2/alerts): InferenceServerDown,
its never-notified inhibitor, and the symptoms it inhibits. Each page integration gets exactly
one notification (InferenceServerDown alone), then its resolution; the ticket receiver gets
nothing; the Watchdog reaches the dead man's switch with its bearer token.

Timing comes from the config (1 s group wait and interval), every wait polls for a state with a
bound; nothing sleeps for a fixed time except the final quiet check.
"""

from __future__ import annotations

import contextlib
import email
import email.policy
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
import yaml

from contract.spec import Alertmanager, SecretRef
from slo.alertmanager import alertmanager_config, secret_file, secret_refs
from slo.spec import load_spec
from testsupport.procs import free_port, running, wait_until
from testsupport.webhook import Notification, Receiver, webhook_receiver

pytestmark = [pytest.mark.integration,
              # AUTH without TLS is what the test wants: loopback, and Go's PLAIN allows it only there.
              pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS:UserWarning")]

NS = "splitstack-prod"
ROUTING_KEY = "R0UT1NGKEY0123456789abcdefABCDEF"  # PagerDuty integration keys are 32 characters
SLACK_PATH = "/services/T000/B000/XXXX"
SMTP_USER, SMTP_PASSWORD = "alerts", "smtp-s3cret"
BEARER = "deadman-t0ken"
WAIT_S = 60
PD_ACTIONS = {"trigger", "acknowledge", "resolve"}
PD_SEVERITIES = {"critical", "error", "warning", "info"}


def _ref(key: str) -> dict:
    return SecretRef(name="splitstack-alerting", key=key, env=f"UNUSED_{key.upper().replace('-', '_')}").model_dump()


class SmtpSink:
    """aiosmtpd on loopback, AUTH required (over plain TCP: loopback only), messages kept."""

    def __init__(self) -> None:
        try:
            from aiosmtpd.controller import Controller
            from aiosmtpd.smtp import AuthResult
        except ImportError:
            pytest.fail("aiosmtpd not found: install the project's dev extra (pip install -e '.[dev]')")
        self.messages: list[email.message.EmailMessage] = []
        self.logins: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        sink = self

        class Handler:
            async def handle_DATA(self, server, session, envelope):  # noqa: N802 - aiosmtpd's name
                msg = email.message_from_bytes(envelope.content, policy=email.policy.default)
                with sink._lock:
                    sink.messages.append(msg)
                return "250 OK"

        def authenticator(server, session, envelope, mechanism, auth_data):
            login = (auth_data.login.decode(), auth_data.password.decode())
            with sink._lock:
                sink.logins.append(login)
            return AuthResult(success=login == (SMTP_USER, SMTP_PASSWORD))

        self.port = free_port()
        # PLAIN only: Alertmanager 0.25's LOGIN expects the challenge "Username:", aiosmtpd sends
        # "User Name" (both exist in the wild; PLAIN is the one every server offers).
        self.controller = Controller(Handler(), hostname="127.0.0.1", port=self.port, authenticator=authenticator,
                                     auth_required=True, auth_require_tls=False, auth_exclude_mechanism=["LOGIN"])

    def received(self) -> list[email.message.EmailMessage]:
        with self._lock:
            return list(self.messages)


@contextlib.contextmanager
def smtp_sink() -> Iterator[SmtpSink]:
    sink = SmtpSink()
    sink.controller.start()
    try:
        yield sink
    finally:
        sink.controller.stop()


def _alert(name: str, severity: str, service: str, summary: str, ends: datetime | None = None, **labels: str) -> dict:
    body = {"labels": {"alertname": name, "severity": severity, "service": service, "namespace": NS, **labels},
            "annotations": {"summary": summary, "description": f"{summary} (fed by the test)",
                            "runbook_url": f"https://github.com/splitstack/splitstack/blob/main/runbooks/pages/{name}.md"},
            "generatorURL": "http://prometheus.invalid/graph"}
    if ends is not None:
        body["endsAt"] = ends.isoformat()
    return body


def _outage(ends: datetime | None = None) -> list[dict]:
    """What Prometheus sends during an inference server outage, after InferenceServerDown's `for`."""
    return [
        _alert("InferenceServerDown", "critical", "inference-server", "Inference server down for 5 minutes", ends,
               slo="inference-server-uptime", job="inference-server", instance="10.0.0.7:8000"),
        _alert("InferenceServerUnreachable", "none", "inference-server", "down now (inhibitor)", ends,
               slo="inference-server-uptime", job="inference-server", instance="10.0.0.7:8000"),
        _alert("SLOErrorBudgetBurnFast", "critical", "pipeline", "availability budget burning at >= 14.4x", ends,
               slo="availability", long_window="1h", short_window="5m", burn_factor="14.4"),
        _alert("WorkerCircuitBreakerOpen", "critical", "workers", "breaker not closed for 10 minutes", ends,
               job="workers", instance="w1"),
        _alert("PdfQueueStalled", "critical", "pipeline", "PDFs waiting, none processed", ends, job="workers"),
        _alert("WorkerClientFailures", "warning", "workers", "client failures above 5 %", ends, job="workers"),
    ]


def _check_slack(n: Notification) -> str:
    """Slack incoming webhook: a JSON object whose message is `text` and/or `attachments`."""
    assert n.path == SLACK_PATH, n.path
    body = n.body
    assert body.get("channel") == "#splitstack-oncall", body
    (att,) = body["attachments"]
    assert att["title"] and att["text"] and att["color"] in ("danger", "good"), att
    return att["title"]


def _check_pagerduty(n: Notification) -> str:
    """PagerDuty Events API v2 (POST /v2/enqueue): routing_key, event_action, dedup_key, payload."""
    assert n.path == "/v2/enqueue", n.path
    body = n.body
    assert body["routing_key"] == ROUTING_KEY and body["event_action"] in PD_ACTIONS, body
    assert isinstance(body["dedup_key"], str) and body["dedup_key"], body
    if body["event_action"] == "trigger":
        p = body["payload"]
        assert p["summary"] and len(p["summary"]) <= 1024 and p["source"] and p["severity"] in PD_SEVERITIES, p
    return f"{body['event_action']} {body.get('payload', {}).get('summary', '')}"


def _status(n: Notification) -> str:
    if n.path == "/v2/enqueue":
        return "resolved" if n.body["event_action"] == "resolve" else "firing"
    if n.path == SLACK_PATH:
        return "firing" if n.body["attachments"][0]["color"] == "danger" else "resolved"
    return n.body["status"]


def _print(kind: str, what: str) -> None:
    print(f"  {kind}: {what}")


def test_an_outage_pages_once_on_every_integration_resolves_and_the_watchdog_beats(tmp_path: Path) -> None:
    with webhook_receiver() as hook, webhook_receiver() as slack, webhook_receiver() as pagerduty, \
            smtp_sink() as smtp, httpx.Client(timeout=10) as client:
        am_spec = Alertmanager.model_validate({
            "group_wait_s": 1, "group_interval_s": 1, "repeat_interval_min": 60, "watchdog_repeat_interval_min": 1,
            "receivers": {
                "page": [
                    {"kind": "webhook", "url": f"{hook.url}/page"},
                    {"kind": "slack", "channel": "#splitstack-oncall", "webhook_url": _ref("slack-webhook-url")},
                    {"kind": "pagerduty", "url": f"{pagerduty.url}/v2/enqueue", "routing_key": _ref("pd-key")},
                    {"kind": "email", "to": "oncall@example.com", "sender": "alertmanager@example.com",
                     "smarthost": f"127.0.0.1:{smtp.port}", "require_tls": False, "username": SMTP_USER,
                     "password": _ref("smtp-password")},
                ],
                "ticket": [{"kind": "webhook", "url": f"{hook.url}/ticket"}],
                "watchdog": [{"kind": "webhook", "url": f"{hook.url}/watchdog", "bearer_token": _ref("deadman")}],
            }})
        secrets = tmp_path / "secrets"
        values = {"slack-webhook-url": f"{slack.url}{SLACK_PATH}", "pd-key": ROUTING_KEY,
                  "smtp-password": SMTP_PASSWORD, "deadman": BEARER}
        for ref in secret_refs(am_spec):
            path = Path(secret_file(str(secrets), ref))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(values[ref.key])
        config = tmp_path / "alertmanager.yml"
        config.write_text(yaml.safe_dump(alertmanager_config(load_spec(), am_spec, str(secrets)), sort_keys=False))
        text = config.read_text()
        assert not [v for v in values.values() if v in text], "a credential is in the rendered config"

        port = free_port()
        argv = ["prometheus-alertmanager", f"--config.file={config}", f"--storage.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=", "--log.level=debug"]
        with running("alertmanager", argv, tmp_path / "alertmanager.log", port=port, ready="/-/ready") as am:
            api = f"{am.url}/api/v2/alerts"
            now = datetime.now(UTC)
            watchdog = _alert("Watchdog", "none", "prometheus", "always firing")
            watchdog["labels"].pop("namespace")
            r = client.post(api, json=[watchdog, *_outage()])
            assert r.status_code == 200, r.text

            def fired(sink: Receiver, path: str | None = None) -> list[Notification]:
                return [n for n in sink.notifications if path is None or n.path == path]

            page = hook.wait_for(lambda n: n.path == "/page", WAIT_S)
            wait_until(lambda: fired(slack) and fired(pagerduty) and smtp.received(), WAIT_S,
                       "the page on Slack, PagerDuty and e-mail")
            beat = hook.wait_for(lambda n: n.path == "/watchdog", WAIT_S)

            r = client.post(api, json=[watchdog, *_outage(ends=now)])  # the server is back
            assert r.status_code == 200, r.text
            hook.wait_for(lambda n: n.path == "/page" and n.body["status"] == "resolved", WAIT_S)
            wait_until(lambda: len(fired(slack)) >= 2 and len(fired(pagerduty)) >= 2 and len(smtp.received()) >= 2,
                       WAIT_S, "the resolution on Slack, PagerDuty and e-mail")
            time.sleep(3)  # three group intervals: nothing more may arrive

            pages = fired(hook, "/page")
            print(f"\nwebhook /page: {len(pages)} notifications")
            for n in pages:
                _print("webhook", f"status={n.body['status']} receiver={n.body['receiver']} "
                                  f"alerts={n.alertnames} groupLabels={n.body['groupLabels']}")
            assert [n.body["status"] for n in pages] == ["firing", "resolved"]
            assert all(n.body["receiver"] == "page" and n.alertnames == ["InferenceServerDown"] for n in pages)
            assert page.body["commonLabels"]["namespace"] == NS

            print(f"slack {SLACK_PATH}: {len(fired(slack))} notifications")
            for n in fired(slack):
                _print("slack", f"channel={n.body['channel']} title={_check_slack(n)!r}")
            assert [_status(n) for n in fired(slack)] == ["firing", "resolved"]
            assert "InferenceServerDown" in fired(slack)[0].body["attachments"][0]["title"]

            print(f"pagerduty /v2/enqueue: {len(fired(pagerduty))} events")
            for n in fired(pagerduty):
                _print("pagerduty", f"{_check_pagerduty(n)!r} severity={n.body.get('payload', {}).get('severity')} "
                                    f"dedup_key={n.body['dedup_key'][:16]}...")
            assert [n.body["event_action"] for n in fired(pagerduty)] == ["trigger", "resolve"]
            assert fired(pagerduty)[0].body["payload"]["severity"] == "critical"
            assert len({n.body["dedup_key"] for n in fired(pagerduty)}) == 1  # the resolve closes that incident

            mails = smtp.received()
            print(f"smtp: {len(mails)} messages, AUTH as {sorted({u for u, _ in smtp.logins})}")
            for m in mails:
                _print("email", f"to={m['To']} subject={m['Subject']!r}")
            assert [m["Subject"].split("]")[0] for m in mails] == ["[FIRING:1", "[RESOLVED"]
            assert all("InferenceServerDown" in m["Subject"] and m["To"] == "oncall@example.com" for m in mails)
            assert smtp.logins and set(smtp.logins) == {(SMTP_USER, SMTP_PASSWORD)}

            beats = fired(hook, "/watchdog")
            print(f"webhook /watchdog: {len(beats)} heartbeats, Authorization {beat.headers.get('Authorization')!r}")
            assert beats and all(n.alertnames == ["Watchdog"] and n.body["receiver"] == "watchdog" for n in beats)
            assert beat.headers.get("Authorization") == f"Bearer {BEARER}"
            # The symptoms were inhibited, the warning's ticket too (the page's inhibitor covers
            # every service of the outage), the inhibitor itself goes nowhere.
            assert fired(hook, "/ticket") == []
            seen = {a for n in hook.notifications for a in n.alertnames}
            assert seen == {"InferenceServerDown", "Watchdog"}
