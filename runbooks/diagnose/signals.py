"""Prometheus signals diagnose reads (through prometheus-api-client), and their thresholds."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from contract.prometheus_jobs import JOB_SERVER, JOB_WORKERS
from runbooks.model import PlatformError

THRESHOLDS_FILE = Path(__file__).with_name("thresholds.yaml")


def load_thresholds(overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    data = {k: v["value"] for k, v in yaml.safe_load(THRESHOLDS_FILE.read_text()).items()}
    for key, value in (overrides or {}).items():
        if key not in data:
            raise ValueError(f"unknown threshold {key!r}; known: {', '.join(sorted(data))}")
        data[key] = type(data[key])(value)
    return data


def queries(window: str, stall_window: str = "2m") -> dict[str, str]:
    s, w = f'job="{JOB_SERVER}"', f'job="{JOB_WORKERS}"'
    sw = stall_window
    return {
        "server_up": f"max(up{{{s}}})",
        "waiting": f"sum(vllm:num_requests_waiting{{{s}}})",
        "running": f"sum(vllm:num_requests_running{{{s}}})",
        # The peak over the window: an instant sample misses a full batch between two requests.
        "running_peak": f"max_over_time(sum(vllm:num_requests_running{{{s}}})[{window}:])",
        "kv_usage": f"max(vllm:kv_cache_usage_perc{{{s}}})",
        "ttft_p95_s": "histogram_quantile(0.95, sum by (le) "
                      f"(rate(vllm:time_to_first_token_seconds_bucket{{{s}}}[{window}])))",
        "preemptions_per_s": f"sum(rate(vllm:num_preemptions_total{{{s}}}[{window}]))",
        "breaker_max": f"max(mineru_vllm_circuit_breaker_state{{{w}}})",
        "workers_up": f"sum(up{{{w}}})",
        # Every worker reports the same consumer group's counts: read them once (max), never
        # summed over the workers (N times too high).
        "queue_lag": f"max(mineru_queue_lag_messages{{{w}}})",
        "queue_pending": f"max(mineru_queue_pending_messages{{{w}}})",
        # Over the stall window: did documents finish, did requests get answers, did they time
        # out, was the breaker open and the server up all along?
        "finished_recent": f"sum(increase(mineru_pdfs_processed_total{{{w}}}[{sw}])) + "
                           f"sum(increase(mineru_pdfs_failed_total{{{w}}}[{sw}]))",
        "requests_recent": f"sum(increase(mineru_vllm_client_requests_total{{{w}}}[{sw}]))",
        "answered_recent": f"sum(increase(mineru_vllm_client_request_duration_seconds_count{{{w}}}[{sw}])) - "
                           f"sum(increase(mineru_vllm_client_failures_total{{{w},kind!=\"breaker_open\"}}[{sw}]))",
        "timeouts_recent": f"sum(increase(mineru_vllm_client_failures_total{{{w},kind=\"timeout\"}}[{sw}]))",
        "errors_recent": f"sum(increase(mineru_vllm_client_failures_total"
                         f"{{{w},kind=~\"http_5xx|http_4xx|connect\"}}[{sw}]))",
        "breaker_open_all_along": f"min_over_time(max(mineru_vllm_circuit_breaker_state{{{w}}})[{sw}:])",
        "server_up_all_along": f"min_over_time(max(up{{{s}}})[{sw}:])",
        "oldest_request_s": f"max(mineru_vllm_client_oldest_request_seconds{{{w}}})",
        "deadline_s": f"max(mineru_vllm_client_deadline_seconds{{{w}}})",
    }


@dataclass
class Signals:
    """Reads one Prometheus; `client` is a prometheus_api_client.PrometheusConnect (injectable)."""

    url: str
    client: Any = None
    timeout_s: float = 5.0

    def __post_init__(self) -> None:
        if self.client is None:
            from prometheus_api_client import PrometheusConnect
            from urllib3.util.retry import Retry

            # The client's default retry backs off 1+2+4 s: too slow to say "unreachable" at 3 a.m.
            retry = Retry(total=2, backoff_factor=0.1, status_forcelist=[502, 503, 504],
                          allowed_methods=["GET", "POST"])
            self.client = PrometheusConnect(url=self.url, disable_ssl=True, timeout=self.timeout_s,
                                            retry=retry)

    def query(self, promql: str) -> list[tuple[dict[str, str], float]]:
        import requests
        from prometheus_api_client import PrometheusApiClientException

        try:
            result = self.client.custom_query(promql)
        except requests.exceptions.RequestException as exc:
            raise PlatformError(f"Prometheus at {self.url} is unreachable ({type(exc).__name__}); "
                                "start the stack (`splitstack up`) or pass --prometheus-url") from exc
        except PrometheusApiClientException as exc:
            raise PlatformError(f"Prometheus at {self.url} rejected {promql!r}: {exc}") from exc
        out = []
        for item in result:
            value = float(item["value"][1])
            if value == value:  # NaN: a quantile of no samples is "no data", not a number
                out.append((item.get("metric", {}), value))
        return out

    def scalar(self, promql: str) -> float | None:
        rows = self.query(promql)
        return rows[0][1] if rows else None

    def snapshot(self, window: str, stall_window: str = "2m") -> dict[str, float | None]:
        return {name: self.scalar(q) for name, q in queries(window, stall_window).items()}

    def breaker_states(self) -> dict[str, float]:
        rows = self.query(f'max by (instance) (mineru_vllm_circuit_breaker_state{{job="{JOB_WORKERS}"}})')
        return {labels.get("instance", "?"): value for labels, value in rows}
