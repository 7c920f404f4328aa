"""Constructed runs: records with chosen latencies, summarised by the real metric code."""

from __future__ import annotations

import numpy as np
import pytest

from bench.engine import ProcessStats, RunResult
from bench.load import LoadSpec
from bench.metrics import chat_summary
from bench.records import RequestRecord
from bench.scenario import RequestSLO
from bench.validity import ValidityLimits, check

MS = 1_000_000


def make_run(n: int = 300, e2e_ms: float = 100.0, spread: float = 0.1, errors: int = 0, seed: int = 0,
             lag_ms: float = 0.1, cpu_util: float = 0.1, window_s: float = 100.0, keep_output: bool = False):
    rng = np.random.default_rng(seed)
    recs = []
    for i in range(n):
        sent = int(i * window_s / n * 1e9)
        e2e = e2e_ms * float(rng.lognormal(0, spread))
        ttft = e2e / 4
        ev = [sent + int(ttft * MS) + int((e2e - ttft) * MS * k / 9) for k in range(10)]
        err = i < errors
        recs.append(RequestRecord(
            request_id=f"p0-{i}", phase="measure", intended_ns=sent - int(lag_ms * MS), sent_ns=sent,
            wall_sent_s=1e9 + sent / 1e9, headers_ns=sent + MS, event_ns=[] if err else ev,
            event_tokens=[] if err else [1] * 10, event_content=[] if err else [True] * 10,
            end_ns=sent + int(e2e * MS), status=500 if err else 200, error="http_500" if err else None,
            output_tokens=None if err else 10, prompt_tokens=32,
            output_text=None if not keep_output else f"answer {i % 7}"))
    load = LoadSpec(arrival="constant", rate_rps=n / window_s, duration_s=window_s)
    s = chat_summary(recs, 0, int(window_s * 1e9), RequestSLO(ttft_ms=e2e_ms))
    result = RunResult(recs, load, 0, int(window_s * 1e9), 0.0, window_s,
                       [ProcessStats(0, cpu_util * window_s, window_s, n, 0)], n)
    s["validity"] = check(result, s, ValidityLimits())
    s["run"] = {"scenario": "constructed", "load_label": load.target_label, "measure_start_ns": 0,
                "measure_end_ns": int(window_s * 1e9), "started_at_unix_s": 1e9, "wall_s": window_s,
                "target": "http://x", "model": "m", "stack": None,
                "client": {"processes": [], "cpu_s": 0, "cpu_s_per_1k_requests": 0}}
    s["server"] = None
    return recs, s


@pytest.fixture
def run_factory():
    return make_run
