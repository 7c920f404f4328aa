"""Many stacks, one Prometheus: every selector of every namespace-scoped rule and record carries
the stack's namespace, and promtool, loading dev's and prod's rules together, gets each stack's
own records and alerts (alerts/tests/stacks/two-stacks.test.yml)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from infra.artifacts import RuleFile, load_rule_files, scope_rule_files
from slo.exprcheck import selectors
from slo.rules import generate_rules
from slo.spec import load_spec

ROOT = Path(__file__).resolve().parents[3]
ALERTS = ROOT / "alerts"
STACKS_TEST = ALERTS / "tests" / "stacks" / "two-stacks.test.yml"
# The alerting path's own rules select Prometheus' metrics (its namespace, not a stack's): the
# same alerts whichever stack ships them, so they are not scoped.
UNSCOPED = {"alerts/prometheus.rules.yml"}


def _scoped(namespace: str) -> list[RuleFile]:
    generated = {stem: body["groups"] for stem, body in generate_rules(load_spec().scoped(namespace)).items()}
    return scope_rule_files(load_rule_files(ALERTS), namespace, generated)


def test_every_selector_of_a_scoped_rule_carries_the_namespace():
    missing, seen = [], 0
    for f in _scoped("splitstack-dev"):
        if f.source in UNSCOPED:
            continue
        for group in f.groups:
            for rule in group["rules"]:
                for sel in selectors(rule["expr"]):
                    seen += 1
                    ns = [m for m in sel.matchers.matchers if m.name == "namespace"]
                    if [m.value for m in ns] != ["splitstack-dev"]:
                        missing.append((f.source, rule.get("alert") or rule.get("record"), str(sel)))
    assert seen > 250
    assert missing == []


def test_dev_and_prod_rules_in_one_prometheus_keep_their_records_apart(tmp_path):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool not found: install the Debian package `prometheus`")
    for ns, folder in (("splitstack-dev", "dev"), ("splitstack-prod", "prod")):
        (tmp_path / folder).mkdir()
        for f in _scoped(ns):
            (tmp_path / folder / Path(f.source).name).write_text(yaml.safe_dump({"groups": f.groups}))
    shutil.copy(STACKS_TEST, tmp_path / STACKS_TEST.name)
    r = subprocess.run([promtool, "test", "rules", STACKS_TEST.name], cwd=tmp_path,
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout
