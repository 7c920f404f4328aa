"""Bench records (JSONL, one request per line) and the SLI counts the calculators derive from them.

The minimal record model the SLO calculators need; the bench writes these (or more fields,
which are ignored). Kinds:
  * ``pdf``: one PDF job through queue and workers: ``t_s`` (submitted, unix s), ``duration_s``
    (submitted to output stored: the queue wait included, as the end-to-end latency SLIs count),
    ``ok``;
  * ``chat``: one direct inference request: ``t_s``, ``duration_s`` (end to end), ``ttft_s``, ``ok``;
  * ``probe``: one health probe of a component: ``t_s``, ``target`` (inference_server|workers), ``ok``;
  * ``gauge``: one sample of a catalog gauge: ``t_s``, ``metric``, ``value``.
Files written by `bench run` (bench/records.py: ``chat`` and ``pipeline`` records with ns
timings) are read too and mapped onto ``chat`` / ``pdf`` (see ``from_bench``).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from fractions import Fraction
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from contract import metrics as catalog
from slo.budget import Counts, exact
from slo.spec import SLO, EventRatioSLI, JobRole, LatencySLI, ThresholdSLI, UptimeSLI


class RecordError(ValueError):
    pass


class Record(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    kind: Literal["pdf", "chat", "probe", "gauge"]
    t_s: float = Field(description="unix time the request was sent / the sample taken, seconds")
    duration_s: float | None = Field(default=None, ge=0)
    ttft_s: float | None = Field(default=None, ge=0)
    ok: bool = True
    target: JobRole | None = None
    metric: str | None = None
    value: float | None = None
    error: str | None = None

    @property
    def end_s(self) -> float:
        return self.t_s + (self.duration_s or 0.0)


def from_bench(data: dict) -> Record | None:
    """Map a `bench run` record (bench/records.py: chat or pipeline, ns after t0) to a Record.

    Warmup and cooldown records are dropped, as the bench's own gates do.
    """
    if data.get("phase", "measure") != "measure":
        return None
    sent, end = data["sent_ns"], data.get("end_ns")
    duration = (end - sent) / 1e9 if end is not None else None
    if data.get("kind") == "pipeline":
        ok = data.get("error") is None and data.get("status") == "done"
        return Record(kind="pdf", t_s=data["wall_sent_s"], duration_s=duration, ok=ok, error=data.get("error"))
    events = data.get("event_ns") or []
    ttft = (events[0] - sent) / 1e9 if events else None
    return Record(kind="chat", t_s=data["wall_sent_s"], duration_s=duration, ttft_s=ttft,
                  ok=data.get("error") is None, error=data.get("error"))


def _parse(data: dict) -> Record | None:
    if "sent_ns" in data:  # a bench record
        return from_bench(data)
    return Record.model_validate(data)


def load_records(path: Path) -> list[Record]:
    out = []
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError:
        raise RecordError(f"{path}: bench records not found; pass the JSONL file a bench run wrote") from None
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = _parse(json.loads(line))
        except (json.JSONDecodeError, ValidationError, KeyError, TypeError) as e:
            raise RecordError(f"{path}:{i}: not a bench record ({str(e).splitlines()[0]}); "
                              "each line must be a JSON object with kind, t_s and the kind's fields") from None
        if rec is not None:
            out.append(rec)
    if not out:
        raise RecordError(f"{path}: no records; run the bench first")
    return out


# Which records stand for which metric: the offline twin of each SLI.
_PDF_COUNTERS = {catalog.PDFS_PROCESSED, catalog.PDFS_FAILED}
# Bench records time a PDF from submission to its stored output: the end-to-end duration (and
# an upper bound of the processing time).
_PDF_HISTOGRAMS = {catalog.PDF_END_TO_END_DURATION, catalog.PDF_PROCESSING_DURATION}
_CHAT_HISTOGRAMS = {"vllm:time_to_first_token_seconds": "ttft_s", "vllm:e2e_request_latency_seconds": "duration_s"}


def _unsupported(slo: SLO, why: str) -> RecordError:
    return RecordError(f"slo {slo.name!r}: cannot be computed from bench records: {why}")


def sli_counts(slo: SLO, records: list[Record], since_s: float | None = None) -> Counts | None:
    """Good/total counts for ``slo`` from ``records`` that start at or after ``since_s``; None if none apply."""
    recs = [r for r in records if since_s is None or r.t_s >= since_s]
    sli = slo.sli
    if isinstance(sli, EventRatioSLI):
        if not set(sli.metrics()) <= _PDF_COUNTERS:
            raise _unsupported(slo, f"only {sorted(_PDF_COUNTERS)} have a record equivalent")
        pdfs = [r for r in recs if r.kind == "pdf"]
        return Counts(Fraction(sum(r.ok for r in pdfs)), Fraction(len(pdfs))) if pdfs else None
    if isinstance(sli, LatencySLI):
        thr = exact(sli.threshold_s)
        never_done = 0
        if sli.histogram in _PDF_HISTOGRAMS:
            vals = [r.duration_s for r in recs if r.kind == "pdf" and r.ok and r.duration_s is not None]
            if set(sli.failures) & _PDF_COUNTERS:  # failed PDFs count as slower than any bound
                never_done = sum(1 for r in recs if r.kind == "pdf" and not r.ok)
        elif sli.histogram in _CHAT_HISTOGRAMS:
            field = _CHAT_HISTOGRAMS[sli.histogram]
            vals = [getattr(r, field) for r in recs if r.kind == "chat" and r.ok and getattr(r, field) is not None]
        else:
            raise _unsupported(slo, f"no record field for {sli.histogram}")
        total = len(vals) + never_done
        # `le` semantics: a value equal to the bound is good.
        return Counts(Fraction(sum(exact(v) <= thr for v in vals)), Fraction(total)) if total else None
    if isinstance(sli, UptimeSLI):
        # One-second slices: good when every required component was probed and all probes were ok.
        slices: dict[int, dict[str, bool]] = defaultdict(dict)
        for r in recs:
            if r.kind == "probe" and r.target in sli.jobs:
                s = slices[math.floor(r.t_s)]
                s[r.target] = s.get(r.target, True) and r.ok
        full = [s for s in slices.values() if set(s) == set(sli.jobs)]
        return Counts(Fraction(sum(all(s.values()) for s in full)), Fraction(len(full))) if full else None
    assert isinstance(sli, ThresholdSLI)
    return _threshold_counts(slo, sli, recs)


def _threshold_counts(slo: SLO, sli: ThresholdSLI, recs: list[Record]) -> Counts | None:
    slice_s = sli.slice_min * 60
    if sli.measure == "rate_per_hour":
        if sli.metric != catalog.PDFS_PROCESSED:
            raise _unsupported(slo, f"no record equivalent of {sli.metric}")
        pdfs = [r for r in recs if r.kind == "pdf"]
        if not pdfs:
            return None
        start, end = min(r.t_s for r in pdfs), max(r.end_s for r in pdfs)
        # Whole slices only; a run shorter than one slice is judged as one slice of its own length.
        n = int((end - start) // slice_s)
        bounds = [(start + i * slice_s, start + (i + 1) * slice_s) for i in range(n)] or [(start, end)]
        busy = _busy_spans(pdfs)
        good = judged = 0
        for i, (lo, hi) in enumerate(bounds):
            last = i == len(bounds) - 1
            done = sum(1 for r in pdfs if r.ok and (lo <= r.end_s < hi or (last and r.end_s == hi)))
            per_hour = Fraction(done) * 3600 / exact(max(hi - lo, 1e-9))
            met = _meets(per_hour, sli)
            # The records' twin of the backlog gauge: some PDF submitted and not yet done for the
            # whole slice. A slice that missed the threshold without that is not judged (demand
            # was lower than the threshold), as in the rules.
            if not met and sli.backlog_gauge and not any(a <= lo and hi <= b for a, b in busy):
                continue
            good += met
            judged += 1
        return Counts(Fraction(good), Fraction(judged)) if judged else None
    samples = [(r.t_s, r.value) for r in recs if r.kind == "gauge" and r.metric == sli.metric and r.value is not None]
    if not samples:
        return None
    start = min(t_s for t_s, _ in samples)
    by_slice: dict[int, float] = {}
    for t_s, value in samples:
        k = int((t_s - start) // slice_s)
        by_slice[k] = max(by_slice.get(k, value), value)
    good = sum(_meets(exact(v), sli) for v in by_slice.values())
    return Counts(Fraction(good), Fraction(len(by_slice)))


def _busy_spans(pdfs: list[Record]) -> list[tuple[float, float]]:
    """Merged [submitted, done] intervals: when at least one PDF was outstanding."""
    spans: list[tuple[float, float]] = []
    for a, b in sorted((r.t_s, r.end_s) for r in pdfs):
        if spans and a <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], b))
        else:
            spans.append((a, b))
    return spans


def _meets(value: Fraction, sli: ThresholdSLI) -> bool:
    thr = exact(sli.threshold)
    return value >= thr if sli.comparison == "gte" else value <= thr


def span_s(records: list[Record]) -> tuple[float, float]:
    return min(r.t_s for r in records), max(r.end_s for r in records)
