"""What the bench writes from a fixed set of records stays byte for byte what it wrote when the
metric table (bench/metric_table.py) replaced the per-module metric lists: summary.json's keys
and values (read back by reports, `bench compare` of old runs, the SLO calculators), the CSV
rows, the comparison, the report's and the comparison view's figures and the gates' samples
(the fixture was written by the code before the table). Regenerate the fixture only for an intended change:
``python -m testsupport.bench_golden > tests/unit/bench/fixtures/golden_outputs.json``."""

from __future__ import annotations

from pathlib import Path

from testsupport.bench_golden import render

FIXTURE = Path(__file__).parent / "fixtures" / "golden_outputs.json"


def test_outputs_are_byte_identical_to_the_recorded_ones() -> None:
    expected = FIXTURE.read_text()
    got = render()
    assert got == expected, ("the bench's derived outputs changed; diff `python -m testsupport.bench_golden` "
                             "against tests/unit/bench/fixtures/golden_outputs.json")
