"""Shared pydantic helpers: the strict base model and the one way errors are written.

Every typed input of splitstack (the deployment spec, SLO spec, scenarios, gates, profiles,
faults, runbook parameters) is a pydantic model. They all refuse unknown keys, so that a typo
cannot silently vanish, and they all report a failure as ``path: message`` lines, so that the
person reading it knows which line of which file to change.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError


class Strict(BaseModel):
    """Base of a config model: unknown keys are errors and instances are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class StrictMutable(BaseModel):
    """Base of a config model that code fills in after parsing: unknown keys are still errors."""

    model_config = ConfigDict(extra="forbid")


def format_loc(loc: Iterable[Any], skip: Iterable[str] = ()) -> str:
    """A pydantic location as a dotted path: ``('slos', 2, 'sli')`` -> ``slos[2].sli``.

    ``skip`` drops tags pydantic inserts for discriminated unions (they are not keys a user wrote).
    """
    skipped = set(skip)
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part not in skipped:
            out += ("." if out else "") + str(part)
    return out


def error_lines(
    exc: ValidationError, root: str = "<root>", loc: Callable[[tuple[Any, ...]], str] | None = None
) -> list[str]:
    """One ``path: message`` line per problem; ``root`` names a problem of the whole input."""
    lines = []
    for err in exc.errors():
        path = loc(err["loc"]) if loc else format_loc(err["loc"])
        message = str(err["msg"]).removeprefix("Value error, ")
        lines.append(f"{path or root}: {message}")
    return lines


def dotted_loc(loc: tuple[Any, ...]) -> str:
    """A location in the ``--set KEY=VALUE`` spelling, list indexes as keys: ``a.0.b``."""
    return ".".join(map(str, loc))


def describe(
    exc: ValidationError, root: str = "<root>", sep: str = "; ",
    loc: Callable[[tuple[Any, ...]], str] | None = None,
) -> str:
    """All problems of ``exc`` on one line (or joined by ``sep``)."""
    return sep.join(error_lines(exc, root, loc))


def parse_assignments(items: Iterable[str], flag: str, example: str, yaml_values: bool = True,
                      key_name: str = "KEY") -> dict[str, Any]:
    """``KEY=VALUE`` flags (``--set``, ``--spec-override``, ``--fault``...) as a dict.

    Values are YAML scalars (``5``, ``2.5``, ``true``, ``[a, b]``, text) unless ``yaml_values`` is
    false; a malformed item raises ValueError naming the flag and an example.
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{flag} {item!r}: expected {key_name}=VALUE, e.g. {flag} {example}")
        if yaml_values:
            try:
                out[key.strip()] = yaml.safe_load(value)
            except yaml.YAMLError as exc:
                raise ValueError(f"{flag} {item!r}: the value is not valid YAML ({exc})") from None
        else:
            out[key.strip()] = value.strip()
    return out
