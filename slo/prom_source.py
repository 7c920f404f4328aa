"""SLI counts from a live Prometheus (any URL), through prometheus-api-client.

The HTTP session is injectable (tests and callers may pass their own ``requests.Session``).
Counts come from instant queries of ``increase()`` (event SLIs) or subqueries over the 0/1
indicator (time SLIs), so they do not depend on the recording rules being loaded.
"""

from __future__ import annotations

from fractions import Fraction

import requests
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from urllib3.util.retry import Retry

from slo import promql
from slo.budget import Counts, exact
from slo.report import parse_duration_s
from slo.spec import SLO, Jobs, UptimeSLI

ADVICE = "start the stack (`splitstack up`), or pass --prometheus-url URL"
URL_ADVICE = "check the URL and that this host reaches it (a port-forward, a VPN)"


class PrometheusUnreachable(RuntimeError):
    pass


class QueryFailed(RuntimeError):
    pass


class PrometheusSource:
    def __init__(self, url: str, jobs: Jobs, step: str = "1m", timeout_s: float = 30.0,
                 session: requests.Session | None = None, at_s: float | None = None,
                 advice: str = ADVICE):
        self.url = url
        self.advice = advice  # what to do when it does not answer: fits how the URL was chosen
        self.jobs = jobs
        self.step = step
        self.at_s = at_s  # evaluation time (unix s); None = now
        self._timeout_s = timeout_s
        # One quick retry on connection errors and 502/503/504 (a Prometheus restarting), then fail.
        retry = Retry(total=1, backoff_factor=0.2, status_forcelist=(502, 503, 504), allowed_methods=("GET", "POST"))
        self._prom = PrometheusConnect(url=url, disable_ssl=True, session=session, timeout=timeout_s, retry=retry)

    def check(self) -> None:
        try:
            ok = self._prom.check_prometheus_connection()
        except requests.RequestException as e:
            ok, why = False, str(e)
        else:
            why = "no healthy answer from /-/healthy"
        if not ok:
            raise PrometheusUnreachable(
                f"Prometheus at {self.url} is unreachable ({why}); {self.advice}")

    def _scalar(self, slo: SLO, expr: str) -> Fraction | None:
        params = {"time": str(self.at_s)} if self.at_s is not None else None
        try:
            result = self._prom.custom_query(expr, params=params)
        except requests.RequestException as e:
            raise PrometheusUnreachable(
                f"Prometheus at {self.url} is unreachable ({e}); {self.advice}") from None
        except PrometheusApiClientException as e:
            raise QueryFailed(f"slo {slo.name!r}: Prometheus rejected the query {expr!r}: {e}") from None
        if not result:
            return None
        value = result[0]["value"][1]
        if value in ("NaN", "+Inf", "-Inf"):
            return None
        return exact(value)

    def counts(self, slo: SLO, window: str) -> Counts | None:
        good_q, total_q = promql.count_exprs(slo, self.jobs, window, self.step)
        total = self._scalar(slo, total_q)
        if total is None or total == 0:
            return None
        good = self._scalar(slo, good_q)
        return Counts(good if good is not None else Fraction(0), total)

    def coverage_s(self, slo: SLO, window: str) -> int | None:
        """Seconds of ``window`` (up to now) for which Prometheus has the SLI's first series.

        Sampled every 1/720 of the window (an hour for 30 d, a second for 10 min), so it is exact
        to that step.
        """
        step = f"{max(1, parse_duration_s(window) // 720)}s"
        value = self._scalar(slo, promql.coverage_expr(slo, self.jobs, window, step))
        return None if value is None else int(value)

    def no_data_hint(self, slo: SLO) -> str:
        jobs = sorted({m for m in _jobs_of(slo, self.jobs)})
        return (f"Prometheus at {self.url} has no samples of {', '.join(slo.sli.metrics())} for job "
                f"{' / '.join(jobs)}; check `up{{job=\"{jobs[0]}\"}}` and that the target exposes the metric, "
                "or wait for traffic")


def _jobs_of(slo: SLO, jobs: Jobs) -> list[str]:
    sli = slo.sli
    roles = sli.jobs if isinstance(sli, UptimeSLI) else (sli.job,)  # an UptimeSLI has >= 1 job
    return [jobs.of(r) for r in roles]
