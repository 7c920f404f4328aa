"""A suggested next step is typed: checked against the action's parameter model when it is made,
spelled as the `runbook` command line reads it, and carried by a report as that text."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from runbooks.diagnose.engine import GPU_PROBE
from runbooks.model import Report
from runbooks.names import Action
from runbooks.params import PARAMS
from runbooks.registry import ACTIONS
from runbooks.suggestion import Suggestion


def test_every_action_name_has_its_registry_entry_and_parameters():
    assert set(ACTIONS) == set(Action) == set(PARAMS)
    assert all(ACTIONS[a].params is PARAMS[a] for a in Action)


@pytest.mark.parametrize(("step", "text"), [
    (Suggestion(action=Action.RESTART_SERVER), "runbook restart-server"),
    (Suggestion(action=Action.RESTART, params={"component": "worker-1"}), "runbook restart --component worker-1"),
    (Suggestion(action=Action.RESTART_SERVER, params={"force": True}, comment="clears the KV cache"),
     "runbook restart-server --force  # clears the KV cache"),
    (Suggestion(action=Action.TUNE, params={"set": {"max_num_seqs": "8"}}, comment="why"),
     "runbook tune --set max_num_seqs=8  # why"),
    (Suggestion(action=Action.SCALE, params={"component": "server-vlm", "replicas": 2}),
     "runbook scale --component server-vlm --replicas 2"),
    (Suggestion(action=Action.MIGRATE, params={"to": 10}, comment="once the cause is fixed"),
     "runbook migrate --to 10  # once the cause is fixed"),
    (Suggestion(action=Action.DIAGNOSE, params={"thresholds": {"queue_waiting_max": "5"}, "gpu": False}),
     "runbook diagnose --threshold queue_waiting_max=5 --no-nvml"),  # the flags the CLI spells
])
def test_a_suggestion_reads_as_the_command_line(step, text):
    assert step.command() == text
    assert step.line() == text.split("  #")[0]


@pytest.mark.parametrize(("action", "params", "words"), [
    ("restart-servr", {}, "restart-servr"),  # no such action
    (Action.RESTART_SERVER, {"forse": True}, "forse"),  # a parameter it does not take
    (Action.SCALE, {"component": "workers"}, "replicas"),  # one it needs
    (Action.MIGRATE, {"to": 20}, "to"),  # a value it refuses
])
def test_a_suggestion_the_command_line_would_refuse_cannot_be_made(action, params, words):
    with pytest.raises(ValidationError, match=words):
        Suggestion(action=action, params=params)


def test_a_report_shows_and_writes_its_suggestions_as_commands():
    report = Report(action=Action.DIAGNOSE, outcome="report", summary="s", data={"k": 1},
                    suggestions=[Suggestion(action=Action.RESTART_WORKERS), "splitstack up --stack local"])
    assert report.next_steps == ["runbook restart-workers", "splitstack up --stack local"]
    assert "  $ runbook restart-workers\n  $ splitstack up --stack local" in report.render()
    out = json.loads(report.model_dump_json())
    assert list(out) == ["action", "outcome", "summary", "case", "plan", "done", "evidence", "next_steps", "data"]
    assert out["next_steps"] == report.next_steps


def test_a_report_refuses_untyped_next_steps():
    with pytest.raises(ValidationError, match="next_steps"):
        Report(action="diagnose", outcome="report", summary="s", next_steps=["runbook diagnose"])


def test_the_gpu_probe_step_in_words_is_a_runbook_command():
    from splitstack.cli import runbook as cli

    names = {c.name or c.callback.__name__.replace("_", "-") for c in cli.app.registered_commands}
    assert GPU_PROBE.split()[0] == "runbook" and GPU_PROBE.split()[1] in names
