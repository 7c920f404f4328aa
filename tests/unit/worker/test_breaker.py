from contract.metrics import BreakerState
from worker.breaker import CircuitBreaker


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_opens_after_threshold_and_stops_intake() -> None:
    clock, changes = Clock(), []
    b = CircuitBreaker(3, 10.0, clock=clock, on_change=changes.append)
    for _ in range(2):
        b.record_failure()
    assert b.state is BreakerState.closed and b.allows_intake()
    b.record_failure()
    assert b.state is BreakerState.open
    assert not b.allows_intake() and not b.allow_request()
    assert b.seconds_until_trial() == 10.0
    assert changes == [BreakerState.open]


def test_success_resets_the_count() -> None:
    b = CircuitBreaker(2, 5.0, clock=Clock())
    b.record_failure()
    b.record_success()
    b.record_failure()
    assert b.state is BreakerState.closed


def test_half_open_admits_one_trial_and_closes_on_success() -> None:
    clock = Clock()
    b = CircuitBreaker(1, 5.0, clock=clock)
    b.record_failure()
    clock.t += 5.0
    assert b.state is BreakerState.half_open and b.allows_intake()
    assert b.allow_request() is True
    assert b.allow_request() is False  # one trial at a time
    b.record_success()
    assert b.state is BreakerState.closed and b.allow_request()


def test_failed_trial_reopens_for_a_full_recovery_timeout() -> None:
    clock = Clock()
    b = CircuitBreaker(1, 5.0, clock=clock)
    b.record_failure()
    clock.t += 6.0
    assert b.allow_request()
    b.record_failure()
    assert b.state is BreakerState.open
    assert b.seconds_until_trial() == 5.0


def test_cancelled_trial_lets_another_try() -> None:
    clock = Clock()
    b = CircuitBreaker(1, 1.0, clock=clock)
    b.record_failure()
    clock.t += 1.0
    assert b.allow_request()
    b.release_trial()
    assert b.allow_request()
