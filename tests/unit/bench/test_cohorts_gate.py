"""The `cohorts` gate: pass, fail and "too few documents to judge" on two cohorts' windows."""

from __future__ import annotations

from bench.gating.cohorts import CohortSample, Criteria, judge, wilson
from bench.gating.context import GateContext
from bench.gating.models import CohortsGate
from bench.gating.spec import load_gate_file


def _cohort(topology: str, n: int, bad: int, latency_s: float) -> list[CohortSample]:
    return [CohortSample(topology=topology, ok=i >= bad, latency_s=latency_s + (i % 10) * 0.1)
            for i in range(n)]


def _gate(samples, crashes=None):
    gate = CohortsGate(kind="cohorts")
    return gate.evaluate(GateContext(summary={}, records=[], extra={"cohorts": samples, "crashes": crashes}))


def test_healthy_and_large_enough_passes() -> None:
    r = _gate(_cohort("split", 5000, 0, 10.0) + _cohort("monolithic", 5000, 0, 10.5), {"split": 0})
    assert (r.status, r.measured) == ("pass", "pass"), r.reason


def test_a_500_storm_fails_at_once_on_few_documents() -> None:
    r = _gate(_cohort("split", 40, 20, 10.0) + _cohort("monolithic", 360, 0, 10.0))
    assert (r.status, r.measured) == ("fail", "fail")
    assert "split error rate: fail (measured 20/40" in r.reason


def test_healthy_but_few_documents_is_too_few_to_judge() -> None:
    r = _gate(_cohort("split", 30, 0, 10.0) + _cohort("monolithic", 270, 0, 10.0))
    assert (r.status, r.measured) == ("not_evaluable", "too_few")
    assert r.reason.startswith("too few documents to judge")
    assert "needs >= 200 ok documents per cohort" in r.reason


def test_slower_split_fails_p95_and_a_crash_fails() -> None:
    v = judge(_cohort("split", 400, 0, 20.0) + _cohort("monolithic", 400, 0, 10.0), Criteria())
    assert [c.judgement for c in v.checks if c.name.startswith("p95")] == ["fail"]
    v = judge(_cohort("split", 5000, 0, 10.0) + _cohort("monolithic", 5000, 0, 10.0), Criteria(), {"split": 1})
    assert v.judgement == "fail" and v.checks[-1].name == "split worker crashes"


def test_no_samples_is_not_evaluable_and_wilson_bounds() -> None:
    r = CohortsGate(kind="cohorts").evaluate(GateContext(summary={}, records=[]))
    assert r.status == "not_evaluable" and "runbook migrate" in r.reason
    lo, hi = wilson(0, 1000)
    assert lo < 1e-12 and 0.003 < hi < 0.004  # 0 errors in 1,000: cannot yet say < 0.1 %
    assert load_gate_file("migration-cohorts").gates[0].kind == "cohorts"
