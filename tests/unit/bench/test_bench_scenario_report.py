import numpy as np
import pytest

from bench.images import png_bytes
from bench.report.html import render
from bench.scenario import Dist, ScenarioError, load_scenario, parse_scenario


def test_bundled_scenarios_load():
    for name in ("chat-smoke", "chat-mixed", "chat-vllm-cpu", "chat-images", "chat-perf", "pipeline-smoke"):
        assert load_scenario(name).name == name


def test_overrides_switch_loop_kind():
    s = load_scenario("chat-smoke", {"concurrency": 4, "count": 10})
    assert s.load.mode == "closed" and s.load.concurrency == 4 and s.load.rate_rps is None and s.load.count == 10


def test_errors_name_file_and_field(tmp_path):
    with pytest.raises(ScenarioError, match=r"x.yaml: prompt_tokens.mean: Input should be greater than 0"):
        parse_scenario({"kind": "chat", "name": "n", "prompt_tokens": {"mean": 0}, "output_tokens": {"mean": 5},
                        "load": {"rate_rps": 1, "duration_s": 1}}, "x.yaml")
    with pytest.raises(ScenarioError, match=r"x.yaml: promt_tokens: unknown key; did you mean 'prompt_tokens'\?"):
        parse_scenario({"kind": "chat", "name": "n", "promt_tokens": {"mean": 1}}, "x.yaml")
    with pytest.raises(ScenarioError, match="no such file and no bundled scenario of that name"):
        load_scenario("nope")


def test_dist_sampling_is_seeded_and_clipped():
    d = Dist(kind="lognormal", mean=100, sd=50, min=10, max=300)
    a = d.sample(np.random.default_rng(1), 5000)
    assert a == d.sample(np.random.default_rng(1), 5000)
    assert min(a) >= 10 and max(a) <= 300 and abs(np.mean(a) - 100) < 5


def test_png_is_valid_and_seeded():
    a = png_bytes(16, 8, 3)
    assert a.startswith(b"\x89PNG\r\n\x1a\n") and a == png_bytes(16, 8, 3) and a != png_bytes(16, 8, 4)


def test_report_is_self_contained(run_factory):
    recs, s = run_factory(n=50)
    html = render(s, recs)
    assert "plotly-graph-div" in html and "Time to first token: CDF" in html and "Run validity" in html
    page = _page(html)  # plotly.js itself mentions URLs (map tiles, MathJax) that the report never loads
    assert "src=\"http" not in page and "<script src" not in html and "<link" not in page
    assert "Plotly.newPlot" in html and len(html) < 6_000_000  # plotly.js inlined once (about 4.8 MB)


def _page(html: str) -> str:
    """The report without the inlined plotly.js."""
    return html.split("</script>", 1)[1]


def test_every_point_is_inside_its_axes(run_factory):
    from bench.report.html import figures

    recs, s = run_factory(n=200, errors=5, spread=0.8)
    s["sweep"] = _sweep()
    figs = figures(s, recs)
    assert len(figs) >= 9
    for fig in figs:
        layout = fig["layout"]
        for tr in fig["data"]:
            xaxis = layout["xaxis" + tr.get("xaxis", "x")[1:]]
            yaxis = layout["yaxis" + tr.get("yaxis", "y")[1:]]
            xs = [v for v in tr["x"] if v is not None]
            ys = [v for v in tr.get("y", []) if v is not None]
            where = (layout["title"]["text"], tr["name"])
            assert xs and xaxis["range"][0] <= min(xs) and max(xs) <= xaxis["range"][1], where
            assert not ys or yaxis["range"][0] <= min(ys) and max(ys) <= yaxis["range"][1], where
        for shape in layout["shapes"]:  # knee, SLO line, warmup/cooldown shading
            if shape["xref"] == "x":
                assert layout["xaxis"]["range"][0] <= shape["x0"] <= shape["x1"] <= layout["xaxis"]["range"][1]
            if shape["yref"] == "y":
                assert layout["yaxis"]["range"][0] <= shape["y0"] <= layout["yaxis"]["range"][1]
        assert "legend" not in layout or layout["legend"]["y"] >= 1.0  # legends above the plot, never on data


