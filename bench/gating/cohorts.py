"""Two cohorts under the same traffic, in the same window: the migration's live judgement.

Each criterion of the production rollout (error rate < 0.1 % and no worse than the monolithic
baseline; p95 latency within 10 % of it; no worker crash) is judged on an interval, not a point:

* ``fail`` when the interval is wholly on the wrong side (a breach, certain at 95 %): the
  migration aborts;
* ``pass`` when it is wholly on the right side;
* ``too_few`` when it straddles the bound: too few documents to judge, wait for more.

Error rates use Wilson score intervals (a 0-error cohort of n documents has an upper bound of
about 3.8/n, so "< 0.1 %" can pass only from about 3,800 documents); the p95 ratio uses a seeded
bootstrap and needs ``min_samples_for(95)`` documents per cohort.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from bench.stats import min_samples_for
from contract.migration import MONOLITHIC, SPLIT

Judgement = Literal["pass", "fail", "too_few"]
Z95 = 1.959964


class CohortSample(BaseModel):
    """One document of the window: its cohort, whether it succeeded, its latency."""

    model_config = ConfigDict(frozen=True)
    topology: Literal["split", "monolithic"]
    ok: bool
    latency_s: float | None = Field(default=None, ge=0, description="Submission to output (ok ones).")


class Criteria(BaseModel):
    """The rollout's criteria, judged on 95 % intervals."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    max_error_fraction: float = Field(default=0.001, gt=0, lt=1, description="Split cohort's error rate must "
                                      "be below this (and no worse than the monolithic cohort's).")
    max_p95_increase_fraction: float = Field(default=0.10, ge=0, description="Split cohort's p95 latency may "
                                             "exceed the monolithic cohort's by at most this fraction.")
    max_crashes: int = Field(default=0, ge=0, description="Split-cohort worker crashes allowed in the window.")
    min_latency_documents: int = Field(
        default=min_samples_for(95), ge=2, description="Ok documents per cohort before the p95 is judged "
        "(default: enough for 10 beyond the p95); a short drill may lower it, at the cost of wider intervals.")


class Check(BaseModel):
    name: str
    judgement: Judgement
    measured: str
    bound: str


class CohortVerdict(BaseModel):
    judgement: Judgement  # fail if any fails, else too_few if any is, else pass
    checks: list[Check]
    counts: dict[str, int]

    def lines(self) -> list[str]:
        return [f"{c.name}: {c.judgement} (measured {c.measured}; bound {c.bound})" for c in self.checks]


def wilson(bad: int, n: int) -> tuple[float, float]:
    if n == 0:
        return 0.0, 1.0
    p = bad / n
    den = 1 + Z95 ** 2 / n
    mid = (p + Z95 ** 2 / (2 * n)) / den
    half = Z95 * math.sqrt(p * (1 - p) / n + Z95 ** 2 / (4 * n * n)) / den
    return max(0.0, mid - half), min(1.0, mid + half)


def _p95_ratio_ci(split: np.ndarray, mono: np.ndarray, draws: int = 2000) -> tuple[float, float, float]:
    rng = np.random.default_rng(0)  # seeded: the same window gives the same verdict
    s = np.percentile(rng.choice(split, (draws, split.size)), 95, axis=1)
    m = np.percentile(rng.choice(mono, (draws, mono.size)), 95, axis=1)
    ratio = s / np.maximum(m, 1e-9)
    point = float(np.percentile(split, 95) / max(float(np.percentile(mono, 95)), 1e-9))
    return point, float(np.percentile(ratio, 2.5)), float(np.percentile(ratio, 97.5))


def _side(low: float, high: float, bound: float) -> Judgement:
    return "fail" if low > bound else "pass" if high <= bound else "too_few"


def judge(samples: list[CohortSample], criteria: Criteria, crashes: dict[str, int] | None = None) -> CohortVerdict:
    by = {t: [s for s in samples if s.topology == t] for t in (SPLIT, MONOLITHIC)}
    n = {t: len(v) for t, v in by.items()}
    bad = {t: sum(not s.ok for s in v) for t, v in by.items()}
    checks: list[Check] = []
    lo, hi = wilson(bad[SPLIT], n[SPLIT])
    checks.append(Check(name="split error rate", judgement=_side(lo, hi, criteria.max_error_fraction),
                        measured=f"{bad[SPLIT]}/{n[SPLIT]}, 95 % interval {lo:.4%}..{hi:.4%}",
                        bound=f"< {criteria.max_error_fraction:.2%}"))
    mlo, mhi = wilson(bad[MONOLITHIC], n[MONOLITHIC])
    worse: Judgement = "fail" if lo > mhi else "pass" if hi <= max(mhi, criteria.max_error_fraction) else "too_few"
    checks.append(Check(name="split error rate vs monolithic", judgement=worse,
                        measured=f"split {lo:.4%}..{hi:.4%}, monolithic {bad[MONOLITHIC]}/{n[MONOLITHIC]} "
                                 f"{mlo:.4%}..{mhi:.4%}", bound="split no worse (intervals)"))
    need = criteria.min_latency_documents
    lat = {t: np.array([s.latency_s for s in v if s.ok and s.latency_s is not None]) for t, v in by.items()}
    limit = 1 + criteria.max_p95_increase_fraction
    if min(lat[SPLIT].size, lat[MONOLITHIC].size) < need:
        checks.append(Check(name="p95 latency vs monolithic", judgement="too_few",
                            measured=f"{lat[SPLIT].size} split / {lat[MONOLITHIC].size} monolithic ok documents",
                            bound=f"ratio <= {limit:g}; needs >= {need} ok documents per cohort"))
    else:
        point, rlo, rhi = _p95_ratio_ci(lat[SPLIT], lat[MONOLITHIC])
        checks.append(Check(name="p95 latency vs monolithic", judgement=_side(rlo, rhi, limit),
                            measured=f"ratio {point:.3f}, 95 % interval {rlo:.3f}..{rhi:.3f}",
                            bound=f"<= {limit:g}"))
    if crashes is not None:
        got = crashes.get(SPLIT, 0)
        checks.append(Check(name="split worker crashes", judgement="fail" if got > criteria.max_crashes else "pass",
                            measured=str(got), bound=f"<= {criteria.max_crashes}"))
    js = {c.judgement for c in checks}
    overall: Judgement = "fail" if "fail" in js else "too_few" if "too_few" in js else "pass"
    return CohortVerdict(judgement=overall, checks=checks, counts=n)
