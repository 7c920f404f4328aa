"""The migration's cohort recording rules, evaluated by promtool on two cohorts' series."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from slo import cohorts
from slo.spec import load_spec
from slo.writer import GENERATED_DIR

RULES = GENERATED_DIR / f"{cohorts.FILE_STEM}.rules.yml"


def test_error_ratio_and_throughput_in_pdfs_and_pages_per_cohort(tmp_path: Path) -> None:
    promtool = shutil.which("promtool") or pytest.fail("promtool not found: apt-get install prometheus")
    sel = 'job="workers", worker="0", topology="{t}"'
    series = []
    for t, ok_per_min, bad_per_min in (("split", 60, 6), ("monolithic", 120, 0)):
        s = sel.format(t=t)
        series += [{"series": f"mineru_pdfs_processed_total{{{s}}}", "values": f"0+{ok_per_min}x20"},
                   {"series": f"mineru_pages_processed_total{{{s}}}", "values": f"0+{3 * ok_per_min}x20"},
                   {"series": f'mineru_pdfs_failed_total{{{s}, kind="corrupt"}}', "values": f"0+{bad_per_min}x20"}]
    test = {"rule_files": [str(RULES)], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": series,
        "promql_expr_test": [
            {"expr": cohorts.ERROR_RATIO, "eval_time": "10m",
             "exp_samples": [{"labels": f'{cohorts.ERROR_RATIO}{{topology="split"}}', "value": 6 / 66},
                             {"labels": f'{cohorts.ERROR_RATIO}{{topology="monolithic"}}', "value": 0}]},
            {"expr": cohorts.PDFS_PER_S, "eval_time": "10m",
             "exp_samples": [{"labels": f'{cohorts.PDFS_PER_S}{{topology="split"}}', "value": 1},
                             {"labels": f'{cohorts.PDFS_PER_S}{{topology="monolithic"}}', "value": 2}]},
            {"expr": cohorts.PAGES_PER_S, "eval_time": "10m",  # 3-page documents
             "exp_samples": [{"labels": f'{cohorts.PAGES_PER_S}{{topology="split"}}', "value": 3},
                             {"labels": f'{cohorts.PAGES_PER_S}{{topology="monolithic"}}', "value": 6}]},
        ]}]}
    path = tmp_path / "cohorts.test.yml"
    path.write_text(yaml.safe_dump(test))
    r = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_committed_file_is_the_fresh_render() -> None:
    from slo.writer import to_yaml
    spec = load_spec()
    assert RULES.read_text() == to_yaml(cohorts.cohort_rules(spec))
    assert {r["record"] for r in cohorts.cohort_rules(spec)["groups"][0]["rules"]} == set(cohorts.RECORDS)
