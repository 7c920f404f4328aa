"""bench/summary.py's types describe the summaries the bench writes: every key is declared (the
validated copy drops nothing) and every value has its declared type (pydantic, not strict: an
int where a float is declared passes, as JSON has one number type)."""

from __future__ import annotations

import json

import pytest
from pydantic import TypeAdapter

from bench.summary import Comparison, Summary
from testsupport.bench_golden import outputs

SUMMARY = TypeAdapter(Summary)


def _check(adapter: TypeAdapter, value: object) -> None:
    """Same keys and values after validation (the order of keys is the writer's, not the type's)."""
    validated = adapter.validate_python(value)
    assert (json.dumps(adapter.dump_python(validated), default=str, sort_keys=True)
            == json.dumps(value, default=str, sort_keys=True))


@pytest.fixture(scope="module")
def golden():
    return outputs()


@pytest.mark.parametrize("kind", ["chat", "pipeline"])
def test_the_metric_summaries_have_the_declared_shape(golden, kind):
    _check(SUMMARY, golden[f"{kind}_summary"])


def test_a_finished_runs_summary_has_the_declared_shape(run_factory):
    _, summary = run_factory(n=120, errors=3)
    _check(SUMMARY, summary)


@pytest.mark.parametrize("kind", ["chat", "pipeline"])
def test_a_comparison_has_the_declared_shape(golden, kind):
    _check(TypeAdapter(Comparison), golden[f"{kind}_compare"])


def test_an_undeclared_key_would_be_noticed(golden):
    with pytest.raises(AssertionError):
        _check(SUMMARY, {**golden["chat_summary"], "surprise": 1})
