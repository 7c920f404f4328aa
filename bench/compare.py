"""``bench compare BASELINE CANDIDATE``: is the candidate better, worse, the same, or not distinguishable?

Each statistic gets a 95 % interval of its relative change (candidate / baseline − 1):

- percentiles (p50, p95, p99): the order-statistic (binomial, distribution-free) interval of each
  run's percentile at a confidence of sqrt(0.95) each, so that both hold together with at least
  95 %; the change's interval runs from the lowest to the highest ratio those two allow. It needs
  no assumption about the latency distribution and works at small samples: p95 has an interval
  from 86 samples a run (two default `chat-smoke` runs: 100 each), p99 from 435; below that the
  row says how many it needs (no method can bound a p99 from 100 samples without inventing the
  tail).
- the mean and throughput (per-second completions): a percentile bootstrap, the runs resampled
  independently;
- the error rate: the same bootstrap, of the absolute difference of error fractions.

A change is called ``worse`` or ``better`` only when its interval excludes 0 AND the measured change
is at least the minimum effect (``MIN_EFFECT``, 5 % relative; 1 percentage point of error rate);
an interval inside ±the minimum effect, or a significant change smaller than it, is ``same``; the
rest is ``no significant difference`` (the runs cannot tell). Why 5 %: two runs of one build on one
server differ by a few percent in their medians and more in their tails (scheduling, batching,
cache state), so smaller changes are not worth a failed pipeline; a team that measured its own
run-to-run noise passes it as ``--min-effect``.

Throughput is compared only when both runs had the same load shape (an open loop's throughput is
the rate it offered). Whatever else differs (load, scenario, model, target) is listed. No number
here is NaN or infinite: a statistic that cannot be computed is a row with a note instead.
"""

from __future__ import annotations

import math

import numpy as np

from bench import metric_table
from bench.gating.models import latency_values
from bench.records import AnyRecord
from bench.stats import bootstrap_diff_ci, mean_stat, min_samples_for_ci, quantile_ci
from bench.summary import CompareRow, CompareRunInfo, Comparison, Summary

CHAT_METRICS = metric_table.names(m for m in metric_table.of("chat") if m.compared)
PIPELINE_METRICS = metric_table.names(m for m in metric_table.of("pipeline") if m.compared)
STATS = ("mean", "p50", "p95", "p99")
MIN_EFFECT = 0.05  # relative change below which a difference is "same"
MIN_EFFECT_ERROR_RATE = 0.01  # absolute difference of error fractions below which it is "same"
THROUGHPUT_WINDOWS_MIN = 10  # one-second windows a run needs for its throughput to be compared


def _per_second(records: list[AnyRecord], summary: Summary, tokens: bool) -> np.ndarray:
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


def differences(b_sum: Summary, c_sum: Summary) -> dict[str, list[str]]:
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


def invalid_runs(b_sum: Summary, c_sum: Summary) -> list[str]:
    """One line per invalid run (``baseline`` / ``candidate``) naming its failed validity checks;
    empty when both are valid. An invalid run's numbers describe the client or the failures, not
    the server: comparing them calls noise a regression."""
    out = []
    for role, s in (("baseline", b_sum), ("candidate", c_sum)):
        validity = s.get("validity")
        if validity is not None and validity.get("valid") is False:
            failed = [str(c.get("check")) for c in validity.get("checks") or [] if not c.get("passed")]
            out.append(f"the {role} run is INVALID ({', '.join(failed) or 'validity failed'})")
    return out


def call(lo: float, hi: float, point: float, min_effect: float, higher_is_better: bool) -> str:
    """``worse``/``better``: the interval excludes 0 and the change is at least ``min_effect``;
    ``same``: the interval lies within ±min_effect, or the significant change is below it."""
    significant = lo > 0 or hi < 0
    if significant and abs(point) >= min_effect:
        up = point > 0
        return "better" if up == higher_is_better else "worse"
    if significant or (-min_effect <= lo and hi <= min_effect):
        return "same"
    return "no significant difference"


