"""The SLO spec: ``slo/objectives.yaml`` parsed into typed, validated models.

Every SLI is structured (a kind plus catalog metric names), not free PromQL, so that the metric
names, histogram bucket bounds and budget arithmetic can be checked before anything is rendered.
The PromQL is rendered from it by ``slo/promql.py`` (``slo show`` prints it).
"""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from contract import metrics as catalog
from contract.metrics import MetricType
from contract.models import Strict, error_lines
from contract.prometheus_jobs import JOB_SERVER, JOB_WORKERS
from contract.slo_window import SLO_WINDOW_MAX_D
from slo.windows import BurnWindows, Severity, load_burn_windows

OBJECTIVES_PATH = Path(__file__).with_name("objectives.yaml")
# promtool (Prometheus 2.42) compares floats exactly, so alert thresholds are compared after
# round(x, 1e-6). Thresholds are exact for 30-day windows (the cited factors); for other windows
# the rescaled factor may not terminate (0.1 x 7 d / 3 d) and the threshold is rounded to 1e-6.
THRESHOLD_QUANTUM = Decimal("0.000001")


def alert_threshold(factor: Decimal, error_budget: Decimal) -> Decimal:
    return (factor * error_budget).quantize(THRESHOLD_QUANTUM, rounding=ROUND_HALF_EVEN).normalize()

JobRole = Literal["inference_server", "workers"]
Service = Literal["pipeline", "inference-server", "workers"]
_SLUG = r"^[a-z][a-z0-9-]{1,62}$"


def dec(d: Decimal) -> str:
    """Plain decimal text, no exponent, no trailing zeros ("0.072", "6")."""
    return format(d.normalize(), "f")


class SpecError(ValueError):
    """The SLO spec is invalid; the message names the field path and the fix."""


class Jobs(Strict):
    """Where the SLIs' series come from: Prometheus job names, and the namespace in Kubernetes.

    Every deployment names its jobs ``inference-server`` and ``workers`` (the local stack's and
    Compose's scrape configs, the ServiceMonitors' job label), so the committed rules carry no
    deployment's Prometheus job at all. ``namespace`` is set when rendering for one Kubernetes
    namespace (infra/components/observability.py): every selector then matches it, and every
    alert carries it for Alertmanager's grouping and inhibition.
    """

    inference_server: str = Field(
        default=JOB_SERVER, description="job of the inference server (vLLM or the simulator)")
    workers: str = Field(default=JOB_WORKERS, description="job of the MinerU workers")
    namespace: str | None = Field(
        default=None, description="Kubernetes namespace the series carry; None: no namespace matcher")

    def of(self, role: JobRole) -> str:
        return getattr(self, role)


class Alerting(Strict):
    """What every generated alert carries so that it reaches the right person with what they need."""

    runbook_base_url: str = Field(
        default="https://github.com/splitstack/splitstack/blob/main/runbooks/pages",
        description="URL under which runbooks/pages/<Alert>.md is browsable; runbook_url = base/<Alert>.md")
    dashboard_base_url: str = Field(
        default="https://grafana.example.com",
        description="Grafana base URL; dashboard_url = base/d/<uid> (uids are fixed in dashboards/generate.py)")
    severity_labels: dict[Severity, str] = Field(
        default_factory=lambda: {Severity.page: "critical", Severity.ticket: "warning"},
        description="value of the `severity` label per urgency: kube-prometheus-stack's vocabulary "
        "(critical / warning), which its Alertmanager config and inhibit rules understand")
    slow_interval_s: int = Field(
        default=300, gt=0,
        description="evaluation interval of the long-window groups (1 d, 3 d, 30 d ratios, ticket "
        "alerts, budget series), seconds: their ranges are the expensive ones and move slowly")

    @field_validator("runbook_base_url", "dashboard_base_url")
    @classmethod
    def _absolute(cls, url: str) -> str:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"{url!r} is not an absolute http(s) URL; alert links must open from a pager")
        return url.rstrip("/")

    def severity(self, s: Severity) -> str:
        return self.severity_labels.get(s, s.value)

    def runbook_url(self, alert: str) -> str:
        return f"{self.runbook_base_url}/{alert}.md"

    def dashboard_url(self, uid: str) -> str:
        return f"{self.dashboard_base_url}/d/{uid}"


