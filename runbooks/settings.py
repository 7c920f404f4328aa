"""Safety limits and waits of the runbook actions: one typed model, each default defined here only."""

from __future__ import annotations

from pydantic import Field

from contract.models import Strict


class SafetySettings(Strict):

    restart_limit_count: int = Field(
        default=3, ge=1,
        description="Restarts of one component allowed inside restart_window_s. A fourth restart "
        "in half an hour means the restart is not fixing the cause: the action refuses and "
        "points at diagnose (a restart loop only hides an OOM or a driver fault).",
    )
    restart_window_s: float = Field(default=1800.0, gt=0, description="Rate-limit window, seconds.")
    ready_timeout_s: float = Field(
        default=120.0, gt=0,
        description="Longest wait for a restarted component to be healthy again, seconds (the "
        "manual allows 60 s of model loading; the local stack's simulator needs ~2 s).",
    )
    poll_interval_s: float = Field(default=0.5, gt=0, description="Health polling interval, s.")
    test_inference_timeout_s: float = Field(
        default=60.0, gt=0, description="Timeout of the upgrade's test chat completion, seconds."
    )
    breaker_close_timeout_s: float = Field(
        default=60.0, gt=0,
        description="Longest wait for worker circuit breakers to leave OPEN after a restart, s.",
    )
