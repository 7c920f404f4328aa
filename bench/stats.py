"""Statistics used by metrics, compare and search: exact percentiles and bootstrap CIs.

Percentiles are exact over all samples (no sketches, no histograms) with the linear
interpolation between closest ranks of Hyndman & Fan (1996) definition 7 -- numpy's default
``method="linear"`` and what vLLM's ``bench serve`` uses -- so results are comparable.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

PERCENTILE_METHOD = "linear (Hyndman-Fan type 7, numpy default)"
TAIL_SAMPLES_MIN = 10  # samples beyond a quantile before its estimate is reported as reliable


def percentile(values: Sequence[float] | np.ndarray, q: float) -> float | None:
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        return None
    return float(np.percentile(arr, q, method="linear"))


def min_samples_for(q: float, tail_samples: int = TAIL_SAMPLES_MIN) -> int:
    """Samples needed so that ``tail_samples`` lie beyond the q-th percentile.

    p99 needs 1,000 samples, p95 200, p50 20. Below that a tail percentile is set by a handful
    of requests and a comparison of two runs says more about luck than about the server.
    """
    if not 0 < q < 100:
        raise ValueError(f"percentile {q} must be strictly between 0 and 100")
    return math.ceil(tail_samples / (1 - q / 100.0))


def bootstrap_ci(
    values: Sequence[float] | np.ndarray,
    stat: Callable[[np.ndarray], np.ndarray],
    *,
    resamples: int = 2000,
    confidence: float = 0.95,
    rng: np.random.Generator,
) -> tuple[float, float]:
    """Percentile bootstrap CI of ``stat`` (vectorised: takes a (resamples, n) array, axis=1)."""
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        raise ValueError("bootstrap of an empty sample")
    idx = rng.integers(0, arr.size, size=(resamples, arr.size))
    est = stat(arr[idx])
    alpha = (1 - confidence) / 2
    return float(np.quantile(est, alpha)), float(np.quantile(est, 1 - alpha))


def bootstrap_diff_ci(
    base: np.ndarray,
    cand: np.ndarray,
    stat: Callable[[np.ndarray], np.ndarray],
    *,
    resamples: int = 2000,
    confidence: float = 0.95,
    rng: np.random.Generator,
    relative: bool = True,
) -> tuple[float, float, float]:
    """Point estimate and CI of stat(cand) - stat(base) (relative to stat(base) if asked).

    Independent resampling of both runs (they are independent samples); returns
    (estimate, low, high). Chunked so memory stays bounded for 100k-sample runs. Resamples whose
    baseline statistic is 0 have no ratio and are dropped; when that leaves too few, or the
    baseline itself is 0, the missing values are NaN (callers report "cannot compare", never NaN).
    """
    b_point = float(stat(base[None, :])[0])
    c_point = float(stat(cand[None, :])[0])
    diffs = []
    chunk = max(1, min(resamples, 20_000_000 // max(base.size, cand.size, 1)))
    done = 0
    while done < resamples:
        k = min(chunk, resamples - done)
        bs = stat(base[rng.integers(0, base.size, size=(k, base.size))])
        cs = stat(cand[rng.integers(0, cand.size, size=(k, cand.size))])
        with np.errstate(divide="ignore", invalid="ignore"):  # a resample of zeros: dropped below
            diffs.append((cs - bs) / bs if relative else cs - bs)
        done += k
    d = np.concatenate(diffs)
    d = d[np.isfinite(d)]
    if relative:
        point = (c_point - b_point) / b_point if b_point else math.nan
    else:
        point = c_point - b_point
    alpha = (1 - confidence) / 2
    if d.size < (1 - alpha) * resamples:  # too many resamples without a ratio: no interval
        return point, math.nan, math.nan
    return point, float(np.quantile(d, alpha)), float(np.quantile(d, 1 - alpha))


def pct_stat(q: float) -> Callable[[np.ndarray], np.ndarray]:
    return lambda a: np.percentile(a, q, axis=1, method="linear")


def mean_stat(a: np.ndarray) -> np.ndarray:
    return a.mean(axis=1)


def _binom_cdf(n: int, p: float) -> np.ndarray:
    """P(B <= k) for k = 0..n, B ~ Binomial(n, p), summed in log space (exact enough at n = 10^6)."""
    k = np.arange(n, dtype=float)
    steps = np.log((n - k) / (k + 1)) + math.log(p) - math.log1p(-p)
    logpmf = np.concatenate([[n * math.log1p(-p)], n * math.log1p(-p) + np.cumsum(steps)])
    return np.minimum(1.0, np.exp(np.logaddexp.accumulate(logpmf)))


def quantile_ci_ranks(n: int, q: float, confidence: float) -> tuple[int, int] | None:
    """0-based ranks (lo, hi) into the sorted sample whose values bound the q-th percentile with at
    least ``confidence``, from the order statistics alone (the binomial / distribution-free
    interval: the number of samples below the true quantile is Binomial(n, q/100)); None when n is
    too small for both bounds to exist (see :func:`min_samples_for_ci`)."""
    if not 0 < q < 100:
        raise ValueError(f"percentile {q} must be strictly between 0 and 100")
    if n < 1:
        return None
    tail = (1 - confidence) / 2
    cdf = _binom_cdf(n, q / 100.0)
    lo = int(np.searchsorted(cdf, tail, side="right")) - 1  # largest j with P(B <= j) <= tail
    hi = int(np.searchsorted(cdf, 1 - tail, side="left"))  # smallest j with P(B <= j) >= 1 - tail
    if lo < 0 or hi > n - 1:
        return None
    return lo, hi


def quantile_ci(values: Sequence[float] | np.ndarray, q: float, confidence: float) -> tuple[float, float] | None:
    """The order-statistic interval of :func:`quantile_ci_ranks`, as values; None when too few."""
    arr = np.sort(np.asarray(values, dtype=float))
    ranks = quantile_ci_ranks(int(arr.size), q, confidence)
    return None if ranks is None else (float(arr[ranks[0]]), float(arr[ranks[1]]))


def min_samples_for_ci(q: float, confidence: float) -> int:
    """Fewest samples for which :func:`quantile_ci` has both bounds: the sample's max must lie above
    the quantile, and its min below, with probability 1 - (1 - confidence)/2 each. At a per-run
    confidence of sqrt(0.95) (what ``bench compare`` uses): p50 7, p95 86, p99 435."""
    tail = (1 - confidence) / 2
    p = q / 100.0
    n = max(math.ceil(math.log(tail) / math.log(p)), math.ceil(math.log(tail) / math.log1p(-p)))
    while quantile_ci_ranks(n, q, confidence) is None:  # the closed form is exact up to rounding
        n += 1
    return n
