"""The runbook cases are one enum (runbooks/cases.py): diagnose's priority and headings come from
it, signatures.yaml may name only its cases, and the docs and requirements agree with it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from runbooks.cases import DIAGNOSED, Case
from runbooks.diagnose.signatures import SIGNATURES_FILE, load_signatures

ROOT = Path(__file__).resolve().parents[3]


def test_priority_is_the_order_of_the_diagnosed_cases():
    assert [c.priority for c in DIAGNOSED] == list(range(len(DIAGNOSED)))
    assert DIAGNOSED[0] is Case.PLATFORM_UNREACHABLE and DIAGNOSED[-1] is Case.HEALTHY
    # an outage before a slowdown, a cause before a symptom
    assert Case.SERVER_DOWN_OOM.priority < Case.SERVER_DOWN.priority < Case.QUEUE_BACKLOG.priority
    assert Case.BREAKER_STUCK_OPEN.priority < Case.BREAKER_RECOVERING.priority
    with pytest.raises(ValueError, match="not one diagnose names"):
        _ = Case.TUNING.priority


def test_a_case_reads_as_its_value():
    assert Case.QUEUE_BACKLOG == "queue-backlog" and f"{Case.QUEUE_BACKLOG}" == "queue-backlog"
    assert Case.MIGRATION == "production rollout: split share of documents"
    assert all(c.heading for c in Case)


def test_every_requirement_a_case_answers_exists():
    ids = set(re.findall(r"^\| ([A-Z]+-\d+) \|", (ROOT / "docs" / "requirements.md").read_text(), re.M))
    cited = {c.requirement for c in Case if c.requirement}
    assert cited and cited <= ids, sorted(cited - ids)


def test_the_docs_list_every_case_diagnose_names_in_priority_order():
    text = (ROOT / "docs" / "runbooks.md").read_text()
    section = text.split("## The cases diagnose names", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([^`]+)` \| (.+?) \| (.+?) \|$", section, re.M)
    assert rows == [(c.value, c.heading, c.requirement or "-") for c in DIAGNOSED]
    for case in Case:
        if not case.diagnosed:
            assert f"`{case.value}`" in section, case


def test_every_signature_names_a_case_diagnose_names():
    sigs = load_signatures(SIGNATURES_FILE)
    assert sigs and all(s.case in DIAGNOSED for s in sigs)


def test_a_signature_with_an_unknown_case_is_refused_by_name(tmp_path):
    bad = tmp_path / "signatures.yaml"
    bad.write_text("signatures:\n  - {id: cuda-typo, case: server-crashloop, pattern: CUDA, meaning: m, source: s}\n")
    with pytest.raises(ValueError) as err:
        load_signatures(bad)
    message = str(err.value)
    assert str(bad) in message and "'cuda-typo'" in message and "'server-crashloop'" in message
    assert "server-crashloop-cuda" in message and "tuning" not in message  # the valid ones, diagnose's only
