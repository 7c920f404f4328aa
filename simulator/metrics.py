"""``vllm:*`` and ``http_*`` metrics with real vLLM 0.32's names, types, labels and buckets.

State is plain Python numbers updated on the hot path (one token of one request must cost
nanoseconds, not a lock per observation); a prometheus-client ``Collector`` turns it into metric
families at scrape time, on a registry the caller injects. Label names are sorted because vLLM's
output lists them alphabetically. Names and help texts: tests/unit/sim/data/metrics.txt.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.samples import Sample

from .help_texts import HELP

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
               80.0)
REQUEST_TIME_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
                        480.0, 960.0, 1920.0, 7680.0)
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
N_BUCKETS = (1, 2, 5, 10, 20)
PREEMPTION_BUCKETS = (1, 2, 3, 4, 5, 10, 20)
HTTP_HIGHR_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 7.5,
                      10.0, 30.0, 60.0)
HTTP_BUCKETS = (0.1, 0.5, 1.0)
FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")


def build_1_2_5_buckets(max_value: int) -> tuple[float, ...]:
    """vLLM's token-count buckets: 1, 2, 5, 10, 20, 50, ... up to max_value (max_model_len)."""
    out: list[float] = []
    exponent = 0
    while True:
        for m in (1, 2, 5):
            value = m * 10**exponent
            if value > max_value:
                return tuple(out)
            out.append(float(value))
        exponent += 1


class Hist:
    __slots__ = ("bounds", "counts", "total", "created")

    def __init__(self, bounds: Iterable[float]) -> None:
        self.bounds = tuple(float(b) for b in bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0.0
        self.created = time.time()

    def observe(self, value: float, n: int = 1) -> None:
        self.counts[bisect_left(self.bounds, value)] += n
        self.total += value * n

    def family(self, name: str, labels: dict[str, str]) -> HistogramMetricFamily:
        fam = HistogramMetricFamily(name, HELP.get(name, name), labels=sorted(labels))
        add_hist(fam, self, labels)
        return fam


def add_hist(fam: HistogramMetricFamily, h: Hist, labels: dict[str, str]) -> None:
    names = sorted(labels)
    values = [labels[k] for k in names]
    cum = 0
    buckets = []
    for bound, c in zip(h.bounds + (float("inf"),), h.counts):
        cum += c
        buckets.append((_fmt_le(bound), cum))
    fam.add_metric(values, buckets, h.total)
    fam.samples.append(Sample(fam.name + "_created", dict(zip(names, values)), h.created))


def _fmt_le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))


@dataclass
class EngineGauges:
    running: int
    waiting: int
    kv_usage: float


