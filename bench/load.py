"""Load shapes: how many requests, when, and which part of the run is measured.

Open loop: arrival times are drawn before the run starts (seeded), so a slow server cannot
slow the offered load down (no coordinated omission). Closed loop: ``concurrency`` users each
send the next request when the previous one finished. Warmup and cooldown requests are sent
and recorded but excluded from every metric.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from bench.dataset import read_trace
from bench.records import Phase

NS = 1_000_000_000
FAIL_FAST_MIN_FAILURES = 20  # failures in a row before a fail-fast stop, whatever the window


class LoadSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mode: Literal["open", "closed"] = Field(
        default="open", description="open: arrivals on a schedule; closed: fixed concurrency."
    )
    arrival: Literal["constant", "poisson", "gamma", "trace"] = Field(
        default="poisson", description="Inter-arrival distribution of the open loop."
    )
    rate_rps: float | None = Field(
        default=None, gt=0, description="Target arrival rate, requests/s (open loop)."
    )
    ramp_from_rps: float | None = Field(
        default=None, gt=0, description="Start rate of a linear ramp up to rate_rps over ramp_s."
    )
    ramp_s: float = Field(default=0.0, ge=0, description="Ramp length, s (0 = no ramp).")
    burstiness: float = Field(
        default=1.0, gt=0,
        description="Gamma shape k (arrival='gamma'): 1 = Poisson, < 1 burstier, > 1 smoother "
        "(coefficient of variation of gaps = 1/sqrt(k)); vLLM's --burstiness has the same meaning.",
    )
    trace_path: str | None = Field(
        default=None, description="JSONL with 'offset_s' (seconds after the start) or 'timestamp' (Unix seconds, "
        "e.g. from a request log) per line (arrival='trace'): the arrivals replayed as they were.",
    )
    concurrency: int | None = Field(default=None, ge=1, description="Users of the closed loop.")
    duration_s: float | None = Field(default=None, gt=0, description="Measured window, s.")
    count: int | None = Field(default=None, ge=1, description="Measured requests (instead of duration_s).")
    warmup_s: float = Field(default=0.0, ge=0, description="Load before the measured window, s.")
    cooldown_s: float = Field(default=0.0, ge=0, description="Load after the measured window, s.")
    max_in_flight: int = Field(
        default=10_000, ge=1,
        description="Open-loop safety cap: arrivals beyond it are recorded as 'client_overload' "
        "errors instead of piling up unbounded (the run is then invalid).",
    )
    normalize: bool | None = Field(
        default=None,
        description="Open loop: rescale the measured window's drawn gaps so its arrivals span exactly "
        "count / rate_rps (count runs) or duration_s with round(rate_rps x duration_s) arrivals: the rate "
        "asked for, whatever the seed (as vllm bench serve does). Default: on for count runs, off for "
        "duration runs; not with a ramp or a trace.",
    )
    processes: int = Field(default=1, ge=1, le=64, description="Client processes sharing the load.")
    seed: int = Field(default=0, description="Seed of arrivals (and of the scenario's sampling).")
    request_timeout_s: float = Field(default=600.0, gt=0, description="Per-request timeout, s.")
    fail_fast_s: float = Field(
        default=30.0, ge=0,
        description="Stop the run when every request (or document) that finished in this many seconds failed, "
        f"at least {FAIL_FAST_MIN_FAILURES} of them: a run that cannot succeed ends as invalid with its first "
        "failures' reasons instead of running to its end. 30 s outlasts a server restart or a worker "
        "reschedule (the outages a run may ride through) and stops a run whose every request is refused "
        "long before its end. 0: never stop early (a scenario that injects faults on purpose).")

    @model_validator(mode="after")
    def _consistent(self) -> LoadSpec:
        if (self.duration_s is None) == (self.count is None):
            raise ValueError("load: set exactly one of duration_s (measured seconds) or count "
                             "(measured requests)")
        if self.mode == "open":
            if self.arrival == "trace":
                if not self.trace_path:
                    raise ValueError("load: arrival 'trace' needs trace_path (JSONL with offset_s)")
            elif self.rate_rps is None:
                raise ValueError("load: open loop needs rate_rps (requests/s), e.g. rate_rps: 5")
            if self.concurrency is not None:
                raise ValueError("load: concurrency is for mode 'closed'; remove it or set mode: closed")
        else:
            if self.concurrency is None:
                raise ValueError("load: closed loop needs concurrency (users), e.g. concurrency: 8")
            if self.rate_rps is not None:
                raise ValueError("load: rate_rps is for mode 'open'; remove it or set mode: open")
        if self.ramp_from_rps is not None and self.ramp_s <= 0:
            raise ValueError("load: ramp_from_rps needs ramp_s > 0 (ramp length in seconds)")
        if self.normalize and (self.mode != "open" or self.arrival == "trace" or self.ramp_from_rps is not None):
            raise ValueError("load: normalize rescales an open loop's drawn arrivals at one rate; it does not "
                             "apply to a closed loop, a trace or a ramp: remove normalize")
        return self

    @property
    def normalized(self) -> bool:
        """Whether the open loop's measured arrivals are rescaled to the exact rate."""
        if self.mode != "open" or self.arrival == "trace" or self.ramp_from_rps is not None:
            return False
        return self.normalize if self.normalize is not None else self.count is not None

    @property
    def target_label(self) -> str:
        if self.mode == "closed":
            return f"closed loop, {self.concurrency} users"
        if self.arrival == "trace":
            return f"trace {self.trace_path}"
        return f"{self.arrival} {self.rate_rps:g} req/s"


