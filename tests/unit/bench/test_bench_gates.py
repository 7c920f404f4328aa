"""Gates give go / no-go / not evaluable on constructed runs, and the verdict's exit codes."""

import pytest
from pydantic import ValidationError

from bench.gating.context import GateContext
from bench.gating.models import (
    ErrorRateGate,
    GoodputGate,
    LatencyGate,
    LatencyVsBaselineGate,
    MemoryGrowthGate,
    OutputEquivalenceGate,
    SLOGate,
    ThroughputGate,
)
from bench.gating.spec import GateFile, load_gate_file
from bench.gating.verdict import evaluate, verdict


def ctx(run, baseline=None):
    recs, s = run
    return GateContext(s, recs, None, None, baseline[1] if baseline else None, baseline[0] if baseline else None)


def test_latency_gate_pass_fail_and_too_few_samples(run_factory):
    fast = run_factory(n=300, e2e_ms=100)
    g = LatencyGate(kind="latency", metric="e2e_ms", percentile=95, max=200)
    r = g.evaluate(ctx(fast))
    assert r.status == "pass" and r.measured < 200 and "p95 of 300 samples" in r.reason
    slow = run_factory(n=300, e2e_ms=400)
    assert g.evaluate(ctx(slow)).status == "fail"
    few = run_factory(n=50)
    r = g.evaluate(ctx(few))
    assert r.status == "not_evaluable" and "50 samples < 200 needed for a p95" in r.reason


def test_error_rate_gate_and_rule_of_three(run_factory):
    g = ErrorRateGate(kind="error_rate", max_fraction=0.02)
    assert g.evaluate(ctx(run_factory(n=300, errors=3))).status == "pass"
    r = g.evaluate(ctx(run_factory(n=300, errors=9)))
    assert r.status == "fail" and "9 of 300 failed (http_500: 9)" in r.reason
    r = g.evaluate(ctx(run_factory(n=100)))
    assert r.status == "not_evaluable" and "rule of three" in r.reason and "need >= 150" in r.reason


def test_throughput_vs_baseline(run_factory):
    base = run_factory(n=200)
    faster = run_factory(n=260)
    g = ThroughputGate(kind="throughput", metric="completed_rps", min_ratio_vs_baseline=1.2)
    r = g.evaluate(ctx(faster, base))
    assert r.status == "pass" and r.measured == pytest.approx(1.3, rel=0.02)
    assert g.evaluate(ctx(run_factory(n=220), base)).status == "fail"
    r = g.evaluate(ctx(faster))
    assert r.status == "not_evaluable" and "--baseline" in r.reason


def test_p95_within_10_percent_of_baseline(run_factory):
    base = run_factory(n=400, e2e_ms=100, seed=1)
    g = LatencyVsBaselineGate(kind="latency_vs_baseline", metric="e2e_ms", percentile=95, max_increase_fraction=0.10)
    assert g.evaluate(ctx(run_factory(n=400, e2e_ms=103, seed=2), base)).status == "pass"
    r = g.evaluate(ctx(run_factory(n=400, e2e_ms=125, seed=2), base))
    assert r.status == "fail" and "bootstrap CI" in r.reason


def test_goodput_memory_equivalence_not_evaluable_reasons(run_factory):
    run = run_factory(n=100)
    assert GoodputGate(kind="goodput", min_fraction=0.4).evaluate(ctx(run)).status == "pass"
    r = MemoryGrowthGate(kind="memory_growth").evaluate(ctx(run))
    assert r.status == "not_evaluable" and "process_resident_memory_bytes" in r.reason
    r = OutputEquivalenceGate(kind="output_equivalence").evaluate(ctx(run, run))
    assert r.status == "not_evaluable" and "keep_output" in r.reason
    a, b = run_factory(n=20, keep_output=True), run_factory(n=20, keep_output=True)
    assert OutputEquivalenceGate(kind="output_equivalence").evaluate(ctx(a, b)).status == "pass"


def test_slo_gate_uses_the_slo_spec(run_factory):
    r = SLOGate(kind="slo", slo="ttft-p95").evaluate(ctx(run_factory(n=100, e2e_ms=100)))
    assert r.status == "pass" and "Time to first token p95 <= 5 s" in r.threshold
    r = SLOGate(kind="slo", slo="ttft-p95").evaluate(ctx(run_factory(n=100, e2e_ms=40_000)))
    assert r.status == "fail"
    r = SLOGate(kind="slo", slo="pdf-latency-p95").evaluate(ctx(run_factory(n=100)))
    assert r.status == "not_evaluable"
    r = SLOGate(kind="slo", slo="no-such").evaluate(ctx(run_factory(n=10)))
    assert r.status == "not_evaluable" and "no SLO named 'no-such'" in r.reason


def test_verdict_exit_codes(run_factory):
    good = run_factory(n=300)
    gates = [LatencyGate(kind="latency", metric="e2e_ms", percentile=95, max=200),
             ErrorRateGate(kind="error_rate", max_fraction=0.02)]
    v = verdict(evaluate(gates, ctx(good)), True)
    assert (v["verdict"], v["exit_code"]) == ("go", 0)
    v = verdict(evaluate(gates, ctx(run_factory(n=300, e2e_ms=500))), True)
    assert (v["verdict"], v["exit_code"]) == ("no-go", 1) and "latency" in v["reason"]
    v = verdict(evaluate(gates, ctx(good)), False, ["schedule lag p99: late"])
    assert (v["verdict"], v["exit_code"]) == ("invalid", 2) and "schedule lag" in v["reason"]
    # a required gate that cannot be evaluated never passes silently
    v = verdict(evaluate(gates + [MemoryGrowthGate(kind="memory_growth")], ctx(good)), True)
    assert (v["verdict"], v["exit_code"]) == ("invalid", 2) and "memory_growth" in v["reason"]
    # ... an optional one is listed but does not block
    v = verdict(evaluate(gates + [MemoryGrowthGate(kind="memory_growth", required=False)], ctx(good)), True)
    assert v["verdict"] == "go" and "1 optional not evaluated: memory_growth" in v["reason"]


def test_bundled_gate_files_parse_and_unknown_kind_is_named():
    for name in ("demo", "chat-local", "phase1-server", "phase2-workers", "phase5-rollout", "rollback"):
        assert load_gate_file(name).gates
    with pytest.raises(ValidationError, match="kind"):
        GateFile.model_validate({"name": "x", "scenario": "chat-smoke", "gates": [{"kind": "vibes"}]})
