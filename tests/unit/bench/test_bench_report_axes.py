"""The report's CDF axes end at a high percentile with the outliers noted, and the scenario's SLO
is drawn on the plots it applies to."""

from __future__ import annotations

from bench.report import plots
from bench.report.html import figures, render


def test_cdf_axis_is_clipped_at_p99_5_and_the_outliers_are_noted():
    # p99 ~0.6 ms and one 38 ms outlier; 0.5 % of 1,000 lie beyond p99.5
    vals = [0.5 + i * 0.0001 for i in range(999)] + [38.0]
    fig = plots.cdf({"ITL": vals}, "ms", "ITL")
    hi = fig["layout"]["xaxis"]["range"][1]
    assert hi < 1.0  # not stretched to the outlier
    caption = fig["layout"]["meta"]["caption"]
    assert len(caption) == 1 and "p99.5" in caption[0] and "5 values beyond it" in caption[0] and "38 ms" in caption[0]
    assert "38 ms" in fig["layout"]["title"]["text"]
    assert max(fig["data"][0]["x"]) == 38.0  # still in the trace: zooming out shows it


def test_cdf_without_outliers_has_no_caption():
    fig = plots.cdf({"E2E": [1.0, 2.0, 3.0]}, "ms", "E2E", clip=None)
    assert "meta" not in fig["layout"] and fig["layout"]["xaxis"]["range"][1] >= 3.0


def test_slo_lines_on_the_cdf_or_noted_beyond_the_axis():
    fig = plots.cdf({"TTFT": [10.0 + i for i in range(100)]}, "ms", "TTFT", slo={"TTFT": 50.0})
    lines = [s for s in fig["layout"]["shapes"] if s["type"] == "line"]
    assert [(s["x0"], s["line"]["dash"]) for s in lines] == [(50.0, "dash")]
    assert any("SLO TTFT ≤ 50 ms" in a["text"] for a in fig["layout"]["annotations"])
    far = plots.cdf({"TTFT": [10.0 + i for i in range(100)]}, "ms", "TTFT", slo={"TTFT": 2000.0})
    assert not [s for s in far["layout"]["shapes"] if s["type"] == "line"]
    assert any("beyond the axis" in c for c in far["layout"]["meta"]["caption"])


def test_report_draws_the_scenarios_slo(run_factory):
    recs, s = run_factory(n=200, e2e_ms=100)  # slo: ttft_ms = 100 (make_run), TTFT is ~25 ms
    s["goodput"]["slo"] = {"ttft_ms": 30.0, "e2e_ms": 120.0}
    figs = figures(s, recs)
    slo_shapes = [(f["layout"]["title"]["text"].split("<br>")[0], sh) for f in figs for sh in f["layout"]["shapes"]
                  if sh.get("line", {}).get("color") == plots.SLO_COLOR]
    titles = {t for t, _ in slo_shapes}
    assert "Time to first token: CDF (measured requests)" in titles
    assert "End-to-end latency: CDF (measured requests)" in titles
    assert "TTFT over time (by send time)" in titles  # a horizontal line over time
    html = render(s, recs)
    assert 'name="viewport"' in html and "max-width:1100px" not in html
