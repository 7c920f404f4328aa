"""``bench compare``'s side-by-side HTML view: both runs' setup and headline numbers in two
columns, the comparison table with each call, and both runs' latency CDFs overlaid (axes clipped
as the report's are). One self-contained file, plotly.js inlined as in report.html.
"""

from __future__ import annotations

from typing import Any

from bench.metric_table import derive
from bench.records import AnyRecord, RequestRecord
from bench.report import plots
from bench.report.html import _ENV, plotly_js
from bench.summary import Summary


def _latencies(records: list[AnyRecord]) -> dict[str, list[float]]:
    measured = [r for r in records if r.phase == "measure" and r.ok]
    chats = [derive(r) for r in measured if isinstance(r, RequestRecord)]
    if chats:
        return {"TTFT": [d.ttft_ms for d in chats if d.ttft_ms is not None],
                "E2E": [d.e2e_ms for d in chats if d.e2e_ms is not None]}
    return {"document latency": [(r.end_ns - r.sent_ns) / 1e9 for r in measured if r.end_ns is not None]}


def figures(base: tuple[list[AnyRecord], Summary], cand: tuple[list[AnyRecord], Summary]) -> list[Any]:
    """One CDF per latency metric, baseline and candidate on the same axes."""
    b, c = _latencies(base[0]), _latencies(cand[0])
    unit = "ms" if "E2E" in b else "s"
    goodput = base[1].get("goodput")
    slo = (goodput.get("slo") if goodput else None) or {}
    figs = []
    for metric in b:
        key = {"TTFT": "ttft_ms", "E2E": "e2e_ms"}.get(metric)
        figs.append(plots.cdf({f"baseline {metric}": b[metric], f"candidate {metric}": c.get(metric, [])}, unit,
                              f"{metric}: baseline and candidate (measured requests)",
                              slo={metric: float(slo[key])} if key is not None and key in slo else None))
    return figs


def render_comparison(result: dict[str, Any], base: tuple[list[AnyRecord], Summary],
                      cand: tuple[list[AnyRecord], Summary], names: tuple[str, str]) -> str:
    divs = [plots.to_html(f, f"cmp-{i}") for i, f in enumerate(figures(base, cand))]
    return _ENV.get_template("compare.html.j2").render(r=result, names=names, plots=divs, plotly_js=plotly_js())
