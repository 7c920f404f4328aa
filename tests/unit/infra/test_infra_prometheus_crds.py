"""The Prometheus operator's CRDs are Pulumi-managed objects of prometheus-operator-crds at the
version paired with the pinned kube-prometheus-stack (contract/clusters.yaml), applied
server-side with a forced takeover and retained on delete; kube-prometheus-stack installs none;
the monitors and rules wait for them; a bump of the pins changes the CRD chart's version and a
bump of one pin alone is refused. (The upgrade itself, on a real API server:
tests/integration/cluster/test_prometheus_crds_upgrade.py.)"""

from __future__ import annotations

import copy
from typing import Any

import pulumi
import pytest

from contract import clusters
from contract.cluster_fit import installed_charts
from infra.components.program import build
from infra.components.prometheus_crds import (
    CRD_TYPE,
    PATCH_FORCE,
    CrdPinError,
    crds_chart,
    retain_crds,
)
from infra.plan import build_plan, render_plan
from infra.render import CaptureMocks, capture

from .cluster_variants import derive
from .infra_helpers import ROOT, RecordingMonitor

CHART_TYPE = "kubernetes:helm.sh/v4:Chart"
RELEASE_TYPE = "kubernetes:helm.sh/v3:Release"
MONITOR_TYPE = "kubernetes:monitoring.coreos.com/v1:ServiceMonitor"
RULE_TYPE = "kubernetes:monitoring.coreos.com/v1:PrometheusRule"
SCALED_TYPE = "kubernetes:keda.sh/v1alpha1:ScaledObject"


def pins_bumped(monkeypatch: pytest.MonkeyPatch, stack: dict[str, Any], crds: dict[str, Any]) -> None:
    """contract/clusters.yaml with the two charts' rows changed as a bump would change them."""
    data = copy.deepcopy(clusters._data())
    data["charts"]["kube-prometheus-stack"].update(stack)
    data["charts"]["prometheus-operator-crds"].update(crds)
    monkeypatch.setattr(clusters, "_data", lambda: data)


def test_the_pins_pair_the_crds_with_the_stacks_operator():
    stack = clusters.chart("kube-prometheus-stack")
    crds = crds_chart()
    assert stack.crds_chart == crds.name == "prometheus-operator-crds"
    assert crds.operator == stack.operator and stack.operator is not None
    assert crds.source and stack.operator in crds.source and stack.operator in stack.source


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_crds_are_pulumi_objects_and_the_release_installs_none(stack):
    result = capture(derive(stack), ROOT)
    (chart,) = result.mocks.helm_charts
    pinned = crds_chart()
    assert (chart["chart"], chart["version"]) == (pinned.name, pinned.version)
    assert chart["repositoryOpts"] == {"repo": pinned.repo}
    # Every CRD the chart renders carries the forced server-side apply annotation.
    assert chart["values"] == {"crds": {"annotations": {PATCH_FORCE: "true"}}}
    (release,) = [r for r in result.mocks.helm_releases if r["chart"] == "kube-prometheus-stack"]
    assert release["skipCrds"] is True
    assert release["values"]["crds"] == {"enabled": False}
    assert "prometheus-operator-crds" in installed_charts(result.spec)


def test_without_the_stack_no_crd_chart():
    result = capture(derive("dev", {"observability.install_kube_prometheus_stack": False,
                                    "cluster.operators": ["prometheus-operator", "keda"]}), ROOT)
    assert result.mocks.helm_charts == []


