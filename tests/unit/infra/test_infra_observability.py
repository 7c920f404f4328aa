"""The observability component: rules scoped to the deployment's namespace, kube-prometheus-stack
with the retention the SLOs need and the Alertmanager config generated from the SLO spec."""

from __future__ import annotations

import subprocess

import pulumi
import yaml

from contract.spec_loader import load_stack, project_root
from infra.components.program import build
from slo.exprcheck import PARSE_ERRORS, selectors

ROOT = project_root()


def test_prod_rules_are_scoped_and_alertmanager_is_generated(mocks, tmp_path):
    spec = load_stack("prod")

    @pulumi.runtime.test
    def run():
        build(spec, ROOT)

    run()
    rules = [o for o in mocks.kubernetes_objects if o["kind"] == "PrometheusRule"]
    assert len(rules) == len(list((ROOT / "alerts").glob("*.rules.yml"))) + \
        len(list((ROOT / "alerts" / "generated").glob("*.rules.yml")))
    job_selectors = job_alerts = 0
    for obj in rules:
        for group in obj["spec"]["groups"]:
            for rule in group["rules"]:
                try:
                    sels = selectors(rule["expr"])
                except PARSE_ERRORS as e:  # pragma: no cover - the message names the rule
                    raise AssertionError(f"{obj['metadata']['name']}: {rule['expr']}: {e}") from None
                for sel in sels:
                    matchers = {m.name: m.value for m in sel.matchers.matchers}
                    if "job" in matchers:
                        job_selectors += 1
                        assert matchers.get("namespace") == spec.namespace, (obj["metadata"]["name"], rule["expr"])
                if "alert" in rule and 'job="' in rule["expr"]:
                    job_alerts += 1
                    assert rule["labels"]["namespace"] == spec.namespace, rule["alert"]
    assert job_selectors > 100
    assert job_alerts >= 20, job_alerts  # the hand-written and the SLO alerts that select a job
    (kps,) = [r for r in mocks.helm_releases if r["chart"] == "kube-prometheus-stack"]
    assert kps["values"]["prometheus"]["prometheusSpec"]["retention"] == "744h"
    am = tmp_path / "alertmanager.yml"
    am.write_text(yaml.safe_dump(kps["values"]["alertmanager"]["config"]))
    checked = subprocess.run(["amtool", "check-config", str(am)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    inhibit = kps["values"]["alertmanager"]["config"]["inhibit_rules"][0]
    assert inhibit["source_matchers"] == ['alertname="InferenceServerUnreachable"']
    assert inhibit["equal"] == ["namespace"]


def _rule_jobs() -> set[str]:
    import re

    files = sorted((ROOT / "alerts").glob("*.rules.yml")) + sorted((ROOT / "alerts" / "generated").glob("*.rules.yml"))
    return set(re.findall(r'job="([^"]+)"', "".join(f.read_text() for f in files)))


def test_every_deployment_names_its_jobs_as_the_rules_select_them(mocks):
    """The job names come from the deployment: the local stack's and Compose's scrape configs and
    the ServiceMonitors' job label all produce the jobs the rules select on, and no rule needs
    the deployment's own Prometheus job (kube-prometheus-stack names it differently)."""
    from contract import naming
    from infra.compose import prometheus_config as compose_config
    from stack.prometheus_config import prometheus_config as local_config

    wanted = _rule_jobs()
    assert wanted == {"inference-server", "workers"}
    local = {j["job_name"] for j in local_config(load_stack("local"), [])["scrape_configs"]}
    compose = {j["job_name"] for j in compose_config(load_stack("dev"), [])["scrape_configs"]}
    assert wanted <= local and wanted <= compose

    @pulumi.runtime.test
    def run():
        build(load_stack("prod"), ROOT)

    run()
    monitors = [o for o in mocks.kubernetes_objects if o["kind"] == "ServiceMonitor"]
    assert monitors and all(m["spec"]["jobLabel"] == naming.JOB_LABEL for m in monitors)
    services = {o["metadata"]["labels"][naming.JOB_LABEL] for o in mocks.kubernetes_objects
                if o["kind"] == "Service" and naming.JOB_LABEL in o["metadata"].get("labels", {})}
    assert wanted <= services
