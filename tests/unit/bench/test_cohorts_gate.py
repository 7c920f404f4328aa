"""The `cohorts` gate: pass, fail and "too few documents to judge" on two cohorts' windows."""

from __future__ import annotations

from bench.gating.cohorts import CohortSample, Criteria, ShadowPair, judge, markdown_similarity, wilson
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


def test_markdown_similarity_ignores_whitespace_and_scores_changed_lines() -> None:
    page = "# Title\n\nFirst paragraph.\n\n| a | b |\n|---|---|\n" + "".join(f"line {i}\n" for i in range(38))
    assert markdown_similarity(page, page.replace("\n\n", "\n").replace("First ", "First  ") + "\n\n") == 1.0
    one_block = page.replace("line 7\n", "line seven\n")
    assert 0.95 <= markdown_similarity(page, one_block) < 1.0  # one of 41 lines differs
    assert markdown_similarity(page, "# Title\n") < 0.1  # a page missing
    assert markdown_similarity("", "") == 1.0


def _pairs(same: int, different: int, failed: int = 0) -> list[ShadowPair]:
    return ([ShadowPair(document_id=f"s{i}", topology="split", similarity=1.0) for i in range(same)]
            + [ShadowPair(document_id=f"d{i}", topology="monolithic", similarity=0.4) for i in range(different)]
            + [ShadowPair(document_id=f"f{i}", topology="split") for i in range(failed)])


def test_shadow_equivalence_passes_fails_or_is_too_few_on_its_interval() -> None:
    healthy = _cohort("split", 5000, 0, 10.0) + _cohort("monolithic", 5000, 0, 10.0)
    v = judge(healthy, Criteria(), shadow=_pairs(40, 0, failed=2))
    check = v.checks[-1]
    assert (v.judgement, check.name, check.judgement) == ("pass", "shadow output equivalence", "pass")
    assert check.measured.startswith("40/40 pairs equivalent") and "2 shadow copies failed" in check.measured
    assert judge(healthy, Criteria(), shadow=_pairs(10, 0)).checks[-1].judgement == "too_few"  # 10 pairs: too few
    assert judge(healthy, Criteria(), shadow=[]).judgement == "too_few"  # sampled, nothing finished yet
    v = judge(healthy, Criteria(), shadow=_pairs(10, 10))
    assert (v.judgement, v.checks[-1].judgement) == ("fail", "fail")
    assert "10/20 pairs equivalent" in v.checks[-1].measured and "lowest similarity 0.400" in v.checks[-1].measured
    assert all(c.name != "shadow output equivalence" for c in judge(healthy, Criteria()).checks)  # no sample


def test_pages_per_cohort_are_counted_for_ok_documents() -> None:
    samples = [CohortSample(topology="split", ok=True, latency_s=1.0, pages=3),
               CohortSample(topology="split", ok=False, pages=0),
               CohortSample(topology="monolithic", ok=True, latency_s=1.0, pages=5)]
    assert judge(samples, Criteria()).pages == {"split": 3, "monolithic": 5}
