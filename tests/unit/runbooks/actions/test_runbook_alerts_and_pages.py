"""Every alert names an action that exists, and every page names `runbook` commands that exist.

Reads alerts/ and runbooks/pages/ at test time, so a new alert or page is checked as it lands.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer
import yaml

from runbooks.registry import ACTIONS
from slo.spec import load_spec
from splitstack.cli.runbook_actions import register

ROOT = Path(__file__).resolve().parents[4]
RULE_FILES = sorted((ROOT / "alerts").rglob("*.rules.yml"))
PAGES = sorted((ROOT / "runbooks" / "pages").glob("*.md"))


def runbook_commands() -> set[str]:
    """Commands of the `runbook` CLI: splitstack/cli/runbook.py's app plus the action commands."""
    from splitstack.cli import runbook as cli

    fresh = typer.Typer()
    register(fresh)
    apps = [cli.app, fresh]
    names = {c.name or c.callback.__name__.replace("_", "-") for a in apps for c in a.registered_commands}
    return names | {g.name for a in apps for g in a.registered_groups}


def alerts() -> list[tuple[str, str, dict]]:
    out = []
    for path in RULE_FILES:
        for group in (yaml.safe_load(path.read_text()) or {}).get("groups", []):
            for rule in group.get("rules", []):
                if "alert" in rule:
                    out.append((path.name, rule["alert"], rule.get("annotations", {})))
    return out


def test_there_are_alerts_to_check():
    assert len(alerts()) >= 5


@pytest.mark.parametrize("file,alert,annotations", alerts(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_alert_names_an_existing_action(file, alert, annotations):
    action = annotations.get("runbook_action")
    assert action, f"{file}: alert {alert} has no runbook_action annotation"
    assert action in ACTIONS, (f"{file}: alert {alert} names runbook_action {action!r}, which is not "
                               f"an action; known: {', '.join(sorted(ACTIONS))}")


@pytest.mark.parametrize("file,alert,annotations", alerts(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_alert_has_a_page(file, alert, annotations):
    url = annotations.get("runbook_url", "")
    base = load_spec().alerting.runbook_base_url + "/"
    assert url.startswith(base), f"{file}: alert {alert}: runbook_url {url!r} is not under {base}"
    page = ROOT / "runbooks" / "pages" / url.removeprefix(base)
    assert page.is_file(), f"{file}: alert {alert}: runbook_url {url!r} names no page in runbooks/pages"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_pages_have_the_four_sections_and_name_real_commands(page):
    text = page.read_text()
    for section in ("## Meaning", "## Impact", "## Diagnosis", "## Mitigation"):
        assert section in text, f"{page.name} lacks {section}"
    named = set(re.findall(r"`runbook ([a-z][a-z0-9-]*)", text))
    assert named, f"{page.name} names no `runbook <command>`"
    missing = named - runbook_commands()
    assert not missing, f"{page.name} names runbook commands that do not exist: {sorted(missing)}"


def test_every_action_has_a_cli_command():
    assert set(ACTIONS) <= runbook_commands()
