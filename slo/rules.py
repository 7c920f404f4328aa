"""Generate Prometheus rule groups from the SLO spec. Pure: spec in, plain dicts out.

Per SLO, one group (rules in a group run in order, so alerts see this evaluation's records):
  * ``slo:sli_good:indicator`` (time-based SLIs only): 1 when good at this instant;
  * ``slo:sli_error:ratio_rate<W>`` for every burn-rate window and the SLO window;
  * multi-window multi-burn-rate alerts, one rule per window pair (slo/burn_windows.yaml);
  * ``SLOMetricAbsent`` when a metric the SLI needs is missing.
Thresholds are exact decimals; the SLI is compared after ``round(x, 1e-6)`` because Prometheus
2.42 compares floats exactly and rate arithmetic is not exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from slo import promql
from slo.spec import SLO, SLOSpec, alert_threshold, dec
from slo.windows import BurnWindow, BurnWindows, Severity, fmt_duration_min, load_burn_windows

ALERT_BY_SEVERITY = {Severity.page: "SLOErrorBudgetBurnFast", Severity.ticket: "SLOErrorBudgetBurnSlow"}
ABSENT_ALERT = "SLOMetricAbsent"
RUNBOOK_PAGES = "runbooks/pages"
ROUND_TO = "0.000001"


def runbook_url(alert: str) -> str:
    return f"{RUNBOOK_PAGES}/{alert}.md"


@dataclass(frozen=True)
class BurnAlert:
    """One generated burn-rate alert rule (kept typed so the test generator can reuse it)."""

    slo: SLO
    window: BurnWindow
    factor: Decimal
    threshold: Decimal

    @property
    def name(self) -> str:
        return ALERT_BY_SEVERITY[self.window.severity]

    @property
    def labels(self) -> dict[str, str]:
        return {
            "severity": self.window.severity.value,
            "slo": self.slo.name,
            "long_window": self.window.long,
            "short_window": self.window.short,
            "burn_factor": dec(self.factor.quantize(Decimal("0.0001"))),
        }

    @property
    def annotations(self) -> dict[str, str]:
        s, w = self.slo, self.window
        return {
            "summary": f"SLO {s.name}: error budget burning at >= {dec(self.factor.quantize(Decimal('0.0001')))}x",
            "description": (
                f"{s.title}: the error ratio over both {w.long} and {w.short} is at least {dec(self.threshold)} "
                f"({dec(self.factor.quantize(Decimal('0.0001')))}x the {dec(s.error_budget)} error budget "
                f"of a {dec(s.target * 100)} % target over "
                f"{s.window_d} d); at this rate {dec(w.budget_consumed_ratio * 100)} % of the budget goes in {w.long}."
                + ("" if s.time_based else f" (Only with at least {s.min_events} events in {w.long}.)")
            ),
            "runbook_url": runbook_url(self.name),
            "runbook_action": s.runbook_action,
        }


def burn_alerts(slo: SLO, windows: BurnWindows) -> list[BurnAlert]:
    out = []
    for w in windows.windows:
        if w.severity in slo.alerts:
            factor = w.factor_for(slo.window_d)
            out.append(BurnAlert(slo, w, factor, alert_threshold(factor, slo.error_budget)))
    return out


def ratio_windows(slo: SLO, windows: BurnWindows) -> list[str]:
    mins = sorted({m for w in windows.windows for m in (w.long_window_min, w.short_window_min)} | {slo.window_d * 1440})
    return [fmt_duration_min(m) for m in mins]


def absent_annotations(slo: SLO, metric: str, expr: str) -> dict[str, str]:
    return {
        "summary": f"SLO {slo.name}: metric {metric} is absent",
        "description": (
            f"{expr} has been true for the alert's `for` duration: the SLI of {slo.title!r} cannot be computed. "
            "Check that the scrape job exists and its targets are up, and that the exporter still exposes the metric."
        ),
        "runbook_url": runbook_url(ABSENT_ALERT),
        "runbook_action": "diagnose",
    }


def slo_group(spec: SLOSpec, slo: SLO, windows: BurnWindows | None = None) -> dict:
    windows = windows or load_burn_windows()
    rules: list[dict] = []
    if slo.time_based:
        rules.append({"record": promql.INDICATOR_RECORD, "expr": promql.indicator_expr(slo, spec.jobs),
                      "labels": {"slo": slo.name}})
    for win in ratio_windows(slo, windows):
        rules.append({"record": promql.ERROR_RATIO_RECORD.format(window=win),
                      "expr": promql.error_ratio_expr(slo, spec.jobs, win), "labels": {"slo": slo.name}})
    for a in burn_alerts(slo, windows):
        thr = dec(a.threshold)
        sel = f'{{slo="{slo.name}"}}'
        long_rec = promql.ERROR_RATIO_RECORD.format(window=a.window.long) + sel
        short_rec = promql.ERROR_RATIO_RECORD.format(window=a.window.short) + sel
        expr = f"round({long_rec}, {ROUND_TO}) >= {thr}\nand\nround({short_rec}, {ROUND_TO}) >= {thr}"
        if not slo.time_based:
            # Minimum traffic: 1 failure out of 2 requests is a 50 % error ratio, not an incident.
            expr += f"\nand on ()\n{promql.events_expr(slo, spec.jobs, a.window.long)} >= {slo.min_events}"
        rules.append({
            "alert": a.name,
            "expr": expr,
            "labels": a.labels,
            "annotations": a.annotations,
        })
    for metric, job, expr in promql.absent_exprs(slo, spec.jobs):
        rules.append({
            "alert": ABSENT_ALERT,
            "expr": expr,
            "for": fmt_duration_min(spec.absent_for_min),
            "labels": {"severity": Severity.ticket.value, "slo": slo.name, "metric": metric, "job": job},
            "annotations": absent_annotations(slo, metric, expr),
        })
    return {"name": f"slo-{slo.name}", "rules": rules}


def generate_rules(spec: SLOSpec, windows: BurnWindows | None = None) -> dict[str, dict]:
    """File stem -> rule file content, one file per SLO."""
    return {slo.name: {"groups": [slo_group(spec, slo, windows)]} for slo in spec.slos}
