"""docs/capacity.md's generated matrix must equal what the calculator prints today."""

from __future__ import annotations

from pathlib import Path

from runbooks.capacity.matrix import matrix_table

DOC = Path(__file__).resolve().parents[3] / "docs" / "capacity.md"


def test_generated_matrix_is_current() -> None:
    text = DOC.read_text(encoding="utf-8")
    start = text.index("DO NOT EDIT (tests/unit/runbooks/test_capacity_docs.py) -->\n")
    body = text[start:].split("\n", 1)[1]
    block = body[: body.index("\n<!-- end generated -->")]
    assert block == matrix_table(), (
        "docs/capacity.md is stale: regenerate the block with `runbook capacity-plan matrix`")
