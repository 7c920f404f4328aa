"""``bench compare BASELINE CANDIDATE``: is the candidate better, worse, or not distinguishable?

Each statistic's relative change gets a percentile-bootstrap CI (runs resampled independently,
requests as the unit). A change is called only when the CI excludes 0; a tail percentile is
compared only when both runs have enough samples beyond it (stats.min_samples_for: p99 needs
1,000). Throughput is compared on per-second completion counts of the measured window, and only
when both runs had the same load shape (an open loop's throughput is the rate it offered).
Whatever else differs (load, scenario, model, target) is listed for the reader.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bench.gating.models import _latency_values
from bench.records import AnyRecord
from bench.stats import bootstrap_diff_ci, mean_stat, min_samples_for, pct_stat

CHAT_METRICS = ("ttft_ms", "ttfc_ms", "e2e_ms", "tpot_ms")
PIPELINE_METRICS = ("doc_latency_s",)
STATS = ("mean", "p50", "p95", "p99")


def _per_second(records: list[AnyRecord], summary: dict[str, Any], tokens: bool) -> np.ndarray:
    start = summary["run"]["measure_start_ns"]
    end = summary["run"]["measure_end_ns"]
    bins = max(1, int((end - start) // 1_000_000_000))
    counts = np.zeros(bins)
    for r in records:
        if not r.ok:
            continue
        if tokens:
            for t, k in zip(getattr(r, "event_ns", []), getattr(r, "event_tokens", [])):
                i = (t - start) // 1_000_000_000
                if 0 <= i < bins:
                    counts[i] += k
        elif r.end_ns is not None:
            i = (r.end_ns - start) // 1_000_000_000
            if 0 <= i < bins:
                counts[i] += 1
    return counts


LOAD_KEYS = ("mode", "arrival", "rate_rps", "ramp_from_rps", "ramp_s", "burstiness", "concurrency", "trace_path",
             "max_in_flight", "processes")


def differences(b_sum: dict[str, Any], c_sum: dict[str, Any]) -> dict[str, list[str]]:
    """What differs between the two runs besides the thing under test: ``load`` (the load shape:
    a throughput comparison then measures the offered load, not the system), ``setup`` (scenario,
    model: the requests differ) and ``target`` (usually the point of an A/B; said, not judged)."""
    b_run, c_run = b_sum.get("run") or {}, c_sum.get("run") or {}
    b_load, c_load = b_run.get("load") or {}, c_run.get("load") or {}
    out: dict[str, list[str]] = {"load": [], "setup": [], "target": []}
    for key in LOAD_KEYS:
        if b_load.get(key) != c_load.get(key):
            out["load"].append(f"load.{key}: {b_load.get(key)!r} vs {c_load.get(key)!r}")
    for key in ("scenario", "model"):
        if b_run.get(key) != c_run.get(key):
            out["setup"].append(f"{key}: {b_run.get(key)!r} vs {c_run.get(key)!r}")
    for key in ("target", "stack", "deployment"):
        if b_run.get(key) != c_run.get(key):
            out["target"].append(f"{key}: {b_run.get(key)!r} vs {c_run.get(key)!r}")
    return out


def _call(lo: float, hi: float, higher_is_better: bool) -> str:
    if lo > 0:
        return "better" if higher_is_better else "worse"
    if hi < 0:
        return "worse" if higher_is_better else "better"
    return "no significant difference"


def compare(base: tuple[list[AnyRecord], dict[str, Any]], cand: tuple[list[AnyRecord], dict[str, Any]],
            *, resamples: int = 2000, confidence: float = 0.95, seed: int = 0) -> dict[str, Any]:
    (b_rec, b_sum), (c_rec, c_sum) = base, cand
    if b_sum.get("kind") != c_sum.get("kind"):
        raise ValueError(f"cannot compare a {b_sum.get('kind')} run with a {c_sum.get('kind')} run")
    rng = np.random.default_rng(seed)
    diffs = differences(b_sum, c_sum)
    rows: list[dict[str, Any]] = []
    metrics = CHAT_METRICS if b_sum.get("kind") == "chat" else PIPELINE_METRICS
    for metric in metrics:
        b = np.asarray(_latency_values(None, metric, b_rec))
        c = np.asarray(_latency_values(None, metric, c_rec))
        for stat in STATS:
            row: dict[str, Any] = {"metric": metric, "stat": stat,
                                   "n_baseline": int(b.size), "n_candidate": int(c.size)}
            need = 2 if stat == "mean" else min_samples_for(float(stat[1:]))
            row["min_samples"] = need
            if min(b.size, c.size) < need:
                row.update(call="insufficient samples",
                           note=f"{stat} needs >= {need} samples in each run (10 beyond the percentile)")
                rows.append(row)
                continue
            fn = mean_stat if stat == "mean" else pct_stat(float(stat[1:]))
            point, lo, hi = bootstrap_diff_ci(b, c, fn, resamples=resamples, confidence=confidence, rng=rng)
            row.update(baseline=float(fn(b[None, :])[0]), candidate=float(fn(c[None, :])[0]),
                       change=point, ci_low=lo, ci_high=hi, call=_call(lo, hi, higher_is_better=False))
            rows.append(row)
    for name, tokens in (("completed_per_s", False), ("output_tokens_per_s", True)):
        if tokens and b_sum.get("kind") != "chat":
            continue
        b = _per_second(b_rec, b_sum, tokens)
        c = _per_second(c_rec, c_sum, tokens)
        row = {"metric": name, "stat": "mean", "n_baseline": int(b.size), "n_candidate": int(c.size), "min_samples": 10}
        if min(b.size, c.size) < 10 or b.mean() == 0:
            row.update(call="insufficient samples", note="throughput needs >= 10 one-second windows in each run")
        elif diffs["load"]:
            row.update(baseline=float(b.mean()), candidate=float(c.mean()), call="not compared",
                       note="the load shapes differ: throughput follows the load offered")
        else:
            point, lo, hi = bootstrap_diff_ci(b, c, mean_stat, resamples=resamples, confidence=confidence, rng=rng)
            row.update(baseline=float(b.mean()), candidate=float(c.mean()), change=point, ci_low=lo, ci_high=hi,
                       call=_call(lo, hi, higher_is_better=True))
        rows.append(row)
    b_err = np.array([0.0 if r.ok else 1.0 for r in b_rec if r.phase == "measure"])
    c_err = np.array([0.0 if r.ok else 1.0 for r in c_rec if r.phase == "measure"])
    err_row: dict[str, Any] = {"metric": "error_rate", "stat": "mean", "n_baseline": int(b_err.size),
                               "n_candidate": int(c_err.size), "baseline": float(b_err.mean()) if b_err.size else None,
                               "candidate": float(c_err.mean()) if c_err.size else None}
    if b_err.size and c_err.size:
        point, lo, hi = bootstrap_diff_ci(b_err, c_err, mean_stat, resamples=resamples, confidence=confidence,
                                          rng=rng, relative=False)
        err_row.update(change=point, ci_low=lo, ci_high=hi, call=_call(lo, hi, higher_is_better=False),
                       note="absolute difference of error fractions")
    rows.append(err_row)
    valid = {"baseline": b_sum.get("validity", {}).get("valid"), "candidate": c_sum.get("validity", {}).get("valid")}
    # Runs of different topologies (monolithic baseline, split candidate) are compared like any
    # two runs of one kind; the result says so (older summaries carry no topology: None).
    topology = {"baseline": b_sum.get("run", {}).get("topology"), "candidate": c_sum.get("run", {}).get("topology")}
    return {"rows": rows, "confidence": confidence, "resamples": resamples, "validity": valid, "topology": topology,
            "topologies_differ": None not in topology.values() and topology["baseline"] != topology["candidate"],
            "differences": diffs,
            "min_samples": {stat: 2 if stat == "mean" else min_samples_for(float(stat[1:])) for stat in STATS},
            "method": "percentile bootstrap of the relative change, runs resampled independently"}
