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
from contract.models import Strict
from slo.windows import BurnWindows, Severity, load_burn_windows

OBJECTIVES_PATH = Path(__file__).with_name("objectives.yaml")
# promtool (Prometheus 2.42) compares floats exactly, so alert thresholds are compared after
# round(x, 1e-6). Thresholds are exact for 30-day windows (the cited factors); for other windows
# the rescaled factor may not terminate (0.1 x 7 d / 3 d) and the threshold is rounded to 1e-6.
THRESHOLD_QUANTUM = Decimal("0.000001")


def alert_threshold(factor: Decimal, error_budget: Decimal) -> Decimal:
    return (factor * error_budget).quantize(THRESHOLD_QUANTUM, rounding=ROUND_HALF_EVEN).normalize()

JobRole = Literal["inference_server", "workers"]
_SLUG = r"^[a-z][a-z0-9-]{1,62}$"


def dec(d: Decimal) -> str:
    """Plain decimal text, no exponent, no trailing zeros ("0.072", "6")."""
    return format(d.normalize(), "f")


class SpecError(ValueError):
    """The SLO spec is invalid; the message names the field path and the fix."""


class Jobs(Strict):
    """Prometheus job names of the scrape targets (the local stack's names are the defaults)."""

    inference_server: str = Field(
        default="inference-server", description="job of the inference server (vLLM or the simulator)")
    workers: str = Field(default="workers", description="job of the MinerU workers")
    prometheus: str = Field(default="prometheus", description="job of Prometheus scraping itself")

    def of(self, role: JobRole) -> str:
        return getattr(self, role)


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

    @field_validator("histogram")
    @classmethod
    def _hist(cls, v: str) -> str:
        return _check_metric(v, (MetricType.histogram,), "histogram")

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
        return (self.histogram,)


class UptimeSLI(Strict):
    """Share of evaluation steps in which every listed job has at least one target up."""

    kind: Literal["uptime"]
    jobs: tuple[JobRole, ...] = Field(min_length=1, description="jobs that must all have a target up")

    def metrics(self) -> tuple[str, ...]:
        return ("up",)


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
    idle_gauge: str | None = Field(
        default=None, description="gauge that is 0 when there is no demand; an idle slice counts as good")

    @model_validator(mode="after")
    def _types(self) -> ThresholdSLI:
        want = (MetricType.counter,) if self.measure == "rate_per_hour" else (MetricType.gauge,)
        _check_metric(self.metric, want, f"metric for measure {self.measure}")
        if self.idle_gauge is not None:
            _check_metric(self.idle_gauge, (MetricType.gauge,), "idle_gauge")
        return self

    def metrics(self) -> tuple[str, ...]:
        return (self.metric,) + ((self.idle_gauge,) if self.idle_gauge else ())


SLI = Annotated[EventRatioSLI | LatencySLI | UptimeSLI | ThresholdSLI, Field(discriminator="kind")]


class SLO(Strict):

    name: str = Field(pattern=_SLUG, description="slug, used in rule labels and file names")
    title: str = Field(description="one line for tables, alerts and dashboards")
    description: str = Field(description="what is measured and why")
    source: str = Field(description="where the objective comes from (document and section)")
    sli: SLI = Field(description="the indicator, by kind")
    target: Decimal = Field(gt=0, lt=1, description="share of good events (or good slices) required, e.g. 0.995")
    window_d: int = Field(default=30, gt=0, description="rolling SLO window, days")
    min_events: int = Field(
        default=20, ge=1,
        description="below this many events (or slices) in a window the calculators report insufficient data")
    alerts: tuple[Severity, ...] = Field(
        default=(Severity.page, Severity.ticket), description="burn-rate alert severities to generate")
    runbook_action: str = Field(default="slo-status", description="`runbook <action>` that handles this SLO's alerts")

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
        return self

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
        lines = []
        for err in e.errors():
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = "unknown key; remove it or fix its spelling"
            elif err["type"] == "missing":
                msg = "required key is missing; add it"
            path = _loc(err["loc"], data)
            lines.append(f"{path}: {msg}" if path else msg)
        raise SpecError(f"{origin}: invalid SLO spec:\n  " + "\n  ".join(lines)) from None


def load_spec(path: Path = OBJECTIVES_PATH) -> SLOSpec:
    try:
        data = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise SpecError(f"{path}: SLO spec not found; pass --spec PATH or restore slo/objectives.yaml") from None
    except yaml.YAMLError as e:
        raise SpecError(f"{path}: not valid YAML: {e}") from None
    return parse_spec(data, str(path))
