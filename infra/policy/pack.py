"""CrossGuard policies built from :mod:`infra.policy.rules` (importable without serving: the
``PolicyPack`` constructor starts a gRPC server, so only ``__main__`` constructs it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from infra.policy import rules

PACK_NAME = "splitstack"


def kubernetes_object(resource_type: str, props: Any) -> dict[str, Any] | None:
    """CrossGuard's props of a pulumi-kubernetes resource are the Kubernetes object itself."""
    if not resource_type.startswith("kubernetes:") or "kind" not in props:
        return None
    return dict(props)


def resource_validator(rule: rules.Rule) -> Callable[[ResourceValidationArgs, ReportViolation], None]:
    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        obj = kubernetes_object(args.resource_type, args.props)
        if obj is None:
            return
        for message in rule.check(obj):
            report_violation(message, args.urn)
    return validate


def stack_validator(rule: rules.StackRule) -> Callable[[StackValidationArgs, ReportViolation], None]:
    def validate(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        objs = [o for r in args.resources
                if (o := kubernetes_object(r.resource_type, r.props)) is not None]
        for message in rule.check(objs):
            report_violation(message, None)
    return validate


def validate_custom_timeouts(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    """A GPU server's Deployment waits in Pulumi at least its startup budget."""
    obj = kubernetes_object(args.resource_type, args.props)
    if obj is None or obj.get("kind") != "Deployment" or not rules.is_gpu_workload(obj):
        return
    meta = rules.pod_template(obj)[0]  # type: ignore[index]  # a GPU workload always has a pod template
    budget = int((meta.get("annotations") or {}).get(rules.STARTUP_BUDGET_ANNOTATION, 0))
    timeouts = args.opts.custom_timeouts if args.opts else None
    for what in ("create", "update"):
        seconds = getattr(timeouts, f"{what}_seconds", 0) or 0
        if seconds < budget:
            report_violation(
                f"{rules.ident(obj)}: customTimeouts.{what} is {seconds:g} s < startup budget "
                f"{budget} s; `pulumi up` would give up while the model still loads: set "
                f"customTimeouts {what} to at least {budget}s", args.urn)


POLICIES: list[Any] = [
    *(ResourceValidationPolicy(name=r.name, description=r.description,
                               validate=resource_validator(r),
                               enforcement_level=EnforcementLevel.MANDATORY)
      for r in rules.RESOURCE_RULES),
    ResourceValidationPolicy(name="custom-timeouts", description=" ".join(
        (validate_custom_timeouts.__doc__ or "").split()), validate=validate_custom_timeouts,
        enforcement_level=EnforcementLevel.MANDATORY),
    *(StackValidationPolicy(name=r.name, description=r.description, validate=stack_validator(r),
                            enforcement_level=EnforcementLevel.MANDATORY)
      for r in rules.STACK_RULES),
]
