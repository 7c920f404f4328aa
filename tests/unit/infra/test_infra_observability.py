"""The observability component: rules scoped to the deployment's namespace, kube-prometheus-stack
with the retention the SLOs need and the Alertmanager config generated from the SLO spec."""

from __future__ import annotations

import subprocess

import promql_parser
import pulumi
import yaml

from contract.spec_loader import load_stack, project_root
from infra.components.program import build
from slo.exprcheck import PARSE_ERRORS

ROOT = project_root()


def _selectors(expr: str) -> list[promql_parser.VectorSelector]:
    out, stack = [], [promql_parser.parse(expr)]
    while stack:
        node = stack.pop()
        if isinstance(node, promql_parser.VectorSelector):
            out.append(node)
            continue
        if isinstance(node, promql_parser.MatrixSelector):
            stack.append(node.vector_selector)
            continue
        for attr in ("expr", "lhs", "rhs", "param"):
            child = getattr(node, attr, None)
            if child is not None and not isinstance(child, (int, float, str)):
                stack.append(child)
        stack.extend(getattr(node, "args", None) or [])
    return out


def test_prod_rules_are_scoped_and_alertmanager_is_generated(mocks, tmp_path):
    spec = load_stack("prod")

    @pulumi.runtime.test
    def run():
        build(spec, ROOT)

    run()
    rules = [o for o in mocks.kubernetes_objects if o["kind"] == "PrometheusRule"]
    assert len(rules) == len(list((ROOT / "alerts").glob("*.rules.yml"))) + \
        len(list((ROOT / "alerts" / "generated").glob("*.rules.yml")))
    job_selectors = 0
    for obj in rules:
        for group in obj["spec"]["groups"]:
            for rule in group["rules"]:
                try:
                    sels = _selectors(rule["expr"])
                except PARSE_ERRORS as e:  # pragma: no cover - the message names the rule
                    raise AssertionError(f"{obj['metadata']['name']}: {rule['expr']}: {e}") from None
                for sel in sels:
                    matchers = {m.name: m.value for m in sel.matchers.matchers}
                    if "job" in matchers:
                        job_selectors += 1
                        assert matchers.get("namespace") == spec.namespace, (obj["metadata"]["name"], rule["expr"])
                if "alert" in rule and 'job="' in rule["expr"]:
                    assert rule["labels"]["namespace"] == spec.namespace, rule["alert"]
    assert job_selectors > 100
    (kps,) = [r for r in mocks.helm_releases if r["chart"] == "kube-prometheus-stack"]
    assert kps["values"]["prometheus"]["prometheusSpec"]["retention"] == "744h"
    am = tmp_path / "alertmanager.yml"
    am.write_text(yaml.safe_dump(kps["values"]["alertmanager"]["config"]))
    checked = subprocess.run(["amtool", "check-config", str(am)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    inhibit = kps["values"]["alertmanager"]["config"]["inhibit_rules"][0]
    assert inhibit["source_matchers"] == ['alertname="InferenceServerUnreachable"'] and inhibit["equal"] == ["namespace"]
