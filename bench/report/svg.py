"""Plots as inline SVG strings.

Why SVG written here rather than matplotlib: the report must be one self-contained file;
SVG is text (diffable, searchable, sharp at any zoom, a few KB per plot) and needs no 40 MB
plotting dependency in the CLI install. The plots are simple (CDFs, scatter, lines), so a
small generator with nice ticks is enough.
"""

from __future__ import annotations

import math
from html import escape

W, H = 640, 300
ML, MR, MT, MB = 60, 140, 20, 45
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    out, v = [], start
    while v <= hi + step * 1e-9:
        out.append(round(v, 10))
        v += step
    return out


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1000 or abs(v) < 0.01:
        return f"{v:.3g}"
    return f"{v:g}"


class _Axes:
    def __init__(self, xs: list[float], ys: list[float], xlabel: str, ylabel: str, title: str,
                 y_range: tuple[float, float] | None = None) -> None:
        xt = _ticks(min(xs, default=0.0), max(xs, default=1.0))
        yt = _ticks(*(y_range or (min(ys, default=0.0), max(ys, default=1.0))))
        self.x0, self.x1, self.y0, self.y1 = xt[0], xt[-1], yt[0], yt[-1]
        self.xt, self.yt = xt, yt
        self.parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}" '
                      f'font-family="sans-serif" font-size="11"><title>{escape(title)}</title>',
                      f'<text x="{ML}" y="13" font-weight="bold">{escape(title)}</text>']
        for v in xt:
            x = self.x(v)
            self.parts.append(f'<line x1="{x:.1f}" y1="{MT}" x2="{x:.1f}" y2="{H - MB}" stroke="#eee"/>'
                              f'<text x="{x:.1f}" y="{H - MB + 14}" text-anchor="middle">{_fmt(v)}</text>')
        for v in yt:
            y = self.y(v)
            self.parts.append(f'<line x1="{ML}" y1="{y:.1f}" x2="{W - MR}" y2="{y:.1f}" stroke="#eee"/>'
                              f'<text x="{ML - 4}" y="{y + 4:.1f}" text-anchor="end">{_fmt(v)}</text>')
        self.parts.append(f'<rect x="{ML}" y="{MT}" width="{W - ML - MR}" height="{H - MT - MB}" '
                          'fill="none" stroke="#999"/>'
                          f'<text x="{(ML + W - MR) / 2}" y="{H - 8}" text-anchor="middle">{escape(xlabel)}</text>'
                          f'<text transform="translate(14,{(MT + H - MB) / 2}) rotate(-90)" '
                          f'text-anchor="middle">{escape(ylabel)}</text>')
        self.legend = 0

    def x(self, v: float) -> float:
        return ML + (v - self.x0) / ((self.x1 - self.x0) or 1) * (W - ML - MR)

    def y(self, v: float) -> float:
        return H - MB - (v - self.y0) / ((self.y1 - self.y0) or 1) * (H - MT - MB)

    def add_legend(self, label: str, color: str) -> None:
        y = MT + 10 + 16 * self.legend
        self.parts.append(f'<rect x="{W - MR + 8}" y="{y - 8}" width="10" height="10" fill="{color}"/>'
                          f'<text x="{W - MR + 22}" y="{y + 1}">{escape(label[:18])}</text>')
        self.legend += 1

    def done(self) -> str:
        return "".join(self.parts) + "</svg>"


def _thin(points: list[tuple[float, float]], max_points: int = 1500) -> list[tuple[float, float]]:
    if len(points) <= max_points:
        return points
    step = len(points) / max_points
    return [points[int(i * step)] for i in range(max_points)] + [points[-1]]


def cdf(series: dict[str, list[float]], xlabel: str, title: str) -> str:
    """Empirical CDFs (step functions) of each series."""
    xs = [v for vals in series.values() for v in vals]
    ax = _Axes(xs or [0.0, 1.0], [0.0, 1.0], xlabel, "fraction of requests", title, (0.0, 1.0))
    for i, (label, vals) in enumerate(series.items()):
        if not vals:
            continue
        color = COLORS[i % len(COLORS)]
        s = sorted(vals)
        pts = _thin([(v, (k + 1) / len(s)) for k, v in enumerate(s)])
        d = "M" + " L".join(f"{ax.x(x):.1f},{ax.y(y):.1f}" for x, y in pts)
        ax.parts.append(f'<path d="{d}" fill="none" stroke="{color}" stroke-width="1.5"/>')
        ax.add_legend(label, color)
    return ax.done()


def scatter(series: dict[str, list[tuple[float, float]]], xlabel: str, ylabel: str, title: str) -> str:
    pts_all = [p for pts in series.values() for p in pts]
    ax = _Axes([p[0] for p in pts_all] or [0.0, 1.0], [p[1] for p in pts_all] or [0.0, 1.0],
               xlabel, ylabel, title)
    for i, (label, pts) in enumerate(series.items()):
        color = COLORS[i % len(COLORS)]
        ax.parts.extend(f'<circle cx="{ax.x(x):.1f}" cy="{ax.y(y):.1f}" r="1.6" fill="{color}" fill-opacity="0.6"/>'
                        for x, y in _thin(pts, 3000))
        ax.add_legend(label, color)
    return ax.done()


def lines(series: dict[str, list[tuple[float, float]]], xlabel: str, ylabel: str, title: str,
          hline: tuple[float, str] | None = None,
          bands: dict[str, list[tuple[float, float, float]]] | None = None) -> str:
    """Lines with markers; ``bands`` adds (x, low, high) error bars; ``hline`` a threshold."""
    pts_all = [p for pts in series.values() for p in pts]
    ys = [p[1] for p in pts_all] + ([hline[0]] if hline else [])
    for b in (bands or {}).values():
        ys += [lo for _, lo, _ in b] + [hi for _, _, hi in b]
    ax = _Axes([p[0] for p in pts_all] or [0.0, 1.0], ys or [0.0, 1.0], xlabel, ylabel, title,
               (min(0.0, min(ys, default=0.0)), max(ys, default=1.0)))
    for i, (label, pts) in enumerate(series.items()):
        color = COLORS[i % len(COLORS)]
        pts = sorted(pts)
        if pts:
            d = "M" + " L".join(f"{ax.x(x):.1f},{ax.y(y):.1f}" for x, y in pts)
            ax.parts.append(f'<path d="{d}" fill="none" stroke="{color}" stroke-width="1.5"/>')
            ax.parts.extend(f'<circle cx="{ax.x(x):.1f}" cy="{ax.y(y):.1f}" r="3" fill="{color}"/>' for x, y in pts)
        for x, lo, hi in (bands or {}).get(label, []):
            ax.parts.append(f'<line x1="{ax.x(x):.1f}" y1="{ax.y(lo):.1f}" x2="{ax.x(x):.1f}" y2="{ax.y(hi):.1f}" '
                            f'stroke="{color}" stroke-width="1"/>')
        ax.add_legend(label, color)
    if hline:
        y = ax.y(hline[0])
        ax.parts.append(f'<line x1="{ML}" y1="{y:.1f}" x2="{W - MR}" y2="{y:.1f}" stroke="#000" '
                        'stroke-dasharray="4 3"/>'
                        f'<text x="{W - MR - 4}" y="{y - 4:.1f}" text-anchor="end">{escape(hline[1])}</text>')
    return ax.done()
