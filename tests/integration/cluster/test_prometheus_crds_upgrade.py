"""The Prometheus operator's CRDs upgraded by `pulumi up` on a real API server, the way the program
installs them (infra/components/prometheus_crds.py): a CRD Helm applied first (an earlier
kube-prometheus-stack install) is taken over, a new chart version's CRD replaces the old one
server-side, the objects of the kind survive, and `pulumi destroy` leaves the CRD in place.

No chart can be downloaded here: the two chart versions are generated in the test's folder in the
layout of prometheus-community's prometheus-operator-crds (the CRDs are templates of a `crds`
subchart, annotated from its `annotations` value). Their content is the ServiceMonitor CRD of the
prometheus-operator release the local cluster installs (tools/go-tools.env, from its module); the
"old" version lacks one field of the schema and names an older operator.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml
from kubernetes import client

from infra.automation import PulumiSession
from infra.components.prometheus_crds import PATCH_FORCE, operator_crds
from stack.cluster.cluster import LocalCluster
from stack.cluster.tools import go_tools
from testsupport.cluster import ROOT

pytestmark = pytest.mark.integration
CRD = "servicemonitors.monitoring.coreos.com"
VERSION_KEY = "operator.prometheus.io/version"
DROPPED = "selectorMechanism"  # the field the "old" schema lacks
OLD_OPERATOR = "0.84.0"
ANNOTATIONS = ("{{- with .Values.annotations }}\n"
               "{{- toYaml . | nindent 4 }}\n"
               "{{- end }}\n")


def spec_properties(crd: dict[str, Any]) -> dict[str, Any]:
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]


def write_chart(root: Path, version: str, crd: dict[str, Any]) -> Path:
    """An unpacked prometheus-operator-crds-shaped chart holding ``crd`` as a template."""
    chart = root / f"prometheus-operator-crds-{version}"
    templates = chart / "charts" / "crds" / "templates"
    templates.mkdir(parents=True)
    (chart / "Chart.yaml").write_text(yaml.safe_dump({
        "apiVersion": "v2", "name": "prometheus-operator-crds", "version": version,
        "dependencies": [{"name": "crds", "version": "0.0.0"}]}))
    (chart / "values.yaml").write_text("crds:\n  annotations: {}\n")
    (chart / "charts" / "crds" / "Chart.yaml").write_text(yaml.safe_dump(
        {"apiVersion": "v2", "name": "crds", "version": "0.0.0"}))
    text = yaml.safe_dump(crd, sort_keys=True)
    assert "{{" not in text and text.count("  annotations:\n") >= 1
    text = text.replace("  annotations:\n", "  annotations:\n" + ANNOTATIONS, 1)
    (templates / "crd-servicemonitors.yaml").write_text(text)
    return chart


@dataclass
class CrdSession(PulumiSession):
    """A Pulumi session whose inline program is only the CRD chart, at ``chart``."""

    chart: list[Path] = field(default_factory=list)

    def program(self) -> Callable[[], None]:
        def run() -> None:
            operator_crds("prometheus-operator-crds", pulumi.ResourceOptions(), local_chart=self.chart[0])
        return run


@pytest.fixture(scope="module")
def charts(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, Any]]:
    new = yaml.safe_load((go_tools(ROOT).crds / "monitoring.coreos.com_servicemonitors.yaml").read_text())
    assert DROPPED in spec_properties(new)
    old = copy.deepcopy(new)
    del spec_properties(old)[DROPPED]
    old["metadata"]["annotations"][VERSION_KEY] = OLD_OPERATOR
    root = tmp_path_factory.mktemp("charts")
    return write_chart(root, "14.0.0", old), write_chart(root, "15.0.0", new), old


@pytest.fixture(scope="module")
def engine(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CrdSession]:
    work = tmp_path_factory.mktemp("pulumi")
    stack_file = work / "stack.yaml"
    stack_file.write_text("config: {}\n")
    s = CrdSession("crds", ROOT, work / "session", go_tools(ROOT), cluster.kubeconfig)
    s.prepare(source_stack_file=stack_file)
    yield s


def read_crd(cluster: LocalCluster) -> Any:
    return client.ApiextensionsV1Api(cluster.api()).read_custom_resource_definition(CRD)


def managers(crd: Any) -> dict[str, str]:
    return {f.manager: f.operation for f in crd.metadata.managed_fields or []}


def test_pulumi_takes_over_then_upgrades_the_crds_and_leaves_them(cluster, charts, engine) -> None:
    old_chart, new_chart, old = charts
    api = cluster.api()
    ext = client.ApiextensionsV1Api(api)
    custom = client.CustomObjectsApi(api)
    # An earlier install: Helm (field manager "helm", an update) put the old CRD there.
    body = copy.deepcopy(old)
    body["metadata"]["resourceVersion"] = read_crd(cluster).metadata.resource_version
    ext.replace_custom_resource_definition(CRD, body, field_manager="helm")
    assert read_crd(cluster).metadata.annotations[VERSION_KEY] == OLD_OPERATOR
    custom.create_namespaced_custom_object("monitoring.coreos.com", "v1", "default", "servicemonitors", {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
        "metadata": {"name": "kept"}, "spec": {"selector": {}, "endpoints": [{"port": "http"}]}})
    stack = engine.stack_handle()
    transcript: list[str] = []
    try:
        # The program's first `pulumi up` at the old pin: the CRD Helm owns is taken over (forced
        # server-side apply), not refused on conflicts.
        engine.chart[:] = [old_chart]
        assert stack.up(on_output=transcript.append, color="never").summary.result == "succeeded"
        crd = read_crd(cluster)
        assert crd.metadata.annotations[PATCH_FORCE] == "true"
        assert any(m.startswith("pulumi-kubernetes") and op == "Apply" for m, op in managers(crd).items()), \
            managers(crd)
        assert DROPPED not in crd.spec.versions[0].schema.open_apiv3_schema.properties["spec"].properties
        # The bump: the new chart version's CRD is applied server-side over the old one.
        engine.chart[:] = [new_chart]
        preview = stack.preview(on_output=transcript.append, color="never")
        assert preview.change_summary.get("update") == 1, preview.change_summary
        assert stack.up(on_output=transcript.append, color="never").summary.result == "succeeded"
        crd = read_crd(cluster)
        new_operator = yaml.safe_load((new_chart / "charts/crds/templates/crd-servicemonitors.yaml").read_text(
        ).replace(ANNOTATIONS, ""))["metadata"]["annotations"][VERSION_KEY]
        assert crd.metadata.annotations[VERSION_KEY] == new_operator != OLD_OPERATOR
        assert DROPPED in crd.spec.versions[0].schema.open_apiv3_schema.properties["spec"].properties
        assert any(c.type == "Established" and c.status == "True" for c in crd.status.conditions)
        assert custom.get_namespaced_custom_object("monitoring.coreos.com", "v1", "default",
                                                   "servicemonitors", "kept")
        # Nothing left to do at the new pin.
        stack.preview(on_output=transcript.append, color="never", expect_no_changes=True)
        # `pulumi destroy` (or dropping the chart) leaves the CRD and the objects of its kind.
        assert stack.destroy(on_output=transcript.append, color="never").summary.result == "succeeded"
        assert read_crd(cluster).metadata.annotations[VERSION_KEY] == new_operator
        assert custom.get_namespaced_custom_object("monitoring.coreos.com", "v1", "default",
                                                   "servicemonitors", "kept")
    finally:
        print("\n".join(transcript))
