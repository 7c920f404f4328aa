"""What the report plots and exports, computed once from a run's records: one row per request and
one row per second. docs/bench-report.md lists the columns of both CSV files.

Time is seconds since the first request of the run was sent (the records' clock: monotonic ns
after the bench's t0, or wall-clock ns for Locust), so the axes of every plot start at 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bench import metric_table
from bench.metric_table import Derived, EventGaps, derive, derive_pipeline, event_gaps
from bench.records import AnyRecord, PipelineRecord, RequestRecord

NS = 1e9

_HEAD = ("request_id", "process", "phase", "ok", "error", "status", "sent_s")
_CHAT_METRICS = metric_table.exported("chat")  # the per-request metrics' columns (bench/metric_table.py)
_PIPELINE_METRICS = metric_table.exported("pipeline")
CHAT_COLUMNS = (*_HEAD, *(m.column for m in _CHAT_METRICS), "prompt_tokens", "output_tokens", "finish_reason")
PIPELINE_COLUMNS = (*_HEAD, *(m.column for m in _PIPELINE_METRICS), "pages", "document", "worker_processing_s",
                    "output_verified")
TIME_COLUMNS = ("t_s", "sent", "completed", "errors", "output_tokens", "latency_p50", "latency_p95", "itl_p50_ms",
                "itl_p95_ms")


@dataclass
class RunSeries:
    kind: str  # "chat" or "pipeline"
    unit_name: str  # "requests" or "documents"
    latency_name: str  # the per-second latency columns: "ttft_ms" or "doc_latency_s"
    rows: list[dict[str, Any]] = field(default_factory=list)  # one per request, CHAT_/PIPELINE_COLUMNS
    bins: list[float] = field(default_factory=list)  # start of each 1 s bin
    sent: list[int] = field(default_factory=list)
    completed: list[int] = field(default_factory=list)
    errors: list[int] = field(default_factory=list)
    output_tokens: list[int] = field(default_factory=list)
    lat_p50: list[float | None] = field(default_factory=list)
    lat_p95: list[float | None] = field(default_factory=list)
    itl_p50: list[float | None] = field(default_factory=list)
    itl_p95: list[float | None] = field(default_factory=list)
    windows: list[tuple[float, float, str]] = field(default_factory=list)  # warmup / cooldown, not measured
    itl_by_request: list[float | None] = field(default_factory=list)
    derived: dict[str, Derived] = field(default_factory=dict)  # each request's metrics, by request_id
    gaps: EventGaps | None = None  # every request's gaps, requests in order of sending ...
    measured_ok: np.ndarray | None = None  # ... and which of them are measured and succeeded

    @property
    def columns(self) -> tuple[str, ...]:
        return CHAT_COLUMNS if self.kind == "chat" else PIPELINE_COLUMNS

    def time_rows(self) -> list[dict[str, Any]]:
        return [dict(zip(TIME_COLUMNS, vals)) for vals in zip(self.bins, self.sent, self.completed, self.errors,
                                                               self.output_tokens, self.lat_p50, self.lat_p95,
                                                               self.itl_p50, self.itl_p95)]


def _r(v: float | None, nd: int = 3) -> float | None:
    return None if v is None or not math.isfinite(v) else round(v, nd)


def _pct(vals: list[float] | np.ndarray, q: float) -> float | None:
    return float(np.percentile(vals, q)) if len(vals) else None


def _by_bin(values: np.ndarray, bins: np.ndarray, n: int) -> list[np.ndarray]:
    """``values`` grouped by their bin (0 .. n - 1)."""
    order = np.argsort(bins, kind="stable")
    cuts = np.searchsorted(bins[order], np.arange(1, n))
    return np.split(values[order], cuts)


_CELLS = {kind: tuple((m.column, m.name, m.per_event is not None) for m in metrics)
          for kind, metrics in (("chat", _CHAT_METRICS), ("pipeline", _PIPELINE_METRICS))}


def _metric_cells(kind: str, d: Derived | metric_table.PipelineDerived, means: dict[str, list[float | None]],
                  c: int) -> dict[str, float | None]:
    """The request's value of each metric (every request, failed ones too), rounded; a per-event
    metric's is the request's mean (``means``: by metric, of every chat request; ``c``: this one's
    index there)."""
    return {col: _r(means[name][c] if per_event else getattr(d, name)) for col, name, per_event in _CELLS[kind]}


def build(records: list[AnyRecord]) -> RunSeries:
    chats = [r for r in records if isinstance(r, RequestRecord)]
    kind = "chat" if chats or not records else "pipeline"
    rs = RunSeries(kind, "requests" if kind == "chat" else "documents", "ttft_ms" if kind == "chat" else
                   "doc_latency_s")
    sent = [r for r in records if r.sent_ns is not None]
    if not sent:
        return rs
    t0 = min(r.sent_ns for r in sent)
    last = max([(r.end_ns if r.end_ns is not None else r.sent_ns) for r in sent])
    n = int((last - t0) // NS) + 1
    rs.bins = [float(i) for i in range(n)]
    rs.sent, rs.completed, rs.errors, rs.output_tokens = [0] * n, [0] * n, [0] * n, [0] * n
    lat: list[list[float]] = [[] for _ in range(n)]
    ordered = sorted(sent, key=lambda r: r.sent_ns)
    chats = [r for r in ordered if isinstance(r, RequestRecord)]
    gaps = event_gaps(chats)  # every request's gaps at once (numpy), in this order
    means = {m.name: gaps.means(m.per_event) for m in _CHAT_METRICS if m.per_event is not None}
    itl_means = gaps.itl_means()
    chat_bin = np.zeros(len(chats), dtype=np.int64)  # the second each request was sent in ...
    chat_ok = np.zeros(len(chats), dtype=bool)  # ... and whether its ITL counts there
    rs.gaps, rs.measured_ok = gaps, np.zeros(len(chats), dtype=bool)
    c = 0
    for r in ordered:
        s_s = (r.sent_ns - t0) / NS
        i = int(s_s)
        rs.sent[i] += 1
        if r.end_ns is not None:
            j = int((r.end_ns - t0) // NS)
            if r.ok:
                rs.completed[j] += 1
            else:
                rs.errors[j] += 1
        elif not r.ok:
            rs.errors[i] += 1
        row: dict[str, Any] = {"request_id": r.request_id, "process": r.process, "phase": r.phase, "ok": r.ok,
                               "error": r.error, "status": r.status, "sent_s": _r(s_s, 6)}
        if isinstance(r, RequestRecord):
            d = derive(r)
            rs.derived[r.request_id] = d
            itl_mean = itl_means[c]
            row.update(_metric_cells("chat", d, means, c))
            row.update(prompt_tokens=r.prompt_tokens, output_tokens=r.output_tokens, finish_reason=r.finish_reason)
            rs.itl_by_request.append(itl_mean if r.ok else None)
            if r.ok and r.end_ns is not None and r.output_tokens:
                rs.output_tokens[int((r.end_ns - t0) // NS)] += r.output_tokens
            if r.ok and d.ttft_ms is not None:
                lat[i].append(d.ttft_ms)
            chat_bin[c], chat_ok[c] = i, r.ok
            rs.measured_ok[c] = r.ok and r.phase == "measure"
            c += 1
        else:
            assert isinstance(r, PipelineRecord)
            pd = derive_pipeline(r)
            doc_s = pd.doc_latency_s
            row.update(_metric_cells("pipeline", pd, {}, -1))
            row.update(pages=r.pages, document=r.document,
                       worker_processing_s=_r(r.processing_s), output_verified=r.output_verified)
            if r.ok and doc_s is not None:
                lat[i].append(doc_s)
        rs.rows.append(row)
    rs.lat_p50 = [_r(_pct(v, 50)) for v in lat]
    rs.lat_p95 = [_r(_pct(v, 95)) for v in lat]
    if kind == "chat":
        itl = _by_bin(gaps.itl_of(chat_ok), chat_bin[gaps.itl_record[chat_ok[gaps.itl_record]]], n)
        rs.itl_p50 = [_r(_pct(v, 50)) for v in itl]
        rs.itl_p95 = [_r(_pct(v, 95)) for v in itl]
    else:
        rs.itl_p50 = rs.itl_p95 = [None] * n
    measured = [(r.sent_ns - t0) / NS for r in sent if r.phase == "measure"]
    if measured:
        if any(r.phase == "warmup" for r in sent):
            rs.windows.append((0.0, min(measured), "warmup"))
        if any(r.phase == "cooldown" for r in sent):
            rs.windows.append((max(measured), (last - t0) / NS, "cooldown"))
    return rs