def _finite(*values: float | None) -> bool:
    return all(v is not None and math.isfinite(v) for v in values)


def _quantile_row(row: CompareRow, b: np.ndarray, c: np.ndarray, q: float, confidence: float,
                  min_effect: float) -> None:
    each = math.sqrt(confidence)  # both runs' intervals hold together with `confidence`
    need = min_samples_for_ci(q, each)
    row["min_samples"] = need
    b_ci, c_ci = quantile_ci(b, q, each), quantile_ci(c, q, each)
    if b_ci is None or c_ci is None:
        row.update({"call": "insufficient samples",
                   "note": f"p{q:g} needs >= {need} samples a run"})
        return
    bq = float(np.percentile(b, q, method="linear"))
    cq = float(np.percentile(c, q, method="linear"))
    row.update({"baseline": bq, "candidate": cq})
    if b_ci[0] <= 0 or bq <= 0:
        row.update({"call": "not compared", "note": "the baseline's value is 0: no relative change"})
        return
    point, lo, hi = cq / bq - 1, c_ci[0] / b_ci[1] - 1, c_ci[1] / b_ci[0] - 1
    row.update({"change": point, "ci_low": lo, "ci_high": hi,
                "call": call(lo, hi, point, min_effect, higher_is_better=False)})


def _bootstrap_row(row: CompareRow, b: np.ndarray, c: np.ndarray, *, resamples: int, confidence: float,
                   rng: np.random.Generator, min_effect: float, higher_is_better: bool, relative: bool = True) -> None:
    bm, cm = float(b.mean()), float(c.mean())
    row.update({"baseline": bm, "candidate": cm})
    if relative and bm <= 0:
        row.update({"call": "not compared", "note": "the baseline's value is 0: no relative change"})
        return
    point, lo, hi = bootstrap_diff_ci(b, c, mean_stat, resamples=resamples, confidence=confidence, rng=rng,
                                      relative=relative)
    if not _finite(point, lo, hi):
        row.update({"call": "insufficient samples", "note": "too many resamples of the baseline averaged 0"})
        return
    row.update({"change": point, "ci_low": lo, "ci_high": hi,
                "call": call(lo, hi, point, min_effect, higher_is_better)})


