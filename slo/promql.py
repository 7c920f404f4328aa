"""Render an SLO's SLI as PromQL. Pure functions: spec in, strings out.

Two shapes of SLI:
  * event based (event_ratio, latency): an error ratio of summed counter rates, request-weighted;
  * time based (uptime, threshold): a 0/1 "good" indicator recorded every evaluation, whose
    average over a window is the good ratio. A threshold SLI with a backlog gauge records no
    sample at all for a slice that had nothing to work on: such a slice is not judged.

Every selector carries the job and, when the spec is scoped to a Kubernetes namespace, the
namespace (``Jobs.namespace``).
"""

from __future__ import annotations

from decimal import Decimal

from slo.spec import SLO, EventRatioSLI, Jobs, LatencySLI, ThresholdSLI, UptimeSLI, dec
from slo.windows import fmt_duration_min

INDICATOR_RECORD = "slo:sli_good:indicator"
ERROR_RATIO_RECORD = "slo:sli_error:ratio_rate{window}"
# Prometheus has been scraping for a minute: the gate that makes a job with no target at all
# count as down, without naming any deployment's own Prometheus job (kube-prometheus-stack calls
# it kube-prometheus-stack-prometheus, Compose has none). The minute: a fresh Prometheus
# evaluates its rules before it has scraped every target once, which must not read as an outage
# of the targets not scraped yet. In `slo report`'s subqueries it also keeps time before
# monitoring started out of the count. Scoped to a namespace, the stack's own targets stand for
# it (another stack's Prometheus targets in the same server must not decide this one's uptime).
MONITORING_UP = "group(up offset 1m)"


def monitoring_up(jobs: Jobs) -> str:
    return f'group(up{{namespace="{jobs.namespace}"}} offset 1m)' if jobs.namespace else MONITORING_UP


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


def matchers(job: str, jobs: Jobs, *extra: str) -> str:
    ns = (f'namespace="{jobs.namespace}"',) if jobs.namespace else ()
    return ", ".join((f'job="{job}"', *ns, *extra))


def selector(metric: str, job: str, *extra: str, jobs: Jobs | None = None) -> str:
    return f"{metric}{{{matchers(job, jobs or Jobs(), *extra)}}}"


def _sel(jobs: Jobs, metric: str, role: str, *extra: str) -> str:
    return selector(metric, jobs.of(role), *extra, jobs=jobs)  # type: ignore[arg-type]


def _sum_rate(jobs: Jobs, metric: str, role: str, window: str, *extra: str) -> str:
    return f"sum(rate({_sel(jobs, metric, role, *extra)}[{window}]))"


def _sum_increase(jobs: Jobs, metric: str, role: str, window: str, *extra: str) -> str:
    return f"sum(increase({_sel(jobs, metric, role, *extra)}[{window}]))"


def _kinds(kinds: tuple[str, ...]) -> str:
    return f'kind=~"{"|".join(kinds)}"'


def job_up_expr(jobs: Jobs, role: str) -> str:
    """1 while the job has a target up, 0 while its targets are down or gone from discovery."""
    return f"(max({_sel(jobs, 'up', role)}) or on () 0 * {monitoring_up(jobs)})"


def uptime_indicator(sli: UptimeSLI, jobs: Jobs) -> str:
    terms = [job_up_expr(jobs, r) for r in sli.jobs]
    if sli.breaker_gauge:
        # Every worker's breaker open: no worker sends work to the server. A worker without the
        # gauge (never started) does not make the service down on its own.
        terms.append(f"((min({_sel(jobs, sli.breaker_gauge, 'workers')}) < bool 2) or on () vector(1))")
    rf = sli.request_failures
    if rf:
        w = fmt_duration_min(rf.window_min)
        failed = _sum_rate(jobs, rf.failed, "workers", w, _kinds(rf.kinds))
        sent = _sum_rate(jobs, rf.attempted, "workers", w)
        if rf.unsent_kinds:
            unsent = _sum_rate(jobs, rf.failed, "workers", w, _kinds(rf.unsent_kinds))
            sent = f"({sent} + ({unsent} or vector(0)))"
        # No request in the window: nothing failed (the division is filtered out, then 1).
        terms.append(f"(({failed} / ({sent} > 0) <= bool {dec(rf.max_failed_ratio)}) or on () vector(1))")
    return " * ".join(terms)


