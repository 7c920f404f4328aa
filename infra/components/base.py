"""Small pulumi helpers every component uses."""

from __future__ import annotations

from collections.abc import Callable
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


# Our workload Deployments are the program's: a later `pulumi up` takes back a field that another
# manager changed (a runbook's patch, the HPA's replica count once autoscaling is turned off)
# instead of failing on a server-side apply conflict (pulumi-kubernetes does not force by default).
PATCH_FORCE = {"pulumi.com/patchForce": "true"}


def replicas_ignored(scaled: bool) -> list[str]:
    """ignore_changes of a Deployment whose count an autoscaler may own.

    The Deployment always says ``replicas`` (the autoscaler's minimum): removing the field from
    a live object would let the API server default it to 1 (prod's 8 workers down to 1) before
    KEDA's HPA first writes it. Ignored while autoscaled, pulumi-kubernetes applies the live
    value while it still owns the field and leaves it out once the HPA does, so `pulumi up`
    never fights the autoscaler; turning autoscaling off applies the spec's count again.
    """
    return ["spec.replicas"] if scaled else []


def custom_resources_wait_for(
        by_group: dict[str, list[pulumi.Resource]],
) -> Callable[[pulumi.ResourceTransformationArgs], pulumi.ResourceTransformationResult | None]:
    """A transformation for a component: its custom resources (ServiceMonitors, ScaledObjects)
    depend on what installs their API group's CRDs. Children do not inherit a component's
    depends_on, so without it they race the operator's chart and fail with 'no matches for kind'."""

    def transform(args: pulumi.ResourceTransformationArgs) -> pulumi.ResourceTransformationResult | None:
        group = args.type_.split(":")[1].split("/")[0] if args.type_.startswith("kubernetes:") else ""
        wanted = by_group.get(group)
        if not wanted:
            return None
        return pulumi.ResourceTransformationResult(
            args.props, pulumi.ResourceOptions.merge(args.opts, pulumi.ResourceOptions(depends_on=wanted)))

    return transform
