import numpy as np
import pytest
from pydantic import ValidationError

from bench.load import NS, LoadSpec, open_schedule, phase_of


def test_constant_schedule_and_window():
    spec = LoadSpec(arrival="constant", rate_rps=10, duration_s=2, warmup_s=1, cooldown_s=0.5)
    arr, start, end = open_schedule(spec)
    assert start == 1 * NS and end == 3 * NS
    assert len(arr) == 35                       # 3.5 s at 10/s
    assert sum(1 for t in arr if start <= t < end) == 20


def test_poisson_and_gamma_rates_and_burstiness():
    for arrival, k, cv in (("poisson", 1.0, 1.0), ("gamma", 0.25, 2.0), ("gamma", 4.0, 0.5)):
        arr, _, _ = open_schedule(LoadSpec(arrival=arrival, burstiness=k, rate_rps=100, duration_s=100, seed=3))
        gaps = np.diff(arr) / NS
        assert gaps.mean() == pytest.approx(0.01, rel=0.05)
        assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.1)


def test_count_stop_and_seed_reproducible():
    spec = LoadSpec(rate_rps=50, count=100, warmup_s=0.5, cooldown_s=0.2, seed=9)
    a, start, end = open_schedule(spec)
    assert sum(1 for t in a if start <= t < end) == 100
    assert open_schedule(spec)[0] == a


def test_ramp_rises_linearly():
    arr, _, _ = open_schedule(LoadSpec(arrival="constant", rate_rps=20, ramp_from_rps=2, ramp_s=10, duration_s=10))
    first, last = [t for t in arr if t < 5 * NS], [t for t in arr if t >= 5 * NS]
    assert len(first) < len(last)


def test_trace_replay(tmp_path):
    f = tmp_path / "trace.jsonl"
    f.write_text("".join(f'{{"offset_s": {x}}}\n' for x in (0.0, 0.5, 0.25, 2.0)))
    arr, start, end = open_schedule(LoadSpec(arrival="trace", trace_path=str(f), duration_s=1.0))
    assert arr == [0, NS // 4, NS // 2]


def test_phases():
    assert phase_of(1, 5, 10) == "warmup" and phase_of(5, 5, 10) == "measure" and phase_of(10, 5, 10) == "cooldown"


@pytest.mark.parametrize("kw, msg", [
    (dict(rate_rps=1), "exactly one of duration_s"),
    (dict(duration_s=1), "open loop needs rate_rps"),
    (dict(mode="closed", duration_s=1), "closed loop needs concurrency"),
    (dict(mode="closed", concurrency=2, rate_rps=1, duration_s=1), "rate_rps is for mode 'open'"),
    (dict(rate_rps=1, duration_s=1, ramp_from_rps=1), "ramp_from_rps needs ramp_s"),
])
def test_bad_load_specs_say_how_to_fix(kw, msg):
    with pytest.raises(ValidationError, match=msg):
        LoadSpec(**kw)
