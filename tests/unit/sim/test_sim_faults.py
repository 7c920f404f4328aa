from __future__ import annotations

import pytest

from simulator.faults import Action, FaultError, FaultInjector, FaultSpec, parse_fault_args


def test_parse_fault_args():
    spec = parse_fault_args(["error_rate=0.25", "error_status=500", "crash_after_requests=none"])
    assert spec.error_rate == 0.25 and spec.error_status == 500 and spec.crash_after_requests is None


@pytest.mark.parametrize("item, needle", [
    ("error_rate", "expected KEY=VALUE"),
    ("oops=1", "unknown key 'oops', valid keys: added_latency_ms"),
    ("error_rate=1.5", "error_rate: Input should be less than or equal to 1"),
    ("error_status=404", "error_status: Input should be 500 or 503"),
])
def test_bad_fault_args_name_the_problem(item, needle):
    with pytest.raises(FaultError) as err:
        parse_fault_args([item])
    assert needle in str(err.value)


def test_decisions_are_deterministic_per_seed_and_follow_rates():
    spec = FaultSpec(error_rate=0.2, reset_rate=0.1, hang_rate=0.05)
    a = [FaultInjector(spec, 3).decide() for _ in range(1)]
    inj1, inj2 = FaultInjector(spec, 3), FaultInjector(spec, 3)
    seq1 = [inj1.decide() for _ in range(2000)]
    assert seq1 == [inj2.decide() for _ in range(2000)] and a[0] == seq1[0]
    share = {k: seq1.count(k) / 2000 for k in Action}
    assert share[Action.ERROR] == pytest.approx(0.2, abs=0.03)
    assert share[Action.RESET] == pytest.approx(0.1, abs=0.03)
    assert share[Action.HANG] == pytest.approx(0.05, abs=0.02)


def test_no_faults_pass_everything_and_crash_counts_requests():
    inj = FaultInjector(FaultSpec(crash_after_requests=3), 0)
    assert [inj.decide() for _ in range(2)] == [Action.PASS, Action.PASS] and not inj.should_crash()
    inj.decide()
    assert inj.should_crash()


def test_runtime_update_validates():
    inj = FaultInjector(FaultSpec(), 0)
    assert inj.update({"added_latency_ms": 50}).added_latency_ms == 50
    with pytest.raises(FaultError, match="kv_capacity_factor"):
        inj.update({"kv_capacity_factor": 0})
