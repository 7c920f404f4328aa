"""Saturation and SLO search: the highest arrival rate that still meets the SLO.

Escalate the rate geometrically until a point fails the SLO (or the run becomes invalid),
bisect between the last passing and the first failing rate, then interpolate linearly where
the SLO metric crosses its threshold. Every rate is run ``repeats`` times; the crossing is
computed per repeat and reported with a Student-t 95 % CI over repeats.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import cast

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from bench.summary import Summary, Sweep, SweepPoint

T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


class SearchSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    metric: str = Field(default="ttft_ms", description="Latency metric of the SLO (summary latency key).")
    percentile: float = Field(default=95, gt=0, lt=100)
    max_value: float = Field(gt=0, description="SLO threshold in the metric's unit.")
    max_error_rate: float = Field(default=0.01, ge=0, le=1)
    start_rps: float = Field(default=1.0, gt=0)
    factor: float = Field(default=2.0, gt=1)
    max_rps: float = Field(default=1000.0, gt=0)
    bisect_steps: int = Field(default=3, ge=0, le=10)
    repeats: int = Field(default=3, ge=1, le=10)


Point = SweepPoint
RunAt = Callable[[float, int], Summary]  # (rate, repeat) -> summary


def _point(spec: SearchSpec, rate: float, rep: int, s: Summary) -> Point:
    lat = cast(dict[str, float], s["latency"].get(spec.metric) or {})  # a distribution: {"n": ..., "p95": ...}
    value = lat.get(f"p{spec.percentile:g}")
    err = s["requests"]["error_rate"]
    valid = s["validity"]["valid"]
    meets = valid and value is not None and value <= spec.max_value and (err or 0) <= spec.max_error_rate
    return {"rate_rps": rate, "repeat": rep, "achieved_rps": s["throughput"]["completed_rps"],
            "value": value, "error_rate": err, "valid": valid, "meets": bool(meets),
            # the metric's percentiles, for the report's curves against the offered rate
            "percentiles": {k: lat.get(k) for k in ("p50", "p90", "p95", "p99")},
            "output_tokens_per_s": s["throughput"].get("output_tokens_per_s")}


def _crossing(lo: float, v_lo: float | None, hi: float, v_hi: float | None, thr: float) -> float:
    if v_lo is None or v_hi is None or v_hi <= v_lo:
        return lo
    return float(min(hi, max(lo, lo + (thr - v_lo) / (v_hi - v_lo) * (hi - lo))))


def search(run_at: RunAt, spec: SearchSpec, log: Callable[[str], None] = lambda m: None) -> Sweep:
    points: list[Point] = []

    def at(rate: float) -> tuple[bool, bool]:
        reps = []
        for rep in range(spec.repeats):
            p = _point(spec, rate, rep, run_at(rate, rep))
            points.append(p)
            reps.append(p)
            log(f"rate {rate:.3g} req/s repeat {rep}: p{spec.percentile:g} {spec.metric}="
                f"{p['value'] if p['value'] is None else round(p['value'], 2)} err={p['error_rate']} "
                f"valid={p['valid']} meets={p['meets']}")
        return all(p["meets"] for p in reps), all(p["valid"] for p in reps)

    lo = hi = None
    rate = spec.start_rps
    client_limited = False
    while rate <= spec.max_rps:
        ok, valid = at(rate)
        if not valid:
            client_limited = True
            hi = rate
            break
        if ok:
            lo = rate
            rate *= spec.factor
        else:
            hi = rate
            break
    if lo is not None and hi is not None and not client_limited:
        for _ in range(spec.bisect_steps):
            mid = (lo + hi) / 2
            ok, valid = at(mid)
            if not valid:
                break
            lo, hi = (mid, hi) if ok else (lo, mid)
    result: Sweep = {"metric": spec.metric, "percentile": spec.percentile, "threshold": spec.max_value,
                     "spec": spec.model_dump(), "points": points, "client_limited": client_limited}
    if lo is None:
        result.update({"max_rate_rps": None, "conclusion": f"even {spec.start_rps:g} req/s misses the SLO"
                       + (" (the client was the bottleneck)" if client_limited else "")})
        return result
    if hi is None:
        result.update({"max_rate_rps": lo, "ci_rps": None,
                       "conclusion": f"SLO met up to max_rps {spec.max_rps:g} (the last rate tried: {lo:g} req/s)"})
        return result
    crossings = []
    for rep in range(spec.repeats):
        p_lo = next((p for p in points if p["rate_rps"] == lo and p["repeat"] == rep), None)
        p_hi = next((p for p in points if p["rate_rps"] == hi and p["repeat"] == rep), None)
        if p_lo and p_hi:
            crossings.append(_crossing(lo, p_lo["value"], hi, p_hi["value"] if p_hi["valid"] else None,
                                       spec.max_value))
    arr = np.asarray(crossings)
    est = float(arr.mean())
    ci = None
    if arr.size >= 2:
        half = T975.get(arr.size - 1, 1.96) * float(arr.std(ddof=1)) / math.sqrt(arr.size)
        ci = [est - half, est + half]
    sat = max((p["achieved_rps"] for p in points if p["valid"]), default=None)
    result.update({"max_rate_rps": est, "ci_rps": ci, "bracket_rps": [lo, hi], "saturation_rps": sat,
                   "conclusion": (f"max rate meeting p{spec.percentile:g} {spec.metric} <= {spec.max_value:g} and "
                                  f"errors <= {spec.max_error_rate:.1%}: {est:.3g} req/s"
                                  + (f" (95 % CI {ci[0]:.3g} .. {ci[1]:.3g}, {arr.size} repeats)" if ci else "")
                                  + f", bracketed by {lo:.3g} (pass) and {hi:.3g} (fail)"
                                  + ("; beyond it the client was the bottleneck" if client_limited else ""))})
    return result
