"""The report's plots, drawn with plotly (interactive zoom and hover, offline: report.html inlines
plotly.js once, see html.py).

Every axis range is computed here from the data it shows (plus a margin), never left to a tick
rule, so no point falls outside its frame; legends sit above the plotting area, never on data.
The series come from ``series.py``, which the CSV exports share.

Figures are plain dicts (plotly's JSON figure format) rendered with ``plotly.io.to_html(...,
validate=False)``: building them through ``plotly.graph_objects`` validated every property and
took seconds per report.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from bench.report.series import RunSeries
from bench.summary import Sweep

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
MAX_POINTS = 3000  # per trace: a CDF or scatter thinned beyond this stays exact at its ends
# plotly's named templates ("plotly_white") are deep-copied into every figure, seconds per report:
# the few settings wanted are set directly (plotly.js defaults otherwise)
_AXIS = {"showline": True, "mirror": True, "linecolor": "#999", "zeroline": False, "gridcolor": "#eee",
         "ticks": "outside", "tickcolor": "#999", "automargin": True}
_LAYOUT = {"paper_bgcolor": "#fff", "plot_bgcolor": "#fff", "font": {"size": 12},
           "colorway": list(COLORS)}
CONFIG = {"displaylogo": False, "responsive": True,
          "modeBarButtonsToRemove": ["select2d", "lasso2d", "autoScale2d"]}


Fig = dict[str, Any]


def _figure() -> Fig:
    return {"data": [], "layout": {"shapes": [], "annotations": []}}


def to_html(fig: Fig, div_id: str) -> str:
    import plotly.io as pio  # imported when a report is drawn, not by every `bench` command

    return str(pio.to_html(fig, full_html=False, include_plotlyjs=False, config=CONFIG, div_id=div_id,
                           default_width="100%", validate=False))


def data_range(values: Iterable[float | None], *, zero: bool = True, pad: float = 0.05) -> list[float]:
    """[low, high] that contains every value with ``pad`` of the span on each side (0 included
    when ``zero``); a single value or none still gets a non-empty range."""
    vals = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return [0.0, 1.0]
    lo, hi = min(vals), max(vals)
    if zero:
        lo, hi = min(lo, 0.0), max(hi, 0.0)
    span = hi - lo or abs(hi) or 1.0
    return [lo - pad * span if lo < 0 or not zero else 0.0, hi + pad * span]


def _thin(xs: Sequence[float], ys: Sequence[float], n: int = MAX_POINTS) -> tuple[list[float], list[float]]:
    if len(xs) <= n:
        return list(xs), list(ys)
    idx = sorted({round(i * (len(xs) - 1) / (n - 1)) for i in range(n)})
    return [xs[i] for i in idx], [ys[i] for i in idx]


def _ecdf(vals: Sequence[float] | np.ndarray, n: int = MAX_POINTS) -> tuple[list[float], list[float]]:
    """The empirical CDF's points (value, share at or below it), thinned as :func:`_thin` does;
    sorted with numpy: a run's ITL samples number hundreds of thousands."""
    s = np.sort(np.asarray(vals, dtype=float))
    m = s.size
    idx = np.unique(np.round(np.arange(n) * (m - 1) / (n - 1)).astype(np.int64)) if m > n else np.arange(m)
    return s[idx].tolist(), ((idx + 1) / m).tolist()


def _layout(fig: Fig, title: str, xtitle: str, ytitle: str, xs: Iterable[float | None],
            ys: Iterable[float | None], *, y_zero: bool = True, x_zero: bool = True,
            y_range: list[float] | None = None, height: int = 380) -> Fig:
    fig["layout"].update(
        title={"text": title, "x": 0.0, "xanchor": "left", "font": {"size": 15}, "yref": "container", "y": 1.0,
               "yanchor": "top", "pad": {"t": 10}},  # pinned to the top: caption lines grow downwards
        height=height, margin={"l": 70, "r": 30, "t": 85, "b": 55},
        legend={"orientation": "h", "x": 0.0, "y": 1.02, "xanchor": "left", "yanchor": "bottom"},
        hovermode="closest", **_LAYOUT)
    fig["layout"]["xaxis"] = {"title": {"text": xtitle}, "range": data_range(xs, zero=x_zero), **_AXIS}
    fig["layout"]["yaxis"] = {"title": {"text": ytitle}, "range": y_range or data_range(ys, zero=y_zero), **_AXIS}
    return fig


