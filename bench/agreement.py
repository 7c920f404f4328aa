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

import numpy as np

from bench.metric_table import derive
from bench.records import AnyRecord, RequestRecord
from bench.summary import Agreement, CountAgreement, ServerDiff

ABS_MS = 3.0
REL = 0.05
PAIRS = (("ttft_ms", "vllm:time_to_first_token_seconds"), ("e2e_ms", "vllm:e2e_request_latency_seconds"))


def agreement(records: list[AnyRecord], server: ServerDiff | None,
              abs_ms: float = ABS_MS, rel: float = REL) -> list[Agreement]:
    if not server:
        return []
    chats = [derive(r) for r in records if isinstance(r, RequestRecord) and r.ok]
    out: list[Agreement] = []
    for metric, hist in PAIRS:
        h = server["histograms"].get(hist)
        vals = [getattr(d, metric) for d in chats if getattr(d, metric) is not None]
        mean_s = h.get("mean_s") if h else None  # None: no request in the window
        if not h or not h.get("count") or mean_s is None or not vals:
            continue
        client = float(np.mean(vals))
        srv = mean_s * 1000
        tol = abs_ms + rel * srv
        out.append({"metric": metric, "histogram": hist, "client_ms": client, "server_ms": srv,
                    "client_n": len(vals), "server_n": h["count"], "diff_ms": client - srv,
                    "tolerance_ms": tol, "agrees": abs(client - srv) <= tol})
    return out


# What the client counted beside the server's own counter of the same thing over the run.
COUNT_PAIRS = (("requests", "vllm:request_success_total"), ("prompt_tokens", "vllm:prompt_tokens_total"),
               ("output_tokens", "vllm:generation_tokens_total"))


def count_agreement(records: list[AnyRecord], server: ServerDiff | None) -> list[CountAgreement]:
    """Client vs server counts over the run (every phase: the server's counters see them all):
    successful requests, prompt tokens (the server's usage where it sent one, else the client's
    count) and output tokens. Exact equality is expected from a server this run alone loads; a
    difference is flagged with both numbers, never hidden (another client on the server, a
    chat template the client did not count, a server that counts tokens another way)."""
    if not server or not server.get("counters"):
        return []
    ok = [r for r in records if isinstance(r, RequestRecord) and r.ok]
    client = {"requests": len(ok),
              "prompt_tokens": sum((r.server_prompt_tokens if r.server_prompt_tokens is not None else r.prompt_tokens)
                                   or 0 for r in ok),
              "output_tokens": sum(r.output_tokens or 0 for r in ok)}
    client_prompt = sum(r.prompt_tokens or 0 for r in ok)
    out: list[CountAgreement] = []
    for name, counter in COUNT_PAIRS:
        srv = server["counters"].get(counter)
        if srv is None:
            continue
        row: CountAgreement = {"count": name, "client": client[name], "server": int(round(srv)), "counter": counter,
               "agrees": int(round(srv)) == client[name]}
        if name == "prompt_tokens" and client_prompt and client_prompt != client[name]:
            row["client_counted"] = client_prompt  # what the client's own count (/tokenize, tokenizer) said
        out.append(row)
    return out