def threshold_value(sli: ThresholdSLI, jobs: Jobs, window: str) -> str:
    """The measured value of one slice (in the threshold's unit)."""
    if sli.measure == "rate_per_hour":
        return f"{_sum_rate(jobs, sli.metric, sli.job, window)} * 3600"
    return f"max(max_over_time({_sel(jobs, sli.metric, sli.job)}[{window}]))"


def backlog_throughout(sli: ThresholdSLI, jobs: Jobs, window: str) -> str:
    """Work waited for the whole window, and the window is covered: the gauge was already exported
    a window ago (a slice that began before monitoring did is not judged on its last minutes).
    Every worker exports the same group-wide lag: max, never sum."""
    assert sli.backlog_gauge is not None
    gauge = _sel(jobs, sli.backlog_gauge, sli.job)
    return f"max(min_over_time({gauge}[{window}])) > 0 and on () count({gauge} offset {window})"


def indicator_expr(slo: SLO, jobs: Jobs) -> str:
    """0/1 expression, 1 when the pipeline is good at this instant (time-based SLIs only)."""
    sli = slo.sli
    if isinstance(sli, UptimeSLI):
        return uptime_indicator(sli, jobs)
    if isinstance(sli, ThresholdSLI):
        window = fmt_duration_min(sli.slice_min)
        op = ">=" if sli.comparison == "gte" else "<="
        value = threshold_value(sli, jobs, window)
        good = f"({value} {op} bool {sli.threshold})"
        if sli.backlog_gauge:
            # Judged when the slice met the threshold, or when work waited the whole slice: a slice
            # that missed it with an empty queue at some point (demand was lower) is not judged.
            judged = f"({value} {op} {sli.threshold}) or on () ({backlog_throughout(sli, jobs, window)})"
            return f"{good} and on () ({judged})"
        return good
    raise TypeError(f"slo {slo.name!r}: {sli.kind} is event based, it has no indicator")


def _event_terms(jobs: Jobs, role: str, metrics: tuple[str, ...], window: str, agg=_sum_rate) -> str:
    # A counter may not exist yet (an exporter that creates it at the first event): missing is 0.
    return " + ".join(f"({agg(jobs, m, role, window)} or vector(0))" for m in metrics)


def latency_parts(sli: LatencySLI, jobs: Jobs, window: str, agg=_sum_rate) -> tuple[str, str]:
    """(good, total) of a latency SLI: good = within the bound; total = observed + never finished."""
    good = agg(jobs, f"{sli.histogram}_bucket", sli.job, window, le_matcher(sli.threshold_s))
    total = agg(jobs, f"{sli.histogram}_count", sli.job, window)
    if sli.failures:
        total = f"({total} + {_event_terms(jobs, sli.job, sli.failures, window, agg)})"
    return good, total


def error_ratio_expr(slo: SLO, jobs: Jobs, window: str) -> str:
    """Error ratio over ``window`` (e.g. "5m"), as used by the recording rules."""
    sli = slo.sli
    if isinstance(sli, EventRatioSLI):
        bad = _event_terms(jobs, sli.job, sli.bad, window)
        total = _event_terms(jobs, sli.job, sli.total, window)
        # A zero total is filtered out (no traffic means no ratio, not 0/0 = NaN).
        return f"({bad}) / (({total}) > 0)"
    if isinstance(sli, LatencySLI):
        good, total = latency_parts(sli, jobs, window)
        return f"1 - ({good} / ({total} > 0))"
    ns = f', namespace="{jobs.namespace}"' if jobs.namespace else ""
    return f'1 - avg_over_time({INDICATOR_RECORD}{{slo="{slo.name}"{ns}}}[{window}])'


