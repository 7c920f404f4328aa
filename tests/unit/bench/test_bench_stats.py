import numpy as np
import pytest

from bench.stats import bootstrap_diff_ci, min_samples_for, pct_stat, percentile


def test_percentile_is_numpy_linear():
    vals = [1, 2, 3, 4, 10]
    assert percentile(vals, 50) == 3
    assert percentile(vals, 90) == pytest.approx(7.6)   # 4 + 0.6 * (10 - 4)
    assert percentile([], 50) is None


def test_min_samples_for_tail_percentiles():
    assert min_samples_for(99) == 1000
    assert min_samples_for(95) == 200
    assert min_samples_for(50) == 20
    with pytest.raises(ValueError, match="strictly between 0 and 100"):
        min_samples_for(100)


def test_bootstrap_finds_a_real_shift_and_not_a_fake_one():
    rng = np.random.default_rng(1)
    base = rng.lognormal(3, 0.3, 2000)
    same = rng.lognormal(3, 0.3, 2000)
    slower = base * 1.2
    p, lo, hi = bootstrap_diff_ci(base, slower, pct_stat(95), resamples=500, rng=np.random.default_rng(0))
    assert p == pytest.approx(0.2, rel=1e-6) and lo > 0.1
    p, lo, hi = bootstrap_diff_ci(base, same, pct_stat(50), resamples=500, rng=np.random.default_rng(0))
    assert lo < 0 < hi
