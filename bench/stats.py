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
    (estimate, low, high). Chunked so memory stays bounded for 100k-sample runs.
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
        diffs.append((cs - bs) / bs if relative else cs - bs)
        done += k
    d = np.concatenate(diffs)
    point = (c_point - b_point) / b_point if relative else c_point - b_point
    alpha = (1 - confidence) / 2
    return point, float(np.quantile(d, alpha)), float(np.quantile(d, 1 - alpha))


def pct_stat(q: float) -> Callable[[np.ndarray], np.ndarray]:
    return lambda a: np.percentile(a, q, axis=1, method="linear")


def mean_stat(a: np.ndarray) -> np.ndarray:
    return a.mean(axis=1)
