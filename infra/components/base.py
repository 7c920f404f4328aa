"""Small pulumi helpers every component uses."""

from __future__ import annotations

from typing import Any

import pulumi


def child(parent: pulumi.Resource, **kwargs: Any) -> pulumi.ResourceOptions:
    """Options of a child resource: parented (so providers and aliases flow down)."""
    return pulumi.ResourceOptions(parent=parent, **kwargs)


def metadata(name: str, namespace: str, labels: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": dict(labels), **extra}


def quantity_gib(gib: float) -> str:
    return f"{int(gib)}Gi" if float(gib).is_integer() else f"{int(gib * 1024)}Mi"


def duration(seconds: int) -> str:
    """A Pulumi customTimeouts duration (Go syntax)."""
    return f"{int(seconds)}s"
