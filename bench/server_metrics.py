"""The server's own view: /metrics scraped before and after a run and diffed.

Histograms (TTFT, e2e, queue time, ...) are diffed bucket by bucket, so the run's share is
separated from whatever the server did before; gauges (KV usage, running/waiting) are sampled.
"""

from __future__ import annotations

import math
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench.summary import Quantile, ServerDiff

HISTOGRAMS = (
    "vllm:time_to_first_token_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:request_prefill_time_seconds",
    "vllm:request_decode_time_seconds",
)
COUNTERS = ("vllm:num_preemptions_total", "vllm:generation_tokens_total", "vllm:prompt_tokens_total",
            "vllm:request_success_total")
GAUGES = ("vllm:kv_cache_usage_perc", "vllm:num_requests_running", "vllm:num_requests_waiting",
          "process_resident_memory_bytes")

Snapshot = dict[str, Any]


def parse(text: str) -> Snapshot:
    """{histogram: {"buckets": {le: count}, "sum": s, "count": n}, sample name: value}, summed
    over label sets other than ``le`` (one model per server)."""
    snap: Snapshot = {}
    for fam in text_string_to_metric_families(text):
        if fam.type == "histogram":
            h = snap.setdefault(fam.name, {"buckets": {}, "sum": 0.0, "count": 0.0})
            for s in fam.samples:
                if s.name.endswith("_bucket"):
                    le = float(s.labels["le"])
                    h["buckets"][le] = h["buckets"].get(le, 0.0) + s.value
                elif s.name.endswith("_sum"):
                    h["sum"] += s.value
                elif s.name.endswith("_count"):
                    h["count"] += s.value
            continue
        for s in fam.samples:
            if not s.name.endswith("_created"):
                snap[s.name] = snap.get(s.name, 0.0) + float(s.value)
    return snap


def scrape(base_url: str, client: httpx.Client, headers: dict[str, str] | None = None) -> Snapshot | None:
    try:
        r = client.get(f"{base_url}/metrics", headers=headers or {}, timeout=10.0)
    except httpx.HTTPError:
        return None
    if r.status_code != 200:
        return None
    return parse(r.text)


def histogram_quantile(q: float, buckets: dict[float, float]) -> float | None:
    """Prometheus' histogram_quantile over cumulative buckets (linear within a bucket)."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    total = buckets[math.inf] if math.inf in buckets else buckets[bounds[-1]]
    rank = q * total
    prev_b, prev_c = 0.0, 0.0
    for b in bounds:
        c = buckets[b]
        if c >= rank:
            if math.isinf(b):
                return prev_b
            if c == prev_c:
                return b
            return prev_b + (b - prev_b) * (rank - prev_c) / (c - prev_c)
        prev_b, prev_c = b, c
    return prev_b


def bucket_quantile(q: float, buckets: dict[float, float]) -> Quantile:
    """A quantile of a histogram as what it is: an estimate inside one bucket.

    Returns ``{"estimate_s", "bucket_s": [lower, upper]}`` where the estimate is Prometheus'
    linear interpolation, or ``{"estimate_s": None, "why": ...}`` when the buckets cannot support
    one: the quantile falls in the first bucket (its lower edge is unknown: interpolating from 0
    gave "p50 0.15 s" for requests whose mean was 0.0002 s, all inside a 0-0.3 s bucket) or in
    the +Inf bucket (no upper edge)."""
    bounds = sorted(buckets)
    total = buckets[bounds[-1]] if bounds else 0.0
    if total <= 0:
        return {"estimate_s": None, "why": "no observations"}
    rank = q * total
    for i, b in enumerate(bounds):
        if buckets[b] >= rank:
            if math.isinf(b):
                return {"estimate_s": None, "why": f"above the last finite bucket (> {bounds[i - 1]:g} s)"
                        if i else "every observation is in the +Inf bucket"}
            if i == 0:
                return {"estimate_s": None, "why": f"in the first bucket (<= {b:g} s): too coarse to estimate"}
            return {"estimate_s": histogram_quantile(q, buckets), "bucket_s": [bounds[i - 1], b]}
    return {"estimate_s": None, "why": "no observations"}


def diff(before: Snapshot | None, after: Snapshot | None) -> ServerDiff | None:
    if before is None or after is None:
        return None
    out: ServerDiff = {"histograms": {}, "counters": {}, "gauges": {}}
    for name in HISTOGRAMS:
        a, b = after.get(name), before.get(name, {"buckets": {}, "sum": 0.0, "count": 0.0})
        if not isinstance(a, dict) or not a.get("buckets"):
            continue
        buckets = {le: a["buckets"][le] - b["buckets"].get(le, 0.0) for le in a["buckets"]}
        count = a["count"] - b["count"]
        out["histograms"][name] = {
            "count": count, "sum_s": a["sum"] - b["sum"],
            "mean_s": (a["sum"] - b["sum"]) / count if count > 0 else None,
            # bucket estimates (bucket_quantile says when they are omitted), never exact percentiles
            "quantiles": {f"p{round(q * 100)}": bucket_quantile(q, buckets) for q in (0.5, 0.95, 0.99)},
            "buckets": {("+Inf" if math.isinf(k) else repr(k)): v for k, v in sorted(buckets.items())},
        }
    for name in COUNTERS:
        if name in after and isinstance(after[name], float):
            out["counters"][name] = after[name] - float(before.get(name, 0.0))
    for name in GAUGES:
        if name in after and not isinstance(after[name], dict):
            out["gauges"][name] = {"before": before.get(name), "after": after[name]}
    return out
