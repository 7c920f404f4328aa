"""Budget math: exact fractions, request weighting, minimum-traffic guards."""

from decimal import Decimal
from fractions import Fraction

import pytest

from slo.budget import Counts, Status, evaluate, exact
from slo.spec import load_spec

SPEC = load_spec()
ERR = SPEC.get("pdf-error-rate")  # target 0.98, budget 0.02, window 30 d, min_events 20


def test_exact_takes_numbers_as_written():
    assert exact("0.1") == Fraction(1, 10)
    assert exact(0.1) == Fraction(1, 10)  # shortest repr, not 0.1000000000000000055...
    assert exact(Decimal("0.995")) == Fraction(199, 200)


def test_ratio_exactly_at_target_spends_exactly_the_budget_and_meets_it():
    e = evaluate(ERR, Counts(Fraction(98), Fraction(100)), Counts(Fraction(98), Fraction(100)), 86400, 3600)
    assert e.attainment == Fraction(98, 100)
    assert e.budget_total == Fraction(2) and e.budget_spent == Fraction(2)
    assert e.budget_remaining_ratio == 0 and e.status is Status.ok  # met exactly: not exhausted
    assert e.burn_rate == 1 and e.time_to_exhaustion_s == 0.0
    one_more = evaluate(ERR, Counts(Fraction(97), Fraction(100)), None, 86400, 3600)
    assert one_more.status is Status.exhausted


def test_exhaustion_time_is_measured_on_the_window_that_was_measured():
    # Half of a 7-day window's budget left, burning at 2x: it lasts a quarter of 7 days, not of 30.
    e = evaluate(ERR, Counts(Fraction(990), Fraction(1000)), Counts(Fraction(96), Fraction(100)), 7 * 86400, 3600)
    assert e.time_to_exhaustion_s == pytest.approx(0.5 * 7 * 86400 / 2)
    # A 2-hour bench run: the run is the window.
    e = evaluate(ERR, Counts(Fraction(990), Fraction(1000)), Counts(Fraction(96), Fraction(100)), 7200, 600)
    assert e.time_to_exhaustion_s == pytest.approx(1800)


def test_half_budget_left_burning_at_2x_lasts_a_quarter_window():
    # 1000 events, 10 bad = half of the 20 allowed; current 4 % errors = 2x burn
    e = evaluate(ERR, Counts(Fraction(990), Fraction(1000)), Counts(Fraction(96), Fraction(100)), 30 * 86400, 3600)
    assert e.status is Status.ok
    assert e.budget_remaining_ratio == Fraction(1, 2)
    assert e.burn_rate == 2
    assert e.time_to_exhaustion_s == pytest.approx(0.5 * 30 * 86400 / 2)


def test_request_weighted_not_mean_of_ratios():
    # Two intervals: 1/10 bad and 0/990 bad. The mean of ratios would be 5 %; weighted is 0.1 %.
    window = Counts(Fraction(9 + 990), Fraction(10 + 990))
    e = evaluate(ERR, window, None, 3600, 3600)
    assert e.attainment == Fraction(999, 1000)


def test_not_burning_has_no_exhaustion_time_and_low_traffic_is_guarded():
    e = evaluate(ERR, Counts(Fraction(100), Fraction(100)), Counts(Fraction(5), Fraction(5)), 3600, 3600)
    assert e.status is Status.ok and e.burn_rate is None and e.time_to_exhaustion_s is None
    assert "current burn rate needs >= 20 events in the last 3600 s" in e.message
    e = evaluate(ERR, Counts(Fraction(10), Fraction(10)), None, 3600, 3600)
    assert e.status is Status.insufficient_data
    assert e.message == ("slo 'pdf-error-rate': 10 events < min_events 20; "
                         "run longer or lower min_events in slo/objectives.yaml")


def test_no_data_names_the_slo_and_the_hint():
    e = evaluate(ERR, None, None, 3600, 3600, "check up{job=\"workers\"}")
    assert e.status is Status.no_data
    assert e.message == "slo 'pdf-error-rate': no events in the window. check up{job=\"workers\"}"


def test_good_above_total_from_extrapolation_is_clamped_not_an_error():
    c = Counts(Fraction(1001, 10), Fraction(100))
    assert c.good == 100 and c.bad == 0
    with pytest.raises(ValueError, match="counts must be >= 0"):
        Counts(Fraction(-1), Fraction(1))
