"""What a gate may look at: the run, an optional baseline run, the target and probe clients."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
from pydantic import BaseModel

from bench.records import AnyRecord
from bench.summary import Summary
from bench.target import Target

Status = Literal["pass", "fail", "not_evaluable"]


class GateResult(BaseModel):
    name: str
    kind: str
    status: Status
    measured: float | str | None
    threshold: str
    reason: str
    required: bool = True


@dataclass
class GateContext:
    summary: Summary
    records: list[AnyRecord]
    target: Target | None = None
    http: httpx.Client | None = None
    baseline_summary: Summary | None = None
    baseline_records: list[AnyRecord] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