def _vrect(fig: Fig, x0: float, x1: float, color: str, label: str | None = None, opacity: float = 0.12) -> None:
    fig["layout"]["shapes"].append({"type": "rect", "xref": "x", "yref": "paper", "x0": x0, "x1": x1, "y0": 0,
                                    "y1": 1, "fillcolor": color, "opacity": opacity, "line": {"width": 0},
                                    "layer": "below"})
    if label:
        fig["layout"]["annotations"].append({"x": x0, "y": 1, "xref": "x", "yref": "paper", "text": label,
                                             "showarrow": False, "xanchor": "left", "yanchor": "top",
                                             "font": {"size": 10, "color": "#555"}})


def _hline(fig: Fig, y: float, label: str, color: str = "#000") -> None:
    fig["layout"]["shapes"].append({"type": "line", "xref": "paper", "yref": "y", "x0": 0, "x1": 1, "y0": y, "y1": y,
                                    "line": {"color": color, "dash": "dash", "width": 1.5}})
    fig["layout"]["annotations"].append({"x": 0, "y": y, "xref": "paper", "yref": "y", "text": label,
                                         "showarrow": False, "xanchor": "left", "yanchor": "bottom",
                                         "font": {"color": color}})


def _vline(fig: Fig, x: float, label: str, color: str, right: bool = False, dash: str = "solid",
           y: float = 0.0) -> None:
    """A vertical line with its label at height ``y`` (bottom by default), on the side of the line
    with room for it."""
    fig["layout"]["shapes"].append({"type": "line", "xref": "x", "yref": "paper", "x0": x, "x1": x, "y0": 0, "y1": 1,
                                    "line": {"color": color, "width": 2, "dash": dash}})
    fig["layout"]["annotations"].append({"x": x, "y": y, "xref": "x", "yref": "paper", "text": label,
                                         "showarrow": False, "xanchor": "right" if right else "left",
                                         "yanchor": "bottom", "font": {"color": color},
                                         "bgcolor": "rgba(255,255,255,0.8)"})


DASHES = ("solid", "dash", "dot", "dashdot")  # identical series (TTFT = TTFC on most servers) stay visible


CLIP_PERCENTILE = 99.5  # a CDF's x axis ends here: one outlier no longer squeezes the rest into a line


def cdf(series: dict[str, Sequence[float] | np.ndarray], unit: str, title: str, of: str = "requests",
        slo: dict[str, float] | None = None, clip: float | None = CLIP_PERCENTILE) -> Fig:
    """Empirical CDFs (step functions): y = share of ``of`` at or below x.

    The x axis ends at the ``clip`` percentile of the largest series (plus a margin); the values
    beyond it stay in the traces (zoom out to see them) and are counted in the caption under the
    title. ``slo`` draws each objective (label: value, same unit) as a vertical dashed line, or
    notes it in the caption when it lies beyond the axis."""
    fig = _figure()
    xs_all: list[float] = []
    clip_at: float | None = None
    vmax = -math.inf
    arrays = {label: np.asarray(vals, dtype=float) for label, vals in series.items()}
    for i, (label, arr) in enumerate(arrays.items()):
        if not arr.size:
            continue
        xs, ys = _ecdf(arr)
        xs_all += [xs[0], xs[-1]]
        vmax = max(vmax, xs[-1])
        if clip is not None:
            clip_at = max(clip_at or -math.inf, float(np.percentile(arr, clip)))
        fig["data"].append(dict(type="scatter", x=xs, y=ys, mode="lines", name=f"{label} (n={arr.size})",
                                line={"color": COLORS[i % len(COLORS)], "width": 2, "shape": "hv",
                                      "dash": DASHES[i % len(DASHES)]},
                                hovertemplate=f"{label}: %{{x:.4g}} {unit}<br>share at or below: %{{y:.1%}}"
                                "<extra></extra>"))
    notes: list[str] = []
    if clip_at is not None and vmax > clip_at:
        beyond = sum(int((arr > clip_at).sum()) for arr in arrays.values())
        notes.append(f"axis ends at p{clip:g} ({clip_at:.4g} {unit}): {beyond} value{'s' * (beyond != 1)} "
                     f"beyond it, up to {vmax:.4g} {unit} (zoom out to see them)")
        xs_all = [x for x in xs_all if x <= clip_at] + [clip_at]
    _layout(fig, title, unit, f"share of {of}", xs_all, [], y_range=[0.0, 1.02])
    x_hi = fig["layout"]["xaxis"]["range"][1]
    for j, (label, value) in enumerate((slo or {}).items()):
        if value <= x_hi:
            _vline(fig, value, f"SLO {label} ≤ {value:g} {unit}", SLO_COLOR, right=True, dash="dash",
                   y=0.5 + 0.1 * j)
        else:
            notes.append(f"SLO {label} ≤ {value:g} {unit} lies beyond the axis")
    _caption(fig, notes)
    return fig


