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


def test_with_a_prober_the_trial_waits_for_readiness_not_the_clock() -> None:
    clock, changes = Clock(), []
    b = CircuitBreaker(1, 30.0, clock=clock, on_change=changes.append)
    b.server_ready(True, clock.t)  # a prober reports to this breaker
    b.record_failure()
    clock.t += 0.5
    b.server_ready(True, clock.t - 1)  # sent before it opened: says nothing about the server since
    assert b.state is BreakerState.open
    clock.t += 100  # far past recovery_timeout_s: still no trial while the server is not ready
    b.server_ready(False, clock.t)
    assert b.state is BreakerState.open and not b.allow_request()
    b.server_ready(True, clock.t)  # the server answers /v1/models again
    assert b.state is BreakerState.half_open and b.allow_request()
    b.record_failure()  # a failed trial: open again, next trial once a probe after it says ready
    assert b.state is BreakerState.open
    clock.t += 0.2
    b.server_ready(True, clock.t)
    assert b.state is BreakerState.open  # at least min_open_s (1 s) between trials
    clock.t += 1.0
    assert b.state is BreakerState.half_open
    b.record_success()
    assert changes == [BreakerState.open, BreakerState.half_open, BreakerState.open,
                       BreakerState.half_open, BreakerState.closed]


def test_failures_of_requests_sent_before_opening_do_not_extend_it() -> None:
    clock = Clock()
    b = CircuitBreaker(2, 5.0, clock=clock)
    b.record_failure()
    b.record_failure()
    clock.t += 4.0
    b.record_failure()  # a request sent earlier times out now
    clock.t += 1.0
    assert b.state is BreakerState.half_open  # 5 s after opening, not after the late failure


def test_listeners_hear_every_transition() -> None:
    clock, heard = Clock(), []
    b = CircuitBreaker(1, 1.0, clock=clock)
    b.subscribe(heard.append)
    b.record_failure()
    clock.t += 1.0
    assert b.state is BreakerState.half_open and b.trial_in_flight is False
    assert heard == [BreakerState.open, BreakerState.half_open]


def test_a_hung_server_seen_by_the_probe_trips_it_at_once_and_it_recovers_as_usual() -> None:
    clock, changes = Clock(), []
    b = CircuitBreaker(5, 30.0, clock=clock, on_change=changes.append)
    b.trip()  # the worker's 1-token completion got no answer: no need for 5 failed requests
    assert b.state is BreakerState.open and not b.allows_intake()
    b.trip()
    assert changes == [BreakerState.open]
    clock.t += 2
    b.server_ready(True, clock.t)  # a probe completion answered after it opened
    assert b.state is BreakerState.half_open and b.allow_request()
    b.record_success()
    assert b.state is BreakerState.closed
