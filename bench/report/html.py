"""The self-contained HTML report: a jinja2 template with plotly figures (plots.py).

One file that opens offline: plotly.js is inlined once in the page's head (what plotly's
``include_plotlyjs=True`` does, shared by every figure), so zoom and hover work without a network.
"""

from __future__ import annotations

from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from bench.metrics import derive, event_gaps
from bench.records import AnyRecord, RequestRecord
from bench.report import plots
from bench.report.series import RunSeries, build

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


def figures(summary: dict[str, Any], records: list[AnyRecord], rs: RunSeries | None = None) -> list[Any]:
    """The report's plotly figures, in page order."""
    rs = rs or build(records)
    figs: list[Any] = []
    sweep = summary.get("sweep")
    if sweep and sweep.get("points"):
        figs += [plots.sweep_latency(sweep), plots.sweep_throughput(sweep)]
    measured = [r for r in records if r.phase == "measure" and r.ok]
    chats = [r for r in measured if isinstance(r, RequestRecord)]
    slo = {k: float(v) for k, v in ((summary.get("goodput") or {}).get("slo") or {}).items()
           if isinstance(v, int | float)}  # the scenario's per-request objectives, ms
    if chats:
        ds = [rs.derived.get(r.request_id) or derive(r) for r in chats]
        if rs.gaps is not None and rs.measured_ok is not None and int(rs.measured_ok.sum()) == len(chats):
            gaps, chunk = rs.gaps.itl_of(rs.measured_ok), rs.gaps.chunk_of(rs.measured_ok)
        else:  # the series of other records
            event = event_gaps(chats)
            gaps, chunk = event.itl, event.chunk
        figs.append(plots.cdf({"TTFT": [d.ttft_ms for d in ds if d.ttft_ms is not None],
                               "TTFC (first content)": [d.ttfc_ms for d in ds if d.ttfc_ms is not None],
                               "TTFB (headers)": [d.ttfb_ms for d in ds if d.ttfb_ms is not None]},
                              "ms", "Time to first token: CDF (measured requests)",
                              slo=_pick(slo, "ttft_ms", "TTFT")))
        figs.append(plots.cdf({"ITL (per token)": gaps, "chunk gap (per SSE event)": chunk,
                               "TPOT (per request)": [d.tpot_ms for d in ds if d.tpot_ms is not None]},
                              "ms", "Inter-token latency: CDF (measured requests)", of="samples",
                              slo=_pick(slo, "tpot_ms", "TPOT")))
        figs.append(plots.cdf({"E2E": [d.e2e_ms for d in ds if d.e2e_ms is not None]}, "ms",
                              "End-to-end latency: CDF (measured requests)", slo=_pick(slo, "e2e_ms", "E2E")))
    elif measured:
        figs.append(plots.cdf({"document": [(r.end_ns - r.sent_ns) / 1e9 for r in measured if r.end_ns is not None]},
                              "s", "Document latency (enqueue to output written): CDF"))
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


def _pick(slo: dict[str, float], key: str, label: str) -> dict[str, float]:
    return {label: slo[key]} if key in slo else {}


def plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    return str(get_plotlyjs())


def render(summary: dict[str, Any], records: list[AnyRecord], rs: RunSeries | None = None) -> str:
    divs = [plots.to_html(f, f"plot-{i}") for i, f in enumerate(figures(summary, records, rs))]
    n = 2 if (summary.get("sweep") or {}).get("points") else 0  # figures() puts the sweep's two first
    return _ENV.get_template("report.html.j2").render(s=summary, sweep_plots=divs[:n], plots=divs[n:],
                                                      plotly_js=plotly_js())
