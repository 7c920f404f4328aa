"""Client vs server: do our TTFT and E2E agree with the server's own histograms?

The server's histograms count every request in the scrape window (all phases), so the client
side uses the same set: every successful request of the run. Means are compared because the
server's sum/count are exact, while its quantiles are bucket interpolations.

Tolerance: |client mean - server mean| <= ABS_MS + REL * server mean. The client measures
from before the request is written to when the byte is read, the server from when the engine
got the request to when the token was produced, so the client is expected to be slightly
higher by HTTP parsing, loopback transfer and event-loop scheduling on both sides.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bench.metrics import derive
from bench.records import AnyRecord, RequestRecord

ABS_MS = 3.0
REL = 0.05
PAIRS = (("ttft_ms", "vllm:time_to_first_token_seconds"), ("e2e_ms", "vllm:e2e_request_latency_seconds"))


def agreement(records: list[AnyRecord], server: dict[str, Any] | None,
              abs_ms: float = ABS_MS, rel: float = REL) -> list[dict[str, Any]]:
    if not server:
        return []
    chats = [derive(r) for r in records if isinstance(r, RequestRecord) and r.ok]
    out = []
    for metric, hist in PAIRS:
        h = server["histograms"].get(hist)
        vals = [getattr(d, metric) for d in chats if getattr(d, metric) is not None]
        if not h or not h.get("count") or not vals:
            continue
        client = float(np.mean(vals))
        srv = h["mean_s"] * 1000
        tol = abs_ms + rel * srv
        out.append({"metric": metric, "histogram": hist, "client_ms": client, "server_ms": srv,
                    "client_n": len(vals), "server_n": h["count"], "diff_ms": client - srv,
                    "tolerance_ms": tol, "agrees": abs(client - srv) <= tol})
    return out
