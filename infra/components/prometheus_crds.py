"""The Prometheus operator's CRDs as objects Pulumi manages, so a chart bump upgrades them.

Helm installs the CRDs of a chart's crds/ folder once and never upgrades them, which is where
kube-prometheus-stack keeps them: after a bump of its pin the new operator would run against the
old schemas. So the program installs kube-prometheus-stack without its CRDs and renders
prometheus-community's prometheus-operator-crds chart (its CRDs are templates) with
pulumi-kubernetes' helm.v4.Chart: each CRD becomes a Pulumi resource the provider applies
server-side, and a new chart version is a diff Pulumi applies like any other. The two pins and the
operator they share live in contract/clusters.yaml.

Each CRD carries ``pulumi.com/patchForce: "true"`` (through the chart's own ``crds.annotations``
value): on a cluster where Helm or someone else applied these CRDs first, their fields belong to
that field manager, and a conflict with it is overridden (as `kubectl apply --server-side
--force-conflicts` does) instead of failing the update. Each is retained on delete: removing the
chart from the program (or `pulumi destroy`) must not delete the CRDs, which would delete every
ServiceMonitor and PrometheusRule in the cluster, other teams' included; Helm leaves CRDs in place
for the same reason.
"""

from __future__ import annotations

from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s

from contract import clusters

KUBE_PROMETHEUS_STACK_CHART = "kube-prometheus-stack"
PATCH_FORCE = "pulumi.com/patchForce"
CRD_TYPE = "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition"


class CrdPinError(ValueError):
    """The two charts' pins name different operators."""


def crds_chart() -> clusters.Chart:
    """The CRD chart paired with the pinned kube-prometheus-stack; refuses a pair whose
    operators differ (one pin bumped without the other)."""
    stack = clusters.chart(KUBE_PROMETHEUS_STACK_CHART)
    if stack.crds_chart is None:
        raise CrdPinError(f"contract/clusters.yaml: charts.{stack.name} names no crds_chart; "
                          "set it to prometheus-operator-crds")
    crds = clusters.chart(stack.crds_chart)
    if crds.operator != stack.operator:
        raise CrdPinError(
            f"contract/clusters.yaml: {stack.name} {stack.version} ships the Prometheus operator "
            f"{stack.operator} but {crds.name} {crds.version} has the CRDs of {crds.operator}; "
            f"pin the {crds.name} version whose appVersion is {stack.operator}")
    return crds


def crds_values() -> dict:
    """The CRD chart's values: every CRD annotated for a forced server-side apply."""
    return {"crds": {"annotations": {PATCH_FORCE: "true"}}}


def retain_crds(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
    """Transform of the chart's children: CRDs stay in the cluster when Pulumi deletes them."""
    if args.type_ != CRD_TYPE:
        return None
    return pulumi.ResourceTransformResult(
        props=args.props,
        opts=pulumi.ResourceOptions.merge(args.opts, pulumi.ResourceOptions(retain_on_delete=True)))


def operator_crds(name: str, opts: pulumi.ResourceOptions,
                  local_chart: Path | None = None) -> k8s.helm.v4.Chart:
    """The CRDs of the pinned Prometheus operator (cluster-scoped: no namespace).
    ``local_chart``: an unpacked chart directory in place of the pinned repository's chart (a
    mirror where the repository cannot be reached; the upgrade test's generated charts)."""
    merged = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(transforms=[retain_crds]))
    if local_chart is not None:
        return k8s.helm.v4.Chart(name, chart=str(local_chart), values=crds_values(), opts=merged)
    chart = crds_chart()
    return k8s.helm.v4.Chart(
        name, chart=chart.name, version=chart.version, repository_opts={"repo": chart.repo},
        values=crds_values(), opts=merged)
