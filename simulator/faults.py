"""Fault injection: what can go wrong with an inference server, switchable at start and at run time.

Every per-request decision comes from one RNG seeded by the simulator seed and drawn in arrival
order, so a run with the same seed and the same request sequence fails the same requests.
"""

from __future__ import annotations

import random
from enum import Enum
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from contract.models import describe


class FaultError(ValueError):
    """A fault setting that cannot be used (names the field and the fix)."""


class FaultSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    added_latency_ms: float = Field(
        default=0.0, ge=0, description="extra delay before the first token of every request")
    error_rate: float = Field(default=0.0, ge=0, le=1, description="fraction of requests answered with error_status")
    error_status: Literal[500, 503] = Field(
        default=503, description="status of injected errors (503 carries Retry-After)")
    retry_after_s: int = Field(default=1, ge=0, description="Retry-After header of injected 503s")
    reset_rate: float = Field(
        default=0.0, ge=0, le=1, description="fraction of requests whose connection is cut mid-response")
    hang_rate: float = Field(default=0.0, ge=0, le=1, description="fraction of requests that never get an answer")
    kv_capacity_factor: float = Field(default=1.0, gt=0, le=1,
                                      description="fraction of the profile's KV cache available "
                                                  "(KV exhaustion: queueing and preemptions)")
    slow_start_s: float = Field(default=0.0, ge=0, description="delay before the server listens (start-up only)")
    crash_after_requests: int | None = Field(default=None, ge=0,
                                             description="exit the process (status 70) after this "
                                                         "many inference requests; 0 = now")


class Action(str, Enum):
    PASS = "pass"
    ERROR = "error"
    RESET = "reset"
    HANG = "hang"


def parse_fault_args(items: list[str], base: FaultSpec | None = None) -> FaultSpec:
    """``["error_rate=0.1", "error_status=500"]`` -> FaultSpec; errors name the bad item."""
    data = (base or FaultSpec()).model_dump()
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise FaultError(f"--fault '{item}': expected KEY=VALUE, keys: {', '.join(FaultSpec.model_fields)}")
        if key not in FaultSpec.model_fields:
            raise FaultError(f"--fault '{item}': unknown key '{key}', valid keys: {', '.join(FaultSpec.model_fields)}")
        data[key] = None if value.lower() in ("none", "") else yaml.safe_load(value)  # "500" -> 500
    try:
        return FaultSpec.model_validate(data)
    except ValidationError as exc:
        raise FaultError(f"--fault: {describe(exc)}") from exc


class FaultInjector:
    def __init__(self, spec: FaultSpec, seed: int) -> None:
        self.spec = spec
        self.rng = random.Random(seed ^ 0x5EED_FA17)
        self.requests = 0

    def update(self, changes: dict) -> FaultSpec:
        try:
            self.spec = FaultSpec.model_validate(self.spec.model_dump() | changes)
        except ValidationError as exc:
            raise FaultError(describe(exc)) from exc
        return self.spec

    def decide(self) -> Action:
        """One draw per inference request, in arrival order (deterministic for a seed)."""
        self.requests += 1
        s = self.spec
        if not (s.error_rate or s.reset_rate or s.hang_rate):
            return Action.PASS
        x = self.rng.random()
        if x < s.error_rate:
            return Action.ERROR
        x -= s.error_rate
        if x < s.reset_rate:
            return Action.RESET
        x -= s.reset_rate
        if x < s.hang_rate:
            return Action.HANG
        return Action.PASS

    def should_crash(self) -> bool:
        n = self.spec.crash_after_requests
        return n is not None and self.requests >= n
