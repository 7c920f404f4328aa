"""The metric table (bench/metric_table.py): well formed, and what reads it follows it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from bench import metric_table
from bench.compare import CHAT_METRICS
from bench.compare import PIPELINE_METRICS as COMPARED_PIPELINE
from bench.gating.models import LatencyGate, latency_values
from bench.metrics import LATENCY_METRICS, PIPELINE_METRICS
from bench.records import PipelineRecord, RequestRecord
from bench.report.series import CHAT_COLUMNS, PIPELINE_COLUMNS

MS = 1_000_000


def test_every_row_is_well_formed():
    names = [m.name for m in metric_table.METRICS]
    assert len(names) == len(set(names))
    for m in metric_table.METRICS:
        assert m.name.endswith("_" + m.unit), f"{m.name}: the name ends with its unit"
        assert m.formula and m.workloads
        assert m.per_event is None or m.workloads == ("chat",), f"{m.name}: per-event metrics are chat metrics"
        assert m.figure is None or (m.label and m.short), f"{m.name}: a drawn metric needs its legend and short name"
        assert not m.overlaid or m.compared, f"{m.name}: overlaid in the comparison view but not compared"


def test_the_summary_gates_comparison_and_csv_take_their_metrics_from_the_table():
    assert LATENCY_METRICS == tuple(m.name for m in metric_table.of("chat"))
    assert PIPELINE_METRICS == tuple(m.name for m in metric_table.of("pipeline"))
    assert CHAT_METRICS == tuple(m.name for m in metric_table.of("chat") if m.compared)
    assert COMPARED_PIPELINE == tuple(m.name for m in metric_table.of("pipeline") if m.compared)
    assert [c for c in CHAT_COLUMNS if c.endswith(("_ms", "_s")) and c != "sent_s"] == [
        m.column for m in metric_table.exported("chat")]
    assert [c for c in PIPELINE_COLUMNS if c in {m.column for m in metric_table.METRICS}] == [
        m.column for m in metric_table.exported("pipeline")]


@pytest.mark.parametrize("metric", metric_table.GATED)
def test_a_latency_gate_takes_every_gated_metric(metric):
    assert LatencyGate(kind="latency", metric=metric, max=1).metric == metric


def test_a_latency_gate_refuses_a_metric_the_table_does_not_gate():
    with pytest.raises(ValidationError, match="ttfb_ms"):  # the error lists the accepted metrics
        LatencyGate(kind="latency", metric="chunk_gap_ms", max=1)


def _chat(i: int, ok: bool) -> RequestRecord:
    sent = i * 1000 * MS
    return RequestRecord(request_id=f"p0-{i}", phase="measure", intended_ns=sent - 2 * MS, sent_ns=sent,
                         wall_sent_s=1e9, headers_ns=sent + 5 * MS, event_ns=[sent + 10 * MS, sent + 12 * MS],
                         event_tokens=[1, 2], event_content=[False, True], end_ns=sent + 20 * MS,
                         status=200 if ok else 500, error=None if ok else "http_500", output_tokens=3)


def test_samples_count_failed_requests_only_for_the_schedule_lag():
    recs = [_chat(0, True), _chat(1, False)]
    got = metric_table.samples(recs, metric_table.of("chat"))
    assert got["lag_ms"] == [2.0, 2.0]
    assert got["ttfb_ms"] == [5.0] and got["ttft_ms"] == [10.0] and got["ttfc_ms"] == [12.0]
    assert got["e2e_ms"] == [20.0] and got["tpot_ms"] == [5.0]
    assert list(got["chunk_gap_ms"]) == [2.0] and list(got["itl_ms"]) == [1.0, 1.0]  # per event: numpy arrays


def test_gate_samples_of_a_mixed_run_take_each_metric_from_its_own_workload():
    doc = PipelineRecord(request_id="j", phase="measure", document="a.pdf", pages=1, intended_ns=0, sent_ns=0,
                         wall_sent_s=1e9, end_ns=3_000_000_000, status="done")
    warm = _chat(2, True).model_copy(update={"phase": "warmup"})
    assert latency_values("doc_latency_s", [_chat(0, True), doc, warm]) == [3.0]
    assert latency_values("e2e_ms", [_chat(0, True), doc, warm]) == [20.0]
