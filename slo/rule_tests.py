"""Generate ``promtool test rules`` unit tests for the generated SLO alerts. Pure.

For every burn-rate alert rule (one window pair) two scenarios:
  * event-based SLIs: a constant error ratio exactly AT the pair's threshold (it fires, with every
    pair whose threshold is lower) and 1e-6 below it (the pair is silent);
  * time-based SLIs: the last k samples bad, k the smallest count that crosses the pair's
    threshold over its long window (fires), and k - 1 (silent).
The expected set of firing alerts is computed here with exact fractions from the same sample
counts Prometheus sees (range selectors include both ends on Prometheus 2.x). Plus one scenario
with every needed metric absent (SLOMetricAbsent fires after its ``for``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from slo import promql
from slo.rules import (
    ABSENT_ALERT,
    ALERT_BY_SEVERITY,
    BurnAlert,
    absent_annotations,
    burn_alerts,
    history_offset_min,
    scope_labels,
)
from slo.spec import SLO, EventRatioSLI, LatencySLI, SLOSpec, ThresholdSLI, UptimeSLI
from slo.windows import BurnWindows, Severity, fmt_duration_min, load_burn_windows

EVENTS_PER_MIN = 1_000_000  # 1e6 events/min makes every 6-decimal ratio an integer count
EVENT_EVAL_MIN = 20


class ScenarioError(ValueError):
    pass


def _round6(x: Fraction) -> Fraction:
    return Fraction(math.floor(x * 1_000_000 + Fraction(1, 2)), 1_000_000)


def _series(metric: str, labels: dict[str, str], values: str) -> dict[str, str]:
    inner = ", ".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{metric}{{{inner}}}", "values": values}


def go_g4(x: Fraction) -> str:
    """Go's %.4g of the float Prometheus holds (the alerts' `{{ $value | printf "%.4g" }}`)."""
    return format(float(x), ".4g")


def _exp(a: BurnAlert, value: Fraction, windows: BurnWindows) -> dict:
    ann = a.annotations(windows)
    ann["description"] = ann["description"].replace('{{ $value | printf "%.4g" }}', go_g4(value))
    return {"exp_labels": dict(a.labels), "exp_annotations": ann}


def _alert_checks(slo: SLO, alerts: list[BurnAlert], firing: dict[BurnAlert, Fraction], eval_min: int,
                  windows: BurnWindows) -> list[dict]:
    """``firing``: each alert expected to fire, with its $value (the rounded long-window ratio)."""
    out = []
    for name in sorted({ALERT_BY_SEVERITY[s] for s in slo.alerts}):
        out.append({"eval_time": fmt_duration_min(eval_min) if eval_min else "0m", "alertname": name,
                    "exp_alerts": [_exp(a, firing[a], windows) for a in alerts if a in firing and a.name == name]})
    out.append({"eval_time": fmt_duration_min(eval_min), "alertname": ABSENT_ALERT, "exp_alerts": []})
    return out


# --- event based ---------------------------------------------------------------------------------
def _event_series(slo: SLO, spec: SLOSpec, bad_per_min: int, le_text: str) -> list[dict]:
    sli = slo.sli
    n = EVENT_EVAL_MIN + 10
    base = {"job": spec.jobs.of(sli.job), "instance": "t1", **scope_labels(spec)}  # type: ignore[union-attr]
    if isinstance(sli, LatencySLI):
        good = EVENTS_PER_MIN - bad_per_min
        return [
            _series(f"{sli.histogram}_bucket", {**base, "le": le_text}, f"0+{good}x{n}"),
            _series(f"{sli.histogram}_bucket", {**base, "le": "+Inf"}, f"0+{EVENTS_PER_MIN}x{n}"),
            _series(f"{sli.histogram}_count", base, f"0+{EVENTS_PER_MIN}x{n}"),
            # Failed events exist from start-up at 0 (worker/metrics.py); slow-by-failure is tested by hand.
            *(_series(m, base, f"0x{n}") for m in sli.failures),
        ]
    assert isinstance(sli, EventRatioSLI)
    series = {sli.bad[0]: bad_per_min}
    rest = [m for m in sli.total if m not in sli.bad]
    if not rest:
        raise ScenarioError(f"slo {slo.name!r}: total must contain a counter that is not a bad counter")
    # total = sum(total counters): put the good events on the first non-bad total counter.
    series[rest[0]] = EVENTS_PER_MIN - (bad_per_min if sli.bad[0] in sli.total else 0)
    return [_series(m, base, f"0+{v}x{n}") for m, v in series.items()]


def _event_tests(slo: SLO, spec: SLOSpec, alerts: list[BurnAlert], windows: BurnWindows) -> list[tuple[int, dict]]:
    tests = []
    sli = slo.sli
    for i, a in enumerate(alerts):
        for label, ratio in (("at", a.threshold), ("below", a.threshold - Decimal("0.000001"))):
            r = Fraction(ratio)
            bad = int(r * EVENTS_PER_MIN)
            firing = {b: r for b in alerts if Fraction(b.threshold) <= r}
            # Alternate the le spelling: 2.x text format "90" and Prometheus 3 / client_python "90.0".
            le_text = ""
            if isinstance(sli, LatencySLI):
                b = float(sli.threshold_s)
                le_text = (f"{b}" if i % 2 == 0 else f"{int(b)}") if b.is_integer() else repr(b)
            tests.append((1, {
                "name": f"{slo.name}: error ratio {label} {a.window.severity.value} "
                        f"threshold {promql_dec(a.threshold)} "
                        f"({a.window.long}/{a.window.short}){f', le={le_text!r}' if le_text else ''}",
                "interval": "1m",
                "input_series": _event_series(slo, spec, bad, le_text),
                "alert_rule_test": _alert_checks(slo, alerts, firing, EVENT_EVAL_MIN, windows),
            }))
    return tests


def _low_traffic_test(slo: SLO, spec: SLOSpec, alerts: list[BurnAlert], windows: BurnWindows) -> tuple[int, dict]:
    """Every event bad, but fewer than min_events in every long window: the guard keeps it silent."""
    sli = slo.sli
    per_min = Fraction(slo.min_events, 2 * EVENT_EVAL_MIN)  # ~half of min_events by the eval time
    n = EVENT_EVAL_MIN + 10
    base = {"job": spec.jobs.of(sli.job), "instance": "t1", **scope_labels(spec)}  # type: ignore[union-attr]
    rate = promql_dec(Decimal(per_min.numerator) / Decimal(per_min.denominator))
    if isinstance(sli, LatencySLI):
        series = [_series(f"{sli.histogram}_bucket", {**base, "le": "+Inf"}, f"0+{rate}x{n}"),
                  _series(f"{sli.histogram}_count", base, f"0+{rate}x{n}"),
                  *(_series(m, base, f"0x{n}") for m in sli.failures)]
    else:
        assert isinstance(sli, EventRatioSLI)
        series = [_series(m, base, f"0+{rate}x{n}" if m == sli.bad[0] else f"0+0x{n}")
                  for m in dict.fromkeys((*sli.bad, *sli.total))]
    return (1, {"name": f"{slo.name}: every event bad but fewer than min_events {slo.min_events}: silent",
                "interval": "1m", "input_series": series,
                "alert_rule_test": _alert_checks(slo, alerts, {}, EVENT_EVAL_MIN, windows)})


def promql_dec(d) -> str:
    return format(d.normalize(), "f")


# --- time based ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Grid:
    step_min: int
    samples: int  # sample i is at i * step_min, i = 0 .. samples - 1
    first_indicator: int  # index of the first sample where the indicator exists


def _grid(slo: SLO, a: BurnAlert) -> _Grid:
    step = max(1, a.window.short_window_min // 5)
    rate_based = False
    if isinstance(slo.sli, ThresholdSLI) and slo.sli.measure == "rate_per_hour":
        rate_based = True
        step = min(step, max(1, slo.sli.slice_min // 2))  # rate() needs two samples per slice
    samples = a.window.long_window_min // step + 1
    return _Grid(step, samples, 1 if rate_based else 0)


def _ratio(grid: _Grid, bad: int, window_min: int) -> Fraction | None:
    last = grid.samples - 1
    first = max(grid.first_indicator, last - window_min // grid.step_min)  # inclusive left end (2.x)
    if first > last:
        return None
    n = last - first + 1
    return Fraction(min(bad, n), n)


def _fires(grid: _Grid, bad: int, a: BurnAlert) -> Fraction | None:
    """The alert's $value (rounded long-window ratio) if it fires, else None."""
    thr = Fraction(a.threshold)
    if (grid.samples - 1) * grid.step_min < history_offset_min(a):
        return None  # not enough history for the long window (slo/rules.py)
    longr, shortr = _ratio(grid, bad, a.window.long_window_min), _ratio(grid, bad, a.window.short_window_min)
    if longr is not None and shortr is not None and _round6(longr) >= thr and _round6(shortr) >= thr:
        return _round6(longr)
    return None


