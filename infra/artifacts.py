"""The files the deployment ships besides workloads: Prometheus rule files (alerts/) and Grafana
dashboards (dashboards/generated/), read and checked here. No pulumi import: Compose and the
Pulumi program both use them."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

RULE_GLOBS = ("*.rules.yml", "generated/*.rules.yml")
# `slo dashboards` writes dashboards/generated/ (dashboards/generate.py DASHBOARD_DIR); a
# hand-written dashboard may sit in dashboards/ itself.
DASHBOARD_GLOBS = ("*.json", "generated/*.json")
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
    """Every Grafana dashboard under dashboards/ (generated and hand-written); none is an error,
    because the program would then ship no dashboard without saying so."""
    out = []
    names: dict[str, str] = {}
    for pattern in DASHBOARD_GLOBS:
        for path in sorted(dashboards_dir.glob(pattern)):
            text = path.read_text()
            try:
                json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}: not valid JSON ({exc}); regenerate the dashboards") from exc
            name = object_name("splitstack-dashboard", path)
            if name in names:
                raise ValueError(f"{path}: object name {name!r} also used by {names[name]}; rename one")
            names[name] = str(path)
            out.append(Dashboard(name, text, str(path.relative_to(dashboards_dir.parent))))
    if not out:
        raise ValueError(
            f"{dashboards_dir}: no dashboard (*.json, generated/*.json); generate them with "
            "`slo dashboards`, or set observability.grafana_dashboards to false")
    return out


_JOB_MATCHER = re.compile(r'job="([^"]+)"')


def scope_rule_files(rule_files: list[RuleFile], namespace: str, generated: dict[str, list[dict]]) -> list[RuleFile]:
    """The rule files for one Kubernetes namespace, so that two deployments sharing a Prometheus
    (dev and staging, say) never read each other's series nor merge their alerts.

    ``generated``: alerts/generated/<stem>.rules.yml groups rendered for the namespace
    (``slo.rules.generate_rules(spec.scoped(namespace))``); they replace the committed ones.
    Hand-written files select with ``job="..."`` only: each such matcher gains the namespace and
    each alert the ``namespace`` label (the one Alertmanager groups and inhibits by).
    """
    out = []
    for rule in rule_files:
        stem = Path(rule.source).name.removesuffix(".rules.yml")
        if Path(rule.source).parent.name == "generated":
            if stem not in generated:
                raise ValueError(f"{rule.source}: no SLO renders it any more; run `slo rules`")
            groups = generated[stem]
        else:
            groups = [{**g, "rules": [_scope_rule(r, namespace) for r in g["rules"]]} for g in rule.groups]
        out.append(RuleFile(rule.name, groups, rule.source))
    return out


def _scope_rule(rule: dict, namespace: str) -> dict:
    expr = _JOB_MATCHER.sub(lambda m: f'job="{m.group(1)}", namespace="{namespace}"', rule["expr"])
    scoped = {**rule, "expr": expr}
    if "alert" in rule and _JOB_MATCHER.search(rule["expr"]):
        scoped["labels"] = {**rule.get("labels", {}), "namespace": namespace}
    return scoped
