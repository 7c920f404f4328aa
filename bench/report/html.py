"""The self-contained HTML report: a jinja2 template with plotly figures (plots.py).

One file that opens offline: plotly.js is inlined once in the page's head (what plotly's
``include_plotlyjs=True`` does, shared by every figure), so zoom and hover work without a network.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from jinja2 import Environment, PackageLoader, select_autoescape

from bench import metric_table
from bench.records import AnyRecord, RequestRecord
from bench.report import plots
from bench.report.series import RunSeries, build
from bench.summary import Summary

_ENV = Environment(loader=PackageLoader("bench.report", "templates"),
                   autoescape=select_autoescape(["html", "j2"]), trim_blocks=True, lstrip_blocks=True)


def _fmt(v: Any, digits: int = 3) -> str:
    """A table cell: numbers rounded, None as a dash, mappings as ``key value`` pairs (never a repr)."""
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.{digits}g}" if abs(v) < 1e-3 or abs(v) >= 1e5 else f"{v:,.{digits}f}".rstrip("0").rstrip(".")
    if isinstance(v, dict):
        return ", ".join(f"{k} {_fmt(x, digits)}" for k, x in v.items()) or "—"
    if isinstance(v, list | tuple):
        return ", ".join(_fmt(x, digits) for x in v) or "—"
    return str(v)


_ENV.filters["fmt"] = _fmt


# The report's CDF figures, in page order: title and what the y axis counts. Which metrics each
# draws is the metric table's ``figure`` (bench/metric_table.py).
CDF_FIGURES: dict[metric_table.Figure, tuple[str, str]] = {
    "first_token": ("Time to first token: CDF (measured requests)", "requests"),
    "inter_token": ("Inter-token latency: CDF (measured requests)", "samples"),
    "end_to_end": ("End-to-end latency: CDF (measured requests)", "requests"),
    "document": ("Document latency (enqueue to output written): CDF", "requests"),
}


def figures(summary: Summary, records: list[AnyRecord], rs: RunSeries | None = None) -> list[Any]:
    """The report's plotly figures, in page order."""
    rs = rs or build(records)
    figs: list[Any] = []
    sweep = summary.get("sweep")
    if sweep and sweep.get("points"):
        figs += [plots.sweep_latency(sweep), plots.sweep_throughput(sweep)]
    measured = [r for r in records if r.phase == "measure" and r.ok]
    kind: metric_table.Workload = "chat" if any(isinstance(r, RequestRecord) for r in measured) else "pipeline"
    goodput = summary.get("goodput")
    slo = {k: float(v) for k, v in ((goodput.get("slo") if goodput else None) or {}).items()
           if isinstance(v, int | float)}  # the scenario's per-request objectives, ms
    drawn = [m for m in metric_table.of(kind) if m.figure is not None]
    values = _cdf_values([r for r in measured if r.kind == kind], drawn, rs)
    for figure, (title, of) in CDF_FIGURES.items():
        shown = sorted((m for m in drawn if m.figure == figure), key=lambda m: m.legend_rank)
        if shown and measured:
            figs.append(plots.cdf({m.label: values[m.name] for m in shown}, shown[0].unit, title, of=of,
                                  slo={m.short: slo[m.name] for m in shown if m.name in slo}))
    if rs.rows:
        ok = [row for row in rs.rows if row["ok"]]
        lat_key = "ttft_ms" if rs.kind == "chat" else "doc_latency_s"
        unit = "ms" if rs.kind == "chat" else "s"
        label = "TTFT" if rs.kind == "chat" else "document latency"
        figs.append(plots.over_time(
            {f"{label}, each request": ([r["sent_s"] for r in ok if r[lat_key] is not None],
                                        [r[lat_key] for r in ok if r[lat_key] is not None])},
            {"p50 per second": (rs.bins, rs.lat_p50), "p95 per second": (rs.bins, rs.lat_p95)},
            f"{label}, {unit}", f"{label} over time (by send time)", rs.windows))
        if rs.kind == "chat" and "ttft_ms" in slo:
            plots.slo_hline(figs[-1], slo["ttft_ms"], f"SLO TTFT ≤ {slo['ttft_ms']:g} ms")
        if rs.kind == "chat" and any(v is not None for v in rs.itl_p50):
            itl_pts = [(r["sent_s"], r["itl_mean_ms"]) for r in ok if r["itl_mean_ms"] is not None]
            figs.append(plots.over_time(
                {"mean ITL of each request": ([p[0] for p in itl_pts], [p[1] for p in itl_pts])},
                {"p50 per second (all tokens)": (rs.bins, rs.itl_p50),
                 "p95 per second (all tokens)": (rs.bins, rs.itl_p95)},
                "inter-token latency, ms", "Inter-token latency over time (by send time)", rs.windows))
        figs.append(plots.throughput(rs, "Throughput over time"))
        if rs.kind == "chat":
            lengths = {"prompt tokens": [r["prompt_tokens"] for r in rs.rows if r["prompt_tokens"] is not None],
                       "output tokens": [r["output_tokens"] for r in ok if r["output_tokens"] is not None]}
            if any(lengths.values()):
                figs.append(plots.histograms(lengths, "Prompt and output lengths (every request; output: successful)"))
        failed = [row for row in rs.rows if not row["ok"]]
        e2e_key = "e2e_ms" if rs.kind == "chat" else "doc_latency_s"
        by_phase: dict[str, tuple[list[float], list[float]]] = {}
        for row in ok + failed:
            if row[e2e_key] is None:
                continue
            key = row["phase"] if row["ok"] else "error"
            by_phase.setdefault(key, ([], []))
            by_phase[key][0].append(row["sent_s"])
            by_phase[key][1].append(row[e2e_key])
        figs.append(plots.over_time(by_phase, {}, f"{'end-to-end' if rs.kind == 'chat' else 'document'} latency, "
                                    f"{unit}", "Every request: latency by send time (warmup and cooldown not "
                                    "measured)", rs.windows))
        if rs.kind == "chat" and "e2e_ms" in slo:
            plots.slo_hline(figs[-1], slo["e2e_ms"], f"SLO E2E ≤ {slo['e2e_ms']:g} ms")
        figs.append(plots.over_time({"schedule lag": ([r["sent_s"] for r in rs.rows], [r["lag_ms"] for r in rs.rows])},
                                    {}, "sent − intended, ms", "Client schedule lag (open loop: a late send "
                                    "means the client could not keep up)", rs.windows))
    return figs


