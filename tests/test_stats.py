"""The statistics seed's figures, reproduced exactly."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mitmchaos import stats


def test_all_pass_of_40_at_95_percent_is_91_to_100():
    low, high = stats.wilson(40, 40, 0.95)
    assert math.floor(low * 100) == 91 and high == 1.0
    assert stats.interval_text(40, 40, 0.95) == "40/40 (100%, 95% CI 91%-100%)"


def test_29_of_40_is_72_percent_57_to_84():
    low, high = stats.wilson(29, 40, 0.95)
    assert round(low, 4) == 0.5717 and round(high, 4) == 0.8389
    assert stats.interval_text(29, 40, 0.95) == "29/40 (72%, 95% CI 57%-84%)"


def test_threshold_95_needs_73_all_pass_runs():
    assert stats.runs_needed(0.95, 0.95) == 73
    assert stats.wilson(72, 72)[0] < 0.95 <= stats.wilson(73, 73)[0]


def test_runs_needed_ends():
    assert stats.runs_needed(1.0) is None  # decided exactly, never by interval
    assert stats.runs_needed(0.0) == 1
    assert stats.runs_needed(0.9, 0.99) > stats.runs_needed(0.9, 0.95)


def test_no_runs_is_the_whole_range():
    assert stats.wilson(0, 0) == (0.0, 1.0)


@given(st.integers(1, 500).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))),
       st.sampled_from([0.8, 0.9, 0.95, 0.99]))
def test_interval_contains_the_rate(pr, confidence):
    passes, runs = pr
    low, high = stats.wilson(passes, runs, confidence)
    assert 0 <= low <= passes / runs <= high <= 1


def test_runs_to_settle():
    # 29/40 against 95%: the upper bound 84% is already below it.
    assert stats.runs_to_settle(29, 40, 0.95) == 40
    # 19/20 against 90%: the interval straddles 90% and more runs at 95% would clear it.
    need = stats.runs_to_settle(19, 20, 0.90)
    assert need > 20
    assert stats.wilson(round(0.95 * need), need)[0] >= 0.90
    assert stats.wilson(round(0.95 * (need - 1)), need - 1)[0] < 0.90
    assert stats.runs_to_settle(9, 10, 0.9) is None  # sits on the threshold


def test_pass_hat_k():
    assert stats.pass_hat_k(10, 10, 10) == 1.0
    assert stats.pass_hat_k(9, 10, 10) == 0.0
    assert stats.pass_hat_k(9, 10, 1) == pytest.approx(0.9)
    assert stats.pass_hat_k(8, 10, 2) == pytest.approx(28 / 45)
    assert stats.pass_hat_k(3, 3, 4) is None


def test_shown_percentages_reach_0_and_100_only_when_exact():
    assert stats.interval_text(19, 20, 0.95) == "19/20 (95%, 95% CI 76%-99%)"
    assert stats.interval_text(0, 20, 0.95) == "0/20 (0%, 95% CI 0%-17%)"
    assert stats.percent_floor(0.001) == 1 and stats.percent_floor(0.999) == 99 and stats.percent_floor(0.29) == 29