def count_exprs(slo: SLO, jobs: Jobs, window: str, step: str) -> tuple[str, str]:
    """(good, total) event or slice counts over ``window``, for the calculators' instant queries.

    Threshold SLIs are counted in whole, non-overlapping slices (the subquery's step is the slice,
    aligned by Prometheus to multiples of it); uptime in steps of ``step``.
    """
    sli = slo.sli
    if isinstance(sli, EventRatioSLI):
        bad = _event_terms(jobs, sli.job, sli.bad, window, _sum_increase)
        total = _event_terms(jobs, sli.job, sli.total, window, _sum_increase)
        return f"({total}) - ({bad})", total
    if isinstance(sli, LatencySLI):
        return latency_parts(sli, jobs, window, _sum_increase)
    if isinstance(sli, ThresholdSLI):
        step = fmt_duration_min(sli.slice_min)
    ind = indicator_expr(slo, jobs)
    # A subquery re-evaluates the indicator, so the answer does not depend on recording rules.
    return f"sum_over_time(({ind})[{window}:{step}])", f"count_over_time(({ind})[{window}:{step}])"


def events_expr(slo: SLO, jobs: Jobs, window: str) -> str:
    """Number of events in ``window`` (event-based SLIs): the alerts' minimum-traffic guard."""
    sli = slo.sli
    if isinstance(sli, EventRatioSLI):
        return _event_terms(jobs, sli.job, sli.total, window, _sum_increase)
    if isinstance(sli, LatencySLI):
        return latency_parts(sli, jobs, window, _sum_increase)[1]
    raise TypeError(f"slo {slo.name!r}: {sli.kind} is time based, it counts slices, not events")


def coverage_expr(slo: SLO, jobs: Jobs, window: str, step: str) -> str:
    """Seconds of ``window`` for which Prometheus holds the SLI's first series (retention, start-up)."""
    sli = slo.sli
    metric = sli.metrics()[0]
    role = sli.jobs[0] if isinstance(sli, UptimeSLI) else sli.job
    name = f"{metric}_count" if isinstance(sli, LatencySLI) else metric
    return f"time() - min(min_over_time(timestamp({_sel(jobs, name, role)})[{window}:{step}]))"


def absent_exprs(slo: SLO, jobs: Jobs) -> list[tuple[str, str, str]]:
    """(metric, job, absent() expression) for each metric the SLO cannot be computed without."""
    sli = slo.sli
    if isinstance(sli, UptimeSLI):
        pairs = [("up", "up", r) for r in sli.jobs]
    elif isinstance(sli, LatencySLI):
        pairs = [(sli.histogram, sli.histogram + "_count", sli.job)]
    elif isinstance(sli, EventRatioSLI):
        # Only the first total counter: bad counters may legitimately appear at the first failure.
        pairs = [(sli.total[0], sli.total[0], sli.job)]
    else:
        assert isinstance(sli, ThresholdSLI)
        names = [sli.metric] + ([sli.backlog_gauge] if sli.backlog_gauge else [])
        pairs = [(m, m, sli.job) for m in names]
    return [(metric, jobs.of(role), f"absent({_sel(jobs, sample, role)})")
            for metric, sample, role in pairs]


def page_parts(slo: SLO, jobs: Jobs, window: str) -> tuple[str, str]:
    """(bad share, bad count) over ``window`` as a fixed-threshold page reads them (event SLIs).

    A latency page reads finished PDFs only: requirement ALERT-2's "P95 > 90 s" is a percentile of
    durations, and a failed PDF has none; it pages as the error rate's alert instead, so one
    cause makes one page. The latency SLO itself (burn rate, budget) still counts it as slow.
    """
    sli = slo.sli
    if isinstance(sli, EventRatioSLI):
        return error_ratio_expr(slo, jobs, window), _event_terms(jobs, sli.job, sli.bad, window, _sum_increase)
    if isinstance(sli, LatencySLI):
        finished = LatencySLI.model_validate({**sli.model_dump(), "failures": ()})
        good, total = latency_parts(finished, jobs, window)
        good_n, total_n = latency_parts(finished, jobs, window, _sum_increase)
        return f"1 - ({good} / ({total} > 0))", f"({total_n} - {good_n})"
    raise TypeError(f"slo {slo.name!r}: {sli.kind} is time based, it counts slices, not events")


def offset(expr: str, window: str, by: str) -> str:
    """``expr`` (whose ranges are all ``[window]``) evaluated ``by`` earlier."""
    return expr.replace(f"[{window}]", f"[{window}] offset {by}")
