"""Error-budget math, shared by the Prometheus and the bench-record calculators.

Inputs are event (or time-slice) counts; all arithmetic is on Fractions so a ratio exactly at a
target is exactly at it. Ratios are request-weighted: good / total over the window, never a
mean of per-interval ratios.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum
from fractions import Fraction
from functools import partial

from slo.spec import SLO


class Status(StrEnum):
    ok = "ok"
    exhausted = "exhausted"
    insufficient_data = "insufficient-data"
    no_data = "no-data"


def exact(value: str | float | int | Decimal) -> Fraction:
    """Exact Fraction of a number as written (Prometheus sends values as decimal strings)."""
    if isinstance(value, float):
        value = repr(value)  # shortest repr, not the binary expansion
    return Fraction(Decimal(value))


@dataclass(frozen=True)
class Counts:
    good: Fraction
    total: Fraction

    def __post_init__(self) -> None:
        if self.total < 0 or self.good < 0:
            raise ValueError(f"counts must be >= 0, got good={self.good} total={self.total}")
        if self.good > self.total:
            # Counter resets and extrapolation can push good a hair over total; clamp, never invent errors.
            object.__setattr__(self, "good", self.total)

    @property
    def bad(self) -> Fraction:
        return self.total - self.good


@dataclass(frozen=True)
class Evaluation:
    slo: str
    target: Decimal
    window_s: int
    current_window_s: int
    status: Status
    good: Fraction | None = None
    total: Fraction | None = None
    attainment: Fraction | None = None
    budget_total: Fraction | None = None  # bad events (or slices) the window may have
    budget_spent: Fraction | None = None
    budget_remaining_ratio: Fraction | None = None  # 1 = untouched, 0 = all spent (target met), < 0 = overspent
    burn_rate: Fraction | None = None  # 1 = spending exactly the budget over the SLO window
    time_to_exhaustion_s: float | None = None  # None: not burning, or not enough current traffic
    covered_s: int | None = None  # seconds of the window the source holds data for (retention, start)
    message: str = ""

    def as_dict(self) -> dict:
        def f(x: Fraction | None) -> float | None:
            return None if x is None else float(x)

        return {
            "slo": self.slo, "status": self.status.value, "target": str(self.target),
            "window_s": self.window_s, "current_window_s": self.current_window_s,
            "good": f(self.good), "total": f(self.total), "attainment": f(self.attainment),
            "budget_total": f(self.budget_total), "budget_spent": f(self.budget_spent),
            "budget_remaining_ratio": f(self.budget_remaining_ratio), "burn_rate": f(self.burn_rate),
            "time_to_exhaustion_s": self.time_to_exhaustion_s, "covered_s": self.covered_s,
            "message": self.message,
        }


def evaluate(slo: SLO, window: Counts | None, current: Counts | None, window_s: int, current_window_s: int,
             no_data_hint: str = "") -> Evaluation:
    """Attainment and budget over ``window``; burn rate and time to exhaustion from ``current``."""
    new = partial(Evaluation, slo=slo.name, target=slo.target, window_s=window_s, current_window_s=current_window_s)
    if window is None or window.total == 0:
        return new(status=Status.no_data,
                   message=f"slo {slo.name!r}: no events in the window. {no_data_hint}".strip())
    if window.total < slo.min_events:
        return new(status=Status.insufficient_data, good=window.good, total=window.total,
                   message=f"slo {slo.name!r}: {float(window.total):g} events < min_events {slo.min_events}; "
                           "run longer or lower min_events in slo/objectives.yaml")
    budget_ratio = Fraction(slo.error_budget)
    attainment = window.good / window.total
    budget_total = budget_ratio * window.total
    remaining = 1 - window.bad / budget_total
    burn: Fraction | None = None
    tte: float | None = None
    msg = ""
    if current is not None and current.total >= slo.min_events:
        burn = (current.bad / current.total) / budget_ratio
        if remaining < 0:
            tte = 0.0
        elif burn > 0:
            # Burn 1 spends, over the measured window, exactly the budget that window has: what is
            # left (a share of this window's budget) lasts remaining / burn windows. The measured
            # window, not the SLO's: over a 7-day window the budget is a quarter of a month's.
            tte = float(remaining * window_s / burn)
    else:
        msg = f"current burn rate needs >= {slo.min_events} events in the last {current_window_s} s"
    # Exactly at the target spends the whole budget and no more: met, not exhausted.
    status = Status.exhausted if remaining < 0 else Status.ok
    return new(status=status, good=window.good, total=window.total, attainment=attainment,
               budget_total=budget_total, budget_spent=window.bad, budget_remaining_ratio=remaining,
               burn_rate=burn, time_to_exhaustion_s=tte, message=msg)
