"""Every per-request metric the bench reports, defined once.

One row of ``METRICS`` per metric: its name, unit, formula, how one record yields it, and where
it is used -- the summary's ``latency`` section (bench/metrics.py), the gates that take a
``metric`` (bench/gating/models.py), ``bench compare`` (bench/compare.py) and its HTML view
(bench/report/compare_html.py), the report's CDF figures (bench/report/html.py) and
requests.csv (bench/report/series.py). Each of those reads
its metrics from this table, and the table in docs/bench-metrics.md is generated from it
(``python -m bench.reference``), so a new metric is one row here and a regenerated doc.

Every timestamp is monotonic ns after the run's t0 (bench/records.py); the table's row order is
the order of the summary's ``latency`` keys.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import sub, truediv
from typing import Literal

from bench.records import AnyRecord, PipelineRecord, RequestRecord

MS = 1e6  # ns per ms
Workload = Literal["chat", "pipeline"]
# The report's CDF figures a metric can be drawn in (their titles and order: bench/report/html.py).
Figure = Literal["first_token", "inter_token", "end_to_end", "document"]


@dataclass
class Derived:
    """The per-request values of one chat request (None: not defined for it)."""

    ttfb_ms: float | None
    ttft_ms: float | None
    ttfc_ms: float | None
    e2e_ms: float | None
    tpot_ms: float | None
    lag_ms: float


@dataclass
class PipelineDerived:
    """The per-request values of one pipeline document."""

    doc_latency_s: float | None
    lag_ms: float


def derive(r: RequestRecord) -> Derived:
    sent = r.sent_ns
    ttft = (r.event_ns[0] - sent) / MS if r.event_ns else None
    ttfc = next(((t - sent) / MS for t, c in zip(r.event_ns, r.event_content) if c), None)
    e2e = (r.end_ns - sent) / MS if r.end_ns is not None else None
    tpot = None
    out_tokens = r.output_tokens or 0
    if r.ok and ttft is not None and e2e is not None and out_tokens >= 2:
        tpot = (e2e - ttft) / (out_tokens - 1)
    return Derived(
        ttfb_ms=(r.headers_ns - sent) / MS if r.headers_ns is not None else None,
        ttft_ms=ttft, ttfc_ms=ttfc, e2e_ms=e2e, tpot_ms=tpot,
        lag_ms=(sent - r.intended_ns) / MS,
    )


def derive_pipeline(r: PipelineRecord) -> PipelineDerived:
    return PipelineDerived(doc_latency_s=(r.end_ns - r.sent_ns) / 1e9 if r.end_ns is not None else None,
                           lag_ms=(r.sent_ns - r.intended_ns) / MS)


def derive_any(r: AnyRecord) -> Derived | PipelineDerived:
    return derive_pipeline(r) if isinstance(r, PipelineRecord) else derive(r)


def chunk_gaps_ms(r: RequestRecord) -> list[float]:
    ns = r.event_ns
    return list(map(truediv, map(sub, ns[1:], ns), repeat(MS)))  # C-level: runs for every request


def itl_gaps_ms(r: RequestRecord) -> list[float]:
    chunks = chunk_gaps_ms(r)
    toks = r.event_tokens[1:]
    if toks.count(1) == len(toks):  # one token per event (the usual stream): the chunk gaps themselves
        return chunks
    out: list[float] = []
    for gap, k in zip(chunks, toks):
        k = max(1, k)
        out.extend([gap / k] * k)
    return out


@dataclass(frozen=True)
class Metric:
    name: str
    unit: Literal["ms", "s"]
    workloads: tuple[Workload, ...]
    formula: str
    note: str = ""
    # None: one value per request, the attribute ``name`` of derive_any()'s result (None where
    # undefined); else the values one chat request contributes (one per event or token).
    per_event: Callable[[RequestRecord], list[float]] | None = None
    successful_only: bool = True  # False: failed requests count too (the schedule lag)
    gated: bool = False  # a ``metric`` of the latency gates (bench/gating/models.py)
    compared: bool = False  # a row of `bench compare`
    overlaid: bool = False  # a CDF of `bench compare`'s HTML view, baseline and candidate overlaid
    figure: Figure | None = None  # the report's CDF figure that draws it
    label: str = ""  # its legend in that figure
    legend_rank: int = 0  # its place in that figure's legend (and colour), lowest first; ties: the table's order
    short: str = ""  # its name in an SLO line of that figure
    exported: bool = True  # a column of requests.csv (per-event metrics: the request's mean, see ``column``)

    @property
    def column(self) -> str:
        """Its requests.csv column: the name, or ``<stem>_mean_<unit>`` for a per-event metric."""
        if self.per_event is None:
            return self.name
        return f"{self.name.removesuffix('_' + self.unit)}_mean_{self.unit}"


METRICS: tuple[Metric, ...] = (
    Metric("ttfb_ms", "ms", ("chat",), "(headers_ns - sent_ns) / 1e6", "time to first byte of the response",
           gated=True, figure="first_token", label="TTFB (headers)", legend_rank=2, short="TTFB"),
    Metric("ttft_ms", "ms", ("chat",), "(event_ns[0] - sent_ns) / 1e6",
           "first token **of any kind** (content, reasoning, or an empty-text token)",
           gated=True, compared=True, overlaid=True, figure="first_token", label="TTFT", short="TTFT"),
    Metric("ttfc_ms", "ms", ("chat",), "(first event_ns[i] with event_content[i] - sent_ns) / 1e6",
           "first **content** token", gated=True, compared=True, figure="first_token",
           label="TTFC (first content)", legend_rank=1, short="TTFC"),
    Metric("e2e_ms", "ms", ("chat",), "(end_ns - sent_ns) / 1e6", "last byte of the response",
           gated=True, compared=True, overlaid=True, figure="end_to_end", label="E2E", short="E2E"),
    Metric("tpot_ms", "ms", ("chat",), "(e2e_ms - ttft_ms) / (output_tokens - 1)",
           "only when `output_tokens >= 2` and the request succeeded",
           gated=True, compared=True, figure="inter_token", label="TPOT (per request)", legend_rank=2,
           short="TPOT"),
    Metric("itl_ms", "ms", ("chat",),
           "event `i >= 1` carrying `k_i` tokens contributes `k_i` gaps of `(event_ns[i] - event_ns[i-1]) / k_i / 1e6`",
           "the sum of a request's gaps is `event_ns[-1] - event_ns[0]`; number of gaps = `output_tokens - k_0`",
           per_event=itl_gaps_ms, gated=True, figure="inter_token", label="ITL (per token)", short="ITL"),
    Metric("chunk_gap_ms", "ms", ("chat",), "`(event_ns[i] - event_ns[i-1]) / 1e6` for token events `i >= 1`",
           "equals `itl_ms` when every chunk has one token",
           per_event=chunk_gaps_ms, figure="inter_token", label="chunk gap (per SSE event)", legend_rank=1,
           short="chunk gap"),
    Metric("doc_latency_s", "s", ("pipeline",), "(end_ns - sent_ns) / 1e9",
           "enqueue to the worker's `done` (see below for `end_ns`)",
           gated=True, compared=True, overlaid=True, figure="document", label="document", short="document latency"),
    Metric("lag_ms", "ms", ("chat", "pipeline"), "(sent_ns - intended_ns) / 1e6",
           "schedule lag, of every measured request (failed ones too); may be up to ~1 ms negative with uvloop, "
           "whose timers have millisecond resolution", successful_only=False),
)
BY_NAME = {m.name: m for m in METRICS}


def of(workload: Workload) -> tuple[Metric, ...]:
    """The metrics of one workload's records, in the table's order."""
    return tuple(m for m in METRICS if workload in m.workloads)


def names(metrics: Iterable[Metric]) -> tuple[str, ...]:
    return tuple(m.name for m in metrics)


def exported(workload: Workload) -> tuple[Metric, ...]:
    """requests.csv's metric columns: the schedule lag (every request has one) first, then the
    response's metrics in the table's order."""
    cols = [m for m in of(workload) if m.exported]
    return tuple(sorted(cols, key=lambda m: m.successful_only))


GATED: tuple[str, ...] = names(m for m in METRICS if m.gated)


class Samples:
    """Collects the values of ``metrics`` from records added one by one (each with its derived
    values, so a caller that needs them too derives once): in the order added, failed requests
    skipped except for the metrics that count them. The caller chooses the records (the summary
    and the gates: measured ones)."""

    def __init__(self, metrics: Sequence[Metric]) -> None:
        self.values: dict[str, list[float]] = {m.name: [] for m in metrics}
        per_request = [m for m in metrics if m.per_event is None]
        self._always = tuple((m.name, m.workloads) for m in per_request if not m.successful_only)
        self._ok = tuple((m.name, m.workloads) for m in per_request if m.successful_only)
        self._events: list[tuple[str, Callable[[RequestRecord], list[float]]]] = []
        for m in metrics:
            if m.per_event is not None:
                self._events.append((m.name, m.per_event))

    def add(self, r: AnyRecord, d: Derived | PipelineDerived) -> None:
        values, kind = self.values, r.kind
        for name, workloads in self._always:
            if kind in workloads:
                values[name].append(getattr(d, name))
        if not r.ok:
            return
        for name, workloads in self._ok:
            if kind in workloads:
                v = getattr(d, name)
                if v is not None:
                    values[name].append(v)
        if isinstance(r, RequestRecord):
            for name, fn in self._events:
                values[name].extend(fn(r))


def samples(records: Iterable[AnyRecord], metrics: Sequence[Metric]) -> dict[str, list[float]]:
    """The values of ``metrics`` over ``records`` (see Samples)."""
    acc = Samples(metrics)
    for r in records:
        acc.add(r, derive_any(r))
    return acc.values
