"""The self-contained HTML report (jinja2 template + inline SVG plots; no external assets)."""

from __future__ import annotations

from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from bench.metrics import derive
from bench.records import AnyRecord, RequestRecord
from bench.report import svg

_ENV = Environment(loader=PackageLoader("bench.report", "templates"),
                   autoescape=select_autoescape(["html", "j2"]), trim_blocks=True, lstrip_blocks=True)


def _fmt(v: Any, digits: int = 3) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.{digits}g}" if abs(v) < 1e-3 or abs(v) >= 1e5 else f"{v:,.{digits}f}".rstrip("0").rstrip(".")
    return str(v)


_ENV.filters["fmt"] = _fmt


def plots(summary: dict[str, Any], records: list[AnyRecord]) -> list[str]:
    out: list[str] = []
    measured = [r for r in records if r.phase == "measure" and r.ok]
    chats = [r for r in measured if isinstance(r, RequestRecord)]
    if chats:
        ds = [derive(r) for r in chats]
        out.append(svg.cdf({"TTFT": [d.ttft_ms for d in ds if d.ttft_ms is not None],
                            "TTFC": [d.ttfc_ms for d in ds if d.ttfc_ms is not None]},
                           "ms", "Latency CDF: time to first token / content token"))
        out.append(svg.cdf({"E2E": [d.e2e_ms for d in ds if d.e2e_ms is not None]}, "ms",
                           "Latency CDF: end to end"))
        out.append(svg.cdf({"TPOT": [d.tpot_ms for d in ds if d.tpot_ms is not None]}, "ms",
                           "Latency CDF: time per output token"))
    elif measured:
        lat = [(r.end_ns - r.sent_ns) / 1e9 for r in measured if r.end_ns is not None]
        out.append(svg.cdf({"document": lat}, "s", "Latency CDF: document enqueue to output written"))
    everyone = [r for r in records if r.end_ns is not None]
    if everyone:
        series: dict[str, list[tuple[float, float]]] = {}
        for r in everyone:
            if r.sent_ns is None or r.end_ns is None:
                continue  # never sent or never finished: no latency to plot
            key = r.phase if r.ok else "error"
            series.setdefault(key, []).append((r.sent_ns / 1e9, (r.end_ns - r.sent_ns) / 1e6))
        out.append(svg.scatter(series, "send time, s after start", "end-to-end latency, ms",
                               "Timeline: every request (warmup/cooldown shown, not measured)"))
        lag = [(r.sent_ns / 1e9, (r.sent_ns - r.intended_ns) / 1e6) for r in records]
        out.append(svg.scatter({"lag": lag}, "send time, s", "schedule lag, ms", "Timeline: client schedule lag"))
    sweep = summary.get("sweep")
    if sweep and sweep.get("points"):
        pts = sweep["points"]
        metric = sweep.get("metric", "ttft_ms")
        out.append(svg.lines({metric: [(p["achieved_rps"], p["value"]) for p in pts if p.get("value") is not None]},
                             "achieved request throughput, req/s", metric,
                             f"Sweep: {metric} p{sweep.get('percentile', 95):g} vs throughput",
                             hline=(sweep["threshold"], "SLO") if sweep.get("threshold") else None))
        out.append(svg.lines({"achieved": [(p["rate_rps"], p["achieved_rps"]) for p in pts],
                              "target": [(p["rate_rps"], p["rate_rps"]) for p in pts]},
                             "target rate, req/s", "req/s", "Sweep: achieved vs offered load"))
    return out


def render(summary: dict[str, Any], records: list[AnyRecord]) -> str:
    return _ENV.get_template("report.html.j2").render(s=summary, plots=plots(summary, records))