SLO_COLOR = "#6e40c9"


def _caption(fig: Fig, notes: list[str]) -> None:
    """Notes under the title (what the axes leave out), in small grey type."""
    if not notes:
        return
    title = fig["layout"]["title"]
    title["text"] += "".join(f"<br><span style='font-size:11px;color:#555'>{n}</span>" for n in notes)
    fig["layout"]["margin"]["t"] += 16 * len(notes)
    fig["layout"].setdefault("meta", {})["caption"] = notes


def slo_hline(fig: Fig, value: float, label: str) -> None:
    """An objective as a horizontal dashed line, when it lies on the y axis; a caption otherwise."""
    hi = fig["layout"]["yaxis"]["range"][1]
    if value <= hi:
        _hline(fig, value, label, color=SLO_COLOR)
    else:
        _caption(fig, [f"{label} lies above the axis (every value is below it)"])


def over_time(points: dict[str, tuple[list[float], list[float]]],
              lines: dict[str, tuple[list[float], list[float | None]]],
              ytitle: str, title: str, windows: list[tuple[float, float, str]] | None = None) -> Fig:
    """Per-request markers (``points``) with per-second lines (``lines``, e.g. p50/p95), and shaded
    ``windows`` (warmup, cooldown) that are not measured."""
    fig = _figure()
    xs: list[float] = []
    ys: list[float] = []
    for i, (label, (px, py)) in enumerate(points.items()):
        if not px:
            continue
        tx, ty = _thin(px, py)
        xs += px
        ys += py
        fig["data"].append(dict(type="scattergl", x=tx, y=ty, mode="markers", name=label,
                                   marker={"size": 4, "opacity": 0.45, "color": COLORS[i % len(COLORS)]},
                                   hovertemplate=f"{label}<br>t=%{{x:.2f}} s<br>%{{y:.4g}}<extra></extra>"))
    for j, (label, (lx, ly)) in enumerate(lines.items()):
        if not lx:
            continue
        xs += lx
        ys += [float(v) for v in ly if v is not None]
        fig["data"].append(dict(type="scatter", x=lx, y=ly, mode="lines", name=label, connectgaps=False,
                                 line={"width": 2.5, "color": COLORS[(len(points) + j) % len(COLORS)]},
                                 hovertemplate=f"{label}<br>t=%{{x:.0f}} s<br>%{{y:.4g}}<extra></extra>"))
    _shade(fig, windows)
    return _layout(fig, title, "time since the first request was sent, s", ytitle, xs, ys)


def _shade(fig: Fig, windows: list[tuple[float, float, str]] | None) -> None:
    for lo, hi, label in windows or []:
        if hi > lo:
            _vrect(fig, lo, hi, "#888", label)