def _pattern(grid: _Grid, bad: int, good_v: str, bad_v: str) -> str:
    good = grid.samples - bad
    parts = ([f"{good_v}x{good - 1}"] if good else []) + ([f"{bad_v}x{bad - 1}"] if bad else [])
    return " ".join(parts)


def _time_series(slo: SLO, spec: SLOSpec, grid: _Grid, bad: int) -> list[dict]:
    sli = slo.sli
    if isinstance(sli, UptimeSLI):
        # Only `up` varies; breakers and request counters are absent, which the indicator reads as
        # "nothing failing" (hand-written tests in alerts/tests/ cover those terms).
        out = []
        for i, role in enumerate(sli.jobs):
            base = {"job": spec.jobs.of(role), "instance": "t1", **scope_labels(spec)}
            out.append(_series("up", base, _pattern(grid, bad, "1", "0") if i == 0 else f"1x{grid.samples - 1}"))
        return out
    assert isinstance(sli, ThresholdSLI)
    base = {"job": spec.jobs.of(sli.job), "instance": "t1", **scope_labels(spec)}
    thr = sli.threshold
    if sli.measure == "max" and sli.comparison == "lte" and not sli.backlog_gauge:
        # max_over_time turns bad as soon as the first bad sample enters the slice: exact.
        return [_series(sli.metric, base, _pattern(grid, bad, promql_dec(thr), promql_dec(thr + 1)))]
    raise ScenarioError(
        f"slo {slo.name!r}: no generated promtool scenario for measure={sli.measure} comparison={sli.comparison}"
        f"{' with a backlog gauge' if sli.backlog_gauge else ''}; hand-write its test in alerts/tests/"
    )


