"""Every object the program renders validates against Kubernetes 1.30..newest (strict: unknown
fields fail) and, for custom resources, against their CRD schemas."""

from __future__ import annotations

import copy

import pytest

from contract.spec_loader import load_stack, parse_spec
from infra.policy.manifests import supported_versions, validate_all, validate_object
from infra.render import capture

from .infra_helpers import ROOT, make_raw


def test_supported_versions_span_130_to_newest():
    versions = supported_versions()
    assert versions[0] == "1.30.0"
    assert len(versions) >= 2 and versions == sorted(versions, key=lambda v: int(v.split(".")[1]))


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_stack_manifests_validate(stack):
    result = capture(load_stack(stack), ROOT)
    kinds = {o["kind"] for o in result.objects}
    assert {"Deployment", "Service", "NetworkPolicy", "ServiceMonitor", "PrometheusRule",
            "PodDisruptionBudget", "StatefulSet", "PersistentVolumeClaim"} <= kinds
    assert validate_all(result.objects) == []


def test_monolithic_shared_gpu_manifests_validate():
    raw = make_raw("existing", "monolithic")
    raw["gpu_node_pool"].update(gpu_sharing="time-slicing", slices_per_gpu=2, node_count=1)
    # The program installs the GPU operator for sharing: the cluster must not run its own.
    raw["cluster"]["operators"] = ["prometheus-operator", "keda"]
    raw["inference_servers"][0]["gpu_memory_utilization"] = 0.45
    result = capture(parse_spec(raw), ROOT)
    kinds = {o["kind"] for o in result.objects}
    assert {"ScaledObject", "ConfigMap", "Namespace"} <= kinds
    assert validate_all(result.objects) == []


def test_external_queue_manifests_validate():
    raw = make_raw("existing", "split")
    raw["queue"] = {"kind": "external"}
    result = capture(parse_spec(raw), ROOT)
    kinds = {o["kind"] for o in result.objects}
    assert "TriggerAuthentication" in kinds and "StatefulSet" not in kinds
    assert validate_all(result.objects) == []


def test_a_misspelt_field_fails_validation():
    result = capture(load_stack("dev"), ROOT)
    dep = copy.deepcopy(next(o for o in result.objects if o["kind"] == "Deployment"))
    pod = dep["spec"]["template"]["spec"]
    pod["enableServicLinks"] = pod.pop("enableServiceLinks")
    (problem,) = validate_object(dep, "1.30.0")
    assert "enableServicLinks" in problem and "Kubernetes 1.30.0" in problem


def test_a_misspelt_crd_field_fails_validation():
    result = capture(load_stack("dev"), ROOT)
    sm = copy.deepcopy(next(o for o in result.objects if o["kind"] == "ServiceMonitor"))
    sm["spec"]["endpoints"][0]["intervall"] = "5s"
    (problem,) = validate_object(sm, "1.30.0")
    assert "CRD schema" in problem and "intervall" in problem


def test_unknown_kind_is_reported_not_skipped():
    obj = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    (problem,) = validate_object(obj, "1.30.0")
    assert "no schema for example.com/v1/Widget" in problem
