"""`bench compare` on constructed runs with known answers: the order-statistic intervals, the
minimum effect, refusal of invalid runs, no warning and no NaN on degenerate runs, the HTML view."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
from typer.testing import CliRunner

from bench.compare import MIN_EFFECT, call, compare
from bench.report.writer import write_run
from bench.scenario import load_scenario
from bench.stats import min_samples_for_ci, quantile_ci, quantile_ci_ranks
from splitstack.cli.bench import app

EACH = math.sqrt(0.95)  # the per-run confidence compare uses for percentiles


def _rows(res):
    return {(r["metric"], r["stat"]): r for r in res["rows"]}


def test_order_statistic_interval_ranks_and_sample_sizes():
    # n = 100, p95: B ~ Binomial(100, 0.95); X(90) .. X(100) (1-based) holds with >= sqrt(0.95)
    assert quantile_ci_ranks(100, 95, EACH) == (89, 99)
    assert quantile_ci_ranks(100, 99, EACH) is None  # the max lies above p99 only with 1 - 0.99^100 = 63 %
    assert [min_samples_for_ci(q, EACH) for q in (50, 95, 99)] == [7, 86, 435]
    assert quantile_ci_ranks(85, 95, EACH) is None and quantile_ci_ranks(86, 95, EACH) is not None


def test_order_statistic_interval_covers_the_true_quantile():
    rng = np.random.default_rng(0)
    true_p95 = -math.log(0.05)  # of the unit exponential
    hits = 0
    for _ in range(2000):
        lo, hi = quantile_ci(rng.exponential(size=100), 95, 0.95)
        hits += lo <= true_p95 <= hi
    assert hits / 2000 >= 0.95  # distribution-free: at least the nominal coverage (conservative)


def test_call_needs_significance_and_the_minimum_effect():
    assert call(0.10, 0.30, 0.20, 0.05, higher_is_better=False) == "worse"
    assert call(0.10, 0.30, 0.20, 0.05, higher_is_better=True) == "better"
    assert call(0.01, 0.03, 0.02, 0.05, higher_is_better=False) == "same"  # significant, below the minimum
    assert call(-0.04, 0.04, 0.0, 0.05, higher_is_better=False) == "same"  # inside ±5 %
    assert call(-0.20, 0.30, 0.05, 0.05, higher_is_better=False) == "no significant difference"


def test_two_default_chat_smoke_runs_get_a_p95_interval(run_factory):
    load = load_scenario("chat-smoke").load
    n = round(load.rate_rps * load.duration_s)  # the arrivals a default run measures
    res = compare(run_factory(n=n, seed=1), run_factory(n=n, seed=2), resamples=300)
    p95 = _rows(res)[("e2e_ms", "p95")]
    assert p95["n_baseline"] == n == 100
    assert math.isfinite(p95["ci_low"]) and math.isfinite(p95["ci_high"]) and p95["ci_low"] < 0 < p95["ci_high"]
    assert p95["call"] in ("same", "no significant difference")
    assert not [r for r in res["rows"] if r.get("call") == "worse"]


def test_a_small_significant_change_is_same_a_large_one_worse(run_factory):
    base = run_factory(n=3000, e2e_ms=100, spread=0.05, seed=1)
    slight = compare(base, run_factory(n=3000, e2e_ms=102, spread=0.05, seed=2), resamples=300)
    mean = _rows(slight)[("e2e_ms", "mean")]
    assert mean["ci_low"] > 0 and mean["change"] < MIN_EFFECT and mean["call"] == "same"
    big = compare(base, run_factory(n=3000, e2e_ms=120, spread=0.05, seed=2), resamples=300)
    rows = _rows(big)
    assert {rows[("e2e_ms", s)]["call"] for s in ("mean", "p50", "p95", "p99")} == {"worse"}
    assert rows[("e2e_ms", "p50")]["ci_low"] < 0.2 < rows[("e2e_ms", "p50")]["ci_high"]


def test_degenerate_runs_give_no_warning_and_no_nan(run_factory):
    cases = [(run_factory(n=20, errors=20, seed=1), run_factory(n=20, seed=2)),  # nothing succeeded
             (run_factory(n=1, seed=1), run_factory(n=1, seed=2)),
             (run_factory(n=50, window_s=5, seed=1), run_factory(n=50, window_s=5, seed=2))]  # < 10 windows
    for base, cand in cases:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            res = compare(base, cand, resamples=200)
        text = json.dumps(res, allow_nan=False)  # raises on NaN or infinity
        assert "nan" not in text.lower()
        assert all(r.get("call") for r in res["rows"])


def test_cli_refuses_an_invalid_run_unless_allowed(tmp_path, run_factory):
    b, bad = tmp_path / "base", tmp_path / "bad"
    write_run(b, *run_factory(n=200, seed=1))
    write_run(bad, *run_factory(n=200, seed=2, lag_ms=25))  # the client fell behind: INVALID
    r = CliRunner().invoke(app, ["compare", str(b), str(bad), "--resamples", "200"], env={"COLUMNS": "200"})
    assert r.exit_code == 2 and "candidate run is INVALID" in r.output and "--allow-invalid" in r.output
    r = CliRunner().invoke(app, ["compare", str(b), str(bad), "--resamples", "200", "--allow-invalid"],
                           env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "compared because of --allow-invalid" in r.output


def test_cli_exit_1_only_on_a_regression_beyond_the_minimum_effect(tmp_path, run_factory):
    b, same, slower = tmp_path / "b", tmp_path / "same", tmp_path / "slower"
    write_run(b, *run_factory(n=300, seed=1))
    write_run(same, *run_factory(n=300, seed=2))
    write_run(slower, *run_factory(n=300, e2e_ms=140, seed=3))
    runner = CliRunner()
    r = runner.invoke(app, ["compare", str(b), str(same), "--resamples", "200"], env={"COLUMNS": "200"})
    assert r.exit_code == 0 and "nan" not in r.output.lower() and "worse" not in r.output
    out = tmp_path / "c.json"
    r = runner.invoke(app, ["compare", str(b), str(slower), "--resamples", "200", "--out", str(out)],
                      env={"COLUMNS": "200"})
    assert r.exit_code == 1 and "worse" in r.output
    assert json.loads(out.read_text())["min_effect"] == MIN_EFFECT
    html = (tmp_path / "c.html").read_text()  # beside --out by default
    assert "regression" in html and str(b) in html and str(slower) in html and "Plotly.newPlot" in html
    # a minimum effect above the change: the same runs are "same", exit 0
    r = runner.invoke(app, ["compare", str(b), str(slower), "--resamples", "200", "--min-effect", "0.6",
                            "--html", str(tmp_path / "v.html")], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "no regression" in (tmp_path / "v.html").read_text()


def test_cli_rejects_a_bad_min_effect(tmp_path, run_factory):
    b = tmp_path / "b"
    write_run(b, *run_factory(n=50))
    r = CliRunner().invoke(app, ["compare", str(b), str(b), "--min-effect", "-1"])
    assert r.exit_code == 2 and "--min-effect" in r.output
    with pytest.raises(ValueError, match="min_effect"):
        compare(*[run_factory(n=10)] * 2, min_effect=1.5)
