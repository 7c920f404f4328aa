"""`slo report` / `slo status` against a real Prometheus (prometheus-api-client), and the clear
error for a Prometheus that has no data for an SLO.

Switch to the full local stack with a bench run once real workers run there.
"""

import json
import time

import pytest
import yaml
from typer.testing import CliRunner

from slo.budget import Status
from slo.prom_source import PrometheusSource
from slo.report import evaluate_prometheus
from slo.spec import OBJECTIVES_PATH, Jobs, load_spec
from splitstack.cli.slo import app

pytestmark = pytest.mark.integration


def test_report_from_live_prometheus_matches_the_counters(stack, worker_metrics, tmp_path, live):
    prom, sim, _ = stack
    m = worker_metrics[0]
    live.chat_traffic(sim.url, 4)
    # at least min_events (20) one-second steps of the uptime indicator
    live.wait_until(lambda: prom.query('count_over_time(up{job="inference-server"}[10m]) >= 25'), 40, "25 s of scrapes")
    # 300 processed, 9 failed -> error-rate attainment 300/309; arrive in one step between scrapes.
    m.pdfs_processed.labels(backend="vlm-http-client").inc(0)
    m.pdfs_failed.labels(backend="vlm-http-client", kind="permanent").inc(0)
    m.initialise("vlm-http-client")  # every series exists at 0 before the first increment is scraped
    time.sleep(3)
    before_ok = m.pdfs_processed.labels(backend="vlm-http-client")._value.get()
    before_bad = m.pdfs_failed.labels(backend="vlm-http-client", kind="permanent")._value.get()
    for dur in (30.0, 60.0, 100.0, 150.0):
        m.pdf_duration.labels(backend="vlm-http-client").observe(dur)
        m.pdf_end_to_end.labels(backend="vlm-http-client").observe(dur + 5)
    m.pdfs_processed.labels(backend="vlm-http-client").inc(300)
    m.pdfs_failed.labels(backend="vlm-http-client", kind="permanent").inc(9)
    want_total = before_ok + before_bad + 309
    counted = (f'sum(mineru_pdfs_processed_total{{job="workers"}}) + '
               f'sum(mineru_pdfs_failed_total{{job="workers"}}) == {want_total}')
    live.wait_until(lambda: prom.query(counted), 15, "counters scraped")
    time.sleep(2)

    out = tmp_path / "report.json"
    r = CliRunner().invoke(app, ["report", "--prometheus-url", prom.url, "--window", "10m", "--current", "10m",
                                 "--step", "1s", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "SLO report (prometheus:" in r.output
    rows = {s["slo"]: s for s in json.loads(out.read_text())["slos"]}
    assert set(rows) == {s.name for s in load_spec().slos}
    assert rows["inference-server-uptime"]["status"] in {"ok", "exhausted"}
    assert rows["inference-server-uptime"]["total"] >= 20  # one-second steps of the indicator
    err = rows["pdf-error-rate"]
    # increase() extrapolates both counters by the same factor, so the ratio is the true one.
    assert err["total"] > 0 and err["attainment"] == pytest.approx(
        1 - (before_bad + 9) / (before_ok + before_bad + 309), rel=0.02)
    for name in ("availability", "ttft-p95", "pdf-latency-p99"):
        assert rows[name]["status"] != "no-data", rows[name]
    # the report says how much of the window the young Prometheus holds
    assert 0 < rows["pdf-error-rate"]["covered_s"] < 600


def test_a_job_without_data_names_the_slo_and_the_fix(stack, live):
    prom, sim, _ = stack
    live.chat_traffic(sim.url, 2)
    time.sleep(2)
    spec = load_spec()
    src = PrometheusSource(prom.url, Jobs(workers="no-such-job"), step="1s")
    src.check()
    evals = {e.slo: e for e in evaluate_prometheus(spec, src, "5m", "5m")}
    e = evals["pdf-error-rate"]
    assert e.status is Status.no_data
    assert e.message.startswith("slo 'pdf-error-rate': no events in the window. Prometheus at ")
    assert 'has no samples of mineru_pdfs_failed_total, mineru_pdfs_processed_total for job no-such-job; ' \
           'check `up{job="no-such-job"}`' in e.message
    assert evals["ttft-p95"].status is not Status.no_data  # the inference server job still has data


def test_status_exit_codes_name_the_slos(stack, tmp_path, live):
    prom, _, _ = stack
    # A job with no target counts as down once Prometheus has scraped for a minute (slo/promql.py).
    live.wait_until(lambda: prom.query("count_over_time(group(up offset 1m)[1m:1s]) >= 25"), 100,
                    "25 s past the first minute of scrapes (min_events 20)")
    spec = yaml.safe_load(OBJECTIVES_PATH.read_text())
    spec.setdefault("jobs", {})["workers"] = "no-such-job"
    path = tmp_path / "objectives.yaml"
    path.write_text(yaml.safe_dump(spec))
    args = ["status", "--spec", str(path), "--prometheus-url", prom.url, "--window", "5m", "--current", "5m",
            "--step", "1s"]
    # Workers gone while Prometheus is up: the service is unavailable, its budget burns through.
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 1, r.output
    assert "error budget exhausted: availability" in r.output
    # The worker SLOs alone (the server's may have burnt in an earlier test) simply have no data.
    spec["slos"] = [s for s in spec["slos"] if s["sli"].get("job") == "workers"]
    path.write_text(yaml.safe_dump(spec))
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 3, r.output
    assert "no or too little data for: pdf-latency-p50, pdf-latency-p95, pdf-latency-p99, pdf-throughput, " \
           "pdf-error-rate" in r.output
