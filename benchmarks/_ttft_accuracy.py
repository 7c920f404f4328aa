"""TTFT accuracy: each request's client TTFT against the simulator's own stamps (GET /sim/timings).

Client and simulator stamp with ``time.monotonic_ns()`` (CLOCK_MONOTONIC, one clock for every
process of the host), so per request, joined by the response id (``RequestRecord.response_id`` =
``RequestTiming.response_id``), with t0 = the run's ``RunResult.t0_ns``:

    client_ttft = (t0 + event_ns[0]) - (t0 + sent_ns)
    server_ttft = first_token_ns - arrival_ns
    error       = client_ttft - server_ttft = send_delay + recv_delay
    send_delay  = arrival_ns - (t0 + sent_ns)          (client stamp -> server's HTTP parser)
    recv_delay  = (t0 + event_ns[0]) - first_token_ns  (server's write -> client's read stamp)

Both delays are >= 0 by causality; docs/bench-metrics.md ("TTFT accuracy") states the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np

from bench.records import AnyRecord, RequestRecord
from bench.stats import PERCENTILE_METHOD, percentile

MS = 1e6


def timings_mark(url: str, headers: dict[str, str] | None = None, http: httpx.Client | None = None) -> int:
    """The simulator's newest timing seq: pass it to :func:`fetch_timings` after a run."""
    return int(fetch_timings(url, 2**62, headers, http)["last_seq"])


def fetch_timings(url: str, since: int, headers: dict[str, str] | None = None,
                  http: httpx.Client | None = None) -> dict[str, Any]:
    """GET /sim/timings?since=...: the entries of requests that ended after entry ``since``."""
    get = http.get if http is not None else httpx.get
    r = get(f"{url}/sim/timings", params={"since": since}, headers=headers, timeout=60)
    if r.status_code == 404:
        raise RuntimeError(f"{url} has no /sim/timings: TTFT accuracy needs the splitstack simulator "
                           "(python -m splitstack.cli.sim serve), not another server")
    r.raise_for_status()
    return r.json()


@dataclass
class Joined:
    client_ttft_ms: list[float] = field(default_factory=list)
    server_ttft_ms: list[float] = field(default_factory=list)
    error_ms: list[float] = field(default_factory=list)
    send_ms: list[float] = field(default_factory=list)
    recv_ms: list[float] = field(default_factory=list)
    measured: int = 0  # successful measured records with a first token
    unmatched: int = 0  # of those, without a server entry (no id, evicted from the ring, ...)


def join(records: list[AnyRecord], t0_ns: int, timings: list[dict[str, Any]]) -> Joined:
    by_id = {t["response_id"]: t for t in timings if t.get("response_id") and t.get("first_token_ns")}
    out = Joined()
    for r in records:
        if not isinstance(r, RequestRecord) or r.phase != "measure" or not r.ok or not r.event_ns:
            continue
        out.measured += 1
        t = by_id.get(r.response_id) if r.response_id else None
        if t is None:
            out.unmatched += 1
            continue
        sent, first = t0_ns + r.sent_ns, t0_ns + r.event_ns[0]
        server = t["first_token_ns"] - t["arrival_ns"]
        out.client_ttft_ms.append((first - sent) / MS)
        out.server_ttft_ms.append(server / MS)
        out.error_ms.append((first - sent - server) / MS)
        out.send_ms.append((t["arrival_ns"] - sent) / MS)
        out.recv_ms.append((first - t["first_token_ns"]) / MS)
    return out


def _pmm(values: list[float]) -> dict[str, float | None]:
    arr = np.asarray(values, dtype=float)
    return {"p50": percentile(arr, 50), "p99": percentile(arr, 99),
            "max": float(arr.max()) if arr.size else None}


def summary(j: Joined) -> dict[str, Any]:
    return {"requests": j.measured, "joined": len(j.error_ms), "unmatched": j.unmatched,
            "error_ms": _pmm(j.error_ms), "send_delay_ms": _pmm(j.send_ms), "recv_delay_ms": _pmm(j.recv_ms),
            "client_ttft_ms": _pmm(j.client_ttft_ms), "server_ttft_ms": _pmm(j.server_ttft_ms),
            "percentiles": PERCENTILE_METHOD}
