"""Is the run a measurement? A run that fails any check is marked invalid, and `bench run` and
`bench gate` return exit code 2 for it: either its latencies describe the load generator, not the
server (lag, client CPU, in-flight cap, achieved rate), or the server mostly answered with errors
(error share above the limit, nothing succeeded): a run of 401s or 503s measures no serving."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from bench.engine import RunResult
from bench.summary import Check, Summary, Validity


class ValidityLimits(BaseModel):
    model_config = ConfigDict(extra="forbid")

    lag_p99_ms_max: float = Field(
        default=10.0, gt=0,
        description="Schedule lag p99 above this means requests left late: the offered load was "
        "not the one asked for (coordinated omission by the client).",
    )
    client_cpu_max: float = Field(
        default=0.90, gt=0, le=1.0,
        description="CPU-seconds per wall-second of a client process (one event loop uses at most "
        "one core): above it the loop had no idle time and timestamps were taken late.",
    )
    client_cpu_warn: float = Field(
        default=0.75, gt=0, le=1.0,
        description="CPU-seconds per wall-second of a client process above which the run warns that the "
        "client nears its core's capacity (still valid): a little more load and its sends run late.",
    )
    achieved_rate_min_ratio: float = Field(
        default=0.95, gt=0, le=1.0, description="Open loop: measured sends / target must reach this."
    )
    min_measured: int = Field(default=1, ge=1, description="Fewest measured requests for a valid run.")
    error_rate_max: float = Field(
        default=0.05, ge=0, le=1.0,
        description="Largest share of measured requests that may fail (HTTP errors, timeouts, failed "
        "documents) in a valid run; a run with no successful request is invalid whatever this says. "
        "Set it to 1.0 for a scenario that injects faults on purpose.")


def check(run: RunResult, summary: Summary, limits: ValidityLimits) -> Validity:
    checks: list[Check] = []

    def add(name: str, measured: Any, threshold: str, passed: bool, why: str) -> None:
        checks.append({"check": name, "measured": measured, "threshold": threshold,
                       "passed": bool(passed), "why": why})

    lag = summary["latency"]["lag_ms"]
    p99 = lag.get("p99")
    add("schedule lag p99", None if p99 is None else round(p99, 3), f"<= {limits.lag_p99_ms_max} ms",
        p99 is not None and p99 <= limits.lag_p99_ms_max,
        "requests were sent on time" if p99 is not None and p99 <= limits.lag_p99_ms_max
        else "requests left later than scheduled: the client could not keep up")
    warnings: list[str] = []
    for st in run.processes:
        util = st.cpu_s / st.wall_s if st.wall_s > 0 else 0.0
        if limits.client_cpu_warn < util <= limits.client_cpu_max:
            warnings.append(f"client process {st.process} used {util:.0%} of a core (warning above "
                            f"{limits.client_cpu_warn:.0%}, invalid above {limits.client_cpu_max:.0%}): it nears "
                            "its capacity; for more load add client processes (load.processes, --processes)")
        add(f"client CPU (process {st.process})", round(util, 3), f"<= {limits.client_cpu_max}",
            util <= limits.client_cpu_max,
            f"{st.cpu_s:.2f} CPU-s over {st.wall_s:.2f} s" + (
                "" if util <= limits.client_cpu_max else
                ": the event loop was saturated; add client processes (load.processes) or machines"))
    overloaded = sum(st.overloaded for st in run.processes)
    add("in-flight cap", overloaded, "== 0", overloaded == 0,
        "never hit" if overloaded == 0 else f"{overloaded} arrivals dropped at load.max_in_flight")
    sent = summary["requests"]["sent"]
    add("measured requests", sent, f">= {limits.min_measured}", sent >= limits.min_measured,
        "enough samples" if sent >= limits.min_measured else "too few requests in the measured window")
    ok = summary["requests"].get("ok", 0)
    add("successful requests", ok, ">= 1", ok >= 1,
        "some requests succeeded" if ok >= 1 else
        f"none of {sent} measured requests succeeded ({_reasons(summary)}): the run measured no serving")
    share = summary["requests"].get("error_rate")
    add("error share", None if share is None else round(share, 4), f"<= {limits.error_rate_max}",
        share is not None and share <= limits.error_rate_max,
        "errors within the limit" if share is not None and share <= limits.error_rate_max else
        "no measured requests" if share is None else
        f"{summary['requests'].get('errors', 0)} of {sent} measured requests failed ({_reasons(summary)}); "
        "the limit is validity.error_rate_max of the scenario or gate")
    stopped = [st.fail_fast_after_s for st in run.processes if st.fail_fast_after_s is not None]
    if run.load.fail_fast_s:
        add("ran to its end (fail fast)", round(max(stopped), 1) if stopped else None,
            f"no failure streak >= {run.load.fail_fast_s:g} s", not stopped,
            "never stopped early" if not stopped else
            f"stopped early: every request that finished in {max(stopped):.1f} s failed ({_reasons(summary)}); "
            "see the first failures below for the fix (load.fail_fast_s or --fail-fast-s 0 lets a run ride "
            "through on purpose)")
    if stopped:  # the open loop's schedule was cut short: its achieved rate says nothing
        return {"valid": False, "checks": checks, "warnings": warnings, "limits": limits.model_dump()}
    if run.load.mode == "open" and run.load.arrival != "trace" and run.load.ramp_from_rps is None:
        target = run.load.rate_rps or 0.0
        tput = summary["throughput"]
        achieved = tput.get("actual_sent_rps", tput["sent_rps"])  # from actual send times
        ratio = achieved / target if target else 0.0
        # Poisson counts fluctuate: allow 3 standard deviations of the expected count as well,
        # unless the schedule was normalised to the exact rate
        expected = target * summary["window_s"]
        slack = 3 * expected ** 0.5 / expected if expected > 0 else 1.0
        exact = run.load.arrival == "constant" or run.load.normalized
        # A window holding few arrivals: one send on either side of an edge moves the rate by
        # 1/expected, whatever the client did (6 arrivals: 5 of 6 is 0.83).
        edge = 1 / expected if expected > 0 else 1.0
        floor = min(limits.achieved_rate_min_ratio, 1 - edge - (0.0 if exact else slack))
        add("achieved / target rate", round(ratio, 4), f">= {round(floor, 4)}", ratio >= floor - 1e-9,
            f"{achieved:.2f} of {target:g} req/s actually sent in the measured window "
            f"(scheduled: {tput['sent_rps']:.2f} req/s{', normalised to the rate' if run.load.normalized else ''})")
    valid = all(c["passed"] for c in checks)
    return {"valid": valid, "checks": checks, "warnings": warnings, "limits": limits.model_dump()}


def _reasons(summary: Summary, top: int = 3) -> str:
    """The commonest error reasons, e.g. ``http_401 x86``."""
    by = summary.get("errors_by_reason") or {}
    items = sorted(((k, v) for k, v in by.items() if isinstance(v, int)), key=lambda kv: -kv[1])[:top]
    return ", ".join(f"{k} x{v}" for k, v in items) or "no reason recorded"
