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
from itertools import chain, repeat
from operator import attrgetter, sub, truediv
from typing import Literal

import numpy as np

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
class EventGaps:
    """Every record's chunk gaps and ITL gaps (ms), computed for a run's records at once: the same
    values as :func:`chunk_gaps_ms` and :func:`itl_gaps_ms` record by record, in record order,
    without a Python float per gap (a run of 10,000 64-token answers has 630,000 of them; the
    summary and the report each read them)."""

    chunk: np.ndarray  # every record's chunk gaps, record after record
    chunk_record: np.ndarray  # the index of the record each chunk gap belongs to
    itl: np.ndarray  # every record's ITL gaps, record after record
    itl_record: np.ndarray
    records: int

    def chunk_of(self, selected: np.ndarray) -> np.ndarray:
        """The chunk gaps of the records where ``selected`` (a bool per record) is true, in order."""
        return self.chunk[selected[self.chunk_record]]

    def itl_of(self, selected: np.ndarray) -> np.ndarray:
        return self.itl[selected[self.itl_record]]

    def of(self, gaps: Gaps, selected: np.ndarray) -> np.ndarray:
        return self.itl_of(selected) if gaps == "itl" else self.chunk_of(selected)

    def itl_means(self) -> list[float | None]:
        """Each record's mean ITL (None without gaps): the sum in record order, as Python's ``sum`` adds."""
        return _means(self.itl, self.itl_record, self.records)

    def chunk_means(self) -> list[float | None]:
        return _means(self.chunk, self.chunk_record, self.records)

    def means(self, gaps: Gaps) -> list[float | None]:
        return self.itl_means() if gaps == "itl" else self.chunk_means()


def _means(values: np.ndarray, owner: np.ndarray, n: int) -> list[float | None]:
    counts = np.bincount(owner, minlength=n)
    sums = np.bincount(owner, weights=values, minlength=n)  # adds in order, one by one
    return [float(s) / int(c) if c else None for s, c in zip(sums, counts)]


def event_gaps(records: Sequence[RequestRecord]) -> EventGaps:
    """:class:`EventGaps` of ``records`` (see there)."""
    n = len(records)
    lens = np.fromiter(map(len, map(attrgetter("event_ns"), records)), np.int64, n)
    total = int(lens.sum())
    ns = np.fromiter(chain.from_iterable(map(attrgetter("event_ns"), records)), np.int64, total)
    toks = np.fromiter(chain.from_iterable(map(attrgetter("event_tokens"), records)), np.int64, total)
    starts = np.cumsum(lens) - lens
    inner = np.ones(max(total - 1, 0), dtype=bool)  # diff j = ns[j + 1] - ns[j]: inside one record?
    first = starts[(starts > 0) & (starts < total)]
    inner[first - 1] = False
    chunk = (np.diff(ns) / MS)[inner]
    chunk_record = np.repeat(np.arange(n), np.maximum(lens - 1, 0))
    k = np.maximum(toks[1:][inner], 1)  # tokens of the later event of each gap
    itl = chunk if bool((k == 1).all()) else np.repeat(chunk / k, k)
    itl_record = chunk_record if itl is chunk else np.repeat(chunk_record, k)
    return EventGaps(chunk, chunk_record, itl, itl_record, n)


Gaps = Literal["itl", "chunk"]
PER_EVENT: dict[Gaps, Callable[[RequestRecord], list[float]]] = {"itl": itl_gaps_ms, "chunk": chunk_gaps_ms}


@dataclass(frozen=True)
class Metric:
    name: str
    unit: Literal["ms", "s"]
    workloads: tuple[Workload, ...]
    formula: str
    note: str = ""
    # None: one value per request, the attribute ``name`` of derive_any()'s result (None where
    # undefined); else which gaps between a chat request's events it is (EventGaps for a run's
    # records at once, PER_EVENT for one record): one value per gap or per token.
    per_event: Gaps | None = None
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
           per_event="itl", gated=True, figure="inter_token", label="ITL (per token)", short="ITL"),
    Metric("chunk_gap_ms", "ms", ("chat",), "`(event_ns[i] - event_ns[i-1]) / 1e6` for token events `i >= 1`",
           "equals `itl_ms` when every chunk has one token",
           per_event="chunk", figure="inter_token", label="chunk gap (per SSE event)", legend_rank=1,
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
    """Collects the per-request metrics among ``metrics`` (one value per request) from records
    added one by one, each with its derived values (a caller that needs them too derives once):
    in the order added, failed requests skipped except for the metrics that count them. The
    per-event metrics come from a run's records at once (event_samples). The caller chooses the
    records (the summary and the gates: measured ones)."""

    def __init__(self, metrics: Sequence[Metric]) -> None:
        per_request = [m for m in metrics if m.per_event is None]
        self.values: dict[str, list[float]] = {m.name: [] for m in per_request}
        self._always = tuple((m.name, m.workloads) for m in per_request if not m.successful_only)
        self._ok = tuple((m.name, m.workloads) for m in per_request if m.successful_only)

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


def event_samples(records: Sequence[AnyRecord], metrics: Sequence[Metric]) -> dict[str, np.ndarray]:
    """The per-event metrics among ``metrics`` over the successful chat records of ``records``,
    record after record (EventGaps: numpy, every record at once)."""
    wanted = [m for m in metrics if m.per_event is not None]
    if not wanted:
        return {}
    chats = [r for r in records if isinstance(r, RequestRecord)]
    gaps = event_gaps(chats)
    ok = np.fromiter((r.ok for r in chats), bool, len(chats))
    return {m.name: gaps.of(m.per_event, ok) for m in wanted if m.per_event is not None}


def samples(records: Sequence[AnyRecord], metrics: Sequence[Metric]) -> dict[str, list[float] | np.ndarray]:
    """The values of ``metrics`` over ``records``, by metric in the order given (see Samples and
    event_samples)."""
    acc = Samples(metrics)
    for r in records:
        acc.add(r, derive_any(r))
    events = event_samples(records, metrics)
    return {m.name: acc.values[m.name] if m.per_event is None else events[m.name] for m in metrics}
