"""Offline calculators from bench records (slo/records.py), both the minimal format and `bench run` files."""

import json
from fractions import Fraction

import pytest

from slo.budget import Status
from slo.records import RecordError, load_records, sli_counts
from slo.report import evaluate_records
from slo.spec import load_spec

SPEC = load_spec()


def _write(tmp_path, rows):
    p = tmp_path / "records.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return p


def _pdfs(n_ok_fast=0, n_ok_slow=0, n_failed=0, start=1_000_000.0, gap=10.0):
    rows, t = [], start
    for dur, ok, n in ((30.0, True, n_ok_fast), (100.0, True, n_ok_slow), (5.0, False, n_failed)):
        for _ in range(n):
            rows.append({"kind": "pdf", "t_s": t, "duration_s": dur, "ok": ok})
            t += gap
    return rows


def test_latency_counts_use_le_semantics_and_count_failed_pdfs_as_slow(tmp_path):
    rows = _pdfs(n_ok_fast=18, n_ok_slow=2, n_failed=3)
    rows.append({"kind": "pdf", "t_s": 2e6, "duration_s": 90.0, "ok": True})  # exactly at the bound: good
    recs = load_records(_write(tmp_path, rows))
    c = sli_counts(SPEC.get("pdf-latency-p95"), recs)
    assert (c.good, c.total) == (Fraction(19), Fraction(24))  # the 3 failed PDFs are in the total, not good
    c = sli_counts(SPEC.get("pdf-error-rate"), recs)
    assert (c.good, c.total) == (Fraction(21), Fraction(24))


def test_uptime_from_probes_needs_every_component_in_a_slice(tmp_path):
    rows = []
    for s in range(100):
        rows.append({"kind": "probe", "t_s": 1000 + s + 0.1, "target": "inference_server", "ok": s not in (10, 11)})
        rows.append({"kind": "probe", "t_s": 1000 + s + 0.2, "target": "workers", "ok": s != 50})
    rows.append({"kind": "probe", "t_s": 5000.0, "target": "workers", "ok": False})  # no server probe: not a full slice
    recs = load_records(_write(tmp_path, rows))
    c = sli_counts(SPEC.get("availability"), recs)
    assert (c.good, c.total) == (Fraction(97), Fraction(100))
    c = sli_counts(SPEC.get("inference-server-uptime"), recs)
    assert (c.good, c.total) == (Fraction(98), Fraction(100))


def test_throughput_slices_are_judged_only_under_backlog_and_queue_depth_gauge(tmp_path):
    # Hour 1: 72 PDFs submitted at once, done every 50 s (18 per quarter hour = 72/h). Hour 2: 48,
    # submitted just before, done every 75 s (48/h). A failing straggler keeps work outstanding
    # until 2 h. Then a lone PDF at 2.5 h: nothing waited in between, those slices are not judged.
    rows = [{"kind": "pdf", "t_s": 0.0, "duration_s": (i + 0.5) * 50, "ok": True} for i in range(72)]
    rows += [{"kind": "pdf", "t_s": 3599.0, "duration_s": 1.0 + (i + 0.5) * 75, "ok": True} for i in range(48)]
    rows += [{"kind": "pdf", "t_s": 0.0, "duration_s": 7200.0, "ok": False}]
    rows += [{"kind": "pdf", "t_s": 9000.0, "duration_s": 1.0, "ok": True}]
    rows += [{"kind": "gauge", "t_s": float(t), "metric": "vllm:num_requests_waiting",
              "value": 80.0 if t == 420 else 3.0} for t in range(0, 1200, 60)]
    recs = load_records(_write(tmp_path, rows))
    c = sli_counts(SPEC.get("pdf-throughput"), recs)
    assert (c.good, c.total) == (Fraction(4), Fraction(8))
    c = sli_counts(SPEC.get("inference-queue-depth"), recs)  # 5-minute slices, one with a max of 80
    assert (c.good, c.total) == (Fraction(3), Fraction(4))


def test_bench_run_records_are_mapped(tmp_path):
    chat = {"kind": "chat", "request_id": "r1", "phase": "measure", "intended_ns": 0, "sent_ns": 1_000_000_000,
            "wall_sent_s": 1.7e9, "event_ns": [7_000_000_000, 7_100_000_000], "end_ns": 9_000_000_000, "error": None}
    warm = dict(chat, request_id="r0", phase="warmup")
    pipe = {"kind": "pipeline", "request_id": "j1", "phase": "measure", "document": "a.pdf", "pages": 2,
            "intended_ns": 0, "sent_ns": 0, "wall_sent_s": 1.7e9, "end_ns": 40_000_000_000, "status": "done"}
    recs = load_records(_write(tmp_path, [chat, warm, pipe]))
    assert [(r.kind, r.ttft_s, r.duration_s) for r in recs] == [("chat", 6.0, 8.0), ("pdf", None, 40.0)]
    c = sli_counts(SPEC.get("ttft-p95"), recs)
    assert (c.good, c.total) == (Fraction(0), Fraction(1))  # 6 s > 5 s


def test_report_from_records_exhausts_and_guards(tmp_path):
    recs = load_records(_write(tmp_path, _pdfs(n_ok_fast=90, n_failed=10)))
    by = {e.slo: e for e in evaluate_records(SPEC, recs, current_s=3600)}
    err = by["pdf-error-rate"]
    assert err.status is Status.exhausted and err.attainment == Fraction(9, 10)
    assert err.burn_rate == 5  # 10 % errors / 2 % budget
    # the 10 failed PDFs count as slow: 10 % slow against a 1 % budget
    assert by["pdf-latency-p99"].status is Status.exhausted and by["pdf-latency-p99"].budget_remaining_ratio == -9
    assert by["pdf-latency-p50"].status is Status.ok
    assert by["availability"].status is Status.no_data
    assert "the records hold no uptime data" in by["availability"].message


@pytest.mark.parametrize("content, expected", [
    ("not json\n", "records.jsonl:1: not a bench record"),
    ('{"kind": "pdf"}\n', "records.jsonl:1: not a bench record"),
    ("\n", "no records; run the bench first"),
])
def test_bad_record_files_are_named(tmp_path, content, expected):
    p = tmp_path / "records.jsonl"
    p.write_text(content)
    with pytest.raises(RecordError, match=expected):
        load_records(p)
    with pytest.raises(RecordError, match="bench records not found"):
        load_records(tmp_path / "missing.jsonl")
