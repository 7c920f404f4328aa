"""Circuit breaker around the inference server: closed -> open -> half-open -> closed.

Counts consecutive failed requests (after the per-request retries of :mod:`worker.client`;
timeouts past a request's deadline count too). While open, requests fail fast and the worker
stops taking new jobs (``allows_intake`` is False), so an outage neither burns retries nor
dead-letters documents.

When it lets a trial through follows the server's readiness, not a fixed clock: the worker's
probe (``/v1/models``, then, while the breaker is not closed, a 1-token completion) reports
each verdict (:meth:`server_ready`). An open breaker turns
half-open once a probe sent after it opened found the server ready (and at least
``min_open_s`` after opening), so recovery takes seconds after the server is back, and a trial
never fires while the server is still starting (which would re-open it and double the outage).
Without any probe verdict (no prober attached), the fallback is ``recovery_timeout_s``. A
half-open breaker admits one trial request; its success closes the breaker, its failure opens
it again. The clock is injected so tests need not sleep.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from contract.metrics import BreakerState

__all__ = ["MIN_OPEN_S", "BreakerState", "CircuitBreaker"]

MIN_OPEN_S = 1.0  # open at least this long: one trial per second at most while the server fails


class CircuitBreaker:
    def __init__(
        self,
        failure_threshold: int,
        recovery_timeout_s: float,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[BreakerState], None] | None = None,
        min_open_s: float = MIN_OPEN_S,
    ) -> None:
        self.failure_threshold = failure_threshold
        self.recovery_timeout_s = recovery_timeout_s
        self.min_open_s = min(min_open_s, recovery_timeout_s)
        self._clock = clock
        self._listeners: list[Callable[[BreakerState], None]] = [on_change] if on_change else []
        self._state = BreakerState.closed
        self._failures = 0
        self._opened_at = 0.0
        self._trial_in_flight = False
        self._probed = False  # a readiness prober reports verdicts: trials follow them
        self._ready_since_open = False

    @property
    def state(self) -> BreakerState:
        # Open turns half-open by itself once a trial is due: no timer thread.
        if self._state is BreakerState.open and self._trial_due():
            self._set(BreakerState.half_open)
        return self._state

    @property
    def opened_at(self) -> float:
        return self._opened_at

    def _trial_due(self) -> bool:
        open_for = self._clock() - self._opened_at
        if self._probed:
            return self._ready_since_open and open_for >= self.min_open_s
        return open_for >= self.recovery_timeout_s

    def server_ready(self, ready: bool, probed_at: float) -> None:
        """A readiness probe's verdict; ``probed_at`` is the clock when the probe was sent (a
        probe sent before the breaker opened says nothing about the server since)."""
        self._probed = True
        if not ready:
            self._ready_since_open = False
        elif probed_at >= self._opened_at:
            self._ready_since_open = True

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
        """0 when a trial may go now; while waiting for the server's readiness, the fallback
        time (the probe's verdict usually comes much sooner)."""
        if self.state is not BreakerState.open:
            return 0.0
        open_for = self._clock() - self._opened_at
        if self._probed:
            return max(0.0, self.min_open_s - open_for) if self._ready_since_open else self.recovery_timeout_s
        return max(0.0, self.recovery_timeout_s - open_for)

    def record_success(self) -> None:
        self._failures = 0
        self._trial_in_flight = False
        if self._state is not BreakerState.closed:
            self._set(BreakerState.closed)

    def record_failure(self) -> None:
        self._failures += 1
        if self._state is BreakerState.open:
            return  # a request sent before it opened: nothing new about the server
        was_trial = self._trial_in_flight
        self._trial_in_flight = False
        if was_trial or self._state is BreakerState.half_open or self._failures >= self.failure_threshold:
            self._opened_at = self._clock()
            self._ready_since_open = False
            self._set(BreakerState.open)

    def trip(self) -> None:
        """Open now, without waiting for ``failure_threshold`` failures: the worker's own probe
        saw the server fail a completion (no answer within its deadline, or a 5xx) while it
        lists its models. Recovery is the usual one (a probe that gets an answer, then a trial)."""
        self._trial_in_flight = False
        if self._state is not BreakerState.open:
            self._opened_at = self._clock()
            self._ready_since_open = False
            self._set(BreakerState.open)

    def release_trial(self) -> None:
        """A trial request ended without a verdict (cancelled): let another one try."""
        self._trial_in_flight = False

    def subscribe(self, listener: Callable[[BreakerState], None]) -> None:
        """Also call ``listener`` on every transition."""
        self._listeners.append(listener)

    @property
    def trial_in_flight(self) -> bool:
        return self._trial_in_flight

    def _set(self, state: BreakerState) -> None:
        if state is not self._state:
            self._state = state
            for listener in self._listeners:
                listener(state)
