"""Schema validation of rendered objects: built-in kinds with kubernetes-validate (strict: an
unknown field is an error), custom resources with :mod:`infra.policy.crd_schemas`."""

from __future__ import annotations

from typing import Any

import jsonschema

from infra.policy.crd_schemas import SCHEMAS

# Oldest Kubernetes the manifests must work on (preStop sleep is GA-on-by-default from 1.30).
MIN_KUBERNETES = "1.30.0"


def supported_versions() -> list[str]:
    """1.30 up to the newest version the installed kubernetes-validate knows."""
    import kubernetes_validate

    latest = tuple(int(x) for x in kubernetes_validate.latest_version().split(".")[:2])
    first = tuple(int(x) for x in MIN_KUBERNETES.split(".")[:2])
    return [f"1.{minor}.0" for minor in range(first[1], latest[1] + 1)]


def validate_object(obj: dict[str, Any], version: str) -> list[str]:
    """Problems of one object against Kubernetes ``version`` (empty list = valid)."""
    import kubernetes_validate

    where = f"{obj.get('kind')} {obj.get('metadata', {}).get('name')}"
    crd = SCHEMAS.get((obj.get("apiVersion", ""), obj.get("kind", "")))
    if crd is not None:
        validator = jsonschema.Draft202012Validator(crd)
        return [f"{where} (CRD schema): {'.'.join(map(str, e.absolute_path)) or '<root>'}: "
                f"{e.message}" for e in validator.iter_errors(obj)]
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.SchemaNotFoundError:
        return [f"{where}: no schema for {obj.get('apiVersion')}/{obj.get('kind')} in Kubernetes "
                f"{version} or in infra/policy/crd_schemas.py; add one"]
    except kubernetes_validate.ValidationError as exc:
        path = ".".join(map(str, exc.path)) or "<root>"
        return [f"{where} (Kubernetes {version}): {path}: {exc.message}"]
    return []


def validate_all(objs: list[dict[str, Any]], versions: list[str] | None = None) -> list[str]:
    problems: list[str] = []
    for version in versions or supported_versions():
        for obj in objs:
            problems += validate_object(obj, version)
    return problems
