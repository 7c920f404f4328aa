"""bench/summary.py's types describe the summaries the bench writes (testsupport/summary_shape.py;
the integration tests check real runs' summary.json the same way)."""

from __future__ import annotations

import pytest

from testsupport.bench_golden import outputs
from testsupport.summary_shape import assert_shape


@pytest.fixture(scope="module")
def golden():
    return outputs()


@pytest.mark.parametrize("kind", ["chat", "pipeline"])
def test_the_metric_summaries_have_the_declared_shape(golden, kind):
    assert_shape(golden[f"{kind}_summary"])


def test_a_finished_runs_summary_has_the_declared_shape(run_factory):
    _, summary = run_factory(n=120, errors=3)
    assert_shape(summary)


@pytest.mark.parametrize("kind", ["chat", "pipeline"])
def test_a_comparison_has_the_declared_shape(golden, kind):
    assert_shape(golden[f"{kind}_compare"], "comparison")


def test_an_undeclared_key_is_noticed(golden):
    with pytest.raises(AssertionError, match="does not declare"):
        assert_shape({**golden["chat_summary"], "surprise": 1})


def test_a_value_of_another_type_is_noticed(golden):
    with pytest.raises(Exception, match="requests"):
        assert_shape({**golden["chat_summary"], "requests": {"sent": "many"}})
