"""wait-for-gpu-memory with a fake NVML and an injected clock."""

from __future__ import annotations

import pytest

from runbooks.gpu.wait import WaitParams, wait_for_gpu_memory


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


def test_ready_once_the_old_process_lets_go(make_nvml, h100) -> None:
    h100.used_mib = 80000  # an old vLLM still holds the memory
    nvml = make_nvml([h100])
    t = FakeTime()

    def sleep(s: float) -> None:
        t.sleep(s)
        if t.now >= 10:
            h100.used_mib = 500  # ...and exits after 10 s

    report = wait_for_gpu_memory(WaitParams(min_free_mib=70000, timeout_s=60, interval_s=5),
                                 nvml=nvml, clock=t.clock, sleep=sleep)
    assert report.ok and report.outcome == "ready" and report.checks == 3
    assert report.waited_s == 10 and report.free_mib == {0: 81059}
    assert nvml.inits == nvml.shutdowns == 3


def test_timeout_names_the_short_gpu_and_the_fix(make_nvml, h100, geforce) -> None:
    t = FakeTime()
    report = wait_for_gpu_memory(WaitParams(min_free_mib=10000, timeout_s=12, interval_s=5),
                                 nvml=make_nvml([h100, geforce]), clock=t.clock, sleep=t.sleep)
    assert not report.ok and report.outcome == "timeout"
    assert report.message.startswith("after 12 s still below 10000 MiB free (GPU 1: 4564 MiB "
                                     "free)")
    assert "runbook gpu-probe" in report.message
    assert t.sleeps == [5, 5, 2]  # the last sleep is cut to the deadline


def test_one_gpu_only_and_bad_index(make_nvml, h100, geforce) -> None:
    t = FakeTime()
    ok = wait_for_gpu_memory(WaitParams(min_free_mib=10000, gpu_index=0, timeout_s=0),
                             nvml=make_nvml([h100, geforce]), clock=t.clock, sleep=t.sleep)
    assert ok.ok and list(ok.free_mib) == [0]
    bad = wait_for_gpu_memory(WaitParams(min_free_mib=1, gpu_index=7),
                              nvml=make_nvml([h100]), clock=t.clock, sleep=t.sleep)
    assert bad.outcome == "bad-gpu-index" and bad.message == ("GPU index 7 does not exist: "
                                                              "NVML sees [0]")


def test_no_gpu_is_immediate(make_nvml) -> None:
    t = FakeTime()
    report = wait_for_gpu_memory(WaitParams(min_free_mib=1), nvml=make_nvml([], init_error=12),
                                 clock=t.clock, sleep=t.sleep)
    assert report.outcome == "no-gpu" and report.checks == 1 and t.sleeps == []
    assert report.message.startswith("no GPU: the NVML library")


@pytest.mark.parametrize("kwargs, message", [
    ({"min_free_mib": 0}, "min_free_mib 0 must be > 0 MiB"),
    ({"min_free_mib": 1, "interval_s": 0}, "interval_s 0 > 0"),
])
def test_params_are_validated(kwargs, message) -> None:
    with pytest.raises(ValueError) as err:
        WaitParams(**kwargs)
    assert message in str(err.value)