def has_generated_scenarios(slo: SLO) -> bool:
    """Throughput-style SLIs (a rate judged only under backlog) are proven by hand-written tests."""
    sli = slo.sli
    return not (isinstance(sli, ThresholdSLI) and (sli.measure != "max" or sli.backlog_gauge))


def _time_tests(slo: SLO, spec: SLOSpec, alerts: list[BurnAlert], windows: BurnWindows) -> list[tuple[int, dict]]:
    tests: list[tuple[int, dict]] = []
    if not has_generated_scenarios(slo):
        return tests
    for a in alerts:
        grid = _grid(slo, a)
        k = next((b for b in range(1, grid.samples + 1) if _fires(grid, b, a) is not None), None)
        if k is None:
            raise ScenarioError(
                f"slo {slo.name!r}: {a.window.long}/{a.window.short} alert cannot fire on a {grid.step_min}m grid")
        eval_min = (grid.samples - 1) * grid.step_min
        for bad, label in ((k, "fires"), (k - 1, "silent")):
            firing = {b: v for b in alerts if (v := _fires(grid, bad, b)) is not None}
            assert (a in firing) == (label == "fires")
            tests.append((grid.step_min, {
                "name": f"{slo.name}: last {bad} of {grid.samples} samples bad ({grid.step_min}m apart), "
                        f"{a.window.severity.value} {a.window.long}/{a.window.short} {label}",
                "interval": f"{grid.step_min}m",
                "input_series": _time_series(slo, spec, grid, bad),
                "alert_rule_test": _alert_checks(slo, alerts, firing, eval_min, windows),
            }))
    return tests


def _absent_test(slo: SLO, spec: SLOSpec, windows: BurnWindows) -> dict:
    eval_min = spec.absent_for_min + 2
    exp = []
    for metric, job, expr in promql.absent_exprs(slo, spec.jobs):
        exp.append({"exp_labels": {"severity": spec.alerting.severity(Severity.ticket), "slo": slo.name,
                                   "service": slo.service, "metric": metric, "job": job, **scope_labels(spec)},
                    "exp_annotations": absent_annotations(spec, slo, metric, expr, windows)})
    return {
        "name": f"{slo.name}: every metric absent -> {ABSENT_ALERT}",
        "interval": "1m",
        "input_series": [_series("unrelated_metric", {"job": "elsewhere"}, f"1x{eval_min}")],
        "alert_rule_test": [{"eval_time": fmt_duration_min(eval_min), "alertname": ABSENT_ALERT, "exp_alerts": exp}],
    }


def generate_rule_tests(spec: SLOSpec, windows: BurnWindows | None = None) -> dict[str, dict]:
    """File stem -> promtool test file, relative to alerts/generated/tests/.

    One file per SLO and sample step: promtool's evaluation interval is per file and must equal
    the input series' step, or the time-based indicators would see stale samples.
    """
    windows = windows or load_burn_windows()
    out: dict[str, dict] = {}
    for slo in spec.slos:
        alerts = burn_alerts(spec, slo, windows)
        tests = (_time_tests if slo.time_based else _event_tests)(slo, spec, alerts, windows)
        if not slo.time_based and alerts:
            tests.append(_low_traffic_test(slo, spec, alerts, windows))
        tests.append((1, _absent_test(slo, spec, windows)))
        for step in sorted({s for s, _ in tests}):
            stem = f"{slo.name}.step{fmt_duration_min(step)}"
            out[stem] = {
                "rule_files": [f"../{slo.name}.rules.yml"],
                "evaluation_interval": fmt_duration_min(step),
                # promtool evaluates every group at every step, in no fixed order unless told: the
                # long group's ticket alerts read this step's short-window records only after them.
                "group_eval_order": [f"slo-{slo.name}", f"slo-{slo.name}-long"],
                "tests": [t for s, t in tests if s == step],
            }
    return out
