"""The run's aggregates: latency distributions (the per-request metrics of bench/metric_table.py),
throughputs, goodput, errors and token counts. docs/bench-metrics.md states the same formulas;
change both together.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Sequence
from typing import cast

import numpy as np

from bench import metric_table
from bench.metric_table import Derived, Samples, derive, event_samples
from bench.records import AnyRecord, PipelineRecord, RequestRecord
from bench.scenario import RequestSLO
from bench.stats import PERCENTILE_METHOD
from bench.summary import Describe, Summary

PERCENTILES = (50, 90, 95, 99, 99.9)
LATENCY_METRICS = metric_table.names(metric_table.of("chat"))
PIPELINE_METRICS = metric_table.names(metric_table.of("pipeline"))


def meets_slo(d: Derived, ok: bool, slo: RequestSLO) -> bool:
    if not ok:
        return False
    for limit, value in ((slo.ttft_ms, d.ttft_ms), (slo.tpot_ms, d.tpot_ms), (slo.e2e_ms, d.e2e_ms)):
        if limit is not None and (value is None or value > limit):
            return False
    return True


def describe(values: list[float] | np.ndarray) -> Describe:
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        return {"n": 0}
    pct = np.percentile(arr, PERCENTILES, method="linear")
    out: dict[str, float] = {"n": int(arr.size), "mean": float(arr.mean()),
                             "std": float(arr.std(ddof=1)) if arr.size > 1 else 0.0,
                             "min": float(arr.min()), "max": float(arr.max())}
    out.update({f"p{q:g}": float(v) for q, v in zip(PERCENTILES, pct)})
    return cast(Describe, out)


def error_breakdown(records: Sequence[AnyRecord]) -> dict[str, int]:
    c: Counter[str] = Counter()
    for r in records:
        if not r.ok:
            c[r.error or getattr(r, "status", "failed") or "failed"] += 1
    return dict(c.most_common())


def actual_sent_rps(records: list, start_ns: int, end_ns: int) -> float:
    """Requests of any phase whose request actually left in [start_ns, end_ns), per second of the
    window: what the client delivered, where ``sent_rps`` counts intended send times (a client that
    lags pushes its sends past the window's end, and this rate drops below the target)."""
    window_s = max(1e-9, (end_ns - start_ns) / 1e9)
    return sum(1 for r in records if start_ns <= r.sent_ns < end_ns) / window_s


def throughput_end(records: list, end_ns: int, cooldown_s: float) -> int:
    """End of the throughput window: the measured window's end when a cooldown keeps the load
    on past it; without a cooldown, the last completion of a measured request (otherwise the
    answers still in flight at the end would be missing from the rate)."""
    if cooldown_s > 0:
        return end_ns
    ends = [r.end_ns for r in records if r.phase == "measure" and r.end_ns is not None]
    return max([end_ns, *ends]) + 1


def _tokens_between(r: RequestRecord, start_ns: int, end_ns: int) -> float:
    """Output tokens of ``r`` whose events arrived in [start_ns, end_ns) (event stamps are in order).
    Events without per-event usage count one each; when the answer's token count (final usage or
    the tokenizer) differs from its number of events, the events' share of that count is used, so
    tokens/s and the token counts come from the same numbers."""
    ns, toks = r.event_ns, r.event_tokens
    i, j = bisect_left(ns, start_ns), bisect_left(ns, end_ns)
    if toks.count(1) != len(toks):  # per-event usage: exact
        return sum(toks[i:j])
    if r.output_tokens and ns and r.output_tokens != len(ns):  # one per event, the answer's count differs
        return (j - i) * r.output_tokens / len(ns)
    return j - i


def chat_summary(records: list[RequestRecord], start_ns: int, end_ns: int, slo: RequestSLO,
                 tput_end_ns: int | None = None) -> Summary:
    """Aggregate metrics over the measured window [start_ns, end_ns).

    Latency distributions use measured-phase requests (phase assigned by intended send time).
    Throughputs count what the server delivered inside [start_ns, tput_end_ns), from every
    phase: with warmup and cooldown running the same load, that is the steady-state rate.
    """
    window_s = max(1e-9, (end_ns - start_ns) / 1e9)
    t_end = tput_end_ns or end_ns
    tput_s = max(1e-9, (t_end - start_ns) / 1e9)
    measured = [r for r in records if r.phase == "measure"]
    ok = [r for r in measured if r.ok]
    derived = [(r, derive(r)) for r in measured]
    acc = Samples(metric_table.of("chat"))
    good = 0
    good_done = 0  # of those, finished inside the throughput window: goodput's numerator, a subset of completed
    for r, d in derived:
        acc.add(r, d)
        if meets_slo(d, r.ok, slo):
            good += 1
            if r.end_ns is not None and start_ns <= r.end_ns < t_end:
                good_done += 1
    series: dict[str, list[float] | np.ndarray] = {**acc.values, **event_samples(measured, metric_table.of("chat"))}
    done_in_window = sum(1 for r in records if r.ok and r.end_ns is not None and start_ns <= r.end_ns < t_end)
    tokens_in_window = sum(_tokens_between(r, start_ns, t_end) for r in records if r.ok)
    prompt_mismatch = sum(1 for r in ok if r.prompt_tokens is not None and r.server_prompt_tokens is not None
                          and r.prompt_tokens != r.server_prompt_tokens)
    return {
        "kind": "chat",
        "window_s": window_s,
        "throughput_window_s": tput_s,
        "requests": {"sent": len(measured), "ok": len(ok), "errors": len(measured) - len(ok),
                     "error_rate": (len(measured) - len(ok)) / len(measured) if measured else None,
                     "all_phases": len(records)},
        "errors_by_reason": error_breakdown(measured),
        "latency": {name: describe(series[name]) for name in LATENCY_METRICS},
        "throughput": {
            "sent_rps": len(measured) / window_s,
            "actual_sent_rps": actual_sent_rps(records, start_ns, end_ns),
            "completed_rps": done_in_window / tput_s,
            "output_tokens_per_s": tokens_in_window / tput_s,
            "goodput_rps": good_done / tput_s,  # same window and clock as completed_rps: never above it
        },
        "goodput": {"good": good, "fraction": good / len(measured) if measured else None,
                    "slo": slo.model_dump(exclude_none=True)},
        "tokens": {"output": describe([r.output_tokens for r in ok if r.output_tokens is not None]),
                   "prompt": describe([p for r in ok
                                       if (p := r.prompt_tokens or r.server_prompt_tokens) is not None]),
                   "prompt_mismatch_vs_server": prompt_mismatch},
        "percentile_method": PERCENTILE_METHOD,
    }


def pipeline_summary(records: list[PipelineRecord], start_ns: int, end_ns: int,
                     tput_end_ns: int | None = None) -> Summary:
    window_s = max(1e-9, (end_ns - start_ns) / 1e9)
    t_end = tput_end_ns or end_ns
    tput_s = max(1e-9, (t_end - start_ns) / 1e9)
    measured = [r for r in records if r.phase == "measure"]
    ok = [r for r in measured if r.ok]
    latency = metric_table.samples(measured, metric_table.of("pipeline"))
    done_in_window = [r for r in records if r.ok and r.end_ns is not None and start_ns <= r.end_ns < t_end]
    pages = sum(r.pages for r in done_in_window)
    reqs = [r.server_requests / r.pages for r in ok if r.server_requests is not None and r.pages]
    return {
        "kind": "pipeline",
        "window_s": window_s,
        "requests": {"sent": len(measured), "ok": len(ok), "errors": len(measured) - len(ok),
                     "error_rate": (len(measured) - len(ok)) / len(measured) if measured else None,
                     "all_phases": len(records)},
        "errors_by_reason": error_breakdown(measured),
        "latency": {name: describe(v) for name, v in latency.items()},
        "throughput_window_s": tput_s,
        "throughput": {"sent_rps": len(measured) / window_s,
                       "actual_sent_rps": actual_sent_rps(records, start_ns, end_ns),
                       "documents_per_h": len(done_in_window) / tput_s * 3600,
                       "pages_per_s": pages / tput_s},
        "requests_per_page": describe(reqs),
        "percentile_method": PERCENTILE_METHOD,
    }