class EngineMetrics:
    """The vllm:* families. ``gauges`` is read at scrape time (the scheduler's live state)."""

    def __init__(self, model_name: str, max_model_len: int, cache_info: dict[str, str],
                 gauges: Callable[[], EngineGauges], engine_id: str = "0") -> None:
        self.labels = {"engine": engine_id, "model_name": model_name}
        self.cache_info = cache_info
        self.gauges = gauges
        self.created = time.time()
        tok = build_1_2_5_buckets(max_model_len)
        self.counters = dict.fromkeys(("prompt_tokens", "generation_tokens", "num_preemptions", "mm_cache_queries",
                                       "prefix_cache_queries"), 0)
        self.success = dict.fromkeys(FINISHED_REASONS, 0)
        self.h = {
            "vllm:request_prompt_tokens": Hist(tok), "vllm:request_generation_tokens": Hist(tok),
            "vllm:iteration_tokens_total": Hist(ITERATION_TOKEN_BUCKETS),
            "vllm:request_max_num_generation_tokens": Hist(tok), "vllm:request_params_n": Hist(N_BUCKETS),
            "vllm:request_params_max_tokens": Hist(tok), "vllm:time_to_first_token_seconds": Hist(TTFT_BUCKETS),
            "vllm:inter_token_latency_seconds": Hist(ITL_BUCKETS),
            "vllm:request_time_per_output_token_seconds": Hist(ITL_BUCKETS),
            "vllm:e2e_request_latency_seconds": Hist(REQUEST_TIME_BUCKETS),
            "vllm:request_queue_time_seconds": Hist(REQUEST_TIME_BUCKETS),
            "vllm:request_inference_time_seconds": Hist(REQUEST_TIME_BUCKETS),
            "vllm:request_prefill_time_seconds": Hist(REQUEST_TIME_BUCKETS),
            "vllm:request_decode_time_seconds": Hist(REQUEST_TIME_BUCKETS),
            "vllm:request_num_preemptions": Hist(PREEMPTION_BUCKETS),
            "vllm:request_prefill_kv_computed_tokens": Hist(tok),
        }

    # -- hot path ---------------------------------------------------------------------------
    def step(self, num_tokens: int, preemptions: int) -> None:
        self.h["vllm:iteration_tokens_total"].observe(num_tokens)
        self.counters["num_preemptions"] += preemptions

    def first_token(self, prompt_tokens: int, num_images: int, ttft_s: float) -> None:
        self.counters["prompt_tokens"] += prompt_tokens
        self.counters["prefix_cache_queries"] += prompt_tokens
        self.counters["mm_cache_queries"] += num_images
        self.counters["generation_tokens"] += 1
        self.h["vllm:time_to_first_token_seconds"].observe(ttft_s)

    def tokens(self, itl_s: float, n: int) -> None:
        self.counters["generation_tokens"] += n
        self.h["vllm:inter_token_latency_seconds"].observe(itl_s, n)

    def finished(self, *, reason: str, prompt_tokens: int, generated: int, max_tokens: int,
                 max_tokens_param: int | None, e2e_s: float, queue_s: float, prefill_s: float, decode_s: float,
                 preemptions: int) -> None:
        self.success[reason] = self.success.get(reason, 0) + 1
        if reason in ("abort", "error"):
            return
        h = self.h
        h["vllm:request_prompt_tokens"].observe(prompt_tokens)
        h["vllm:request_prefill_kv_computed_tokens"].observe(prompt_tokens)
        h["vllm:request_generation_tokens"].observe(generated)
        h["vllm:request_max_num_generation_tokens"].observe(max_tokens)
        h["vllm:request_params_n"].observe(1)
        if max_tokens_param is not None:
            h["vllm:request_params_max_tokens"].observe(max_tokens_param)
        h["vllm:e2e_request_latency_seconds"].observe(e2e_s)
        h["vllm:request_queue_time_seconds"].observe(queue_s)
        h["vllm:request_inference_time_seconds"].observe(prefill_s + decode_s)
        h["vllm:request_prefill_time_seconds"].observe(prefill_s)
        h["vllm:request_decode_time_seconds"].observe(decode_s)
        h["vllm:request_num_preemptions"].observe(preemptions)
        if generated > 1:
            h["vllm:request_time_per_output_token_seconds"].observe(decode_s / (generated - 1))

    # -- scrape -----------------------------------------------------------------------------
    def _counter(self, name: str, value: float, extra: dict[str, str] | None = None,
                 series: dict[str, float] | None = None, key: str = "") -> CounterMetricFamily:
        base = {**self.labels, **(extra or {})}
        names = sorted(base | ({key: ""} if key else {}))
        fam = CounterMetricFamily(name, HELP[name + "_total"], labels=names)
        for label_value, v in (series or {"": value}).items():
            labels = base | ({key: label_value} if key else {})
            fam.add_metric([labels[k] for k in names], v, created=self.created)
        return fam

    def _gauge(self, name: str, series: dict[str, float], key: str = "") -> GaugeMetricFamily:
        names = sorted(self.labels | ({key: ""} if key else {}))
        fam = GaugeMetricFamily(name, HELP[name], labels=names)
        for label_value, v in series.items():
            labels = self.labels | ({key: label_value} if key else {})
            fam.add_metric([labels[k] for k in names], v)
        return fam

    def collect(self) -> Iterable[Metric]:
        g = self.gauges()
        c = self.counters
        for name in ("vllm:estimated_flops_per_gpu", "vllm:estimated_read_bytes_per_gpu",
                     "vllm:estimated_write_bytes_per_gpu"):
            yield self._counter(name, 0.0)
        yield self._gauge("vllm:num_requests_running", {"": g.running})
        yield self._gauge("vllm:num_requests_waiting", {"": g.waiting})
        yield self._gauge("vllm:num_requests_waiting_by_reason", {"capacity": g.waiting, "deferred": 0}, "reason")
        yield self._gauge("vllm:engine_sleep_state", {"awake": 1, "weights_offloaded": 0, "discard_all": 0},
                          "sleep_state")
        yield self._gauge("vllm:kv_cache_usage_perc", {"": g.kv_usage})
        yield self._counter("vllm:prefix_cache_queries", c["prefix_cache_queries"])
        yield self._counter("vllm:prefix_cache_hits", 0)
        yield self._counter("vllm:external_prefix_cache_queries", 0)
        yield self._counter("vllm:external_prefix_cache_hits", 0)
        yield self._counter("vllm:mm_cache_queries", c["mm_cache_queries"])
        yield self._counter("vllm:mm_cache_hits", 0)
        yield self._counter("vllm:num_preemptions", c["num_preemptions"])
        yield self._counter("vllm:prompt_tokens", c["prompt_tokens"])
        yield self._counter("vllm:prompt_tokens_by_source", 0, series={
            "local_compute": c["prompt_tokens"], "local_cache_hit": 0, "external_kv_transfer": 0}, key="source")
        yield self._counter("vllm:prompt_tokens_cached", 0)
        yield self._counter("vllm:prompt_tokens_cached_by_source", 0, series=dict.fromkeys(
            ("device", "host", "p2p", "disk", "external_unspecified"), 0), key="source")
        yield self._counter("vllm:generation_tokens", c["generation_tokens"])
        yield self._counter("vllm:request_success", 0, series=dict(self.success), key="finished_reason")
        rej = CounterMetricFamily("vllm:admission_rejections", HELP["vllm:admission_rejections_total"],
                                  labels=["model_name", "reason"])
        for reason in ("max_num_queued_reqs", "max_num_queued_tokens"):
            rej.add_metric([self.labels["model_name"], reason], 0, created=self.created)
        yield rej
        for name, hist in self.h.items():
            yield hist.family(name, self.labels)
        info = GaugeMetricFamily("vllm:cache_config_info", HELP["vllm:cache_config_info"],
                                 labels=sorted(self.cache_info | {"engine": self.labels["engine"]}))
        merged = self.cache_info | {"engine": self.labels["engine"]}
        info.add_metric([merged[k] for k in sorted(merged)], 1.0)
        yield info


