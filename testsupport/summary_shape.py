"""Check a summary (or `bench compare` result) against its declared types in bench/summary.py:
every key declared, every value of its type (pydantic's lax mode: an int where a float is
declared passes, as JSON has one number type). Key order is the writer's, not the type's."""

from __future__ import annotations

import json
from typing import Any

from pydantic import TypeAdapter

from bench.summary import Comparison, Summary

_ADAPTERS: dict[str, TypeAdapter[Any]] = {"summary": TypeAdapter(Summary), "comparison": TypeAdapter(Comparison)}


def assert_shape(value: object, of: str = "summary") -> None:
    adapter = _ADAPTERS[of]
    kept = adapter.dump_python(adapter.validate_python(value))
    assert json.dumps(kept, default=str, sort_keys=True) == json.dumps(value, default=str, sort_keys=True), (
        f"the {of} has keys or values bench/summary.py does not declare")
