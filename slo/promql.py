"""Render an SLO's SLI as PromQL. Pure functions: spec in, strings out.

Two shapes of SLI:
  * event based (event_ratio, latency): an error ratio of summed counter rates, request-weighted;
  * time based (uptime, threshold): a 0/1 "good" indicator recorded every evaluation, whose
    average over a window is the good ratio.
"""

from __future__ import annotations

from decimal import Decimal

from slo.spec import SLO, EventRatioSLI, Jobs, LatencySLI, ThresholdSLI, UptimeSLI
from slo.windows import fmt_duration_min

INDICATOR_RECORD = "slo:sli_good:indicator"
ERROR_RATIO_RECORD = "slo:sli_error:ratio_rate{window}"


def le_matcher(bound: float | Decimal) -> str:
    """An ``le`` matcher that selects the bucket on Prometheus 2.x and 3.x.

    Prometheus 3 normalises ``le`` to a float representation on ingestion ("90" -> "90.0"); 2.x
    keeps what the exporter wrote (client_python writes "90.0", others "90"). Whole numbers get a
    regex accepting both spellings; other bounds are written as Python/Go print them ("2.5").
    """
    b = float(bound)
    if b.is_integer():
        return f'le=~"{int(b)}(\\\\.0)?"'
    return f'le="{b!r}"'


def selector(metric: str, job: str, *extra: str) -> str:
    matchers = ", ".join((f'job="{job}"', *extra))
    return f"{metric}{{{matchers}}}"


def _sum_rate(metric: str, job: str, window: str, *extra: str) -> str:
    return f"sum(rate({selector(metric, job, *extra)}[{window}]))"


def _sum_increase(metric: str, job: str, window: str, *extra: str) -> str:
    return f"sum(increase({selector(metric, job, *extra)}[{window}]))"


def indicator_expr(slo: SLO, jobs: Jobs) -> str:
    """0/1 expression, 1 when the pipeline is good at this instant (time-based SLIs only)."""
    sli = slo.sli
    if isinstance(sli, UptimeSLI):
        # A job whose targets vanished from service discovery counts as down, but only while
        # Prometheus itself is up: time before monitoring started is not downtime.
        gate = f"0 * max({selector('up', jobs.prometheus)})"
        return " * ".join(f"(max({selector('up', jobs.of(r))}) or {gate})" for r in sli.jobs)
    if isinstance(sli, ThresholdSLI):
        job = jobs.of(sli.job)
        window = fmt_duration_min(sli.slice_min)
        if sli.measure == "rate_per_hour":
            value = f"{_sum_rate(sli.metric, job, window)} * 3600"
        else:
            value = f"max(max_over_time({selector(sli.metric, job)}[{window}]))"
        op = ">=" if sli.comparison == "gte" else "<="
        good = f"({value} {op} bool {sli.threshold})"
        if sli.idle_gauge:
            return f"clamp_max({good} + (sum({selector(sli.idle_gauge, job)}) == bool 0), 1)"
        return good
    raise TypeError(f"slo {slo.name!r}: {sli.kind} is event based, it has no indicator")


def error_ratio_expr(slo: SLO, jobs: Jobs, window: str) -> str:
    """Error ratio over ``window`` (e.g. "5m"), as used by the recording rules."""
    sli = slo.sli
    if isinstance(sli, EventRatioSLI):
        job = jobs.of(sli.job)
        # Bad counters may not exist until the first failure: treat missing as 0. A zero total
        # is filtered out (no traffic means no ratio, not 0/0 = NaN).
        bad = " + ".join(f"({_sum_rate(m, job, window)} or vector(0))" for m in sli.bad)
        total = " + ".join(f"({_sum_rate(m, job, window)} or vector(0))" for m in sli.total)
        return f"({bad}) / (({total}) > 0)"
    if isinstance(sli, LatencySLI):
        job = jobs.of(sli.job)
        good = _sum_rate(f"{sli.histogram}_bucket", job, window, le_matcher(sli.threshold_s))
        total = _sum_rate(f"{sli.histogram}_count", job, window)
        return f"1 - ({good} / ({total} > 0))"
    return f'1 - avg_over_time({INDICATOR_RECORD}{{slo="{slo.name}"}}[{window}])'


def count_exprs(slo: SLO, jobs: Jobs, window: str, step: str) -> tuple[str, str]:
    """(good, total) event or slice counts over ``window``, for the calculators' instant queries."""
    sli = slo.sli
    if isinstance(sli, EventRatioSLI):
        job = jobs.of(sli.job)
        bad = " + ".join(f"({_sum_increase(m, job, window)} or vector(0))" for m in sli.bad)
        total = " + ".join(f"({_sum_increase(m, job, window)} or vector(0))" for m in sli.total)
        return f"({total}) - ({bad})", total
    if isinstance(sli, LatencySLI):
        job = jobs.of(sli.job)
        good = _sum_increase(f"{sli.histogram}_bucket", job, window, le_matcher(sli.threshold_s))
        return good, _sum_increase(f"{sli.histogram}_count", job, window)
    ind = indicator_expr(slo, jobs)
    # A subquery re-evaluates the indicator, so the answer does not depend on recording rules.
    return f"sum_over_time(({ind})[{window}:{step}])", f"count_over_time(({ind})[{window}:{step}])"


def events_expr(slo: SLO, jobs: Jobs, window: str) -> str:
    """Number of events in ``window`` (event-based SLIs): the alerts' minimum-traffic guard."""
    sli = slo.sli
    if isinstance(sli, EventRatioSLI):
        return " + ".join(f"({_sum_increase(m, jobs.of(sli.job), window)} or vector(0))" for m in sli.total)
    if isinstance(sli, LatencySLI):
        return _sum_increase(f"{sli.histogram}_count", jobs.of(sli.job), window)
    raise TypeError(f"slo {slo.name!r}: {sli.kind} is time based, it counts slices, not events")


def absent_exprs(slo: SLO, jobs: Jobs) -> list[tuple[str, str, str]]:
    """(metric, job, absent() expression) for each metric the SLO cannot be computed without."""
    sli = slo.sli
    if isinstance(sli, UptimeSLI):
        pairs = [("up", "up", jobs.of(r)) for r in sli.jobs]
    elif isinstance(sli, LatencySLI):
        pairs = [(sli.histogram, sli.histogram + "_count", jobs.of(sli.job))]
    elif isinstance(sli, EventRatioSLI):
        # Only the first total counter: bad counters may legitimately appear at the first failure.
        pairs = [(sli.total[0], sli.total[0], jobs.of(sli.job))]
    else:
        assert isinstance(sli, ThresholdSLI)
        names = [sli.metric] + ([sli.idle_gauge] if sli.idle_gauge else [])
        pairs = [(m, m, jobs.of(sli.job)) for m in names]
    return [(metric, job, f"absent({selector(sample, job)})") for metric, sample, job in pairs]