def _sweep() -> dict:
    pts = [{"rate_rps": r, "repeat": k, "achieved_rps": min(r, 9.0) - 0.1 * k, "value": 20.0 * r,
            "percentiles": {"p50": 10.0 * r, "p90": 18.0 * r, "p95": 20.0 * r, "p99": 30.0 * r},
            "error_rate": 0.0, "valid": True, "meets": 20.0 * r <= 150} for r in (2.0, 4.0, 8.0, 6.0) for k in (0, 1)]
    return {"metric": "ttft_ms", "percentile": 95, "threshold": 150.0, "points": pts, "max_rate_rps": 7.4,
            "ci_rps": [7.1, 7.7], "bracket_rps": [6.0, 8.0], "conclusion": "max rate ...: 7.4 req/s",
            "scenario": "chat-mixed"}


def test_sweep_report_is_titled_for_the_sweep_and_shows_every_point(run_factory):
    recs, s = run_factory(n=50)
    s["sweep"] = _sweep()
    html = render(s, recs)
    page = _page(html)
    assert "<title>bench sweep: constructed (ttft_ms p95 &lt;= 150, 8 runs)</title>" in html
    assert "<h1>bench sweep: constructed (ttft_ms p95 &lt;= 150, 8 runs)</h1>" in page
    assert page.count("<tr><td>") >= 8 and "SLO knee 7.4 req" in page
    assert "Detail: the last run of the sweep" in page


def test_no_dict_repr_and_server_quantiles_labelled(run_factory):
    import math

    from bench.server_metrics import bucket_quantile

    recs, s = run_factory(n=50)
    s["goodput"] = {"good": 50, "slo": {"ttft_ms": 100.0, "e2e_ms": 1000.0}, "fraction": 1.0}
    first_bucket = {0.3: 2044.0, 0.5: 2044.0, math.inf: 2044.0}
    s["server"] = {"histograms": {"vllm:e2e_request_latency_seconds": {
        "count": 2044.0, "mean_s": 0.0002, "quantiles": {k: bucket_quantile(q, first_bucket) for k, q in
                                                         (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))}}},
        "counters": {}, "gauges": {}}
    page = _page(render(s, recs))
    assert "{'" not in page and "ttft_ms 100, e2e_ms 1,000" in page
    assert "p50, s (bucket estimate)" in page and "in the first bucket (&lt;= 0.3 s)" in page
    assert ">0.15<" not in page


def test_csv_exports_beside_the_report(run_factory, tmp_path):
    import csv

    from bench.report.series import CHAT_COLUMNS, TIME_COLUMNS
    from bench.report.writer import write_run

    recs, s = run_factory(n=60, errors=2, window_s=10.0)
    paths = write_run(tmp_path, recs, s)
    rows = list(csv.DictReader(paths["requests_csv"].open()))
    assert tuple(rows[0]) == CHAT_COLUMNS and len(rows) == 60
    assert rows[0]["ok"] == "false" and rows[0]["error"] == "http_500" and rows[0]["ttft_ms"] == ""
    assert float(rows[10]["ttft_ms"]) > 0 and rows[10]["output_tokens"] == "10"
    ts = list(csv.DictReader(paths["timeseries_csv"].open()))
    assert tuple(ts[0]) == TIME_COLUMNS and sum(int(r["sent"]) for r in ts) == 60
    assert sum(int(r["completed"]) + int(r["errors"]) for r in ts) == 60


def test_pipeline_run_plots_and_exports(run_factory, tmp_path):
    import csv

    from bench.records import PipelineRecord
    from bench.report.series import PIPELINE_COLUMNS
    from bench.report.writer import write_run

    _, s = run_factory(n=5)
    recs = [PipelineRecord(request_id=f"j{i}", phase="measure" if 2 <= i < 18 else ("warmup" if i < 2 else "cooldown"),
                           document=f"d{i}.pdf", pages=2, intended_ns=i * 10**9, sent_ns=i * 10**9,
                           wall_sent_s=1e9 + i, end_ns=i * 10**9 + 3 * 10**9, status="done" if i != 7 else "failed",
                           error=None if i != 7 else "dead_letter", processing_s=2.5) for i in range(20)]
    paths = write_run(tmp_path, recs, s)
    html = paths["report"].read_text()
    assert html.count('class="plotly-graph-div"') >= 4 and "Document latency" in html
    rows = list(csv.DictReader(paths["requests_csv"].open()))
    assert tuple(rows[0]) == PIPELINE_COLUMNS and rows[3]["doc_latency_s"] == "3.0" and rows[7]["ok"] == "false"
