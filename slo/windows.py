"""Burn-rate alert windows and factors, loaded from the cited data file ``burn_windows.yaml``."""

from __future__ import annotations

from decimal import Decimal
from enum import StrEnum
from functools import lru_cache
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from contract.slo_window import BURN_WINDOW_MAX_H

BURN_WINDOWS_PATH = Path(__file__).with_name("burn_windows.yaml")


class Severity(StrEnum):
    page = "page"
    ticket = "ticket"


def fmt_duration_min(minutes: int) -> str:
    """Prometheus duration for a whole number of minutes, largest unit that divides it (1440 -> 1d)."""
    for unit, size in (("d", 1440), ("h", 60)):
        if minutes % size == 0:
            return f"{minutes // size}{unit}"
    return f"{minutes}m"


class BurnWindow(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    severity: Severity
    long_window_min: int = Field(gt=0, description="long window, minutes")
    short_window_min: int = Field(gt=0, description="short (reset) window, minutes")
    budget_consumed_ratio: Decimal = Field(
        gt=0, le=1, description="share of the period's budget spent in the long window at this burn rate")
    factor: Decimal = Field(gt=0, description="burn rate for the cited period, as published")

    @property
    def long(self) -> str:
        return fmt_duration_min(self.long_window_min)

    @property
    def short(self) -> str:
        return fmt_duration_min(self.short_window_min)

    def factor_for(self, slo_window_d: int) -> Decimal:
        """Burn rate that spends ``budget_consumed_ratio`` of a ``slo_window_d``-day budget in the long window."""
        return self.budget_consumed_ratio * Decimal(slo_window_d * 1440) / Decimal(self.long_window_min)


class BurnWindows(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    period_d: int = Field(gt=0)
    windows: tuple[BurnWindow, ...]

    @model_validator(mode="after")
    def _factors_match_citation(self) -> BurnWindows:
        # The published factor and the consumption ratio must agree, or the data file was mis-edited.
        for w in self.windows:
            derived = w.factor_for(self.period_d)
            if derived != w.factor:
                raise ValueError(
                    f"burn window {w.long}/{w.short}: factor {w.factor} does not match "
                    f"budget_consumed_ratio {w.budget_consumed_ratio} x {self.period_d} d / {w.long} = {derived}; "
                    "fix one of them in slo/burn_windows.yaml"
                )
            if w.short_window_min >= w.long_window_min:
                raise ValueError(f"burn window {w.long}/{w.short}: short window must be shorter than the long one")
            if w.long_window_min > BURN_WINDOW_MAX_H * 60:
                raise ValueError(
                    f"burn window {w.long}: longer than the {BURN_WINDOW_MAX_H} h a Prometheus with a "
                    "long-term store keeps (contract/slo_window.py); shorten it or raise that bound")
        return self

    @property
    def longest_min(self) -> int:
        return max(w.long_window_min for w in self.windows)


@lru_cache(maxsize=4)
def load_burn_windows(path: Path = BURN_WINDOWS_PATH) -> BurnWindows:
    return BurnWindows.model_validate(yaml.safe_load(path.read_text()))