@dataclass
class Footprint:
    """The ``sim:*`` families of one engine: what it holds and how busy it is. vLLM has no metric
    for these (it logs its weights' size at load); the twin exports them so that the monolithic
    comparison's memory and utilisation rows can be read off /metrics."""

    labels: dict[str, str]  # engine, model_name (as on the vllm:* families)
    weights_bytes: int
    kv_cache_bytes: int
    load_s: float
    ready: Callable[[], bool]
    busy_s: Callable[[], float]
    started: float = 0.0  # time.monotonic() at engine start; utilisation counts from ready

    def collect(self) -> Iterable[Metric]:
        names, values = sorted(self.labels), [self.labels[k] for k in sorted(self.labels)]
        now = time.monotonic()
        ready = self.ready()
        up_s = max(0.0, now - self.started - self.load_s) if ready else 0.0
        busy = self.busy_s()
        for name, help_text, value in (
            ("sim:model_weights_memory_bytes", "GPU memory held by this engine's copy of the model weights.",
             self.weights_bytes),
            ("sim:kv_cache_memory_bytes", "GPU memory of this engine's KV cache.", self.kv_cache_bytes),
            ("sim:engine_load_seconds", "Time this engine takes to load before /health answers 200.", self.load_s),
            ("sim:engine_ready", "1 once this engine has loaded and answers /health 200.", 1.0 if ready else 0.0),
            ("sim:gpu_utilization", "Share of wall time since the engine became ready that it held the GPU "
                                    "for a step (0-1); rate(sim:engine_busy_seconds_total) over a window.",
             min(1.0, busy / up_s) if up_s > 0 else 0.0),
        ):
            fam = GaugeMetricFamily(name, help_text, labels=names)
            fam.add_metric(values, float(value))
            yield fam
        busy_fam = CounterMetricFamily("sim:engine_busy_seconds", "Step time this engine held the GPU, seconds.",
                                       labels=names)
        busy_fam.add_metric(values, busy)
        yield busy_fam


