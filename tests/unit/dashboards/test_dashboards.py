"""Dashboards: committed JSON equals a fresh render, stable UIDs, the datasource variable, and every
panel query parses with Prometheus' own parser (promtool) and names only catalog metrics."""

import json
import re
import shutil
import subprocess

import pytest
import yaml

from dashboards.generate import DASHBOARD_DIR, GENERATED_NOTE, panel_exprs, render_dashboards
from slo.exprcheck import metric_names, unknown_metrics
from slo.spec import dec, load_spec
from slo.writer import diff_tree

SPEC = load_spec()
BOARDS = {p.name: json.loads(p.read_text()) for p in sorted(DASHBOARD_DIR.glob("*.json"))}
UIDS = {"inference-server.json": "splitstack-inference-server",
        "worker-connectivity.json": "splitstack-worker-connectivity",
        "pdf-processing.json": "splitstack-pdf-processing", "slo.json": "mineru-slos"}


def test_committed_dashboards_equal_a_fresh_render():
    assert diff_tree(render_dashboards(SPEC), DASHBOARD_DIR, suffix=".json") == [], "run `slo dashboards`"


def test_stable_uids_and_generated_note():
    assert {n: b["uid"] for n, b in BOARDS.items()} == UIDS
    assert all(b["description"] == GENERATED_NOTE for b in BOARDS.values())


def test_every_panel_queries_the_datasource_variable():
    for name, b in BOARDS.items():
        var = b["templating"]["list"][0]
        assert (var["name"], var["type"], var["query"]) == ("datasource", "datasource", "prometheus")
        for p in b["panels"]:
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, (name, p["title"])
            assert all(t["datasource"]["uid"] == "${datasource}" for t in p["targets"])
        ids = [p["id"] for p in b["panels"]]
        assert len(ids) == len(set(ids))


@pytest.mark.parametrize("name", sorted(UIDS))
def test_every_panel_query_names_only_catalog_metrics(name):
    exprs = panel_exprs(BOARDS[name], annotations=True)
    assert len(exprs) >= 3, exprs  # each board charts several queries
    for title, expr in exprs:
        assert metric_names(expr), (title, expr)
        assert unknown_metrics(expr) == set(), (title, expr)


def test_every_panel_query_parses_with_promtool(tmp_path):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool not found: install the Debian package `prometheus`")
    rules = [{"record": f"dashboard:check:{i}", "expr": expr}
             for i, (_, expr) in enumerate(e for b in BOARDS.values() for e in panel_exprs(b, annotations=True))]
    f = tmp_path / "panels.rules.yml"
    f.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}))
    r = subprocess.run([promtool, "check", "rules", str(f)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"SUCCESS: {len(rules)} rules found" in r.stdout


def test_slo_dashboard_has_the_manual_panels_and_reads_burn_rate_and_budget_from_records():
    titles = [p["title"] for p in BOARDS["slo.json"]["panels"]]
    for want in ("Availability (30 d)", "PDF latency p50 / p95 / p99 (submission to output)",
                 "Throughput (PDFs / hour)", "Error rate", "Inference server uptime (30 d)",
                 "Error budget remaining (30 d)", "Burn rate now (5 m error ratio / budget)"):
        assert want in titles
    exprs = [e for _, e in panel_exprs(BOARDS["slo.json"])]
    assert "slo:period_error_budget_remaining:ratio" in exprs and "slo:current_burn_rate:ratio" in exprs
    # no budget arithmetic with hard-coded targets on the dashboard
    assert not any(f"/ {dec(s.error_budget)}" in e for e in exprs for s in SPEC.slos)
    err = next(p for p in BOARDS["slo.json"]["panels"] if p["title"] == "Error rate")
    steps = err["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert [(s["color"], s["value"]) for s in steps] == [("green", None), ("yellow", 0.02), ("red", 0.05)]


def test_design_doc_dashboards_cover_their_signals():
    names = lambda b: set().union(*(metric_names(e) for _, e in panel_exprs(BOARDS[b])))  # noqa: E731
    assert {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
            "vllm:time_to_first_token_seconds_bucket", "vllm:inter_token_latency_seconds_bucket",
            "vllm:e2e_request_latency_seconds_bucket", "vllm:generation_tokens_total"} <= names("inference-server.json")
    assert {"mineru_vllm_client_request_duration_seconds_bucket", "mineru_vllm_client_failures_total",
            "mineru_vllm_client_retries_total",
            "mineru_vllm_circuit_breaker_state"} <= names("worker-connectivity.json")
    assert {"mineru_pdfs_processed_total", "mineru_pdf_end_to_end_duration_seconds_bucket",
            "mineru_pdf_processing_duration_seconds_bucket",
            "mineru_pdfs_failed_total", "mineru_queue_lag_messages"} <= names("pdf-processing.json")


def test_inference_dashboard_covers_vllms_example_dashboard():
    board = BOARDS["inference-server.json"]
    names = set().union(*(metric_names(e) for _, e in panel_exprs(board)))
    assert {"vllm:request_success_total", "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total",
            "vllm:request_prompt_tokens_bucket", "vllm:request_generation_tokens_bucket",
            "vllm:request_prefill_time_seconds_bucket", "vllm:request_decode_time_seconds_bucket"} <= names
    heatmaps = [p for p in board["panels"] if p["type"] == "heatmap"]
    assert {p["title"] for p in heatmaps} == {"Prompt length (tokens)", "Generation length (tokens)"}
    assert all(t["format"] == "heatmap" for p in heatmaps for t in p["targets"])
    finish = next(p for p in board["panels"] if p["title"] == "Finish reasons")
    assert "by (finished_reason)" in finish["targets"][0]["expr"]


def test_variables_rate_interval_and_alert_annotations():
    for name, board in BOARDS.items():
        raw = [e for _, e in panel_exprs(board, resolved=False)]
        assert not any(re.search(r"\[\d+[smh]\]", e) and "rate(" in e and "[1h]" not in e for e in raw), name
        assert any("$__rate_interval" in e for e in raw), name
        ann = board["annotations"]["list"]
        assert ann and ann[0]["expr"].startswith('ALERTS{alertstate="firing"'), name
    variables = {v["name"] for v in BOARDS["inference-server.json"]["templating"]["list"]}
    assert {"datasource", "instance", "model_name"} <= variables
    vllm_exprs = [e for t, e in panel_exprs(BOARDS["inference-server.json"], resolved=False) if "vllm:" in e]
    assert all('model_name=~"$model_name"' in e and 'instance=~"$instance"' in e for e in vllm_exprs)
    assert "instance" in {v["name"] for v in BOARDS["pdf-processing.json"]["templating"]["list"]}


def test_queue_lag_is_shown_once_not_summed_over_workers():
    for board in BOARDS.values():
        for _, e in panel_exprs(board):
            assert "sum(mineru_queue_lag_messages" not in e.replace(" ", "")
    lag = [e for _, e in panel_exprs(BOARDS["pdf-processing.json"]) if "mineru_queue_lag_messages" in e]
    assert lag == ['max(mineru_queue_lag_messages{job="workers"})']
