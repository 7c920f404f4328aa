"""`runbook migrate` refusals that need no live queue: the target, and the gate file."""

from __future__ import annotations

from pathlib import Path

import pytest

from runbooks.actions.migrate import criteria
from runbooks.model import Refused
from runbooks.registry import invoke


def test_kubernetes_is_refused_naming_why(make_ctx) -> None:
    r = invoke(make_ctx(apply=True), "migrate", {"to": 10})
    assert r.outcome == "refused"
    assert "renders one worker pool" in r.summary and "runbook rollback" in r.summary


def test_bad_share_and_gate_files_are_refused(make_ctx, tmp_path: Path) -> None:
    r = invoke(make_ctx(), "migrate", {"to": 25})
    assert r.outcome == "refused" and "to: Input should be 0, 10, 50 or 100" in r.summary
    assert criteria("migration-cohorts").max_error_fraction == 0.001
    with pytest.raises(Refused, match="--gate nope: gate file 'nope' not found"):
        criteria("nope")
    other = tmp_path / "g.yaml"
    other.write_text("name: g\nscenario: pipeline-smoke\ngates:\n  - kind: error_rate\n    max_fraction: 0.1\n")
    with pytest.raises(Refused, match="has no gate of kind `cohorts`"):
        criteria(str(other))