def throughput(rs: RunSeries, title: str) -> Fig:
    """Completions per second and output tokens per second (right axis), errors per second."""
    fig = _figure()
    t = rs.bins
    fig["data"].append(dict(type="scatter", x=t, y=rs.completed, mode="lines+markers", name="completed, req/s",
                            line={"color": COLORS[0], "width": 2}, marker={"size": 4},
                            hovertemplate="t=%{x:.0f} s<br>%{y} req/s<extra></extra>"))
    if any(rs.errors):
        fig["data"].append(dict(type="scatter", x=t, y=rs.errors, mode="lines+markers", name="errors, req/s",
                                line={"color": COLORS[1], "width": 2}, marker={"size": 4},
                                hovertemplate="t=%{x:.0f} s<br>%{y} errors/s<extra></extra>"))
    has_tokens = any(rs.output_tokens)
    if has_tokens:
        fig["data"].append(dict(type="scatter", x=t, y=rs.output_tokens, mode="lines", yaxis="y2",
                                name="output tokens/s (right axis)", line={"color": COLORS[2], "width": 2,
                                                                          "dash": "dot"},
                                hovertemplate="t=%{x:.0f} s<br>%{y} tokens/s<extra></extra>"))
    _shade(fig, rs.windows)
    _layout(fig, title, "time since the first request was sent, s (1 s bins, by completion time)",
            f"{rs.unit_name} completed per second", t or [0.0], [*rs.completed, *rs.errors])
    if has_tokens:
        fig["layout"]["yaxis2"] = {**_AXIS, "title": {"text": "output tokens per second"}, "overlaying": "y",
                                   "side": "right", "showgrid": False, "mirror": False,
                                   "range": data_range(rs.output_tokens)}
        fig["layout"]["margin"]["r"] = 80
    return fig


def histograms(series: dict[str, list[float]], title: str) -> Fig:
    """One histogram per series, side by side (prompt and output lengths)."""
    fig = _figure()
    names = [k for k, v in series.items() if v]
    gap = 0.1
    width = (1.0 - gap * (len(names) - 1)) / max(1, len(names))
    for i, name in enumerate(names):
        vals = series[name]
        lo, hi = min(vals), max(vals)
        size = max(1.0, math.ceil((hi - lo + 1) / 40))
        ax = "" if i == 0 else str(i + 1)
        fig["data"].append(dict(type="histogram", x=vals, name=name, showlegend=False, xaxis=f"x{ax}", yaxis=f"y{ax}",
                                marker={"color": COLORS[i % len(COLORS)]},
                                xbins={"start": lo - 0.5, "end": hi + 0.5, "size": size},
                                hovertemplate=f"{name}: %{{x}}<br>%{{y}} requests<extra></extra>"))
        counts: dict[int, int] = {}
        for v in vals:
            k = math.floor((v - lo + 0.5) / size)
            counts[k] = counts.get(k, 0) + 1
        x0 = i * (width + gap)
        fig["layout"][f"xaxis{ax}"] = {**_AXIS, "title": {"text": f"{name}, tokens"}, "domain": [x0, x0 + width],
                                       "range": [lo - size, hi + size], "anchor": f"y{ax}"}
        fig["layout"][f"yaxis{ax}"] = {**_AXIS, "title": {"text": "requests" if i == 0 else ""},
                                       "range": [0, max(counts.values()) * 1.08], "anchor": f"x{ax}"}
    fig["layout"].update(title={"text": title, "x": 0.0, "xanchor": "left", "font": {"size": 15}},
                         height=340, margin={"l": 70, "r": 30, "t": 60, "b": 55}, bargap=0.05, **_LAYOUT)
    return fig


def sweep_latency(sweep: Sweep) -> Fig:
    """The SLO metric's percentiles against the offered rate: every run as a marker, the mean over
    repeats as a line; the SLO threshold and the knee (highest rate meeting it, with its CI)."""
    fig = _figure()
    pts = sweep.get("points") or []
    metric, pct = sweep.get("metric", ""), sweep.get("percentile", 95)
    xs = [p["rate_rps"] for p in pts]
    ys: list[float] = []
    keys = ["p50", "p90", "p95", "p99"]
    for i, k in enumerate(keys):
        at = [(p["rate_rps"], v) for p in pts if (v := (p.get("percentiles") or {}).get(k)) is not None]
        if not at and k == f"p{pct:g}":  # a summary written before percentiles were kept per point
            at = [(p["rate_rps"], v) for p in pts if (v := p.get("value")) is not None]
        px, py = [x for x, _ in at], [y for _, y in at]
        if not px:
            continue
        ys += py
        color = COLORS[i % len(COLORS)]
        mx, my = _means(px, py)
        fig["data"].append(dict(type="scatter", x=mx, y=my, mode="lines+markers", name=f"{k} (mean of repeats)",
                                marker={"size": 6},
                                 line={"color": color, "width": 2.5 if k == f"p{pct:g}" else 1.5}, legendgroup=k,
                                 hovertemplate=f"{k} at %{{x:.3g}} req/s: %{{y:.4g}}<extra></extra>"))
        fig["data"].append(dict(type="scatter", x=px, y=py, mode="markers", name=f"{k}, each run",
                                legendgroup=k, showlegend=False,
                                 marker={"color": color, "size": 7, "symbol": "circle-open"},
                                 hovertemplate=f"{k} at %{{x:.3g}} req/s: %{{y:.4g}} (one run)<extra></extra>"))
    thr = sweep.get("threshold")
    if thr is not None:
        ys.append(thr)
        _hline(fig, thr, f"SLO: p{pct:g} ≤ {thr:g}")
    _knee(fig, sweep, xs)
    return _layout(fig, f"Sweep: {metric} percentiles against offered load", "offered rate, req/s", metric,
                   [*xs, *_knee_xs(sweep)], ys)


