"""Shared pydantic helpers: the strict base model and the one way errors are written.

Every typed input of splitstack (the deployment spec, SLO spec, scenarios, gates, profiles,
faults, runbook parameters) is a pydantic model. They all refuse unknown keys, so that a typo
cannot silently vanish, and they all report a failure as ``path: message`` lines, so that the
person reading it knows which line of which file to change.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from typing import Any, Literal, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import ErrorDetails


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


ModelOrUnion = type[BaseModel] | tuple[type[BaseModel], ...]  # a model, or the members of a union


def error_lines(
    exc: ValidationError, root: str = "<root>", loc: Callable[[tuple[Any, ...]], str] | None = None,
    *, model: ModelOrUnion | None = None, schema: str | None = None,
) -> list[str]:
    """One ``path: message`` line per problem, written the same way for every input.

    ``loc`` spells a location (default :func:`format_loc`); ``root`` names the whole input where a
    problem has no location ("" for none). ``model`` is the model validated (or the members of the
    union validated): an unknown key then
    gets the closest known one ("did you mean ...?"); ``schema`` is where the keys are listed (a
    command or a file), named after a missing one. A model's own rule (a value error) that already
    starts with its path, or that belongs to the whole input, is printed as written.
    """
    lines = []
    for err in exc.errors():
        path = loc(err["loc"]) if loc else format_loc(err["loc"])
        lines.append(_error_line(err, path, root, model, schema))
    return lines


def _error_line(err: ErrorDetails, path: str, root: str, model: ModelOrUnion | None,
                schema: str | None) -> str:
    msg = str(err["msg"])
    if err["type"] == "extra_forbidden":
        text = f"unknown key; {_unknown_key_hint(model, err['loc'])}"
    elif err["type"] == "missing":
        text = "required key is missing; add it" + (f" (see {schema})" if schema else "")
    elif msg.startswith("Value error, "):
        text = msg.removeprefix("Value error, ")
        if not path or text.startswith(path.split("[")[0]):
            return text
    else:
        got = repr(err.get("input"))
        text = f"{msg} (got {got})" if len(got) <= 80 else msg  # a whole section repeated is noise
    where = path or root
    return f"{where}: {text}" if where else text


def _unknown_key_hint(model: ModelOrUnion | None, loc: tuple[Any, ...]) -> str:
    if model is None:
        return "remove it or fix its spelling"
    known = sorted({name for m in _models_at(model, loc[:-1]) for name in m.model_fields})
    close = difflib.get_close_matches(str(loc[-1]), known, n=1)
    if close:
        return f"did you mean {close[0]!r}?"
    return f"known keys: {', '.join(known)}" if known else "remove it or fix its spelling"


def _models_at(model: ModelOrUnion, loc: tuple[Any, ...]) -> list[type[BaseModel]]:
    """The models a location may be in: a list index stays in the model, a field moves to the
    model(s) of its annotation, a discriminated union's tag narrows to the member it names."""
    models = list(model) if isinstance(model, tuple) else [model]
    for part in loc:
        if isinstance(part, int):
            continue
        fields = [m.model_fields[str(part)] for m in models if str(part) in m.model_fields]
        if fields:
            models = [m for f in fields for m in _models_in(f.annotation)]
        else:  # not a key: the tag pydantic inserts for the member of a discriminated union
            models = [m for m in models if _tagged(m, str(part))] or models
        if not models:
            return []
    return models


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models_in(arg)]


def _tagged(model: type[BaseModel], tag: str) -> bool:
    """Whether a field of ``model`` is a Literal holding ``tag`` (a union member's discriminator)."""
    return any(get_origin(f.annotation) is Literal and tag in get_args(f.annotation)
               for f in model.model_fields.values())


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
