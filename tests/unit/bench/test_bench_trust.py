"""A run that mostly failed is never valid; bad scenario YAML and folders that are not runs are
refused with the file named (no traceback)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from bench.scenario import ScenarioError, load_scenario
from bench.validity import ValidityLimits
from splitstack.cli.bench import app


def _failed(summary: dict) -> set[str]:
    return {c["check"] for c in summary["validity"]["checks"] if not c["passed"]}


def test_an_error_share_above_the_limit_makes_the_run_invalid(run_factory):
    _, few = run_factory(n=200, errors=8)  # 4 %: within the default 5 %
    assert few["validity"]["valid"], few["validity"]
    _, many = run_factory(n=200, errors=12)  # 6 %
    assert not many["validity"]["valid"] and _failed(many) == {"error share"}
    why = next(c["why"] for c in many["validity"]["checks"] if c["check"] == "error share")
    assert "12 of 200" in why and "http_500 x12" in why and "validity.error_rate_max" in why


def test_a_run_where_nothing_succeeded_is_invalid_whatever_the_limit(run_factory):
    from bench.validity import check

    recs, s = run_factory(n=50, errors=50)
    assert _failed(s) == {"error share", "successful requests"}
    assert "none of 50 measured requests succeeded (http_500 x50)" in " ".join(
        c["why"] for c in s["validity"]["checks"])
    assert ValidityLimits(error_rate_max=1.0).error_rate_max == 1.0
    # a scenario that injects faults may allow every error, but not a run with no success at all
    from bench.engine import ProcessStats, RunResult
    from bench.load import LoadSpec

    result = RunResult(recs, LoadSpec(arrival="constant", rate_rps=0.5, duration_s=100), 0, int(100e9), 0.0, 100.0,
                       [ProcessStats(0, 1.0, 100.0, 50, 0)], 50)
    v = check(result, s, ValidityLimits(error_rate_max=1.0))
    assert not v["valid"] and {c["check"] for c in v["checks"] if not c["passed"]} == {"successful requests"}


def test_a_scenario_carries_its_validity_limits(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("kind: chat\nname: s\nprompt_tokens: {kind: fixed, mean: 8}\n"
                    "output_tokens: {kind: fixed, mean: 4}\nvalidity: {error_rate_max: 1.0}\n"
                    "load: {mode: open, rate_rps: 1, count: 2}\n")
    assert load_scenario(str(path)).validity.error_rate_max == 1.0
    assert load_scenario("chat-smoke").validity.error_rate_max == 0.05


def test_malformed_yaml_names_the_file_and_the_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("kind: chat\nname: s\nload: {mode: open, rate_rps: 1\nprompt_tokens: [\n")
    with pytest.raises(ScenarioError, match=rf"scenario {path}: line \d+, column \d+: not valid YAML"):
        load_scenario(str(path))


@pytest.mark.parametrize("args_of, needle", [
    (lambda p: ["run", str(p / "bad.yaml"), "--url", "http://127.0.0.1:9", "--model", "m"],
     "line 4, column 4: not valid YAML"),
    (lambda p: ["gate", "--gate", str(p / "bad.yaml"), "--url", "http://127.0.0.1:9", "--model", "m"],
     "gate file"),
    (lambda p: ["sweep", "chat-smoke", "--max", "100", "--url", "http://127.0.0.1:9", "--model", "m"],
     "is not healthy (ConnectError"),
    (lambda p: ["report", str(p / "empty")], "no summary.json"),
    (lambda p: ["report", str(p / "missing")], "no such file or folder"),
    (lambda p: ["report", str(p / "junk")], "not a bench summary"),
    (lambda p: ["compare", str(p / "empty"), str(p / "junk")], "no summary.json"),
    (lambda p: ["compare", str(p / "nojsonl"), str(p / "nojsonl")], "no records.jsonl"),
])
def test_bad_inputs_exit_2_without_a_traceback(tmp_path: Path, args_of, needle):
    (tmp_path / "bad.yaml").write_text("kind: chat\nname: s\nload: {mode: open, rate_rps: 1\n  x: [\n")
    (tmp_path / "empty").mkdir()
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "summary.json").write_text("{not json")
    (tmp_path / "nojsonl").mkdir()
    (tmp_path / "nojsonl" / "summary.json").write_text('{"requests": {"sent": 0}}')
    r = CliRunner().invoke(app, args_of(tmp_path))
    assert r.exit_code == 2, r.output
    assert needle in r.output and "Traceback" not in r.output, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)


def test_bench_run_help_lists_its_exit_codes():
    r = CliRunner().invoke(app, ["run", "--help"])
    text = " ".join(r.output.split())
    assert "Exit codes: 0 a valid run; 2 an invalid run" in text and "refuses the API key" in text
