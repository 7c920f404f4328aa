"""Generate Prometheus rule groups from the SLO spec. Pure: spec in, plain dicts out.

Per SLO, two groups (rules in a group run in order, so alerts see this evaluation's records):

``slo-<name>`` (the global evaluation interval):
  * ``slo:sli_good:indicator`` (time-based SLIs only): 1 when good at this instant;
  * ``slo:sli_error:ratio_rate<W>`` for the burn-rate windows up to 6 h, and
    ``slo:current_burn_rate:ratio`` (the 5-minute ratio over the error budget);
  * the page burn-rate alerts, one rule per window pair (slo/burn_windows.yaml);
  * the SLO's fixed paging threshold (``manual_alert``, a requirement's ALERT-n) and, for the server, the inhibitor that
    Alertmanager uses to silence the outage's symptoms;
  * ``SLOMetricAbsent`` when a metric the SLI needs is missing.
``slo-<name>-long`` (``alerting.slow_interval_s``): the 1 d, 3 d and SLO-window ratios (30 d
ranges are the expensive ones), the ticket alerts, and Sloth-style budget series
(``slo:objective:ratio``, ``slo:error_budget:ratio``, ``slo:period_burn_rate:ratio``,
``slo:period_error_budget_remaining:ratio``, ``slo:info``) that dashboards plot.

Burn thresholds are exact decimals; the SLI is compared after ``round(x, 1e-6)`` because
Prometheus 2.42 compares floats exactly and rate arithmetic is not exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from slo import cohorts, promql
from slo.spec import SLO, LatencySLI, ManualAlert, SLOSpec, ThresholdSLI, UptimeSLI, alert_threshold, dec
from slo.windows import BurnWindow, BurnWindows, Severity, fmt_duration_min, load_burn_windows

ALERT_BY_SEVERITY = {Severity.page: "SLOErrorBudgetBurnFast", Severity.ticket: "SLOErrorBudgetBurnSlow"}
ABSENT_ALERT = "SLOMetricAbsent"
ROUND_TO = "0.000001"
SLOW_FROM_MIN = 1440  # ratio windows of a day and more are evaluated in the slow group
SLO_DASHBOARD_UID = "mineru-slos"  # dashboards/generate.py
SERVICE_DASHBOARD_UID = {"inference-server": "splitstack-inference-server", "workers": "splitstack-pdf-processing",
                         "pipeline": SLO_DASHBOARD_UID}
VALUE = '{{ $value | printf "%.4g" }}'
# A throughput SLI's 7-day average per hour, for the SLO dashboard: recorded in the slow group
# (every alerting.slow_interval_s), not a 7-day subquery on every dashboard refresh.
THROUGHPUT_AVG_RECORD = "slo:throughput_per_hour:avg7d"
NONE_SEVERITY = "none"  # kube-prometheus-stack's severity of alerts that notify no one


def fmt_duration_s(seconds: int) -> str:
    return fmt_duration_min(seconds // 60) if seconds % 60 == 0 and seconds else f"{seconds}s"


def scope_labels(spec: SLOSpec) -> dict[str, str]:
    return {"namespace": spec.jobs.namespace} if spec.jobs.namespace else {}


def record_selector(spec: SLOSpec, slo: SLO) -> str:
    ns = f', namespace="{spec.jobs.namespace}"' if spec.jobs.namespace else ""
    return f'{{slo="{slo.name}"{ns}}}'


def paging_policy(slo: SLO, windows: BurnWindows) -> str:
    """Who pages for this SLO, in words: the `paging` annotation of its alerts."""
    pages = [f"{w.long}/{w.short}" for w in windows.windows
             if w.severity is Severity.page and Severity.page in slo.alerts]
    tickets = [f"{w.long}/{w.short}" for w in windows.windows
               if w.severity is Severity.ticket and Severity.ticket in slo.alerts]
    parts = []
    m = slo.manual_alert
    if m and m.severity is Severity.page:
        parts.append(f"pages: {m.alert} (a fixed threshold, not a burn rate)")
    if pages:
        parts.append(f"pages: the burn-rate alerts over {', '.join(pages)}")
    if not parts:
        parts.append("no page")
    parts.append(f"tickets: burn rate over {', '.join(tickets)}" if tickets else "no burn-rate ticket")
    return f"SLO {slo.name}: " + "; ".join(parts) + " (chosen in slo/objectives.yaml)"


def _common_annotations(spec: SLOSpec, slo: SLO, alert: str, windows: BurnWindows) -> dict[str, str]:
    return {
        "runbook_url": spec.alerting.runbook_url(alert),
        "runbook_action": slo.runbook_action,
        "dashboard_url": spec.alerting.dashboard_url(SLO_DASHBOARD_UID),
        "paging": paging_policy(slo, windows),
    }


@dataclass(frozen=True, eq=False)  # identity: the spec inside is not hashable
class BurnAlert:
    """One generated burn-rate alert rule (kept typed so the test generator can reuse it)."""

    spec: SLOSpec
    slo: SLO
    window: BurnWindow
    factor: Decimal
    threshold: Decimal

    @property
    def name(self) -> str:
        return ALERT_BY_SEVERITY[self.window.severity]

    @property
    def factor_text(self) -> str:
        return dec(self.factor.quantize(Decimal("0.0001")))

    @property
    def labels(self) -> dict[str, str]:
        return {
            "severity": self.spec.alerting.severity(self.window.severity),
            "slo": self.slo.name,
            "service": self.slo.service,
            "long_window": self.window.long,
            "short_window": self.window.short,
            "burn_factor": self.factor_text,
            **scope_labels(self.spec),
        }

    def annotations(self, windows: BurnWindows) -> dict[str, str]:
        s, w = self.slo, self.window
        return {
            "summary": f"SLO {s.name}: error budget burning at >= {self.factor_text}x",
            "description": (
                f"{s.title}: the error ratio is {VALUE} over {w.long} and at least {dec(self.threshold)} over "
                f"{w.short} ({self.factor_text}x the {dec(s.error_budget)} error budget of a {dec(s.target * 100)} % "
                f"target over {s.window_d} d); at this rate {dec(w.budget_consumed_ratio * 100)} % of the budget "
                f"goes in {w.long}."
                + ("" if s.time_based else f" (Only with at least {s.min_events} events in {w.long}.)")
            ),
            **_common_annotations(self.spec, s, self.name, windows),
        }


def burn_alerts(spec: SLOSpec, slo: SLO, windows: BurnWindows) -> list[BurnAlert]:
    out = []
    for w in windows.windows:
        if w.severity in slo.alerts:
            factor = w.factor_for(slo.window_d)
            out.append(BurnAlert(spec, slo, w, factor, alert_threshold(factor, slo.error_budget)))
    return out


def ratio_windows(slo: SLO, windows: BurnWindows) -> list[int]:
    return sorted({m for w in windows.windows for m in (w.long_window_min, w.short_window_min)} | {slo.window_d * 1440})


def absent_annotations(spec: SLOSpec, slo: SLO, metric: str, expr: str, windows: BurnWindows) -> dict[str, str]:
    return {
        "summary": f"SLO {slo.name}: metric {metric} is absent",
        "description": (
            f"{expr} has been true for the alert's `for` duration: the SLI of {slo.title!r} cannot be computed. "
            "Check that the scrape job exists and its targets are up, and that the exporter still exposes the metric."
        ),
        **_common_annotations(spec, slo, ABSENT_ALERT, windows),
        "runbook_action": "diagnose",
    }


def _burn_rule(spec: SLOSpec, a: BurnAlert, windows: BurnWindows) -> dict:
    slo, thr, sel = a.slo, dec(a.threshold), record_selector(spec, a.slo)
    long_rec = promql.ERROR_RATIO_RECORD.format(window=a.window.long) + sel
    short_rec = promql.ERROR_RATIO_RECORD.format(window=a.window.short) + sel
    expr = f"round({long_rec}, {ROUND_TO}) >= {thr}\nand\nround({short_rec}, {ROUND_TO}) >= {thr}"
    if not slo.time_based:
        # Minimum traffic: 1 failure out of 2 requests is a 50 % error ratio, not an incident.
        expr += f"\nand on ()\n{promql.events_expr(slo, spec.jobs, a.window.long)} >= {slo.min_events}"
    else:
        # Enough history: the long window must reach back (nearly) to its start. On a stack
        # minutes old its "1h" holds minutes of samples and any blip would page.
        # (A sample of the short-window record in the long window before that point: the
        # record has existed that long, whatever the evaluation interval.)
        expr += (f"\nand on ()\ngroup(present_over_time({short_rec}[{a.window.long}] offset "
                 f"{fmt_duration_min(history_offset_min(a))}))")
        # Resolved promptly: once a whole minute is good again (the short window still holds
        # the outage for minutes after it ended).
        expr += f"\nand on ()\navg_over_time({promql.INDICATOR_RECORD}{sel}[1m]) < 1"
    return {"alert": a.name, "expr": expr, "labels": a.labels, "annotations": a.annotations(windows)}


def history_offset_min(a: BurnAlert) -> int:
    """How far back (minutes) a time-based burn alert's history must reach: 90 % of its long
    window (slo/rule_tests.py models the same)."""
    return -(-a.window.long_window_min * 9 // 10)


# --- the fixed-threshold alerts (requirements ALERT-n) ----------------------------------------------
def manual_expr(spec: SLOSpec, slo: SLO, m: ManualAlert) -> str:
    jobs, sli = spec.jobs, slo.sli
    if isinstance(sli, UptimeSLI):
        # `up == 0` while the target answers badly; absent() once it left service discovery
        # (Prometheus marks its series stale at once): both start the `for` at the same moment.
        ups = [promql.selector("up", jobs.of(r), jobs=jobs) for r in sli.jobs]
        return "\nor\n".join(f"{up} == 0 or absent({up})" for up in ups)
    assert m.over_min is not None and m.threshold is not None and m.window_min is not None
    window = fmt_duration_min(m.window_min)
    if isinstance(sli, ThresholdSLI):
        value = promql.threshold_value(sli, jobs, window)
        miss = "<" if sli.comparison == "gte" else ">"
        expr = f"{value} {miss} {dec(m.threshold)}"
        if sli.backlog_gauge:
            expr += f"\nand on ()\n{promql.backlog_throughout(sli, jobs, window)}"
        return expr
    # The bad share over the short window; or, for low traffic, over twice the duration with bad
    # events in both halves (failures throughout it, not one burst). Either needs min_bad bad events.
    half, whole = fmt_duration_min(m.over_min), fmt_duration_min(2 * m.over_min)
    thr = dec(m.threshold)
    share, _ = promql.page_parts(slo, jobs, window)
    long_share, long_bad = promql.page_parts(slo, jobs, whole)
    _, half_bad = promql.page_parts(slo, jobs, half)
    return (f"(\n  {share} > {thr}\nor\n  {long_share} > {thr}\n  and on () {half_bad} > 0\n"
            f"  and on () {promql.offset(half_bad, half, half)} > 0\n)\n"
            f"and on ()\n{long_bad} >= {m.min_bad}")


def manual_description(slo: SLO, m: ManualAlert) -> str:
    sli = slo.sli
    if isinstance(sli, UptimeSLI):
        target = "{{ with $labels.instance }}{{ . }}{{ else }}(none left in service discovery){{ end }}"
        return (f"Prometheus cannot scrape {{{{ $labels.job }}}} target {target} "
                f"for {fmt_duration_s(m.for_s)}: {slo.title}. Workers cannot process PDFs; their breakers open. "
                f"{m.source}.")
    window = fmt_duration_min(m.window_min or 0)
    held = fmt_duration_min(m.over_min or 0)
    thr = dec(m.threshold or Decimal(0))
    if isinstance(sli, ThresholdSLI):
        unit = " PDFs/h" if sli.measure == "rate_per_hour" else ""
        return (f"{slo.title}: {VALUE}{unit} over the last {window} while work waited in the queue the whole "
                f"time, for {held} (pages {'below' if sli.comparison == 'gte' else 'above'} {thr}{unit}). "
                f"{m.source}.")
    bad = (f"finished PDFs took longer than {dec(sli.threshold_s)} s (failed PDFs page as the error rate)"
           if isinstance(sli, LatencySLI) else "PDFs failed")
    whole = fmt_duration_min(2 * (m.over_min or 0))
    return (f"{slo.title}: a share of {VALUE} of the {bad}, over the last {window} (or {whole} at low "
            f"traffic), for {held} (pages above {thr}, with at least {m.min_bad} in {whole}). {m.source}.")


def manual_rules(spec: SLOSpec, slo: SLO, m: ManualAlert, windows: BurnWindows) -> list[dict]:
    labels = {"severity": spec.alerting.severity(m.severity), "slo": slo.name, "service": slo.service,
              **scope_labels(spec)}
    rule: dict = {"alert": m.alert, "expr": manual_expr(spec, slo, m)}
    if m.for_s or m.over_min:
        rule["for"] = fmt_duration_s(m.for_s or 60 * (m.over_min or 0))
    rule["labels"] = labels
    rule["annotations"] = {"summary": f"{slo.title}: its paging threshold is breached",
                           "description": manual_description(slo, m),
                           **_common_annotations(spec, slo, m.alert, windows)}
    if isinstance(slo.sli, UptimeSLI):
        rule["annotations"]["dashboard_url"] = spec.alerting.dashboard_url(SERVICE_DASHBOARD_UID[slo.service])
    out = [rule]
    if m.inhibitor:
        ns = f', namespace="{spec.jobs.namespace}"' if spec.jobs.namespace else ""
        fired = f'ALERTS{{alertname="{m.alert}", alertstate="firing"{ns}}}'
        out.append({
            "alert": m.inhibitor,
            # The ALERTS series carries alertname/alertstate/severity of the page: drop them, keep
            # job and namespace (Alertmanager's inhibition compares namespace).
            "expr": f"{manual_expr(spec, slo, m)}\nor on ()\nmax without (alertname, alertstate, severity) "
                    f"(max_over_time({fired}[{fmt_duration_min(m.inhibit_after_min)}]))",
            "labels": {"severity": NONE_SEVERITY, "slo": slo.name, "service": slo.service, **scope_labels(spec)},
            "annotations": {
                "summary": f"{slo.title}: down now, or {m.alert} fired within {m.inhibit_after_min} min",
                "description": (
                    f"Never notified. Alertmanager inhibits the outage's symptoms (burn-rate pages, breakers, "
                    f"stalled queue) while this fires: from the first failed scrape, before {m.alert} pages "
                    f"after {fmt_duration_s(m.for_s)}, until {m.inhibit_after_min} min after it, while the "
                    "burn-rate windows still hold the outage. A server that flaps without paging inhibits "
                    "only while it is down, so the availability burn-rate pages still reach a person."),
                **_common_annotations(spec, slo, m.inhibitor, windows),
            },
        })
    return out


# --- groups ----------------------------------------------------------------------------------------
def _records(spec: SLOSpec, slo: SLO, wins: list[int]) -> list[dict]:
    labels = {"slo": slo.name, **scope_labels(spec)}
    return [{"record": promql.ERROR_RATIO_RECORD.format(window=fmt_duration_min(m)),
             "expr": promql.error_ratio_expr(slo, spec.jobs, fmt_duration_min(m)), "labels": dict(labels)}
            for m in wins]


def _metadata(spec: SLOSpec, slo: SLO) -> list[dict]:
    labels = {"slo": slo.name, **scope_labels(spec)}
    sel = record_selector(spec, slo)
    budget = dec(slo.error_budget)
    period = promql.ERROR_RATIO_RECORD.format(window=f"{slo.window_d}d")
    return [
        {"record": "slo:objective:ratio", "expr": f"vector({dec(slo.target)})", "labels": dict(labels)},
        {"record": "slo:error_budget:ratio", "expr": f"vector({budget})", "labels": dict(labels)},
        {"record": "slo:time_period:days", "expr": f"vector({slo.window_d})", "labels": dict(labels)},
        {"record": "slo:period_burn_rate:ratio", "expr": f"{period}{sel} / {budget}", "labels": dict(labels)},
        {"record": "slo:period_error_budget_remaining:ratio", "expr": f"1 - slo:period_burn_rate:ratio{sel}",
         "labels": dict(labels)},
        {"record": "slo:info", "expr": "vector(1)",
         "labels": {**labels, "service": slo.service, "objective": dec(slo.target), "window": f"{slo.window_d}d",
                    "title": slo.title}},
    ]


def slo_groups(spec: SLOSpec, slo: SLO, windows: BurnWindows | None = None) -> list[dict]:
    windows = windows or load_burn_windows()
    labels = {"slo": slo.name, **scope_labels(spec)}
    fast: list[dict] = []
    slow: list[dict] = []
    if slo.time_based:
        fast.append({"record": promql.INDICATOR_RECORD, "expr": promql.indicator_expr(slo, spec.jobs),
                     "labels": dict(labels)})
    wins = ratio_windows(slo, windows)
    fast += _records(spec, slo, [m for m in wins if m < SLOW_FROM_MIN])
    slow += _records(spec, slo, [m for m in wins if m >= SLOW_FROM_MIN])
    if slo.alerts or slo.manual_alert:
        shortest = fmt_duration_min(wins[0])
        fast.append({"record": "slo:current_burn_rate:ratio",
                     "expr": f"{promql.ERROR_RATIO_RECORD.format(window=shortest)}{record_selector(spec, slo)} / "
                             f"{dec(slo.error_budget)}", "labels": dict(labels)})
    for a in burn_alerts(spec, slo, windows):
        (fast if a.window.severity is Severity.page else slow).append(_burn_rule(spec, a, windows))
    if slo.manual_alert:
        fast += manual_rules(spec, slo, slo.manual_alert, windows)
    for metric, job, expr in promql.absent_exprs(slo, spec.jobs):
        fast.append({
            "alert": ABSENT_ALERT,
            "expr": expr,
            "for": fmt_duration_min(spec.absent_for_min),
            "labels": {"severity": spec.alerting.severity(Severity.ticket), "slo": slo.name, "service": slo.service,
                       "metric": metric, "job": job, **scope_labels(spec)},
            "annotations": absent_annotations(spec, slo, metric, expr, windows),
        })
    sli = slo.sli
    if isinstance(sli, ThresholdSLI) and sli.measure == "rate_per_hour":
        slow.append({"record": THROUGHPUT_AVG_RECORD,
                     "expr": promql.threshold_value(sli, spec.jobs, fmt_duration_min(7 * 1440)),
                     "labels": dict(labels)})
    slow += _metadata(spec, slo)
    return [{"name": f"slo-{slo.name}", "rules": fast},
            {"name": f"slo-{slo.name}-long", "interval": fmt_duration_s(spec.alerting.slow_interval_s), "rules": slow}]


def generate_rules(spec: SLOSpec, windows: BurnWindows | None = None) -> dict[str, dict]:
    """File stem -> rule file content, one file per SLO, and the migration cohorts' records."""
    out = {slo.name: {"groups": slo_groups(spec, slo, windows)} for slo in spec.slos}
    out[cohorts.FILE_STEM] = cohorts.cohort_rules(spec)
    return out


def alert_rules(spec: SLOSpec) -> list[dict]:
    """Every alerting rule the spec generates (for the Alertmanager routing checks)."""
    return [r for f in generate_rules(spec).values() for g in f["groups"] for r in g["rules"] if "alert" in r]