def _rate_at(spec: LoadSpec, t_s: float) -> float:
    assert spec.rate_rps is not None
    if spec.ramp_from_rps is not None and t_s < spec.ramp_s:
        return spec.ramp_from_rps + (spec.rate_rps - spec.ramp_from_rps) * t_s / spec.ramp_s
    return spec.rate_rps


def _gap(spec: LoadSpec, rate: float, rng: np.random.Generator) -> float:
    if spec.arrival == "constant":
        return 1.0 / rate
    if spec.arrival == "poisson":
        return float(rng.exponential(1.0 / rate))
    k = spec.burstiness  # gamma with mean 1/rate
    return float(rng.gamma(k, 1.0 / (rate * k)))


def open_schedule(spec: LoadSpec) -> tuple[list[int], int, int]:
    """Arrival offsets (ns after t0) and the measured window [start_ns, end_ns)."""
    warm_ns = int(spec.warmup_s * NS)
    if spec.arrival == "trace":
        offsets = [int(t * NS) for t in read_trace(Path(spec.trace_path or ""))]
        if spec.count is not None:
            measured_offsets = [o for o in offsets if o >= warm_ns][: spec.count]
            trace_end_ns = (measured_offsets[-1] + 1) if measured_offsets else warm_ns
        else:
            trace_end_ns = warm_ns + int((spec.duration_s or 0) * NS)
        stop = trace_end_ns + int(spec.cooldown_s * NS)
        return [o for o in offsets if o < stop], warm_ns, trace_end_ns
    if spec.normalized:
        return _normalized_schedule(spec, warm_ns)
    rng = np.random.default_rng(spec.seed)
    out: list[int] = []
    t_ns = 0  # integer ns: summing float gaps would drift (0.1 s x 10 != 1 s)
    measured = 0
    end_ns = warm_ns + int(spec.duration_s * NS) if spec.duration_s is not None else None
    while True:
        if end_ns is None and measured == spec.count:
            end_ns = t_ns  # count reached: the measured window closes at this arrival
        if end_ns is not None and t_ns >= end_ns + int(spec.cooldown_s * NS):
            return out, warm_ns, end_ns
        out.append(t_ns)
        if warm_ns <= t_ns and (end_ns is None or t_ns < end_ns):
            measured += 1
        t_ns += max(1, round(_gap(spec, _rate_at(spec, t_ns / NS), rng) * NS))


def _normalized_schedule(spec: LoadSpec, warm_ns: int) -> tuple[list[int], int, int]:
    """Warmup arrivals as drawn; then the measured window's ``n`` arrivals from ``n`` drawn gaps
    scaled to sum to the window exactly (the first at the window's start, the window ending one
    scaled gap after the last); then cooldown arrivals as drawn, from the window's end."""
    assert spec.rate_rps is not None
    rate = spec.rate_rps
    rng = np.random.default_rng(spec.seed)
    out: list[int] = []
    t_ns = 0
    while t_ns < warm_ns:
        out.append(t_ns)
        t_ns += max(1, round(_gap(spec, rate, rng) * NS))
    if spec.count is not None:
        n, window_ns = spec.count, round(spec.count / rate * NS)
    else:
        n, window_ns = max(1, round(rate * (spec.duration_s or 0))), round((spec.duration_s or 0) * NS)
    gaps = np.array([_gap(spec, rate, rng) for _ in range(n)])
    offsets = np.concatenate(([0.0], np.cumsum(gaps)[:-1])) * (window_ns / gaps.sum())
    out.extend(warm_ns + int(o) for o in offsets)
    end_ns = warm_ns + window_ns
    stop = end_ns + int(spec.cooldown_s * NS)
    t_ns = end_ns
    while t_ns < stop:
        out.append(t_ns)
        t_ns += max(1, round(_gap(spec, rate, rng) * NS))
    return out, warm_ns, end_ns


def phase_of(t_ns: int, start_ns: int, end_ns: int | None) -> Phase:
    if t_ns < start_ns:
        return "warmup"
    if end_ns is not None and t_ns >= end_ns:
        return "cooldown"
    return "measure"