def _check_metric(name: str, want: tuple[MetricType, ...], what: str) -> str:
    try:
        fam = catalog.get(name)
    except KeyError as e:
        raise ValueError(f"{e.args[0]}; use a metric listed there or add the worker metric to it") from None
    if fam.type not in want:
        raise ValueError(f"{what} {name!r} is a {fam.type.value}, expected {' or '.join(t.value for t in want)}")
    return name


class EventRatioSLI(Strict):
    """Bad events / total events, both sums of counters (request-weighted)."""

    kind: Literal["event_ratio"]
    job: JobRole = Field(description="which scrape job exports the counters")
    bad: tuple[str, ...] = Field(min_length=1, description="counters of bad events")
    total: tuple[str, ...] = Field(min_length=1, description="counters whose sum is all events")

    @field_validator("bad", "total")
    @classmethod
    def _counters(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(_check_metric(n, (MetricType.counter,), "metric") for n in v)

    def metrics(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((*self.bad, *self.total)))


class LatencySLI(Strict):
    """Share of events whose duration is <= threshold_s, counted on a histogram bucket bound."""

    kind: Literal["latency"]
    job: JobRole = Field(description="which scrape job exports the histogram")
    histogram: str = Field(description="catalog histogram (family name, without _bucket)")
    threshold_s: Decimal = Field(gt=0, description="latency bound, seconds; must be a bucket bound of the histogram")
    failures: tuple[str, ...] = Field(
        default=(), description="counters of events that never finished (failed, dead-lettered, timed "
        "out): each counts as slower than any bound, in the total and not among the good")

    @field_validator("histogram")
    @classmethod
    def _hist(cls, v: str) -> str:
        return _check_metric(v, (MetricType.histogram,), "histogram")

    @field_validator("failures")
    @classmethod
    def _failure_counters(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(_check_metric(n, (MetricType.counter,), "failures counter") for n in v)

    @model_validator(mode="after")
    def _bucket_bound(self) -> LatencySLI:
        bounds = catalog.get(self.histogram).buckets
        if float(self.threshold_s) not in bounds:
            raise ValueError(
                f"threshold {self.threshold_s} s is not a bucket bound of {self.histogram} "
                f"(bounds: {', '.join(f'{b:g}' for b in bounds)}); pick one of them, "
                "or add the bound to the histogram's buckets in contract/metrics.py"
            )
        return self

    def metrics(self) -> tuple[str, ...]:
        return (self.histogram, *self.failures)


class RequestFailures(Strict):
    """Requests that fail make an instant unavailable even while every target answers its scrape."""

    failed: str = Field(description="worker counter of failed requests, labelled by `kind`")
    kinds: tuple[str, ...] = Field(min_length=1, description="failure kinds that mean the service could not serve")
    attempted: str = Field(description="worker counter of requests sent")
    unsent_kinds: tuple[str, ...] = Field(
        default=(), description="kinds counted as failed but never sent (an open breaker): added to attempted")
    max_failed_ratio: Decimal = Field(
        gt=0, lt=1, description="above this share of failed requests over window_min the instant counts as down")
    window_min: int = Field(default=1, gt=0, description="minutes the failed share is measured over")

    @model_validator(mode="after")
    def _counters(self) -> RequestFailures:
        for name in (self.failed, self.attempted):
            _check_metric(name, (MetricType.counter,), "request counter")
            if catalog.get(name).source is not catalog.Source.worker:
                raise ValueError(f"{name!r} is not a worker metric; request failures are read from the workers")
        if not set(self.unsent_kinds) <= set(self.kinds):
            raise ValueError(f"unsent_kinds {list(self.unsent_kinds)} must be among kinds {list(self.kinds)}")
        return self


class UptimeSLI(Strict):
    """Share of evaluation steps in which the service could serve: every listed job has a target
    up (a job whose targets vanished from discovery counts as down), and optionally the workers'
    breakers are not all open and most of their requests to the server do not fail."""

    kind: Literal["uptime"]
    jobs: tuple[JobRole, ...] = Field(min_length=1, description="jobs that must all have a target up")
    breaker_gauge: str | None = Field(
        default=None, description="worker gauge of the circuit breaker (2 = open): down while every breaker is open")
    request_failures: RequestFailures | None = Field(
        default=None, description="down while more than max_failed_ratio of the workers' requests fail")

    @field_validator("breaker_gauge")
    @classmethod
    def _gauge(cls, v: str | None) -> str | None:
        return None if v is None else _check_metric(v, (MetricType.gauge,), "breaker_gauge")

    def metrics(self) -> tuple[str, ...]:
        rf = self.request_failures
        return ("up", *((self.breaker_gauge,) if self.breaker_gauge else ()),
                *((rf.failed, rf.attempted) if rf else ()))


class ThresholdSLI(Strict):
    """Time-slice SLI: a slice is good when the measured value meets the threshold."""

    kind: Literal["threshold"]
    job: JobRole = Field(description="which scrape job exports the metric")
    metric: str = Field(description="catalog counter (rate_per_hour) or gauge (max)")
    measure: Literal["rate_per_hour", "max"] = Field(
        description="rate_per_hour of a counter, or max of a gauge over the slice")
    comparison: Literal["gte", "lte"] = Field(description="good when value >= (gte) or <= (lte) the threshold")
    threshold: Decimal = Field(description="in the metric's unit (per hour for rate_per_hour)")
    slice_min: int = Field(gt=0, description="length of one time slice, minutes")
    backlog_gauge: str | None = Field(
        default=None,
        description="gauge of work waiting; a slice that misses the threshold is judged (bad) only when "
        "the gauge stayed above 0 for the whole slice (throughput cannot exceed demand: a slice the "
        "workers kept up with is not counted)")

    @model_validator(mode="after")
    def _types(self) -> ThresholdSLI:
        want = (MetricType.counter,) if self.measure == "rate_per_hour" else (MetricType.gauge,)
        _check_metric(self.metric, want, f"metric for measure {self.measure}")
        if self.backlog_gauge is not None:
            _check_metric(self.backlog_gauge, (MetricType.gauge,), "backlog_gauge")
        return self

    def metrics(self) -> tuple[str, ...]:
        return (self.metric,) + ((self.backlog_gauge,) if self.backlog_gauge else ())


SLI = Annotated[EventRatioSLI | LatencySLI | UptimeSLI | ThresholdSLI, Field(discriminator="kind")]


class ManualAlert(Strict):
    """A fixed paging threshold for an SLO, from the requirements (docs/requirements.md, e.g.
    ALERT-4: "page if the error rate > 5 % for 10 minutes"), generated beside the burn-rate
    alerts; with it the burn-rate alerts usually only open tickets (``alerts: [ticket]``), which
    the generated annotations say.

    "For N minutes" is a duration, not a window: the condition, measured over ``window_min``, must
    hold for ``over_min`` minutes (the rule's ``for``) before anyone is paged; ``window_min`` is
    shorter than ``over_min``, so a burst (a restart's PDFs in flight) leaves the window before
    the duration is reached. Semantics by SLI kind:
      * event SLIs: the bad share over ``window_min`` exceeds ``threshold``, or, for low traffic,
        the bad share over twice ``over_min`` exceeds it with bad events in both of its halves
        (failures throughout, not one burst); either way with at least ``min_bad`` bad events over
        twice ``over_min`` (one failed PDF is never a page, whatever the traffic). A latency
        SLI's page reads finished PDFs only: a failed PDF has no duration, and pages as the error
        rate's alert (one page per cause);
      * a rate_per_hour threshold SLI: the rate over ``window_min`` misses ``threshold`` while work
        waited in the queue that whole window;
      * an uptime SLI: a job's target answers ``up == 0`` or has vanished, for ``for_s``.
    """

    alert: str = Field(pattern=r"^[A-Z][A-Za-z0-9]{2,62}$", description="alert name (its runbook page is <alert>.md)")
    source: str = Field(
        description="the requirement this rule implements: its ID in docs/requirements.md and its words")
    severity: Severity = Field(default=Severity.page, description="page or ticket")
    over_min: int | None = Field(
        default=None, gt=0, description="the requirement's \"for N minutes\": minutes the condition must hold "
        "before it pages (the rule's `for`)")
    window_min: int | None = Field(
        default=None, gt=0, description="minutes each measurement of the SLI covers; shorter than over_min")
    for_s: int = Field(default=0, ge=0, description="seconds the condition must hold before the alert fires")
    threshold: Decimal | None = Field(
        default=None, description="bad-event share (event SLIs) or the value in the metric's unit (threshold SLIs)")
    min_bad: int = Field(
        default=3, ge=2, description="event SLIs: bad events (failed or slow PDFs) needed over twice over_min "
        "before the alert can fire; one failure is never a page")
    inhibitor: str | None = Field(
        default=None, pattern=r"^[A-Z][A-Za-z0-9]{2,62}$",
        description="uptime only: name of a companion alert (severity none, never notified) that fires at "
        "once when the target is down and for inhibit_after_min after this alert fired; Alertmanager "
        "inhibits the symptom alerts while it fires (slo/alertmanager.py)")
    inhibit_after_min: int = Field(
        default=30, gt=0, description="minutes after this alert fired during which symptoms stay inhibited")


class SLO(Strict):

    name: str = Field(pattern=_SLUG, description="slug, used in rule labels and file names")
    title: str = Field(description="one line for tables, alerts and dashboards")
    description: str = Field(description="what is measured and why")
    source: str = Field(description="where the objective comes from (requirement IDs in docs/requirements.md)")
    sli: SLI = Field(description="the indicator, by kind")
    target: Decimal = Field(gt=0, lt=1, description="share of good events (or good slices) required, e.g. 0.995")
    window_d: int = Field(default=30, gt=0, description="rolling SLO window, days")
    min_events: int = Field(
        default=20, ge=1,
        description="below this many events (or slices) in a window the calculators report insufficient data")
    alerts: tuple[Severity, ...] = Field(
        default=(Severity.page, Severity.ticket), description="burn-rate alert severities to generate")
    runbook_action: str = Field(default="slo-status", description="`runbook <action>` that handles this SLO's alerts")
    service: Service = Field(
        default="pipeline", description="`service` label of the alerts: what is broken (grouping and inhibition)")
    manual_alert: ManualAlert | None = Field(
        default=None, description="a fixed paging threshold from the requirements, if the SLO has one")

    @field_validator("window_d")
    @classmethod
    def _window_retained(cls, v: int) -> int:
        if v > SLO_WINDOW_MAX_D:
            raise ValueError(
                f"{v} d is longer than the {SLO_WINDOW_MAX_D} d of history the deployments keep "
                "(contract/slo_window.py, observability.retention_h); shorten it or raise both")
        return v

    @model_validator(mode="after")
    def _manual_alert_fits(self) -> SLO:
        m = self.manual_alert
        if m is None:
            return self
        sli = self.sli
        if isinstance(sli, UptimeSLI):
            if m.over_min is not None or m.threshold is not None or m.window_min is not None:
                raise ValueError("manual_alert: an uptime alert fires on up == 0 or a vanished target "
                                 "for for_s; remove over_min, window_min and threshold")
            return self
        if m.inhibitor is not None:
            raise ValueError("manual_alert.inhibitor: only an uptime SLO's alert can inhibit its symptoms")
        if m.over_min is None or m.threshold is None or m.window_min is None:
            raise ValueError("manual_alert: set over_min (minutes the condition holds), window_min (minutes "
                             "measured) and threshold")
        if m.window_min >= m.over_min:
            raise ValueError(f"manual_alert.window_min {m.window_min} must be shorter than over_min {m.over_min}: "
                             "a burst must leave the window before the condition has held for over_min")
        if isinstance(sli, ThresholdSLI):
            if sli.measure == "rate_per_hour" and sli.backlog_gauge is None:
                raise ValueError("manual_alert: a throughput alert needs sli.backlog_gauge (no page without demand)")
        elif not 0 < m.threshold < 1:
            raise ValueError(f"manual_alert.threshold {m.threshold} is a bad-event share; use 0 < threshold < 1")
        return self

    @property
    def error_budget(self) -> Decimal:
        return Decimal(1) - self.target

    @property
    def time_based(self) -> bool:
        return self.sli.kind in ("uptime", "threshold")

    def check_budget_math(self, windows: BurnWindows) -> None:
        """Raise ValueError if the burn-rate alerts of this SLO could never fire or cannot be exact."""
        if self.alerts and self.window_d * 1440 < windows.longest_min:
            raise ValueError(
                f"window_d {self.window_d} is shorter than the longest burn-rate window "
                f"({windows.longest_min // 1440} d); use window_d >= {windows.longest_min // 1440} or set alerts: []"
            )
        if self.target.as_tuple().exponent < -6:  # type: ignore[operator]
            raise ValueError(f"target {self.target} has more than 6 decimals; alert thresholds are compared at 1e-6")
        for w in windows.windows:
            if w.severity not in self.alerts:
                continue
            threshold = w.factor_for(self.window_d) * self.error_budget
            if threshold >= 1:
                raise ValueError(
                    f"{w.severity.value} burn rate {dec(w.factor_for(self.window_d))}x over {w.long} "
                    f"times error budget {dec(self.error_budget)} = {dec(threshold)} >= 1: "
                    "an error ratio cannot exceed 1, so this alert could never fire; "
                    f"raise target or drop {w.severity.value!r} from alerts"
                )


class SLOSpec(Strict):

    version: Literal[1] = Field(description="spec format version")
    jobs: Jobs = Field(default_factory=Jobs, description="Prometheus job names of the scrape targets")
    alerting: Alerting = Field(default_factory=Alerting, description="links, severities and group intervals")
    absent_for_min: int = Field(
        default=10, gt=0, description="minutes a needed metric must be missing before SLOMetricAbsent fires")
    slos: tuple[SLO, ...] = Field(min_length=1, description="the objectives")

    @model_validator(mode="after")
    def _unique_and_budget(self) -> SLOSpec:
        seen: set[str] = set()
        windows = load_burn_windows()
        for i, s in enumerate(self.slos):
            if s.name in seen:
                raise ValueError(f"slos[{i}].name: duplicate SLO name {s.name!r}; names must be unique")
            seen.add(s.name)
            try:
                s.check_budget_math(windows)
            except ValueError as e:
                raise ValueError(f"slos[{i}] (slo {s.name!r}): {e}") from None
        alerts = [s.manual_alert.alert for s in self.slos if s.manual_alert] + \
            [s.manual_alert.inhibitor for s in self.slos if s.manual_alert and s.manual_alert.inhibitor]
        dup = sorted({a for a in alerts if alerts.count(a) > 1})
        if dup:
            raise ValueError(f"manual alert names {dup} are used twice; each needs its own runbook page")
        return self

    def scoped(self, namespace: str | None) -> SLOSpec:
        """The same spec rendering selectors for one Kubernetes namespace."""
        return self.model_copy(update={"jobs": self.jobs.model_copy(update={"namespace": namespace})})

    def get(self, name: str) -> SLO:
        for s in self.slos:
            if s.name == name:
                return s
        raise SpecError(f"no SLO named {name!r}; known: {', '.join(s.name for s in self.slos)}")


def _loc(loc: tuple, data: object) -> str:
    """Turn a pydantic location into a path like ``slos[2 pdf-latency-p95].sli.threshold_s``."""
    out, node = "", data
    for part in loc:
        if isinstance(part, int):
            node = node[part] if isinstance(node, list) and part < len(node) else None
            name = node.get("name") if isinstance(node, dict) else None
            out += f"[{part}{' ' + name if name else ''}]"
        else:
            if part in ("event_ratio", "latency", "uptime", "threshold") and out.endswith("sli"):
                continue  # the discriminator tag pydantic inserts: not a key the user wrote
            out += f".{part}" if out else str(part)
            node = node.get(part) if isinstance(node, dict) else None
    return out


def parse_spec(data: object, origin: str = "<data>") -> SLOSpec:
    try:
        return SLOSpec.model_validate(data)
    except ValidationError as e:
        lines = error_lines(e, root="", loc=lambda loc: _loc(loc, data), model=SLOSpec,
                            schema="slo/objectives.schema.json")
        raise SpecError(f"{origin}: invalid SLO spec:\n  " + "\n  ".join(lines)) from None


def load_spec(path: Path = OBJECTIVES_PATH) -> SLOSpec:
    try:
        data = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise SpecError(f"{path}: SLO spec not found; pass --spec PATH or restore slo/objectives.yaml") from None
    except yaml.YAMLError as e:
        raise SpecError(f"{path}: not valid YAML: {e}") from None
    return parse_spec(data, str(path))
