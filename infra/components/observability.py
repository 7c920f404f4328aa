"""Observability: PrometheusRules from alerts/, Grafana dashboards as ConfigMaps, and optionally
kube-prometheus-stack through Helm.

The rule and dashboard files are read by :func:`load_rule_files` / :func:`load_dashboards` (plain
functions, so the CLI and tests can point them at any folder); the component only turns them
into objects.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s
import yaml

from contract import naming
from contract.spec import Spec
from infra.components.base import child, metadata

KUBE_PROMETHEUS_STACK_CHART = "kube-prometheus-stack"
KUBE_PROMETHEUS_STACK_VERSION = "65.1.1"
PROMETHEUS_COMMUNITY_REPO = "https://prometheus-community.github.io/helm-charts"
RULE_GLOBS = ("*.rules.yml", "generated/*.rules.yml")
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: the rule files are large


@dataclass(frozen=True)
class RuleFile:
    name: str  # DNS-1123 object name
    groups: list[dict]
    source: str


@dataclass(frozen=True)
class Dashboard:
    name: str
    json_text: str
    source: str


def object_name(prefix: str, path: Path) -> str:
    stem = path.name.split(".")[0]
    return f"{prefix}-" + re.sub(r"[^a-z0-9-]+", "-", stem.lower()).strip("-")


def load_rule_files(alerts_dir: Path) -> list[RuleFile]:
    """Every Prometheus rule file under alerts/ (hand-written and generated), in a stable order."""
    out: list[RuleFile] = []
    names: dict[str, str] = {}
    for pattern in RULE_GLOBS:
        for path in sorted(alerts_dir.glob(pattern)):
            doc = yaml.load(path.read_text(), Loader=SAFE_LOADER) or {}
            groups = doc.get("groups")
            if not isinstance(groups, list) or not groups:
                raise ValueError(
                    f"{path}: no 'groups:' list; a Prometheus rule file needs "
                    "groups: [{name, rules}] (check it with `promtool check rules`)")
            prefix = "splitstack-gen" if path.parent.name == "generated" else "splitstack"
            name = object_name(prefix, path)
            if name in names:
                raise ValueError(f"{path}: object name {name!r} also used by {names[name]}; rename one")
            names[name] = str(path)
            out.append(RuleFile(name, groups, str(path.relative_to(alerts_dir.parent))))
    return out


def load_dashboards(dashboards_dir: Path) -> list[Dashboard]:
    out = []
    for path in sorted(dashboards_dir.glob("*.json")):
        text = path.read_text()
        try:
            json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not valid JSON ({exc}); regenerate the dashboards") from exc
        out.append(Dashboard(object_name("splitstack-dashboard", path), text,
                             str(path.relative_to(dashboards_dir.parent))))
    return out


def kube_prometheus_stack_values(spec: Spec) -> dict:
    o = spec.observability
    return {
        "prometheus": {"prometheusSpec": {
            "scrapeInterval": f"{o.scrape_interval_s}s",
            "evaluationInterval": f"{o.evaluation_interval_s}s",
            "retention": f"{o.retention_h}h",
        }},
        "grafana": {"sidecar": {"dashboards": {
            "enabled": True, "label": naming.GRAFANA_DASHBOARD_LABEL, "labelValue": "1",
            "searchNamespace": "ALL"}}},
    }


@dataclass(frozen=True)
class ObservabilityArgs:
    spec: Spec
    rule_files: list[RuleFile] = field(default_factory=list)
    dashboards: list[Dashboard] = field(default_factory=list)


class ObservabilityComponent(pulumi.ComponentResource):
    def __init__(self, name: str, args: ObservabilityArgs,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("splitstack:infra:Observability", name, None, opts)
        spec = args.spec
        ns = spec.namespace
        self.release: k8s.helm.v3.Release | None = None
        if spec.observability.install_kube_prometheus_stack:
            self.release = k8s.helm.v3.Release(
                f"{name}-kube-prometheus-stack",
                name=naming.PROMETHEUS_RELEASE,
                chart=KUBE_PROMETHEUS_STACK_CHART, version=KUBE_PROMETHEUS_STACK_VERSION,
                repository_opts={"repo": PROMETHEUS_COMMUNITY_REPO},
                namespace=naming.MONITORING_NAMESPACE, create_namespace=True,
                values=kube_prometheus_stack_values(spec),
                opts=child(self),
            )
        after = [self.release] if self.release else []
        self.rules = [
            k8s.apiextensions.CustomResource(
                f"{name}-{rule.name}",
                api_version="monitoring.coreos.com/v1", kind="PrometheusRule",
                metadata=metadata(rule.name, ns, {
                    **naming.labels("alerts", rule.name), "release": naming.PROMETHEUS_RELEASE},
                    annotations={"splitstack.dev/source": rule.source}),
                spec={"groups": rule.groups},
                opts=child(self, depends_on=after),
            )
            for rule in args.rule_files
        ]
        self.dashboards = []
        if spec.observability.grafana_dashboards:
            self.dashboards = [
                k8s.core.v1.ConfigMap(
                    f"{name}-{d.name}",
                    metadata=metadata(d.name, ns, {
                        **naming.labels("dashboard", d.name), naming.GRAFANA_DASHBOARD_LABEL: "1"},
                        annotations={"splitstack.dev/source": d.source}),
                    data={f"{d.name}.json": d.json_text},
                    opts=child(self),
                )
                for d in args.dashboards
            ]
        self.prometheus_url = pulumi.Output.from_input(naming.prometheus_url(spec))
        self.register_outputs({"prometheus_url": self.prometheus_url,
                               "rules": len(self.rules), "dashboards": len(self.dashboards)})
