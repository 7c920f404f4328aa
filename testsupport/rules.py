"""Rule files for live tests: the project's, with the generated ones rendered by the real
generator from slo/objectives.yaml and a few durations shortened, so that a test waits seconds
where the shipped rules wait minutes (a 5-minute `for`, 5-minute long-window groups)."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from contract.spec_loader import project_root
from slo.spec import OBJECTIVES_PATH, parse_spec
from slo.writer import render_generated, write_tree

ROOT = project_root(Path(__file__))


def live_rule_globs(out: Path, server_down_for_s: int | None = None, slow_interval_s: int = 1) -> list[str]:
    """Write alerts/*.rules.yml and freshly rendered generated rules under ``out``; their globs."""
    data = yaml.safe_load(OBJECTIVES_PATH.read_text())
    data.setdefault("alerting", {})["slow_interval_s"] = slow_interval_s
    if server_down_for_s is not None:
        uptime = next(s for s in data["slos"] if s["name"] == "inference-server-uptime")
        uptime["manual_alert"]["for_s"] = server_down_for_s
    out.mkdir(parents=True, exist_ok=True)
    write_tree(render_generated(parse_spec(data, "test objectives")), out / "generated")
    for f in (ROOT / "alerts").glob("*.rules.yml"):
        shutil.copy(f, out / f.name)
    return [str(out / "*.rules.yml"), str(out / "generated" / "*.rules.yml")]