@dataclass(slots=True)
class _Sizes:
    """Request and response body sizes of one handler (two summaries sharing the count)."""

    created: float
    count: int = 0
    request_bytes: int = 0
    response_bytes: int = 0


class HttpMetrics:
    """prometheus-fastapi-instrumentator's families, as vLLM exposes them."""

    def __init__(self) -> None:
        self.requests: dict[tuple[str, str, str], list[float]] = {}  # (handler, method, status) -> [count, created]
        self.sizes: dict[str, _Sizes] = {}  # by handler
        self.duration: dict[tuple[str, str], Hist] = {}
        self.highr = Hist(HTTP_HIGHR_BUCKETS)

    def observe(self, handler: str, method: str, status: int, req_bytes: int, resp_bytes: int, seconds: float) -> None:
        key = (handler, method, f"{status // 100}xx")
        entry = self.requests.get(key)
        if entry is None:
            entry = self.requests[key] = [0, time.time()]
        entry[0] += 1
        s = self.sizes.get(handler)
        if s is None:
            s = self.sizes[handler] = _Sizes(created=time.time())
        s.count += 1
        s.request_bytes += req_bytes
        s.response_bytes += resp_bytes
        h = self.duration.get((handler, method))
        if h is None:
            h = self.duration[(handler, method)] = Hist(HTTP_BUCKETS)
        h.observe(seconds)
        self.highr.observe(seconds)

    def collect(self) -> Iterable[Metric]:
        req = CounterMetricFamily("http_requests", HELP["http_requests_total"], labels=["handler", "method", "status"])
        for (handler, method, status), (count, created) in self.requests.items():
            req.add_metric([handler, method, status], count, created=created)
        yield req
        for name, request_side in (("http_request_size_bytes", True), ("http_response_size_bytes", False)):
            sizes = SummaryMetricFamily(name, HELP[name], labels=["handler"])
            for handler, s in self.sizes.items():
                sizes.add_metric([handler], s.count, s.request_bytes if request_side else s.response_bytes)
                sizes.samples.append(Sample(name + "_created", {"handler": handler}, s.created))
            yield sizes
        yield self.highr.family("http_request_duration_highr_seconds", {})
        durations = HistogramMetricFamily("http_request_duration_seconds", HELP["http_request_duration_seconds"],
                                          labels=["handler", "method"])
        for (handler, method), h in self.duration.items():
            add_hist(durations, h, {"handler": handler, "method": method})
        yield durations


class _Adapter:
    def __init__(self, fn: Callable[[], Iterable[Metric]]) -> None:
        self.collect = fn


def build_registry(engine: EngineMetrics, http: HttpMetrics,
                   registry: CollectorRegistry | None = None, footprint: Footprint | None = None) -> CollectorRegistry:
    registry = registry or CollectorRegistry(auto_describe=False)
    GCCollector(registry=registry)
    PlatformCollector(registry=registry)
    ProcessCollector(registry=registry)
    registry.register(_Adapter(engine.collect))
    registry.register(_Adapter(http.collect))
    if footprint is not None:
        registry.register(_Adapter(footprint.collect))
    return registry