@pulumi.runtime.test
def test_release_monitors_and_rules_wait_for_the_crds(after_build):
    mocks = CaptureMocks()
    recorder = RecordingMonitor(mocks)
    pulumi.runtime.set_mocks(mocks, project="splitstack", stack="test", preview=False,
                             monitor=recorder)
    deployment = build(derive("dev", {"worker_pool.max_replicas": 4}), ROOT)  # a ScaledObject

    def check() -> None:
        (chart,) = mocks.of_type(CHART_TYPE)
        crds = recorder.urns[chart.name]
        waiting = {key: deps for key, deps in recorder.dependencies.items()
                   if key[0] in (RELEASE_TYPE, MONITOR_TYPE, RULE_TYPE)}
        kinds = {t for t, _ in waiting}
        assert kinds == {RELEASE_TYPE, MONITOR_TYPE, RULE_TYPE}
        missing = [key for key, deps in waiting.items()
                   if key[0] != RELEASE_TYPE or "kube-prometheus-stack" in key[1]
                   if crds not in deps]
        assert not missing, f"created before the CRDs: {missing}"
        # Likewise the ScaledObjects wait for KEDA's release (children do not inherit a
        # component's depends_on: a transformation of the program gives them theirs).
        (keda,) = [r for r in mocks.of_type(RELEASE_TYPE) if r.inputs["chart"] == "keda"]
        scaled = {k: d for k, d in recorder.dependencies.items() if k[0] == SCALED_TYPE}
        assert scaled and all(recorder.urns[keda.name] in d for d in scaled.values())

    return after_build(deployment, check)


def test_a_bump_of_both_pins_changes_the_crd_version(monkeypatch):
    pins_bumped(monkeypatch, {"version": "66.2.2", "operator": "v0.78.1"},
                {"version": "16.0.0", "operator": "v0.78.1"})
    result = capture(derive("dev"), ROOT)
    (chart,) = result.mocks.helm_charts
    assert chart["version"] == "16.0.0"
    (release,) = [r for r in result.mocks.helm_releases if r["chart"] == "kube-prometheus-stack"]
    assert release["version"] == "66.2.2"
    assert "prometheus-operator-crds 16.0.0 (operator v0.78.1" in render_plan(build_plan(derive("dev"), ROOT))


def test_a_bump_of_one_pin_alone_is_refused_naming_the_fix(monkeypatch):
    pins_bumped(monkeypatch, {"version": "66.2.2", "operator": "v0.78.1"}, {})
    with pytest.raises(CrdPinError, match=(
            r"kube-prometheus-stack 66.2.2 ships the Prometheus operator v0.78.1 but "
            r"prometheus-operator-crds 15.0.0 has the CRDs of v0.77.1; pin the "
            r"prometheus-operator-crds version whose appVersion is v0.78.1")):
        crds_chart()
    # The program and `infra plan` refuse it the same way (a ValueError: `pulumi up` and the
    # CLI print the message, no traceback).
    with pytest.raises(CrdPinError, match="pin the prometheus-operator-crds version"):
        capture(derive("dev"), ROOT)
    with pytest.raises(CrdPinError, match="pin the prometheus-operator-crds version"):
        build_plan(derive("dev"), ROOT)


def test_crds_are_retained_when_pulumi_deletes_them():
    opts = pulumi.ResourceOptions(ignore_changes=["metadata"])
    args = pulumi.ResourceTransformArgs(custom=True, type_=CRD_TYPE, name="servicemonitors",
                                        props={"kind": "CustomResourceDefinition"}, opts=opts)
    result = retain_crds(args)
    assert result is not None and result.opts.retain_on_delete is True
    assert result.opts.ignore_changes == ["metadata"] and result.props == args.props
    other = pulumi.ResourceTransformArgs(custom=True, type_="kubernetes:core/v1:ConfigMap",
                                         name="x", props={}, opts=opts)
    assert retain_crds(other) is None


def test_plan_states_how_the_crds_are_upgraded():
    text = render_plan(build_plan(derive("prod"), ROOT))
    stack, crds = clusters.chart("kube-prometheus-stack"), crds_chart()
    assert (f"Prometheus operator CRDs: {crds.name} {crds.version} (operator {crds.operator}, "
            f"the operator of {stack.name} {stack.version}) rendered by Pulumi") in text
    assert "installs none (skip_crds, crds.enabled false)" in text
    assert f"  {crds.name} {crds.version} (Kubernetes 1.16+) installed by the program" in text
    assert "helm pull" not in text  # no hand-run commands left

