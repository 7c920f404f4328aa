"""``bench compare``'s side-by-side HTML view: both runs' setup and headline numbers in two
columns, the comparison table with each call, and both runs' latency CDFs overlaid (axes clipped
as the report's are). One self-contained file, plotly.js inlined as in report.html.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bench import metric_table
from bench.records import AnyRecord, RequestRecord
from bench.report import plots
from bench.report.html import _ENV, plotly_js
from bench.summary import Comparison, Summary


def _latencies(records: list[AnyRecord]) -> dict[metric_table.Metric, list[float] | np.ndarray]:
    """The overlaid metrics (bench/metric_table.py) of the run's workload, over its measured records."""
    measured = [r for r in records if r.phase == "measure"]
    kind: metric_table.Workload = "chat" if any(isinstance(r, RequestRecord) for r in measured) else "pipeline"
    shown = [m for m in metric_table.of(kind) if m.overlaid]
    values = metric_table.samples([r for r in measured if r.kind == kind], shown)
    return {m: values[m.name] for m in shown}


def figures(base: tuple[list[AnyRecord], Summary], cand: tuple[list[AnyRecord], Summary]) -> list[Any]:
    """One CDF per overlaid latency metric, baseline and candidate on the same axes."""
    b, c = _latencies(base[0]), _latencies(cand[0])
    goodput = base[1].get("goodput")
    slo = (goodput.get("slo") if goodput else None) or {}
    figs = []
    for m, values in b.items():
        figs.append(plots.cdf({f"baseline {m.short}": values, f"candidate {m.short}": c.get(m, [])}, m.unit,
                              f"{m.short}: baseline and candidate (measured requests)",
                              slo={m.short: float(slo[m.name])} if m.name in slo else None))
    return figs


def render_comparison(result: Comparison, base: tuple[list[AnyRecord], Summary],
                      cand: tuple[list[AnyRecord], Summary], names: tuple[str, str]) -> str:
    divs = [plots.to_html(f, f"cmp-{i}") for i, f in enumerate(figures(base, cand))]
    return _ENV.get_template("compare.html.j2").render(r=result, names=names, plots=divs, plotly_js=plotly_js())
