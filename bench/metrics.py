"""Every metric the bench reports, defined once. docs/bench-metrics.md states the same formulas;
change both together.

Per request (ms, from monotonic ns stamps relative to the run's t0):
  ttfb   = headers - sent                      (status line + headers received)
  ttft   = first_token_event - sent            (first SSE event adding >= 1 completion token, any kind)
  ttfc   = first_content_event - sent          (first event with non-empty delta.content)
  e2e    = end - sent                          (last byte of the response)
  tpot   = (e2e - ttft) / (output_tokens - 1)  (output_tokens from the server's usage; needs >= 2)
  itl    : event i >= 1 carrying k_i tokens contributes k_i gaps of (t_i - t_{i-1}) / k_i
  chunk gap : t_i - t_{i-1} for token events i >= 1
  lag    = sent - intended                     (schedule lag of the client)
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from operator import attrgetter, sub, truediv
from typing import Any

import numpy as np

from bench.records import AnyRecord, PipelineRecord, RequestRecord
from bench.scenario import RequestSLO
from bench.stats import PERCENTILE_METHOD

MS = 1e6  # ns per ms
PERCENTILES = (50, 90, 95, 99, 99.9)
LATENCY_METRICS = ("ttfb_ms", "ttft_ms", "ttfc_ms", "e2e_ms", "tpot_ms", "itl_ms", "chunk_gap_ms",
                   "lag_ms")
PIPELINE_METRICS = ("doc_latency_s", "lag_ms")
_GAP_METRICS = ("itl_ms", "chunk_gap_ms")  # one value per gap between events: bench.metrics.EventGaps


@dataclass
class Derived:
    ttfb_ms: float | None
    ttft_ms: float | None
    ttfc_ms: float | None
    e2e_ms: float | None
    tpot_ms: float | None
    lag_ms: float


def derive(r: RequestRecord) -> Derived:
    sent = r.sent_ns
    ttft = (r.event_ns[0] - sent) / MS if r.event_ns else None
    ttfc = next(((t - sent) / MS for t, c in zip(r.event_ns, r.event_content) if c), None)
    e2e = (r.end_ns - sent) / MS if r.end_ns is not None else None
    tpot = None
    out_tokens = r.output_tokens or 0
    if r.ok and ttft is not None and e2e is not None and out_tokens >= 2:
        tpot = (e2e - ttft) / (out_tokens - 1)
    return Derived(
        ttfb_ms=(r.headers_ns - sent) / MS if r.headers_ns is not None else None,
        ttft_ms=ttft, ttfc_ms=ttfc, e2e_ms=e2e, tpot_ms=tpot,
        lag_ms=(sent - r.intended_ns) / MS,
    )


def chunk_gaps_ms(r: RequestRecord) -> list[float]:
    ns = r.event_ns
    return list(map(truediv, map(sub, ns[1:], ns), repeat(MS)))  # C-level: runs for every request


def itl_gaps_ms(r: RequestRecord) -> list[float]:
    chunks = chunk_gaps_ms(r)
    toks = r.event_tokens[1:]
    if toks.count(1) == len(toks):  # one token per event (the usual stream): the chunk gaps themselves
        return chunks
    out: list[float] = []
    for gap, k in zip(chunks, toks):
        k = max(1, k)
        out.extend([gap / k] * k)
    return out


@dataclass(frozen=True)
class EventGaps:
    """Every record's chunk gaps and ITL gaps (ms), computed for a run's records at once: the same
    values as :func:`chunk_gaps_ms` and :func:`itl_gaps_ms` record by record, in record order,
    without a Python float per gap (a run of 10,000 64-token answers has 630,000 of them; the
    summary and the report each read them)."""

    chunk: np.ndarray  # every record's chunk gaps, record after record
    chunk_record: np.ndarray  # the index of the record each chunk gap belongs to
    itl: np.ndarray  # every record's ITL gaps, record after record
    itl_record: np.ndarray
    records: int

    def chunk_of(self, selected: np.ndarray) -> np.ndarray:
        """The chunk gaps of the records where ``selected`` (a bool per record) is true, in order."""
        return self.chunk[selected[self.chunk_record]]

    def itl_of(self, selected: np.ndarray) -> np.ndarray:
        return self.itl[selected[self.itl_record]]

    def itl_means(self) -> list[float | None]:
        """Each record's mean ITL (None without gaps): the sum in record order, as Python's ``sum`` adds."""
        return _means(self.itl, self.itl_record, self.records)

    def chunk_means(self) -> list[float | None]:
        return _means(self.chunk, self.chunk_record, self.records)


def _means(values: np.ndarray, owner: np.ndarray, n: int) -> list[float | None]:
    counts = np.bincount(owner, minlength=n)
    sums = np.bincount(owner, weights=values, minlength=n)  # adds in order, one by one
    return [float(s) / int(c) if c else None for s, c in zip(sums, counts)]


def event_gaps(records: Sequence[RequestRecord]) -> EventGaps:
    """:class:`EventGaps` of ``records`` (see there)."""
    n = len(records)
    lens = np.fromiter(map(len, map(attrgetter("event_ns"), records)), np.int64, n)
    total = int(lens.sum())
    ns = np.fromiter(chain.from_iterable(map(attrgetter("event_ns"), records)), np.int64, total)
    toks = np.fromiter(chain.from_iterable(map(attrgetter("event_tokens"), records)), np.int64, total)
    starts = np.cumsum(lens) - lens
    inner = np.ones(max(total - 1, 0), dtype=bool)  # diff j = ns[j + 1] - ns[j]: inside one record?
    first = starts[(starts > 0) & (starts < total)]
    inner[first - 1] = False
    chunk = (np.diff(ns) / MS)[inner]
    chunk_record = np.repeat(np.arange(n), np.maximum(lens - 1, 0))
    k = np.maximum(toks[1:][inner], 1)  # tokens of the later event of each gap
    itl = chunk if bool((k == 1).all()) else np.repeat(chunk / k, k)
    itl_record = chunk_record if itl is chunk else np.repeat(chunk_record, k)
    return EventGaps(chunk, chunk_record, itl, itl_record, n)


def meets_slo(d: Derived, ok: bool, slo: RequestSLO) -> bool:
    if not ok:
        return False
    for limit, value in ((slo.ttft_ms, d.ttft_ms), (slo.tpot_ms, d.tpot_ms), (slo.e2e_ms, d.e2e_ms)):
        if limit is not None and (value is None or value > limit):
            return False
    return True


def describe(values: list[float] | np.ndarray) -> dict[str, Any]:
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        return {"n": 0}
    pct = np.percentile(arr, PERCENTILES, method="linear")
    out = {"n": int(arr.size), "mean": float(arr.mean()), "std": float(arr.std(ddof=1)) if arr.size > 1 else 0.0,
           "min": float(arr.min()), "max": float(arr.max())}
    out.update({f"p{q:g}": float(v) for q, v in zip(PERCENTILES, pct)})
    return out


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
                 tput_end_ns: int | None = None) -> dict[str, Any]:
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
    series: dict[str, list[float]] = {m: [] for m in LATENCY_METRICS if m not in _GAP_METRICS}
    gaps = event_gaps(measured)
    measured_ok = np.fromiter((r.ok for r in measured), bool, len(measured))
    good = 0
    good_done = 0  # of those, finished inside the throughput window: goodput's numerator, a subset of completed
    for r, d in derived:
        series["lag_ms"].append(d.lag_ms)
        if meets_slo(d, r.ok, slo):
            good += 1
            if r.end_ns is not None and start_ns <= r.end_ns < t_end:
                good_done += 1
        if not r.ok:
            continue
        for name in ("ttfb_ms", "ttft_ms", "ttfc_ms", "e2e_ms", "tpot_ms"):
            v = getattr(d, name)
            if v is not None:
                series[name].append(v)
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
        "latency": {name: describe(series[name]) if name in series else describe(
            gaps.itl_of(measured_ok) if name == "itl_ms" else gaps.chunk_of(measured_ok)) for name in LATENCY_METRICS},
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
                     tput_end_ns: int | None = None) -> dict[str, Any]:
    window_s = max(1e-9, (end_ns - start_ns) / 1e9)
    t_end = tput_end_ns or end_ns
    tput_s = max(1e-9, (t_end - start_ns) / 1e9)
    measured = [r for r in records if r.phase == "measure"]
    ok = [r for r in measured if r.ok]
    lat = [(r.end_ns - r.sent_ns) / 1e9 for r in ok if r.end_ns is not None]
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
        "latency": {"doc_latency_s": describe(lat),
                    "lag_ms": describe([(r.sent_ns - r.intended_ns) / MS for r in measured])},
        "throughput_window_s": tput_s,
        "throughput": {"sent_rps": len(measured) / window_s,
                       "actual_sent_rps": actual_sent_rps(records, start_ns, end_ns),
                       "documents_per_h": len(done_in_window) / tput_s * 3600,
                       "pages_per_s": pages / tput_s},
        "requests_per_page": describe(reqs),
        "percentile_method": PERCENTILE_METHOD,
    }