def compare(base: tuple[list[AnyRecord], Summary], cand: tuple[list[AnyRecord], Summary],
            *, resamples: int = 2000, confidence: float = 0.95, seed: int = 0,
            min_effect: float = MIN_EFFECT) -> Comparison:
    (b_rec, b_sum), (c_rec, c_sum) = base, cand
    if b_sum.get("kind") != c_sum.get("kind"):
        raise ValueError(f"cannot compare a {b_sum.get('kind')} run with a {c_sum.get('kind')} run")
    if not 0 <= min_effect < 1:
        raise ValueError(f"min_effect {min_effect}: a relative change between 0 and 1 (0.05 is 5 %)")
    rng = np.random.default_rng(seed)
    diffs = differences(b_sum, c_sum)
    rows: list[CompareRow] = []
    metrics = CHAT_METRICS if b_sum.get("kind") == "chat" else PIPELINE_METRICS
    for metric in metrics:
        b = np.asarray(latency_values(metric, b_rec), dtype=float)
        c = np.asarray(latency_values(metric, c_rec), dtype=float)
        for stat in STATS:
            row: CompareRow = {"metric": metric, "stat": stat,
                                   "n_baseline": int(b.size), "n_candidate": int(c.size)}
            if stat == "mean":
                row["min_samples"] = 2
                if min(b.size, c.size) < 2:
                    row.update({"call": "insufficient samples", "note": "the mean needs >= 2 samples in each run"})
                else:
                    _bootstrap_row(row, b, c, resamples=resamples, confidence=confidence, rng=rng,
                                   min_effect=min_effect, higher_is_better=False)
            else:
                _quantile_row(row, b, c, float(stat[1:]), confidence, min_effect)
            rows.append(row)
    for name, tokens in (("completed_per_s", False), ("output_tokens_per_s", True)):
        if tokens and b_sum.get("kind") != "chat":
            continue
        b = _per_second(b_rec, b_sum, tokens)
        c = _per_second(c_rec, c_sum, tokens)
        row = {"metric": name, "stat": "mean", "n_baseline": int(b.size), "n_candidate": int(c.size),
               "min_samples": THROUGHPUT_WINDOWS_MIN}
        if min(b.size, c.size) < THROUGHPUT_WINDOWS_MIN:
            row.update({"call": "insufficient samples",
                       "note": f"needs >= {THROUGHPUT_WINDOWS_MIN} one-second windows a run"})
        elif diffs["load"]:
            row.update({"baseline": float(b.mean()), "candidate": float(c.mean()), "call": "not compared",
                       "note": "the load shapes differ: throughput follows the load offered"})
        else:
            _bootstrap_row(row, b, c, resamples=resamples, confidence=confidence, rng=rng, min_effect=min_effect,
                           higher_is_better=True)
        rows.append(row)
    b_err = np.array([0.0 if r.ok else 1.0 for r in b_rec if r.phase == "measure"])
    c_err = np.array([0.0 if r.ok else 1.0 for r in c_rec if r.phase == "measure"])
    err_row: CompareRow = {"metric": "error_rate", "stat": "mean", "n_baseline": int(b_err.size),
                               "n_candidate": int(c_err.size), "min_samples": 1,
                               "note": "absolute difference of error fractions"}
    if b_err.size and c_err.size:
        _bootstrap_row(err_row, b_err, c_err, resamples=resamples, confidence=confidence, rng=rng,
                       min_effect=MIN_EFFECT_ERROR_RATE, higher_is_better=False, relative=False)
    else:
        err_row.update({"call": "insufficient samples", "note": "a run has no measured requests"})
    rows.append(err_row)
    valid = {"baseline": _valid(b_sum), "candidate": _valid(c_sum)}
    # Runs of different topologies (monolithic baseline, split candidate) are compared like any
    # two runs of one kind; the result says so (older summaries carry no topology: None).
    topology = {"baseline": (b_sum.get("run") or {}).get("topology"),
                "candidate": (c_sum.get("run") or {}).get("topology")}
    each = math.sqrt(confidence)
    return {"rows": rows, "confidence": confidence, "resamples": resamples, "validity": valid, "topology": topology,
            "topologies_differ": None not in topology.values() and topology["baseline"] != topology["candidate"],
            "differences": diffs, "min_effect": min_effect, "min_effect_error_rate": MIN_EFFECT_ERROR_RATE,
            "min_samples": {stat: 2 if stat == "mean" else min_samples_for_ci(float(stat[1:]), each)
                            for stat in STATS},
            "runs": {"baseline": _run_info(b_sum), "candidate": _run_info(c_sum)},
            "method": "percentiles: order-statistic (binomial) intervals of each run at sqrt(confidence), "
                      "combined into the ratio's range; mean, throughput and error rate: percentile bootstrap, "
                      "runs resampled independently"}


def _valid(s: Summary) -> bool | None:
    """The run's validity verdict; None for a summary without one."""
    validity = s.get("validity")
    return validity.get("valid") if validity is not None else None


def _run_info(s: Summary) -> CompareRunInfo:
    """What the side-by-side view shows of each run."""
    run = s.get("run") or {}
    return {"scenario": run.get("scenario"), "target": run.get("target"), "model": run.get("model"),
            "load": run.get("load_label"), "topology": run.get("topology"),
            "window_s": s.get("window_s"), "valid": _valid(s),
            "requests": s.get("requests") or {}, "throughput": s.get("throughput") or {},
            "latency": s.get("latency") or {}}


def regressions(result: Comparison) -> list[CompareRow]:
    """The rows that make ``bench compare`` exit 1: significant and at least the minimum effect, worse."""
    return [r for r in result["rows"] if r.get("call") == "worse"]
