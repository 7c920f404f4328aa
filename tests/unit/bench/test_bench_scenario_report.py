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
    with pytest.raises(ScenarioError, match=r"x.yaml: promt_tokens: Extra inputs are not permitted"):
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
    assert "<svg" in html and "Latency CDF" in html and "Run validity" in html
    assert "src=\"http" not in html and "<script src" not in html and "<link" not in html