def _cdf_values(records: list[AnyRecord], drawn: list[metric_table.Metric],
                rs: RunSeries) -> dict[str, list[float] | np.ndarray]:
    """The drawn metrics' values over ``records`` (measured, successful), from what the series
    computed already where it covers them (each request's derived values; every gap of its run)."""
    acc = metric_table.Samples(drawn)
    for r in records:
        acc.add(r, rs.derived.get(r.request_id) or metric_table.derive_any(r))
    events = [m for m in drawn if m.per_event is not None]
    if rs.gaps is not None and rs.measured_ok is not None and int(rs.measured_ok.sum()) == len(records):
        gaps, ok = rs.gaps, rs.measured_ok
        per_event = {m.name: gaps.of(m.per_event, ok) for m in events if m.per_event is not None}
    else:  # the series of other records
        per_event = metric_table.event_samples(records, events)
    return {m.name: acc.values[m.name] if m.per_event is None else per_event[m.name] for m in drawn}


def plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    return str(get_plotlyjs())


def render(summary: Summary, records: list[AnyRecord], rs: RunSeries | None = None) -> str:
    divs = [plots.to_html(f, f"plot-{i}") for i, f in enumerate(figures(summary, records, rs))]
    n = 2 if (summary.get("sweep") or {}).get("points") else 0  # figures() puts the sweep's two first
    return _ENV.get_template("report.html.j2").render(s=summary, sweep_plots=divs[:n], plots=divs[n:],
                                                      plotly_js=plotly_js())
