"""Build the per-SLO evaluations from a source (Prometheus or bench records) and render them."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from rich.console import Console
from rich.table import Table

from slo.budget import Counts, Evaluation, Status, evaluate
from slo.records import Record, sli_counts, span_s
from slo.spec import SLO, SLOSpec

_DURATION = re.compile(r"^(\d+)(s|m|h|d|w)$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration_s(text: str) -> int:
    m = _DURATION.match(text.strip())
    if not m or int(m.group(1)) == 0:
        raise ValueError(f"duration {text!r} is not like 30d, 6h, 5m or 90s")
    return int(m.group(1)) * _UNIT_S[m.group(2)]


def fmt_duration_s(seconds: int) -> str:
    for unit in ("w", "d", "h", "m"):
        if seconds % _UNIT_S[unit] == 0:
            return f"{seconds // _UNIT_S[unit]}{unit}"
    return f"{seconds}s"


class CountSource(Protocol):
    def counts(self, slo: SLO, window: str) -> Counts | None: ...
    def no_data_hint(self, slo: SLO) -> str: ...
    def coverage_s(self, slo: SLO, window: str) -> int | None: ...


# Data missing for less than this share of the window is start-up or scrape jitter, not retention.
_COVERAGE_SLACK = 0.99


def evaluate_prometheus(spec: SLOSpec, source: CountSource, window: str | None, current: str) -> list[Evaluation]:
    out = []
    for slo in spec.slos:
        win = window or f"{slo.window_d}d"
        win_s = parse_duration_s(win)
        e = evaluate(slo, source.counts(slo, win), source.counts(slo, current), win_s, parse_duration_s(current),
                     source.no_data_hint(slo))
        covered = source.coverage_s(slo, win)
        if covered is not None and covered < win_s * _COVERAGE_SLACK and e.total is not None:
            note = (f"Prometheus holds only {_span(covered)} of the {win} window (monitoring started then, or its "
                    f"retention is shorter): attainment and budget cover that span; if it is the retention, keep "
                    f"observability.retention_h at least the SLO window plus a day")
            e = replace(e, covered_s=covered, message="; ".join(m for m in (e.message, note) if m))
        elif covered is not None:
            e = replace(e, covered_s=min(covered, win_s))
        out.append(e)
    return out


def evaluate_records(spec: SLOSpec, records: list[Record], current_s: int) -> list[Evaluation]:
    """The whole run is the window; its last ``current_s`` seconds give the current burn rate."""
    start, end = span_s(records)
    window_s = max(1, round(end - start))
    out = []
    for slo in spec.slos:
        hint = f"the records hold no {slo.sli.kind} data for it (see slo/records.py for what each SLO needs)"
        out.append(evaluate(slo, sli_counts(slo, records), sli_counts(slo, records, since_s=end - current_s),
                            window_s, current_s, hint))
    return out


def _span(seconds: float) -> str:
    return f"{seconds / 86400:.1f} d" if seconds >= 86400 else f"{seconds / 3600:.1f} h"


def _window(e: Evaluation) -> str:
    text = fmt_duration_s(e.window_s)
    if e.covered_s is not None and e.covered_s < e.window_s * _COVERAGE_SLACK:
        text += f" ({_span(e.covered_s)} held)"
    return text


def _pct(x) -> str:
    return "-" if x is None else f"{float(x) * 100:.3f} %"


def _tte(s: float | None) -> str:
    if s is None:
        return "-"
    if s >= 86400:
        return f"{s / 86400:.1f} d"
    return f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.1f} min"


def render_table(spec: SLOSpec, evals: list[Evaluation], console: Console, title: str) -> None:
    table = Table(title=title)
    for col in ("SLO", "target", "window", "attainment", "events", "budget left", "burn rate", "exhausted in",
                "status"):
        # fold, never truncate: a narrow terminal wraps a cell instead of cutting its value
        table.add_column(col, justify="left" if col in ("SLO", "status") else "right", overflow="fold")
    colour = {Status.ok: "green", Status.exhausted: "red", Status.insufficient_data: "yellow", Status.no_data: "yellow"}
    for e in evals:
        table.add_row(e.slo, _pct(e.target), _window(e), _pct(e.attainment),
                      "-" if e.total is None else f"{float(e.total):g}", _pct(e.budget_remaining_ratio),
                      "-" if e.burn_rate is None else f"{float(e.burn_rate):.2f}x", _tte(e.time_to_exhaustion_s),
                      f"[{colour[e.status]}]{e.status.value}[/]")
    console.print(table)
    by_message: dict[str, list[str]] = {}  # one note said once, with the SLOs it is about
    for e in evals:
        for message in filter(None, (e.message or "").split("; ")):
            by_message.setdefault(message, []).append(e.slo)
    for message, slos in by_message.items():
        console.print(f"[dim]{', '.join(slos)}: {message}[/]", soft_wrap=False)


def report_json(evals: list[Evaluation], source: str) -> str:
    """The report as JSON (numbers as numbers): what ``--output json`` prints and ``--out`` writes."""
    return json.dumps({"source": source, "slos": [e.as_dict() for e in evals]}, indent=2) + "\n"


def write_json(evals: list[Evaluation], path: Path, source: str) -> None:
    path.write_text(report_json(evals, source))
