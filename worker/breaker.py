"""Circuit breaker around the inference server: closed -> open -> half-open -> closed.

Counts consecutive failed requests (after the per-request retries of :mod:`worker.client`).
While open, requests fail fast and the worker stops taking new jobs (``allows_intake`` is
False), so an outage neither burns retries nor dead-letters documents. After
``recovery_timeout_s`` one trial request is let through (half-open); its success closes the
breaker, its failure opens it again. The clock is injected so tests need not sleep.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from contract.metrics import BreakerState

__all__ = ["BreakerState", "CircuitBreaker"]


class CircuitBreaker:
    def __init__(
        self,
        failure_threshold: int,
        recovery_timeout_s: float,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[BreakerState], None] | None = None,
    ) -> None:
        self.failure_threshold = failure_threshold
        self.recovery_timeout_s = recovery_timeout_s
        self._clock = clock
        self._on_change = on_change or (lambda state: None)
        self._state = BreakerState.closed
        self._failures = 0
        self._opened_at = 0.0
        self._trial_in_flight = False

    @property
    def state(self) -> BreakerState:
        # Open turns half-open by itself once the recovery time has passed: no timer thread.
        if self._state is BreakerState.open and self._clock() - self._opened_at >= self.recovery_timeout_s:
            self._set(BreakerState.half_open)
        return self._state

    def allow_request(self) -> bool:
        """True when a request may go out now (a half-open breaker admits one trial at a time)."""
        state = self.state
        if state is BreakerState.closed:
            return True
        if state is BreakerState.half_open and not self._trial_in_flight:
            self._trial_in_flight = True
            return True
        return False

    def allows_intake(self) -> bool:
        """Whether the worker should take a new job now: not while the server is known down."""
        return self.state is not BreakerState.open

    def seconds_until_trial(self) -> float:
        if self.state is not BreakerState.open:
            return 0.0
        return max(0.0, self.recovery_timeout_s - (self._clock() - self._opened_at))

    def record_success(self) -> None:
        self._failures = 0
        self._trial_in_flight = False
        if self._state is not BreakerState.closed:
            self._set(BreakerState.closed)

    def record_failure(self) -> None:
        self._failures += 1
        was_trial = self._trial_in_flight
        self._trial_in_flight = False
        if was_trial or self._state is BreakerState.half_open or self._failures >= self.failure_threshold:
            self._opened_at = self._clock()
            self._set(BreakerState.open)

    def release_trial(self) -> None:
        """A trial request ended without a verdict (cancelled): let another one try."""
        self._trial_in_flight = False

    def _set(self, state: BreakerState) -> None:
        if state is not self._state:
            self._state = state
            self._on_change(state)
