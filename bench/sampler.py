"""Sample the server's gauges while a run is going (KV cache usage, running and waiting
requests): a before/after diff cannot show a queue that built up and drained in between.

A daemon thread with its own HTTP client scrapes /metrics every ``interval_s``; samples are
(unix time, metric, value), the shape of slo.records' ``gauge`` records, so SLOs over gauges
(inference-queue-depth) can be evaluated on a bench run.
"""

from __future__ import annotations

import threading
import time

import httpx

from bench.server_metrics import parse
from bench.summary import GaugeSample, GaugeStats

SAMPLED = ("vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc")


class GaugeSampler:
    def __init__(self, base_url: str, headers: dict[str, str] | None = None, interval_s: float = 1.0,
                 client: httpx.Client | None = None) -> None:
        self.url = f"{base_url}/metrics"
        self.headers = headers or {}
        self.interval_s = interval_s
        self.client = client
        self.samples: list[GaugeSample] = []
        self.reads = 0  # GETs of the server's /metrics during the run (what the sampler cost it)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="bench-gauge-sampler", daemon=True)

    def _loop(self) -> None:
        client = self.client or httpx.Client(timeout=max(1.0, self.interval_s))
        try:
            while not self._stop.wait(self.interval_s):
                self.reads += 1
                try:
                    # Only the sampled gauges are parsed: parsing the whole ~50 KB exposition
                    # every second held the GIL for ~10 ms, a stall that landed in the TTFT of
                    # ~1 % of requests (the p99). Lines are filtered before parsing, because
                    # vLLM 0.32 ignores ?name[]= (its /metrics route is the instrumentator's);
                    # the parameter still spares servers that honour it (prometheus_client's
                    # own exposition) rendering the rest.
                    text = client.get(self.url, params={"name[]": list(SAMPLED)}, headers=self.headers).text
                    snap = parse("\n".join(line for line in text.splitlines() if line.startswith(SAMPLED)))
                except (httpx.HTTPError, ValueError):
                    continue  # a missed sample is a gap, not a failed run
                now = time.time()
                for name in SAMPLED:
                    v = snap.get(name)
                    if isinstance(v, float):
                        self.samples.append({"t_s": now, "metric": name, "value": v})
        finally:
            if self.client is None:
                client.close()

    def __enter__(self) -> GaugeSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def summary(self) -> dict[str, GaugeStats]:
        out: dict[str, GaugeStats] = {}
        for name in SAMPLED:
            vals = [s["value"] for s in self.samples if s["metric"] == name]
            if vals:
                out[name] = {"n": len(vals), "max": max(vals), "mean": sum(vals) / len(vals)}
        return out
