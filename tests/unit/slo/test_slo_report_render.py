"""`slo report`'s table at 80 columns: no value cut off, and a note shared by several SLOs said once."""

from __future__ import annotations

import io
from decimal import Decimal
from fractions import Fraction

from rich.console import Console

from slo.budget import Evaluation, Status
from slo.report import render_table
from slo.spec import load_spec

NOTE = "Prometheus holds only 12 min of the 30d window (monitoring started then, or its retention is shorter)"


def test_a_shared_note_is_printed_once_and_no_value_is_truncated():
    spec = load_spec()
    evals = [Evaluation(slo=s.name, target=Decimal("0.995"), window_s=30 * 86400, current_window_s=3600,
                        status=Status.ok, good=Fraction(999), total=Fraction(1000), attainment=Fraction(999, 1000),
                        budget_remaining_ratio=Fraction(4, 5), burn_rate=Fraction(1, 5), message=NOTE)
             for s in spec.slos[:9]]
    out = io.StringIO()
    render_table(spec, evals, Console(file=out, width=80, color_system=None), "SLO report")
    text = out.getvalue()
    assert text.count("Prometheus holds only") == 1  # once, naming the SLOs it is about
    assert "…" not in text  # folded, never cut
    assert all(e.slo in text for e in evals)
