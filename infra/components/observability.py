"""Observability: PrometheusRules from alerts/, Grafana dashboards as ConfigMaps, and optionally
kube-prometheus-stack through Helm, with the Alertmanager config generated from the SLO spec.

The rule and dashboard files are read by infra/artifacts.py (plain functions, so Compose and tests
can point them at any folder); the component scopes the rules to the deployment's namespace
(every selector matches it, every alert carries it) and turns them into objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from contract import clusters, naming
from contract.cluster_fit import block_min_gib, prometheus_storage, scaled_servers, storage_class
from contract.spec import Spec
from infra.artifacts import Dashboard, RuleFile, scope_rule_files
from infra.components.base import child, metadata
from infra.components.prometheus_crds import KUBE_PROMETHEUS_STACK_CHART, operator_crds
from slo.alertmanager import alertmanager_config, secret_refs
from slo.rules import generate_rules
from slo.spec import SLOSpec, load_spec

# Helm's 300 s default is short for the chart's CRDs, admission webhook jobs and Prometheus.
KUBE_PROMETHEUS_STACK_TIMEOUT_S = 600


PROMETHEUS_PORT = naming.PROMETHEUS_PORT


def prometheus_ingress(spec: Spec) -> dict:
    """NetworkPolicy spec for the Prometheus this program installs: its port only from its own
    namespace (Grafana, Alertmanager, the operator), the stack's namespace and, when a server
    scales on vLLM's queue, KEDA's operator (cluster.keda_namespace), which runs the query;
    `kubectl port-forward` (the bench, the runbooks from a laptop) is not subject to it."""
    def ns(name: str) -> dict:
        return {"namespace_selector": {"match_labels": {"kubernetes.io/metadata.name": name}}}
    peers = [ns(naming.prometheus_namespace(spec)), ns(spec.namespace)]
    if scaled_servers(spec):
        peers.append(ns(naming.keda_namespace(spec)))
    return {
        "pod_selector": {"match_labels": dict(naming.PROMETHEUS_POD_LABELS)},
        "policy_types": ["Ingress"],
        "ingress": [{"from": peers, "ports": [{"protocol": "TCP", "port": PROMETHEUS_PORT}]}],
    }


def claim_template(storage_class_name: str | None, size_gib: int) -> dict:
    """A volumeClaimTemplate for the operator's StatefulSets (Kubernetes' own spelling)."""
    return {"spec": {"storageClassName": storage_class_name, "accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": f"{size_gib}Gi"}}}}


def monitor_selectors(spec: Spec) -> dict:
    """What the installed Prometheus selects: the labels the program puts on its monitors and
    rules (observability.monitor_labels), in every namespace."""
    match = {"matchLabels": naming.monitor_labels(spec)}
    return {"serviceMonitorSelector": match, "podMonitorSelector": match, "ruleSelector": match,
            "serviceMonitorNamespaceSelector": {}, "podMonitorNamespaceSelector": {},
            "ruleNamespaceSelector": {}}


def kube_prometheus_stack_values(spec: Spec, slo_spec: SLOSpec | None = None) -> dict:
    o = spec.observability
    block = storage_class(spec, "block").name
    tsdb = prometheus_storage(spec)
    prometheus: dict = {
        "scrapeInterval": f"{o.scrape_interval_s}s",
        "evaluationInterval": f"{o.evaluation_interval_s}s",
        "retention": f"{o.retention_h}h",
        # The SLO windows survive a restart: a volume sized from retention x series / scrape
        # interval (contract/sizing.py), and a size limit below it so the disk never fills.
        "retentionSize": f"{tsdb.retention_size_gb}GB",
        "storageSpec": {"volumeClaimTemplate": claim_template(block, tsdb.size_gib)},
        # No TSDB admin API (delete series, snapshots), whatever the chart's default becomes.
        # The operator keeps --web.enable-lifecycle for its config reloader (same pod):
        # prometheus_ingress() keeps /-/quit and /-/reload off the rest of the cluster.
        "enableAdminAPI": False,
        **monitor_selectors(spec),
    }
    if o.long_term_store_url:
        prometheus["remoteWrite"] = [{"url": o.long_term_store_url}]
    slo_spec = (slo_spec or load_spec()).scoped(spec.namespace)
    return {
        # The CRDs come from prometheus-operator-crds (infra/components/prometheus_crds.py), which
        # Pulumi upgrades on a bump; the release's own crds subchart (installed once by Helm, never
        # upgraded) is off, and the Release skips CRDs as well.
        "crds": {"enabled": False},
        "prometheus": {"prometheusSpec": prometheus},
        # The chart renders this into the Alertmanager's config Secret, replacing its default
        # (which routes everything to a "null" receiver).
        # The receivers' credentials: the operator mounts each named Secret (in the monitoring
        # namespace) at /etc/alertmanager/secrets/<name>/, where the config's *_file fields point.
        # Silences and the notification log survive a restart on their own claim.
        "alertmanager": {"config": alertmanager_config(slo_spec, o.alertmanager),
                         "alertmanagerSpec": {
                             "secrets": sorted({r.name for r in secret_refs(o.alertmanager)}),
                             "storage": {"volumeClaimTemplate": claim_template(
                                 block, alertmanager_storage_gib(spec))}}},
        "grafana": {"sidecar": {"dashboards": {
            "enabled": True, "label": naming.GRAFANA_DASHBOARD_LABEL, "labelValue": "1",
            "searchNamespace": "ALL"}}},
    }


def alertmanager_storage_gib(spec: Spec) -> int:
    return max(spec.observability.alertmanager_storage_gib, block_min_gib(spec))


def scoped_rule_files(spec: Spec, rule_files: list[RuleFile], slo_spec: SLOSpec | None = None) -> list[RuleFile]:
    """The deployment's rules: generated ones rendered for its namespace, hand-written ones scoped."""
    scoped = (slo_spec or load_spec()).scoped(spec.namespace)
    generated = {stem: body["groups"] for stem, body in generate_rules(scoped).items()}
    return scope_rule_files(rule_files, spec.namespace, generated)


