"""Read ``Pulumi.<stack>.yaml`` into the typed :class:`contract.spec.Spec`.

Pulumi keeps config as ``config: {"splitstack:<key>": value}``; other namespaces (``aws:``,
``kubernetes:``) belong to providers and are ignored here. Errors are collected into one
:class:`SpecError` whose lines each name a field path, what is wrong, and the fix.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from contract.image_refs import merge_lock
from contract.models import error_lines
from contract.spec import Spec

NAMESPACE = "splitstack"


class SpecError(Exception):
    """The spec could not be loaded; ``problems`` holds one line per bad field."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"invalid deployment spec {source}:\n{lines}")


def project_root(start: Path | None = None) -> Path:
    """The folder holding ``Pulumi.yaml``: $SPLITSTACK_ROOT, else searched upward from start/cwd."""
    env = os.environ.get("SPLITSTACK_ROOT")
    if env:
        return Path(env).resolve()
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "Pulumi.yaml").is_file():
            return folder
    # An installed package run from elsewhere: fall back to the source tree it came from.
    return Path(__file__).resolve().parent.parent


def stack_file(stack: str, root: Path | None = None) -> Path:
    return (root or project_root()) / f"Pulumi.{stack}.yaml"


def available_stacks(root: Path | None = None) -> list[str]:
    folder = root or project_root()
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in folder.glob("Pulumi.*.yaml"))


def load_stack(
    stack: str, root: Path | None = None, overrides: dict[str, Any] | None = None
) -> Spec:
    """Load and validate a stack; ``overrides`` maps dotted paths to values (CLI flags)."""
    path = stack_file(stack, root)
    if not path.is_file():
        known = available_stacks(path.parent)
        raise SpecError(
            str(path),
            [f"stack {stack!r} has no file {path.name}; known stacks: {known or 'none'} "
             f"(create {path.name} with a 'config:' mapping of splitstack: keys)"],
        )
    return load_file(path, stack, overrides)


def load_file(path: Path, stack: str, overrides: dict[str, Any] | None = None) -> Spec:
    """Load a Pulumi stack file from any path (fixtures, `spec validate FILE`)."""
    try:
        document = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise SpecError(str(path), [f"not valid YAML: {exc}"]) from exc
    if not isinstance(document, dict) or not isinstance(document.get("config", {}), dict):
        raise SpecError(str(path), ["top level must be a mapping with a 'config:' mapping"])
    raw = config_to_mapping(document.get("config") or {}, str(path))
    raw.setdefault("stack", stack)
    raw = merge_lock(raw, path.parent, stack)  # the digests `splitstack images push` recorded
    for dotted, value in (overrides or {}).items():
        set_path(raw, dotted, value)
    return parse_spec(raw, str(path))


def config_to_mapping(config: dict[str, Any], source: str) -> dict[str, Any]:
    """Strip the ``splitstack:`` prefix; refuse secrets stored by value."""
    raw: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in config.items():
        namespace, _, name = str(key).partition(":")
        if namespace != NAMESPACE or not name:
            continue
        if isinstance(value, dict) and set(value) == {"secure"}:
            problems.append(
                f"{name}: holds a Pulumi secret value; splitstack takes secrets by reference "
                "only: give a SecretRef {name, key, env} and keep the value in a Kubernetes "
                "Secret / environment variable"
            )
            continue
        raw[name] = value
    if problems:
        raise SpecError(source, problems)
    return raw


def parse_spec(raw: dict[str, Any], source: str = "<spec>") -> Spec:
    try:
        return Spec.model_validate(raw)
    except ValidationError as exc:
        raise SpecError(source, error_lines(exc, model=Spec, schema="`splitstack spec schema`")) from None


def set_path(raw: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``a.b.0.c`` in nested dicts/lists, creating dicts on the way."""
    parts = dotted.split(".")
    node: Any = raw
    for part, nxt in zip(parts, parts[1:]):
        key: Any = int(part) if isinstance(node, list) else part
        if isinstance(node, dict) and key not in node:
            node[key] = [] if nxt.isdigit() else {}
        node = node[key]
    last = parts[-1]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


