"""Where the server's own metrics come from for a run: its /metrics (scraped directly, sampled
every second) or, when the bench cannot reach the server (a deployed stack's pipeline run),
the stack's Prometheus.

Through Prometheus the 'before' and 'after' snapshots are instant queries of the raw vllm:*
series of the served model, summed over label sets other than ``le`` exactly as a direct scrape
is (bench/server_metrics.parse), so bench/server_metrics.diff works on either. The 'after' query
waits one scrape interval (plus a second) so the run's last requests are in it; the 'before'
value may be up to one scrape interval old, so requests just before the run can be counted in.
Gauges come from one range query per gauge over the run, at the scrape interval.
"""

from __future__ import annotations

import time
from typing import Any

import httpx

from bench import server_metrics
from bench.sampler import SAMPLED, GaugeSampler
from bench.summary import GaugeSample, GaugeStats

PROM_TIMEOUT_S = 10.0


def _query(http: httpx.Client, prom: str, path: str, params: dict[str, Any]) -> list[dict[str, Any]] | None:
    try:
        r = http.get(f"{prom}/api/v1/{path}", params=params, timeout=PROM_TIMEOUT_S)
        body = r.json()
    except (httpx.HTTPError, ValueError):
        return None
    if r.status_code != 200 or body.get("status") != "success":
        return None
    return body["data"]["result"]


def prom_snapshot(http: httpx.Client, prom: str, model: str,
                  at_s: float | None = None) -> server_metrics.Snapshot | None:
    names = "|".join((*server_metrics.HISTOGRAMS, *server_metrics.COUNTERS, *SAMPLED))
    sel = f'{{__name__=~"({names})(_bucket|_sum|_count)?",model_name="{model}"}}'
    params: dict[str, Any] = {"query": sel}
    if at_s is not None:
        params["time"] = at_s
    res = _query(http, prom, "query", params)
    if not res:
        return None
    snap: server_metrics.Snapshot = {}
    for series in res:
        metric = series["metric"]
        name = metric["__name__"]
        value = float(series["value"][1])
        base = next((h for h in server_metrics.HISTOGRAMS if name in (f"{h}_bucket", f"{h}_sum", f"{h}_count")), None)
        if base is None:
            snap[name] = snap.get(name, 0.0) + value
            continue
        h = snap.setdefault(base, {"buckets": {}, "sum": 0.0, "count": 0.0})
        if name.endswith("_bucket"):
            le = float(metric["le"])
            h["buckets"][le] = h["buckets"].get(le, 0.0) + value
        elif name.endswith("_sum"):
            h["sum"] += value
        else:
            h["count"] += value
    return snap


class PromGaugeSamples:
    """GaugeSampler's interface, filled from Prometheus after the run."""

    def __init__(self, http: httpx.Client, prom: str, model: str, step_s: float) -> None:
        self.http, self.prom, self.model, self.step_s = http, prom, model, step_s
        self.samples: list[GaugeSample] = []
        self.reads = 0  # Prometheus is read, not the server
        self._t0 = 0.0

    def __enter__(self) -> PromGaugeSamples:
        self._t0 = time.time()
        return self

    def __exit__(self, *exc: object) -> None:
        end = time.time()
        for name in SAMPLED:
            res = _query(self.http, self.prom, "query_range", {
                "query": f'sum({name}{{model_name="{self.model}"}})', "start": self._t0, "end": end,
                "step": self.step_s})
            for series in res or []:
                for t, v in series["values"]:
                    self.samples.append({"t_s": float(t), "metric": name, "value": float(v)})

    def summary(self) -> dict[str, GaugeStats]:
        return GaugeSampler.summary(self)  # type: ignore[arg-type]  # same samples shape


class NoSamples:
    samples: list[GaugeSample] = []
    reads = 0

    def __enter__(self) -> NoSamples:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def summary(self) -> dict[str, GaugeStats]:
        return {}


class ServerView:
    def __init__(self, target, http: httpx.Client) -> None:
        self.target, self.http = target, http
        self.source = "none"
        self._first: server_metrics.Snapshot | None = None
        if target.base_url:
            self._first = server_metrics.scrape(target.base_url, http, target.headers)
            if self._first is not None:
                self.source = f"{target.base_url}/metrics"
        if self._first is None and target.prometheus_url:
            self._first = prom_snapshot(http, target.prometheus_url, target.model)
            if self._first is not None:
                self.source = f"prometheus {target.prometheus_url}"
            else:
                self.source = (f"none: {target.prometheus_url} has no vllm:* series for model_name="
                               f"{target.model!r} (unreachable, or not scraping the server)")
        elif self._first is None:
            self.source = "none: the server's /metrics is not reachable from here and no --prometheus-url"

    @property
    def _step_s(self) -> float:
        spec = self.target.spec
        return float(spec.observability.scrape_interval_s) if spec is not None else 5.0

    def before(self) -> server_metrics.Snapshot | None:
        return self._first

    def sampler(self, interval_s: float = 1.0):
        if self.source.startswith("prometheus"):
            return PromGaugeSamples(self.http, self.target.prometheus_url, self.target.model, self._step_s)
        if self.source.startswith("none") or interval_s <= 0:
            return NoSamples()
        return GaugeSampler(self.target.base_url, self.target.headers, interval_s=interval_s)

    def after(self) -> server_metrics.Snapshot | None:
        if self.source.startswith("prometheus"):
            time.sleep(self._step_s + 1.0)  # the run's end must have been scraped
            return prom_snapshot(self.http, self.target.prometheus_url, self.target.model)
        if self.source.startswith("none"):
            return None
        return server_metrics.scrape(self.target.base_url, self.http, self.target.headers)