@dataclass(frozen=True)
class ObservabilityArgs:
    spec: Spec
    rule_files: list[RuleFile] = field(default_factory=list)
    dashboards: list[Dashboard] = field(default_factory=list)
    slo_spec: SLOSpec | None = None  # None: slo/objectives.yaml


class ObservabilityComponent(pulumi.ComponentResource):
    def __init__(self, name: str, args: ObservabilityArgs,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("splitstack:infra:Observability", name, None, opts)
        spec = args.spec
        ns = spec.namespace
        self.release: k8s.helm.v3.Release | None = None
        self.crds: k8s.helm.v4.Chart | None = None
        if spec.observability.install_kube_prometheus_stack:
            chart = clusters.chart(KUBE_PROMETHEUS_STACK_CHART)
            self.crds = operator_crds(f"{name}-prometheus-operator-crds", child(self))
            self.release = k8s.helm.v3.Release(
                f"{name}-kube-prometheus-stack",
                name=naming.PROMETHEUS_RELEASE,
                chart=KUBE_PROMETHEUS_STACK_CHART, version=chart.version,
                repository_opts={"repo": chart.repo}, timeout=KUBE_PROMETHEUS_STACK_TIMEOUT_S,
                namespace=naming.prometheus_namespace(spec), create_namespace=True,
                skip_crds=True,
                values=kube_prometheus_stack_values(spec, args.slo_spec),
                opts=child(self, depends_on=[self.crds]),
            )
        # The monitors and rules need the CRDs (ServiceMonitors of the workloads wait for this
        # whole component, infra/components/program.py).
        after = [r for r in (self.crds, self.release) if r is not None]
        self.prometheus_policy = None
        if self.release is not None:
            self.prometheus_policy = k8s.networking.v1.NetworkPolicy(
                f"{name}-prometheus-ingress",
                metadata=metadata("prometheus-ingress", naming.prometheus_namespace(spec),
                                  naming.labels("network-policy", "prometheus-ingress")),
                spec=prometheus_ingress(spec),
                opts=child(self, depends_on=after),
            )
        self.rules = [
            k8s.apiextensions.CustomResource(
                f"{name}-{rule.name}",
                api_version="monitoring.coreos.com/v1", kind="PrometheusRule",
                metadata=metadata(rule.name, ns, {
                    **naming.labels("alerts", rule.name), **naming.monitor_labels(spec)},
                    annotations={"splitstack.dev/source": rule.source}),
                spec={"groups": rule.groups},
                opts=child(self, depends_on=after),
            )
            for rule in scoped_rule_files(spec, args.rule_files, args.slo_spec)
        ]
        self.dashboards = []
        if spec.observability.grafana_dashboards and args.dashboards:
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