def sweep_throughput(sweep: Sweep) -> Fig:
    """Achieved against offered rate, the ideal y = x, and the knee."""
    fig = _figure()
    pts = sweep.get("points") or []
    xs = [p["rate_rps"] for p in pts]
    ys = [p["achieved_rps"] for p in pts]
    top = max(xs, default=1.0)
    fig["data"].append(dict(type="scatter", x=[0, top], y=[0, top], mode="lines", name="offered = achieved",
                             line={"color": "#999", "dash": "dot"}, hoverinfo="skip"))
    mx, my = _means(xs, ys)
    fig["data"].append(dict(type="scatter", x=mx, y=my, mode="lines+markers", name="achieved (mean of repeats)",
                            marker={"size": 6},
                             line={"color": COLORS[0], "width": 2.5},
                             hovertemplate="offered %{x:.3g} req/s: achieved %{y:.3g} req/s<extra></extra>"))
    colors = [COLORS[2] if p.get("meets") else COLORS[1] for p in pts]
    fig["data"].append(dict(type="scatter", x=xs, y=ys, mode="markers",
                            name="each run (green: meets the SLO, red: misses it)",
                             marker={"color": colors, "size": 8},
                             customdata=[[p.get("repeat"), p.get("error_rate"), p.get("valid")] for p in pts],
                             hovertemplate="offered %{x:.3g} req/s, repeat %{customdata[0]}<br>achieved %{y:.3g} "
                             "req/s<br>error rate %{customdata[1]:.2%}, valid %{customdata[2]}<extra></extra>"))
    _knee(fig, sweep, xs)
    return _layout(fig, "Sweep: achieved throughput against offered load", "offered rate, req/s",
                   "achieved (completed) rate, req/s", [*xs, *_knee_xs(sweep)], [*ys, top])


def _means(xs: list[float], ys: list[float]) -> tuple[list[float], list[float]]:
    by: dict[float, list[float]] = {}
    for x, y in zip(xs, ys):
        by.setdefault(x, []).append(y)
    keys = sorted(by)
    return keys, [sum(by[k]) / len(by[k]) for k in keys]


def _knee_xs(sweep: Sweep) -> list[float]:
    out = [v for v in (sweep.get("max_rate_rps"),) if v is not None]
    return out + [max(0.0, v) for v in (sweep.get("ci_rps") or []) if v is not None]  # no rate is below 0


def _knee(fig: Fig, sweep: Sweep, xs: list[float]) -> None:
    knee = sweep.get("max_rate_rps")
    if knee is None:
        return
    ci = sweep.get("ci_rps")
    if ci:
        _vrect(fig, max(0.0, ci[0]), ci[1], COLORS[2])  # a t-interval over 2 repeats can reach below 0
    if sweep.get("bracket_rps"):  # passed below, failed above: the interpolated crossing
        label = f"SLO knee {knee:.3g} req/s" + (f" (95 % CI {ci[0]:.3g}–{ci[1]:.3g})" if ci else "")
    else:  # no rate tried failed: a lower bound, not a knee
        label = f"SLO met up to {knee:.3g} req/s (the highest rate tried)"
    _vline(fig, knee, label, COLORS[2], right=knee > 0.5 * max([*xs, knee]))
